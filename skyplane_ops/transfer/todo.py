"""What a run has to do, decided in the catalog: sync comparison, mirror-delete candidates,
refused names, resume from the journal, and the chunks, produced lazily in key order.

Everything here is a SQL statement over the whole catalog or a stream over it a page at a
time, so the control plane's memory does not depend on the object count. The decisions are
the ones ``manifest.same_object``, ``mirror.extra_keys`` and ``manifest.refused_names`` make
for one object; they are applied in SQL (or by a function SQLite calls per row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from gateway_agent.stores.base import Capabilities, ObjectStore
from gateway_agent.stores.errors import KeyNotSupportedError
from skyplane_ops.transfer import mirror, syncstate
from skyplane_ops.transfer.catalog import (
    COMMITTED,
    FAILED,
    REFUSED,
    SKIPPED,
    TODO,
    Catalog,
    dec,
)
from skyplane_ops.transfer.checksum import crc32c_combine
from skyplane_ops.transfer.manifest import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_COUNT,
    Chunk,
    Segment,
    choose_part_size,
    matches,
)
from skyplane_ops.transfer.metadata import mark_metadata_changes
from skyplane_ops.transfer.move import check_max_moves

# Sync's test in SQL (``syncstate`` tells the rule): equal size and, where both sides report a
# common checksum, equal checksums; else, where the sync record holds the key, both sides as
# recorded when they were last known equal; else (no record) the destination must not be
# older (``manifest.same_object``). The source's rows (versioned) carry its last change, the
# destination's when its bytes were written.
_CK = "CASE WHEN src.ck IS NOT NULL AND d.ck IS NOT NULL THEN same_ck(src.ck, d.ck) END"
_NOT_OLDER = "CASE WHEN src.mtime IS NULL OR d.mtime IS NULL THEN 1 ELSE d.mtime >= src.mtime END"


def same_sql(catalog: Catalog) -> str:
    """The test for the catalog: with the record where one is attached (a sync)."""
    if catalog.state is None:
        return f"src.size = d.size AND coalesce({_CK}, {_NOT_OLDER})"
    return f"src.size = d.size AND coalesce({_CK}, {syncstate.by_record()}, {_NOT_OLDER})"


# The overwrite policy, as a test of a destination row ``d`` against ``src``: ``ignore_existing``
# never replaces an object; ``update`` keeps one the destination changed after the source (or
# at the same time, with the same size: rclone's rule). The destination's time is when its
# bytes were written (the copy's own write, on an object store).
_NEWER = (
    "d.mtime IS NOT NULL AND src.mtime IS NOT NULL AND "
    "(d.mtime > src.mtime OR (d.mtime = src.mtime AND d.size = src.size))"
)
IGNORE_EXISTING_WHY = "exists at the destination (--ignore-existing)"
UPDATE_WHY = "newer at the destination (--update)"


def skip_rule(*, ignore_existing: bool, update: bool) -> str | None:
    """The SQL test of the overwrite policy that keeps the destination object, or None
    (the default: overwrite)."""
    if ignore_existing:
        return "1"
    if update:
        return _NEWER
    return None


@dataclass
class Todo:
    """Counts of a run's plan; the keys themselves stay in the catalog."""

    objects: int  # to copy (state TODO)
    nbytes: int
    skipped: int  # already the same at the destination (sync)
    unread: int  # failed before any byte moves (unreadable at the source, refused names)
    to_delete: int  # sync --delete candidates (``dst.extra``)


