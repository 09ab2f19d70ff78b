"""End-of-transfer checks: the source did not change, every object landed whole and intact.

Objects are compared by size and by CRC32C. The expected CRC32C is folded from the per-range
checksums the sources computed. ``method``:

- ``full`` (the default): size from the destination listing (a sync that wrote a small share of
  a large destination looks each written object up instead: ``looks_up``), and the CRC32C from
  the first of: the store's own checksum (listing or HEAD); a write this run made that the store
  (S3 echoing the checksum it checked) or the sink (it checked the received bytes against the
  source's CRC32C, then wrote them to a store with ``checked_writes``: a local folder) vouched
  for, for every segment of the object (the ``vouch`` table); else the object is read back;
- ``read-back``: ignores vouches and reads back every object whose listing carries no CRC32C
  (the stronger check: catches a destination changed between the write and the check);
- ``size``: the listing's sizes only.

The store's own checksum comes from the listing where it carries one (GCS), else, for a store
that declares ``crc32c`` among its native checksums but lists without values (S3: the listing
names the algorithm only), from a HEAD: one small request per object instead of a read of every
byte. An object the store holds no full-object CRC32C for (written by another tool, a composite
multipart checksum) is read back.
"""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from typing import Any

from gateway_agent.stores.base import ListRow, ObjectStore
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.catalog import BATCH, COMMITTED, TODO, Catalog, checksums_json, dec
from skyplane_ops.transfer.checksum import crc32c_b64, crc32c_combine
from skyplane_ops.transfer.listrows import micros

# 8 MiB: large enough for few calls, small enough that the allocator reuses its buffers (each
# 64 MiB read was a fresh mmap, page-faulted in: ~0.3 s more per 512 MB read back).
READ_BACK_RANGE = 8 * 1024 * 1024
# A listing page names 1,000 objects where 16 HEADs at once name 16, and a folder's listing
# costs about a ``stat`` per file, as a lookup does: looking each object up is the cheaper end
# check when the destination holds this many times more objects than the run wrote.
LOOKUP_SHARE = 64


@dataclass
class Verification:
    status: str  # passed | failed
    objects: int
    method: str
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "objects": self.objects,
            "method": self.method,
            "failures": len(self.failures),
            "first_failures": self.failures[:5],
        }


def relist_needed(catalog: Catalog, delete: bool) -> bool:
    """Whether ``changed_objects`` (a second listing of the whole source) can find anything the
    copy did not already.

    Every segment read is pinned to the version the listing carried (``read(version=...)``:
    a local file's size/mtime/ctime/inode checked with ``fstat`` before and after the read, S3
    and Azure ETag ``If-Match``, GCS generation), and a read of another version raises
    ``SourceChangedError``, which lands in ``DispatchStats.changed_keys``. So when every object
    this run copies (``TODO``) or holds from the journal (``COMMITTED``) was listed with a
    version, each destination object holds exactly the listed version, and the relist could
    only add objects changed *after* their last read: a change after the run's end that no
    check can tell apart from it. Objects resumed from the journal are no exception: a segment
    or commit is resumed only when the journal's fingerprint (version included) equals this
    listing's, and the earlier run read it pinned to that version too.

    The relist stays when any such object was listed without a version (its reads are not
    pinned: the fingerprint comparison is the only check) and for ``sync --delete`` (``delete``:
    the mirror delete decides from the fresh listing it makes)."""
    if delete:
        return True
    return bool(
        catalog.one(f"SELECT 1 FROM src WHERE state IN ({TODO}, {COMMITTED}) AND version IS NULL")
    )


def changed_objects(src: ObjectStore, catalog: Catalog) -> list[str]:
    """Keys of the objects this run copies (``TODO`` or ``COMMITTED``) whose fingerprint
    (size/etag/mtime/version) differs now from the catalog's listing, or that are gone.

    The fresh listing is streamed into the catalog's ``now`` table (``sync --delete`` uses it
    before deleting) and compared there.
    """
    catalog.add_now(src)
    return [
        dec(k)
        for (k,) in catalog.pages(
            "key",
            "src",
            f"state IN ({TODO}, {COMMITTED}) AND NOT EXISTS "
            "(SELECT 1 FROM now n WHERE n.key = src.key AND n.fp = src.fp)",
        )
    ]


def read_back_crc(store: ObjectStore, key: str, size: int) -> int:
    crc = 0
    for start in range(0, size, READ_BACK_RANGE):
        n = min(READ_BACK_RANGE, size - start)
        part = store.read(key, start, n)
        c = crc32c(part)
        crc = c if start == 0 else crc32c_combine(crc, c, n)
    return crc


def _check(
    dst: ObjectStore, key: str, size: int, crc: int, ask_store: bool
) -> tuple[str | None, bool]:
    """(failure or None, whether the store's own checksum decided it) for one object whose
    listing carried no CRC32C: a HEAD where the store keeps one, else a read-back."""
    if ask_store:
        try:
            stored = dst.head(key).checksums.get("crc32c")
        except StoreError as exc:
            return f"{key}: head failed: {exc}", True
        if stored is not None:
            return (None if stored == crc32c_b64(crc) else f"{key}: crc32c mismatch"), True
    try:
        got = read_back_crc(dst, key, size)
    except StoreError as exc:
        return f"{key}: read-back failed: {exc}", False
    return (None if got == crc else f"{key}: crc32c mismatch on read-back"), False


