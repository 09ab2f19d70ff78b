"""Compare a replica with its source: object count, bytes and per-object checksums.

Native checksums are compared when both stores report the same algorithm (e.g. CRC32C on GCS
and S3); otherwise the bytes are read back and CRC32C'd on both sides, in ranges, with a few
threads. The listings go through a scratch SQLite file, not memory; only counts and at most a
handful of example keys are kept: the result goes into Dagster metadata, which must stay small.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import google_crc32c

from skyplane_ops.api import ObjectInfo

SAMPLE = 5
_READ = 8 * 1024 * 1024
_PAGE = 1000  # listing rows per insert, objects per read-back round


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


def _native_pair(a: dict[str, str], b: dict[str, str]) -> tuple[str, str, str] | None:
    """The first checksum algorithm both listings report: (name, source's, replica's)."""
    for algo in ("crc32c", "md5", "sha256", "crc64nvme"):
        if algo in a and algo in b:
            return algo, a[algo], b[algo]
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
    """Compare two listings (keys relative to each store's root) and, per ``checksums``, bytes.

    The listings are streamed into a scratch SQLite file and compared there in key order, so
    the check's memory does not grow with the object count (a million objects held as two
    dicts of ``ObjectInfo`` took ~2 GiB); objects to read back go a page at a time."""
    if checksums not in ("auto", "native", "off"):
        raise ValueError(f"checksums must be auto, native or off, not {checksums!r}")
    with tempfile.TemporaryDirectory(prefix="skyplane-compare-") as folder:
        db = sqlite3.connect(os.path.join(folder, "compare.sqlite"))
        try:
            return _compare(db, src_store, dst_store, src_items, dst_items, checksums, threads)
        finally:
            db.close()


def _load(db: sqlite3.Connection, table: str, items: Iterable[ObjectInfo]) -> None:
    db.execute(f"CREATE TABLE {table}(key BLOB PRIMARY KEY, size INTEGER, ck TEXT) WITHOUT ROWID")
    rows = ((_blob(o.key), o.size, json.dumps(o.checksums) if o.checksums else None) for o in items)
    while batch := list(itertools.islice(rows, _PAGE)):
        db.executemany(f"INSERT OR REPLACE INTO {table} VALUES(?,?,?)", batch)
    db.commit()


def _blob(key: str) -> bytes:
    """A key as bytes (a local name may not be UTF-8): sorted as S3 sorts, back by ``_key``."""
    return key.encode("utf-8", "surrogatepass")


def _key(blob: bytes) -> str:
    return blob.decode("utf-8", "surrogatepass")


def _compare(
    db: sqlite3.Connection,
    src_store: Any,
    dst_store: Any,
    src_items: Iterable[ObjectInfo],
    dst_items: Iterable[ObjectInfo],
    checksums: str,
    threads: int,
) -> Comparison:
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    _load(db, "a", src_items)
    _load(db, "b", dst_items)
    (n_a, b_a), (n_b, b_b) = (
        db.execute(f"SELECT count(*), coalesce(sum(size), 0) FROM {t}").fetchone()
        for t in ("a", "b")
    )
    cmp = Comparison(src_objects=n_a, dst_objects=n_b, src_bytes=b_a, dst_bytes=b_b)
    for kind, bucket, this, other in (
        ("missing", cmp.missing, "a", "b"),
        ("extra", cmp.extra, "b", "a"),
    ):
        query = (
            f"SELECT key FROM {this} WHERE NOT EXISTS "
            f"(SELECT 1 FROM {other} o WHERE o.key = {this}.key) ORDER BY key"
        )
        for (blob,) in db.execute(query):
            _note(cmp, kind, bucket, _key(blob))
    to_read: list[tuple[str, int]] = []

    def read_back() -> None:
        def both(item: tuple[str, int]) -> tuple[str, bool]:
            key, size = item
            return key, _crc32c_of(src_store, key, size) == _crc32c_of(dst_store, key, size)

        cmp.methods.add("crc32c (read back)")
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for key, same in pool.map(both, to_read):
                cmp.checksummed += 1
                if not same:
                    _note(cmp, "checksum", cmp.checksum_mismatch, key)
        to_read.clear()

    pairs = db.execute(
        "SELECT a.key, a.size, b.size, a.ck, b.ck FROM a JOIN b ON a.key = b.key ORDER BY a.key"
    )
    for blob, size, dst_size, ck_a, ck_b in pairs:
        key = _key(blob)
        if size != dst_size:
            _note(cmp, "size", cmp.size_mismatch, key)
            continue
        if checksums == "off":
            continue
        native = _native_pair(json.loads(ck_a), json.loads(ck_b)) if ck_a and ck_b else None
        if native is not None:
            cmp.methods.add(native[0])
            cmp.checksummed += 1
            if native[1] != native[2]:
                _note(cmp, "checksum", cmp.checksum_mismatch, key)
        elif checksums == "auto":
            to_read.append((key, size))
            if len(to_read) >= _PAGE:
                read_back()
    if to_read:
        read_back()
    return cmp


def compare_stores(src_store: Any, dst_store: Any, *, checksums: str = "auto") -> Comparison:
    """List both stores fully and compare them (see :func:`compare_listings`)."""
    return compare_listings(
        src_store, dst_store, src_store.list(), dst_store.list(), checksums=checksums
    )