def plan_todo(
    catalog: Catalog,
    dst: ObjectStore,
    dst_uri: str,
    include: Sequence[str],
    exclude: Sequence[str],
    *,
    sync: bool,
    delete: bool,
    max_delete: int | None,
    names_fit: bool = False,
    ignore_existing: bool = False,
    update: bool = False,
    move: bool = False,
    src_uri: str = "",
    meta_check: Callable[[list[str]], list[tuple[str, str]]] | None = None,
) -> Todo:
    """Mark the catalog's objects; idempotent (a sync checked up to date, then run, repeats it).
    ``names_fit``: every source key is known to be a name the destination holds (between two
    stores of ``Capabilities.file_names``), so none is checked (0.09 s per 100k keys).
    ``ignore_existing``/``update``: the overwrite policy (``skip_rule``), after sync's rule.
    ``move``: ``max_delete`` bounds the source objects the move would delete (``src_uri``)."""
    # An unreadable entry is a failed object: reported, and it stops the mirror delete.
    unread = [(p.key, f"source: {p.reason}") for p in catalog.problems if p.error]
    catalog.set_outcome("failed", unread, FAILED)
    to_delete = 0
    if delete:
        keep = [p.key for p in catalog.problems]

        def candidate(raw: str | bytes) -> int:
            key = dec(raw)
            kept = any(key == k or (k.endswith("/") and key.startswith(k)) for k in keep)
            return int(matches(key, include, exclude) and not kept)

        with catalog.lock:
            catalog.db.create_function("candidate", 1, candidate, deterministic=True)
        catalog.run(
            "UPDATE dst SET extra = candidate(key) WHERE NOT EXISTS "
            "(SELECT 1 FROM src s WHERE s.key = dst.key)"
        )
        to_delete = int(catalog.one("SELECT count(*) FROM dst WHERE extra = 1"))
        mirror.check_max_delete(to_delete, max_delete, dst_uri)
    if sync:
        catalog.run(
            f"UPDATE src SET state = {SKIPPED} WHERE state = {TODO} AND EXISTS "
            f"(SELECT 1 FROM dst d WHERE d.key = src.key AND {same_sql(catalog)})"
        )
        # Equal content, other metadata or tags: a change too (``metadata.sync_meta_check``).
        mark_metadata_changes(catalog, meta_check)
    # After it: an overwrite rule keeps what it keeps, whatever its metadata.
    rule = skip_rule(ignore_existing=ignore_existing, update=update)
    if rule is not None:
        catalog.run(
            f"UPDATE src SET state = {SKIPPED} WHERE state = {TODO} AND EXISTS "
            f"(SELECT 1 FROM dst d WHERE d.key = src.key AND {rule})"
        )
    # Names the destination cannot hold are failed objects before any byte moves.
    check = None if names_fit else getattr(dst, "check_name", None)
    if check is not None:
        refused: list[tuple[str, str]] = []
        for (raw,) in catalog.pages("key", "src", f"state = {TODO}"):
            try:
                check(dec(raw))
            except KeyNotSupportedError as exc:
                refused.append((dec(raw), f"destination: {exc}"))
        catalog.set_outcome("failed", refused, REFUSED)
    objects, nbytes = catalog.source_totals(TODO)
    if move:
        check_max_moves(objects, max_delete, src_uri)
    skipped = catalog.source_totals(SKIPPED)[0] + catalog.outside[0]
    failed = int(catalog.one("SELECT count(*) FROM outcome WHERE kind = 'failed'"))
    return Todo(objects, nbytes, skipped, failed, to_delete)


def nothing_to_do(catalog: Catalog, *, delete: bool) -> bool:
    """Whether a sync's ``plan_todo`` would find nothing to copy, delete or report, told by a
    read-only look that stops at the first object that needs work. Marking costs a rewrite of
    every row (0.12 s at 100k), which a re-sync of an unchanged tree does not need. A
    destination object missing from the source counts as work under ``delete`` even where the
    filters or a skipped entry keep it: ``plan_todo`` decides those exactly."""
    if any(p.error for p in catalog.problems):
        return False
    differs = catalog.one(
        f"SELECT 1 FROM src WHERE state = {TODO} AND NOT EXISTS "
        f"(SELECT 1 FROM dst d WHERE d.key = src.key AND {same_sql(catalog)}) LIMIT 1"
    )
    if differs is not None:
        return False
    extra = "SELECT 1 FROM dst WHERE NOT EXISTS (SELECT 1 FROM src s WHERE s.key = dst.key) LIMIT 1"
    return not delete or catalog.one(extra) is None