def _inline(dst: ObjectStore) -> bool:
    """A store of local calls (a folder) is read back inline: a thread hop per object cost
    more than the read itself (100k objects of 1 KiB: 4.3 s -> 1.7 s)."""
    return bool(getattr(dst.capabilities, "local_calls", False))


def _check_key(
    dst: ObjectStore, expected: dict[str, tuple[int, int]], ask_store: bool, key: str
) -> tuple[str | None, bool]:
    return _check(dst, key, *expected[key], ask_store)


def _check_row(
    dst: ObjectStore, ask_store: bool, row: tuple[str, int, int]
) -> tuple[str | None, bool]:
    return _check(dst, row[0], row[1], row[2], ask_store)


def _method(native: int, read_back: int, objects: int, written: int = 0) -> str:
    parts = []
    if native:
        parts.append("native crc32c")
    if written:
        parts.append("write-checked crc32c")
    if read_back:
        parts.append("read-back crc32c")
    if objects > native + read_back + written:
        parts.append("size")
    return "+".join(parts) or "none"


def verify_objects(
    dst: ObjectStore,
    expected: dict[str, tuple[int, int]],
    method: str = "full",
    threads: int = 4,
) -> Verification:
    """``expected`` maps key -> (size, crc32c). ``method``: full | read-back | size (no
    vouches here: full reads back like read-back). For a few objects; the engine uses
    ``verify_catalog``, which holds nothing per object."""
    failures: list[str] = []
    native = 0
    to_read: list[str] = []
    ask_store = "crc32c" in dst.capabilities.native_checksums
    seen: set[str] = set()
    try:
        for info in dst.list():
            want = expected.get(info.key)
            if want is None or info.key in seen:
                continue
            seen.add(info.key)
            key, (size, crc) = info.key, want
            if info.size != size:
                failures.append(f"{key}: size {info.size} != {size}")
            elif "crc32c" in info.checksums:
                native += 1
                if info.checksums["crc32c"] != crc32c_b64(crc):
                    failures.append(f"{key}: crc32c mismatch")
            elif method != "size":
                to_read.append(key)
    except StoreError as exc:
        return Verification("failed", len(expected), method, [f"cannot list destination: {exc}"])
    failures.extend(f"{key}: missing at the destination" for key in expected if key not in seen)
    read_back = 0
    inline = _inline(dst)
    with ThreadPoolExecutor(max_workers=threads) as pool:  # threads start on first use only
        check = partial(_check_key, dst, expected, ask_store)
        for failure, by_store in map(check, to_read) if inline else pool.map(check, to_read):
            if failure:
                failures.append(failure)
            native += by_store
            read_back += not by_store
    return Verification(
        "failed" if failures else "passed",
        len(expected),
        _method(native, read_back, len(expected)),
        failures,
    )


def _crc_int(b64: str | None) -> int | None:
    if b64 is None:
        return None
    try:
        return int.from_bytes(base64.b64decode(b64, validate=True), "big")
    except ValueError:
        return -1  # unreadable: never equal to a CRC


# An expected object (``exp e``) is vouched for: a whole object by its write (``seg`` part 0),
# a multipart one by all its parts' (``vouch``, from ``commit.vouch_multipart``).
_VOUCHED = (
    "(EXISTS (SELECT 1 FROM seg s WHERE s.key = e.key AND s.part = 0 AND s.v = 1) "
    "OR EXISTS (SELECT 1 FROM vouch v WHERE v.key = e.key))"
)


GOT = "key,size,crc,mtime,ck,etag"


def _got_rows(batch: list[ListRow]) -> list[tuple[Any, ...]]:
    """(key, size, listed CRC32C, mtime, checksums, ETag) of each destination object of a
    listing batch (the insert encodes a key SQLite cannot take as text); the last three as the
    sync's destination listing shows them, for its record (``syncstate``)."""
    return [
        (key, size, _crc_int(json.loads(sums).get("crc32c")) if sums else None, when, sums, tag)
        for key, size, when, sums, _version, tag in batch
    ]


def looks_up(catalog: Catalog, objects: int) -> bool:
    """Whether the end check looks up each of the run's ``objects`` (a HEAD, or a ``stat`` on
    a folder) instead of listing the whole destination: only for a sync, whose destination
    listing is there to count, when it is ``LOOKUP_SHARE`` times larger than what the run
    wrote. A daily sync of a few new files into a million-object destination then checks those
    few, not a million (a listing of 1M took 6 s on a folder, minutes on an object store).
    A ``files_from`` run always looks its keys up."""
    if catalog.by_key:  # a ``files_from`` run: nothing is listed, before or after
        return True
    if not catalog.has_destination:
        return False
    held = int(catalog.one("SELECT count(*) FROM dst")) + catalog.outside[0]
    return objects * LOOKUP_SHARE < held


