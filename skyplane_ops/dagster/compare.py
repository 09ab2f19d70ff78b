"""Compare a replica with its source: object count, bytes and per-object checksums.

Native checksums are compared when both stores report the same algorithm (e.g. CRC32C on GCS
and S3); otherwise the bytes are read back and CRC32C'd on both sides, in ranges, with a few
threads. Only counts and at most a handful of example keys are kept: the result goes into
Dagster metadata, which must stay small.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import google_crc32c

from gateway_agent.stores.base import ObjectInfo

SAMPLE = 5
_READ = 8 * 1024 * 1024


@dataclass
class Comparison:
    """What differs between source and replica (counts plus a few example keys)."""

    src_objects: int = 0
    dst_objects: int = 0
    src_bytes: int = 0
    dst_bytes: int = 0
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    size_mismatch: list[str] = field(default_factory=list)
    checksum_mismatch: list[str] = field(default_factory=list)
    checksummed: int = 0
    methods: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (
            self.src_objects == self.dst_objects
            and self.src_bytes == self.dst_bytes
            and not any(self.counts.get(k, 0) for k in ("missing", "extra", "size", "checksum"))
        )

    def add(self, other: Comparison) -> None:
        """Fold another partition's comparison into this one."""
        for name in ("src_objects", "dst_objects", "src_bytes", "dst_bytes", "checksummed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("missing", "extra", "size_mismatch", "checksum_mismatch"):
            mine: list[str] = getattr(self, name)
            mine.extend(getattr(other, name)[: max(0, SAMPLE - len(mine))])
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        self.methods |= other.methods

    def summary(self) -> str:
        if self.passed:
            return (
                f"replica matches source: {self.dst_objects} objects, {self.dst_bytes} bytes, "
                f"{self.checksummed} checksums ({', '.join(sorted(self.methods)) or 'none'})"
            )
        parts = [
            f"{self.counts.get(k, 0)} {label}"
            for k, label in (
                ("missing", "missing"),
                ("extra", "extra"),
                ("size", "with a different size"),
                ("checksum", "with a different checksum"),
            )
            if self.counts.get(k, 0)
        ]
        return (
            f"replica differs from source: {self.src_objects} vs {self.dst_objects} objects, "
            f"{self.src_bytes} vs {self.dst_bytes} bytes; " + ", ".join(parts or ["totals differ"])
        )

    def metadata(self) -> dict[str, Any]:
        """Small metadata: counts, bytes, method and up to five example keys per problem."""
        meta: dict[str, Any] = {
            "source_objects": self.src_objects,
            "replica_objects": self.dst_objects,
            "source_bytes": self.src_bytes,
            "replica_bytes": self.dst_bytes,
            "checksums_compared": self.checksummed,
            "checksum_method": ", ".join(sorted(self.methods)) or "none",
            "summary": self.summary(),
        }
        for name, label in (
            ("missing", "missing"),
            ("extra", "extra"),
            ("size_mismatch", "size"),
            ("checksum_mismatch", "checksum"),
        ):
            count = self.counts.get(label, 0)
            meta[f"{label}_count"] = count
            if count:
                meta[f"{label}_examples"] = ", ".join(getattr(self, name)[:SAMPLE])
        return meta


def _note(cmp: Comparison, kind: str, bucket: list[str], key: str) -> None:
    cmp.counts[kind] = cmp.counts.get(kind, 0) + 1
    if len(bucket) < SAMPLE:
        bucket.append(key)


def _crc32c_of(store: Any, key: str, size: int) -> str:
    crc = 0
    offset = 0
    while offset < size:
        data = store.read(key, offset, min(_READ, size - offset))
        if not data:
            break
        crc = int(google_crc32c.extend(crc, data))
        offset += len(data)
    return f"{crc:08x}:{offset}"


def _native_pair(a: ObjectInfo, b: ObjectInfo) -> tuple[str, str, str] | None:
    for algo in ("crc32c", "md5", "sha256", "crc64nvme"):
        if algo in a.checksums and algo in b.checksums:
            return algo, a.checksums[algo], b.checksums[algo]
    return None


def compare_listings(
    src_store: Any,
    dst_store: Any,
    src_items: Iterable[ObjectInfo],
    dst_items: Iterable[ObjectInfo],
    *,
    checksums: str = "auto",
    threads: int = 8,
) -> Comparison:
    """Compare two listings (keys relative to each store's root) and, per ``checksums``, bytes."""
    if checksums not in ("auto", "native", "off"):
        raise ValueError(f"checksums must be auto, native or off, not {checksums!r}")
    src = {o.key: o for o in src_items}
    dst = {o.key: o for o in dst_items}
    cmp = Comparison(
        src_objects=len(src),
        dst_objects=len(dst),
        src_bytes=sum(o.size for o in src.values()),
        dst_bytes=sum(o.size for o in dst.values()),
    )
    for key in sorted(src.keys() - dst.keys()):
        _note(cmp, "missing", cmp.missing, key)
    for key in sorted(dst.keys() - src.keys()):
        _note(cmp, "extra", cmp.extra, key)
    to_read: list[str] = []
    for key in sorted(src.keys() & dst.keys()):
        a, b = src[key], dst[key]
        if a.size != b.size:
            _note(cmp, "size", cmp.size_mismatch, key)
            continue
        if checksums == "off":
            continue
        native = _native_pair(a, b)
        if native is not None:
            cmp.methods.add(native[0])
            cmp.checksummed += 1
            if native[1] != native[2]:
                _note(cmp, "checksum", cmp.checksum_mismatch, key)
        elif checksums == "auto":
            to_read.append(key)
    if to_read:
        cmp.methods.add("crc32c (read back)")

        def both(key: str) -> tuple[str, bool]:
            size = src[key].size
            return key, _crc32c_of(src_store, key, size) == _crc32c_of(dst_store, key, size)

        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for key, same in pool.map(both, to_read):
                cmp.checksummed += 1
                if not same:
                    _note(cmp, "checksum", cmp.checksum_mismatch, key)
    return cmp


def compare_stores(src_store: Any, dst_store: Any, *, checksums: str = "auto") -> Comparison:
    """List both stores fully and compare them (see :func:`compare_listings`)."""
    return compare_listings(
        src_store, dst_store, src_store.list(), dst_store.list(), checksums=checksums
    )