def whole_limit(part_size: int, caps: Capabilities) -> int:
    """Objects up to this size are one segment (written whole); larger ones multipart."""
    if not caps.multipart:
        return 1 << 62
    return max(part_size, caps.min_part_size or 0)


def segments_of(
    key: str,
    size: int,
    version: str | None,
    part_size: int,
    caps: Capabilities,
    fp: str | None = None,
) -> list[Segment]:
    """``manifest.split`` for one catalog row."""
    if size <= part_size:  # the common case, on the per-object path: one whole segment
        return [Segment(key, 0, size, 0, version, True, fp)]
    part = choose_part_size(size, part_size, caps)
    if size <= part or not caps.multipart:
        return [Segment(key, 0, size, 0, version, True, fp)]
    n = math.ceil(size / part)
    return [
        Segment(key, i * part, min(part, size - i * part), i + 1, version, i == n - 1, fp)
        for i in range(n)
    ]


def resume(catalog: Catalog, part_size: int, caps: Capabilities) -> int:
    """Apply the indexed journal: objects an earlier run committed (multipart, upload spent)
    become ``COMMITTED`` with their expected CRC; segments finished against the same source
    version get their CRC. Returns the number of segments resumed.

    The journal records no vouch: a resumed segment (``seg.v`` = 0) or committed object is
    read back at ``--verify full`` on a store without a checksum of its own. Its bytes were
    written by another process, possibly before a crash that lost unflushed writes (``fsync``
    off) or let anything touch the destination since: the write's word does not outlive it."""
    big = whole_limit(part_size, caps)
    committed = 0
    for key, size in list(
        catalog.pages(
            "key, size",
            "src",
            f"state = {TODO} AND EXISTS (SELECT 1 FROM j_commit j WHERE j.key = src.key "
            "AND j.fp = src.fp)",
        )
    ):
        committed += len(segments_of(dec(key), size, None, part_size, caps)) if size > big else 1
    catalog.run(
        f"INSERT OR REPLACE INTO exp SELECT j.key, j.size, j.crc FROM j_commit j JOIN src s "
        f"ON s.key = j.key AND s.fp = j.fp WHERE s.state = {TODO}"
    )
    catalog.run(
        f"UPDATE src SET state = {COMMITTED} WHERE state = {TODO} AND key IN (SELECT key FROM exp)"
    )
    done = catalog.run(
        "INSERT OR REPLACE INTO seg(key, part, crc) SELECT j.key, j.part, j.crc FROM j_done j "
        f"JOIN src s ON s.key = j.key AND s.fp = j.fp WHERE s.state = {TODO}"
    )
    return committed + max(done, 0)


_UNFINISHED = (
    f"state = {TODO} AND NOT EXISTS (SELECT 1 FROM seg g WHERE g.key = src.key AND g.part = 0)"
)


def _rows(catalog: Catalog, part_size: int, caps: Capabilities) -> Iterator[list[Segment]]:
    """The unfinished segments of each ``TODO`` object, in key order."""
    big = whole_limit(part_size, caps)
    for raw, size, version, fp in catalog.pages("key, size, version, fp", "src", _UNFINISHED):
        key = dec(raw)
        segs = segments_of(key, size, version, part_size, caps, fp)
        if size > big and len(segs) > 1:
            segs = _unfinished_parts(catalog, raw, segs)
        if segs:
            yield segs


def _unfinished_parts(catalog: Catalog, raw: str | bytes, segs: list[Segment]) -> list[Segment]:
    """A multipart object's parts no earlier run finished (the last one keeps ``last``)."""
    with catalog.lock:
        rows = catalog.db.execute("SELECT part FROM seg WHERE key = ?", (raw,))
        done = {p for (p,) in rows}
    segs = [s for s in segs if s.part not in done]
    if segs and not segs[-1].last:  # the last part finished in an earlier run
        segs[-1] = replace(segs[-1], last=True)
    return segs