def _head_into_got(dst: ObjectStore, catalog: Catalog, threads: int) -> None:
    """``got`` filled from a HEAD per object of ``exp`` (key, size, the CRC32C the store
    reports); a missing object gets no row, as a listing would show it."""

    def look(raw: str | bytes) -> tuple[Any, ...] | None:
        try:
            info = dst.head(dec(raw))
        except ObjectNotFoundError:
            return None
        # As a listing without versions shows the object (``listrows.listed``): a local
        # file's time is its mtime and it has no ETag there.
        local = dst.capabilities.file_names
        when = micros(info.modified if info.written is None else info.written)
        sums = checksums_json(info)
        return (
            raw,
            info.size,
            _crc_int(info.checksums.get("crc32c")),
            when,
            sums,
            (None if local else info.etag),
        )

    inline = _inline(dst)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        keys = (k for (k,) in catalog.pages("key", "exp"))
        while page := list(islice(keys, BATCH)):
            found = map(look, page) if inline else pool.map(look, page)
            sql = f"INSERT OR IGNORE INTO got({GOT}) VALUES(?,?,?,?,?,?)"
            catalog.write(sql, [r for r in found if r])


def verify_catalog(
    dst: ObjectStore, catalog: Catalog, method: str = "full", threads: int = 16
) -> Verification:
    """``verify_objects`` over the catalog's ``exp`` table (key -> size, CRC32C): the
    destination listing is streamed into ``got`` and compared in SQL; only objects the listing
    carried no CRC32C for, and (``full``) no write vouched for, are looked at one by one (HEAD
    or read-back), a page at a time, by ``threads`` at once (the work is waiting on the store:
    I/O or a request's latency). A local folder is listed in two processes at once
    (``splitlist``)."""
    objects = int(catalog.one("SELECT count(*) FROM exp"))
    catalog.run("DELETE FROM got")
    try:
        if looks_up(catalog, objects):
            _head_into_got(dst, catalog, threads)
        else:
            catalog.insert_listing(
                dst, "got", GOT, _got_rows, versions=False, verb="INSERT OR IGNORE",
            )  # fmt: skip
    except (StoreError, TransferError) as exc:  # TransferError: the listing's second process
        return Verification("failed", objects, method, [f"cannot list destination: {exc}"])
    # Objects whose writes were vouched for (``vouch``, see the module doc) and that the listing
    # shows with their size: a HEAD or a read-back would only repeat what the write's check said.
    # Counted as native when the store itself checked (S3's answer), else as write-checked.
    trust = method == "full"
    # Objects the listing carries a matching CRC32C for (a scan of ``got``: no join for a
    # listing without checksums); the vouched ones are counted from the look pass below.
    listed = int(
        catalog.one(
            "SELECT count(*) FROM got g JOIN exp e ON e.key = g.key AND e.size = g.size "
            "AND e.crc = g.crc WHERE g.crc IS NOT NULL"
        )
    )
    native = listed
    # One pass over the objects that fail or need a look (missing, another size, another CRC32C
    # in the listing, or none and no vouch), in key order: exp and got are both keyed.
    rows = (
        "(SELECT e.key AS key, e.size AS size, e.crc AS crc, g.size AS gsize, g.crc AS gcrc, "
        f"{_VOUCHED} AS vouched "
        "FROM exp e LEFT JOIN got g ON g.key = e.key)"
    )
    look = "gsize IS NULL OR gsize != size OR gcrc != crc"
    if method != "size":
        look += " OR (gcrc IS NULL" + (" AND NOT vouched)" if trust else ")")
    failures: list[str] = []
    read_back = 0
    ask_store = "crc32c" in dst.capabilities.native_checksums
    inline = _inline(dst)
    page: list[tuple[str, int, int]] = []

    def flush() -> None:
        nonlocal native, read_back
        check = partial(_check_row, dst, ask_store)
        checks = map(check, page) if inline else pool.map(check, page)
        for failure, by_store in checks:
            if failure:
                failures.append(failure)
            native += by_store
            read_back += not by_store
        page.clear()

    looked = 0  # rows of the look pass; every other object passed on its listing alone
    with ThreadPoolExecutor(max_workers=threads) as pool:  # threads start on first use only
        for k, size, crc, gsize, gcrc, _v in catalog.pages("*", rows, look):
            looked += 1
            if gsize is None:
                failures.append(f"{dec(k)}: missing at the destination")
            elif gsize != size:
                failures.append(f"{dec(k)}: size {gsize} != {size}")
            elif gcrc is not None:
                native += 1  # the store's own checksum, and it disagrees
                failures.append(f"{dec(k)}: crc32c mismatch")
            else:
                page.append((dec(k), size, crc))
                if len(page) >= 4 * BATCH // 5:
                    flush()
        flush()
    # Passed without a look: a matching listed CRC32C, else (``full`` only) a vouched write.
    vouched = objects - looked - listed if trust else 0
    by_store = "crc32c" in dst.capabilities.native_checksums
    written = 0 if by_store else vouched
    native += vouched if by_store else 0
    return Verification(
        "failed" if failures else "passed",
        objects,
        _method(native, read_back, objects, written),
        failures,
    )
