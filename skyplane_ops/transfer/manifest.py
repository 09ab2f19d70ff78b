"""The manifest: what to copy, cut into segments (ranges aligned to parts) and chunks.

A *segment* is one object range with its destination role: a multipart part (``part >= 1``)
or a whole small object (``part == 0``). Segment ids are stable across runs, which is what the
journal records. A *chunk* is what travels: one part, or a batch of whole small objects, so
10,000 tiny files cost tens of frames, not 10,000 round trips.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway_agent.stores.base import (
    Capabilities,
    ObjectInfo,
    ObjectStore,
    ReportsSkips,
    SkippedEntry,
)
from gateway_agent.stores.errors import KeyNotSupportedError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.checks import MAX_PART_SIZE
from skyplane_ops.transfer.listrows import listed

MiB = 1024 * 1024
DEFAULT_PART_SIZE = 64 * MiB
DEFAULT_BATCH_BYTES = 8 * MiB
DEFAULT_BATCH_COUNT = 256


@dataclass(frozen=True, slots=True)
class Segment:
    key: str
    offset: int
    length: int
    part: int  # 0 = the whole object in one write
    # The source version the listing saw: gateways read only that version (see ObjectInfo).
    version: str | None = None
    # The object's last segment (the dispatcher counts an object done when it has landed and
    # nothing of it is in flight); whole objects are their own last segment.
    last: bool = True
    # The source fingerprint (canonical JSON) the journal records with the segment.
    fp: str | None = None

    @property
    def seg_id(self) -> str:
        return f"{self.part}:{self.key}"


@dataclass(slots=True)
class Chunk:
    chunk_id: int
    segments: list[Segment]
    attempts: int = 0
    # Indexes of segments whose write the destination store vouched for (it checked the body
    # against the source's CRC32C and said so in its answer): verification need not ask again.
    vouched: tuple[int, ...] = ()
    # Per segment, the destination version its write's answer named (None: a part, or a store
    # that names none), for the transfer report; set by the dispatcher.
    versions: tuple[str | None, ...] = ()
    # The source gateway it was last submitted to (set by the dispatcher): if that gateway
    # dies while its region has others, the chunk goes to one of them.
    source: str = ""
    # The index of the plan path it finished on (set by the dispatcher; the transfer report
    # names each object's paths).
    path: int = 0
    # Summed once: the dispatcher weighs its window of chunks by bytes at every round.
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(s.length for s in self.segments)


def fingerprint(info: ObjectInfo) -> list[object]:
    """What must not change between listing and commit: size, etag, modification time and
    the store's version (a local file's ctime and inode: a same-size rewrite that puts the old
    mtime back still changes it)."""
    modified = info.modified.isoformat() if info.modified else None
    return [info.size, info.etag, modified, info.version]


@dataclass
class Manifest:
    """Listed source objects (sorted by key) and their segments."""

    objects: list[ObjectInfo]
    part_size: int
    skipped: int = 0  # objects left out by sync mode
    # Entries the source listing left out (links, loops, unreadable folders); ``error`` ones
    # make the copy incomplete.
    problems: list[SkippedEntry] = field(default_factory=list)
    segments: dict[str, list[Segment]] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def is_multipart(self, key: str) -> bool:
        return self.segments[key][0].part >= 1


def matches(key: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Shell-style globs on the key relative to the source prefix."""
    if include and not any(fnmatch.fnmatchcase(key, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(key, p) for p in exclude)


def choose_part_size(size: int, part_size: int, caps: Capabilities) -> int:
    """Respect the destination's minimum part size and maximum part count: an object that
    would need more parts gets larger ones, never larger than a chunk can be
    (``checks.MAX_PART_SIZE``, one wire frame)."""
    part = max(part_size, caps.min_part_size or 0)
    if caps.max_parts and size > part * caps.max_parts:
        part = min(math.ceil(size / caps.max_parts / MiB) * MiB, max(part, MAX_PART_SIZE))
    return part


def split(info: ObjectInfo, part_size: int, multipart: bool) -> list[Segment]:
    if info.size <= part_size or not multipart:
        return [Segment(info.key, 0, info.size, 0, info.version)]
    n = math.ceil(info.size / part_size)
    return [
        Segment(
            info.key,
            i * part_size,
            min(part_size, info.size - i * part_size),
            i + 1,
            info.version,
            i == n - 1,
        )
        for i in range(n)
    ]


def source_totals(
    store: ObjectStore,
    src_uri: str,
    include: Sequence[str],
    exclude: Sequence[str],
    *,
    allow_empty: bool = False,
) -> tuple[int, int]:
    """(objects, bytes) of the source objects to copy, counted as the listing streams: nothing
    per object is kept, whatever the count (what a plan is sized from). Finding nothing is a
    ``TransferError`` saying why, unless ``allow_empty``."""
    count = nbytes = 0
    try:
        for batch in listed(store, versions=False):
            for row in batch:
                if matches(row[0], include, exclude):
                    count += 1
                    nbytes += row[1]
    except StoreError as exc:
        raise TransferError(f"cannot list source {src_uri}: {exc}") from exc
    problems: list[SkippedEntry] = []
    if isinstance(store, ReportsSkips):
        problems.extend(p for p in store.skipped if matches(p.key, include, exclude) or p.error)
    if not allow_empty:
        check_found(count, problems, src_uri, include, exclude)
    return count, nbytes


def check_found(
    count: int,
    problems: Sequence[SkippedEntry],
    src_uri: str,
    include: Sequence[str],
    exclude: Sequence[str],
) -> None:
    """Refuse a source listing that found nothing to copy, saying why: nothing readable,
    no such folder, or nothing matching the filters."""
    if count:
        return
    bad = next((p for p in problems if p.error), None)
    if bad is not None:
        raise TransferError(f"nothing readable under source {src_uri}: {bad.key!r}: {bad.reason}")
    if src_uri.startswith("file://"):
        root = src_uri[len("file://") :]
        if not os.path.isdir(root):
            raise TransferError(f"source {src_uri} does not exist (no directory {root})")
    filt = ""
    if include or exclude:
        filt = f" matching include={list(include)} exclude={list(exclude)}"
    raise TransferError(f"no objects{filt} under source {src_uri}")


def refused_names(dst: ObjectStore, objects: Iterable[ObjectInfo]) -> dict[str, str]:
    """Keys the destination cannot hold (``check_name`` raises KeyNotSupportedError: a
    non-UTF-8 local name bound for a cloud, ``a//b`` bound for a disk), mapped to why."""
    check = getattr(dst, "check_name", None)
    if check is None:
        return {}
    refused: dict[str, str] = {}
    for o in objects:
        try:
            check(o.key)
        except KeyNotSupportedError as exc:
            refused[o.key] = f"destination: {exc}"
    return refused


def build_manifest(
    objects: list[ObjectInfo],
    dst_caps: Capabilities,
    part_size: int = DEFAULT_PART_SIZE,
    skipped: int = 0,
) -> Manifest:
    manifest = Manifest(objects=objects, part_size=part_size, skipped=skipped)
    for o in objects:
        manifest.segments[o.key] = split(
            o, choose_part_size(o.size, part_size, dst_caps), dst_caps.multipart
        )
    return manifest


def make_chunks(
    segments: Iterable[Segment],
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    batch_count: int = DEFAULT_BATCH_COUNT,
) -> list[Chunk]:
    """Parts become one chunk each; whole objects are batched by bytes and count."""
    chunks: list[Chunk] = []
    batch: list[Segment] = []
    size = 0
    for seg in segments:
        if seg.part >= 1:
            chunks.append(Chunk(len(chunks), [seg]))
            continue
        if batch and (size + seg.length > batch_bytes or len(batch) >= batch_count):
            chunks.append(Chunk(len(chunks), batch))
            batch, size = [], 0
        batch.append(seg)
        size += seg.length
    if batch:
        chunks.append(Chunk(len(chunks), batch))
    return chunks


def same_object(src: ObjectInfo, dst: ObjectInfo) -> bool:
    """Sync's test: equal size and, where both sides report one, an equal checksum; otherwise
    the destination's bytes must not be older than the source's last change (``written``
    against ``modified``: for local files the mtime against the later of mtime and ctime)."""
    if src.size != dst.size:
        return False
    common = set(src.checksums) & set(dst.checksums)
    if common:
        return all(src.checksums[k] == dst.checksums[k] for k in common)
    written = dst.written or dst.modified
    if src.modified and written:
        return written >= src.modified
    return True