def iter_chunks(
    catalog: Catalog,
    part_size: int,
    caps: Capabilities,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_count: int = DEFAULT_BATCH_COUNT,
) -> Iterator[Chunk]:
    """``manifest.make_chunks`` as a generator over the catalog: parts one chunk each, whole
    objects batched by bytes and count. Ids count from 0 in key order."""
    n = 0
    batch: list[Segment] = []
    size = 0
    for segs in _rows(catalog, part_size, caps):
        for seg in segs:
            if seg.part >= 1:
                yield Chunk(n, [seg])
                n += 1
                continue
            if batch and (size + seg.length > batch_bytes or len(batch) >= batch_count):
                yield Chunk(n, batch)
                n += 1
                batch, size = [], 0
            batch.append(seg)
            size += seg.length
    if batch:
        yield Chunk(n, batch)


def chunk_totals(
    catalog: Catalog,
    part_size: int,
    caps: Capabilities,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_count: int = DEFAULT_BATCH_COUNT,
) -> tuple[int, int, int, int]:
    """(chunks, segments, bytes, objects) ``iter_chunks`` will yield, from one pass that
    builds nothing (the dispatcher's progress needs the totals before the first chunk)."""
    chunks = segments = nbytes = objects = 0
    batch = size = 0
    big = whole_limit(part_size, caps)
    for raw, obj_size in catalog.pages("key, size", "src", _UNFINISHED):
        # An object up to ``big`` is one whole segment of its size (``segments_of``): no
        # Segment built, no key decoded (100k small objects: ~0.3 s less before the first send).
        if obj_size <= big:
            lengths: list[tuple[int, int]] = [(0, obj_size)]
        else:
            segs = segments_of(dec(raw), obj_size, None, part_size, caps)
            if len(segs) > 1:
                segs = _unfinished_parts(catalog, raw, segs)
            lengths = [(s.part, s.length) for s in segs]
        objects += bool(lengths)
        for part, length in lengths:
            segments += 1
            nbytes += length
            if part >= 1:
                chunks += 1
                continue
            if batch and (size + length > batch_bytes or batch >= batch_count):
                chunks += 1
                batch, size = 0, 0
            batch += 1
            size += length
    return chunks + (1 if batch else 0), segments, nbytes, objects


def fold_expected(catalog: Catalog, part_size: int, caps: Capabilities) -> list[str]:
    """Fill ``exp`` with (size, CRC32C) of every ``TODO`` object from its segments' CRCs;
    returns keys with a segment missing (an internal error the caller reports)."""
    big = whole_limit(part_size, caps)
    catalog.run(
        f"INSERT OR REPLACE INTO exp SELECT s.key, s.size, g.crc FROM src s JOIN seg g "
        f"ON g.key = s.key AND g.part = 0 WHERE s.state = {TODO}"
    )
    missing: list[str] = []
    rows = []
    where = f"state = {TODO} AND NOT EXISTS (SELECT 1 FROM exp e WHERE e.key = src.key)"
    for raw, size in catalog.pages("key, size", "src", where):
        segs = segments_of(dec(raw), size, None, part_size, caps) if size > big else []
        with catalog.lock:
            crcs = dict(catalog.db.execute("SELECT part, crc FROM seg WHERE key = ?", (raw,)))
        if len(segs) < 2 or any(s.part not in crcs for s in segs):
            missing.append(dec(raw))
            continue
        crc = crcs[segs[0].part]
        for s in segs[1:]:
            crc = crc32c_combine(crc, crcs[s.part], s.length)
        rows.append((raw, size, crc))
    catalog.write("INSERT OR REPLACE INTO exp VALUES(?,?,?)", rows)
    return missing
