"""Versioned measured throughput grids at a location (local path or object-store URI).

Layout under the location::

    journal/<run_id>/<seq>-<measurement_id>.parquet   one row each, written as soon as taken
    versions/<version>.parquet                        immutable snapshots of every measurement
    LATEST                                            {"version": ..., "key": ...} pointer

A run appends each measurement to the journal the moment it is taken, so a run that dies
half-way keeps what it measured. ``publish()`` folds the latest version and the journal into a
new immutable version file, then rewrites the small ``LATEST`` pointer (a single atomic write:
a rename on a local disk, one PUT on an object store). Readers never see a half-written
version. Versions sort by name (UTC timestamp first). Readers may be many; publish from one
run at a time per store: two concurrent publishers can leave the other's new rows out of the
latest version (they stay in that run's own version file).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from skyplane_ops.profiler.errors import GridStoreError
from skyplane_ops.profiler.records import (
    SOURCE_PASSIVE,
    Measurement,
    from_table,
    latest_per_pair,
    to_table,
    utcnow,
)

LATEST_KEY = "LATEST"
VERSIONS_PREFIX = "versions/"
JOURNAL_PREFIX = "journal/"
NOT_FOUND = {"ObjectNotFoundError", "NoSuchKey", "NotFound", "ResourceNotFoundError"}


class _Blobs(Protocol):
    """The four operations the grid store needs from where it lives."""

    def read(self, key: str) -> bytes: ...

    def write(self, key: str, data: bytes) -> None: ...

    def list(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...


class _LocalBlobs:
    """A directory; every write is a temp file + ``os.replace`` (atomic on one filesystem)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(
            str(p.relative_to(self.root))
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".tmp-")
        )

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)


class _ObjectBlobs:
    """An ``ObjectStore`` from ``gateway_agent.stores`` (S3, Azure, GCS, in-memory)."""

    def __init__(self, uri: str, options: Mapping[str, Any]) -> None:
        try:
            from gateway_agent.stores import open_store
        except ImportError as exc:  # pragma: no cover - depends on the stores package
            raise GridStoreError(
                f"object-store grid locations need gateway_agent.stores: {exc}"
            ) from exc
        try:
            self.store = open_store(uri, dict(options))
        except Exception as exc:
            raise GridStoreError(
                f"cannot open grid store {uri!r}: {exc}; use a local path, file://, "
                "s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
            ) from exc

    def read(self, key: str) -> bytes:
        return bytes(self.store.read(key))

    def write(self, key: str, data: bytes) -> None:
        self.store.write(key, data)

    def list(self, prefix: str) -> list[str]:
        return sorted(info.key for info in self.store.list(prefix))

    def delete(self, key: str) -> None:
        self.store.delete(key)


def _open_blobs(location: str, options: Mapping[str, Any]) -> _Blobs:
    if not location or not str(location).strip():
        raise GridStoreError("empty grid store location")
    location = str(location)
    if "://" not in location:
        return _LocalBlobs(Path(location).expanduser())
    scheme = location.split("://", 1)[0].lower()
    if scheme == "file":
        return _LocalBlobs(Path(location[len("file://") :]).expanduser())
    return _ObjectBlobs(location, options)


def default_store_uri() -> str:
    """Where grids live when no ``--store`` is given: ``$SKYPLANE_OPS_HOME/grid``."""
    home = os.environ.get("SKYPLANE_OPS_HOME") or str(Path.home() / ".skyplane-ops")
    return str(Path(home) / "grid")


def new_version_id(now: datetime | None = None) -> str:
    """A sortable, unique version name such as ``v20261122T013000123456Z-1a2b3c``."""
    stamp = (now or utcnow()).astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"v{stamp}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class PairStatus:
    """The planner-facing state of one pair: latest rate, its age and whether it is stale."""

    src: str
    dst: str
    gbps: float
    rtt_ms: float
    measured_at: datetime
    age_s: float
    stale: bool
    connections: int
    run_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "gbps": self.gbps,
            "rtt_ms": self.rtt_ms,
            "measured_at": self.measured_at.isoformat(),
            "age_s": self.age_s,
            "stale": self.stale,
            "connections": self.connections,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class PairChange:
    """How one pair's latest rate differs between two versions (None: absent there)."""

    src: str
    dst: str
    gbps_a: float | None
    gbps_b: float | None

    @property
    def change_pct(self) -> float | None:
        if self.gbps_a is None or self.gbps_b is None or self.gbps_a == 0:
            return None
        return (self.gbps_b - self.gbps_a) / self.gbps_a * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "gbps_a": self.gbps_a,
            "gbps_b": self.gbps_b,
            "change_pct": self.change_pct,
        }


def _to_parquet(rows: list[Measurement]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(to_table(rows), sink, compression="zstd")
    return sink.getvalue()


def _from_parquet(data: bytes, what: str) -> list[Measurement]:
    try:
        # ParquetFile, not read_table: that one imports pyarrow.dataset and with it pandas
        # (about a second of every plan on a grid store).
        return from_table(pq.ParquetFile(pa.BufferReader(data)).read())
    except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        raise GridStoreError(f"unreadable grid {what}: {exc}") from exc


class GridStore:
    """Measured grids at ``location``: append, publish versions, read latest and history."""

    def __init__(self, location: str, options: Mapping[str, Any] | None = None) -> None:
        self.location = str(location)
        self._blobs = _open_blobs(self.location, options or {})

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except GridStoreError:
            raise
        except Exception as exc:
            raise GridStoreError(f"grid store {self.location}: cannot {what}: {exc}") from exc

    # -- journal -----------------------------------------------------------------------------

    def append(self, row: Measurement) -> str:
        """Persist one measurement now (one small immutable file); returns its key."""
        seq = row.measured_at.strftime("%Y%m%dT%H%M%S%fZ")
        key = f"{JOURNAL_PREFIX}{row.run_id or 'adhoc'}/{seq}-{row.measurement_id}.parquet"
        self._call("append a measurement", self._blobs.write, key, _to_parquet([row]))
        return key

    def append_many(self, rows: list[Measurement], run_id: str) -> str:
        """Persist many measurements as ONE journal file (a bulk import); returns its key."""
        seq = utcnow().strftime("%Y%m%dT%H%M%S%fZ")
        key = f"{JOURNAL_PREFIX}{run_id}/{seq}-{uuid.uuid4().hex}.parquet"
        self._call("append measurements", self._blobs.write, key, _to_parquet(rows))
        return key

    def _journal_keys(self) -> list[str]:
        keys: list[str] = self._call("list the journal", self._blobs.list, JOURNAL_PREFIX)
        return [k for k in keys if k.endswith(".parquet")]

    def pending(self) -> list[Measurement]:
        """Measurements appended but not yet folded into a published version."""
        rows: list[Measurement] = []
        for key in self._journal_keys():
            data = self._call(f"read {key}", self._blobs.read, key)
            rows.extend(_from_parquet(data, key))
        return rows

    # -- versions ----------------------------------------------------------------------------

    def versions(self) -> list[str]:
        keys: list[str] = self._call("list versions", self._blobs.list, VERSIONS_PREFIX)
        return sorted(
            k[len(VERSIONS_PREFIX) : -len(".parquet")] for k in keys if k.endswith(".parquet")
        )

    def latest_version(self) -> str | None:
        """The version the ``LATEST`` pointer names (None for an empty store)."""
        try:
            raw = self._blobs.read(LATEST_KEY)
        except (FileNotFoundError, KeyError):
            return None
        except Exception as exc:
            if type(exc).__name__ in NOT_FOUND:
                return None
            raise GridStoreError(f"grid store {self.location}: cannot read LATEST: {exc}") from exc
        try:
            return str(json.loads(raw)["version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise GridStoreError(f"grid store {self.location}: LATEST is corrupt: {exc}") from exc

    def read_version(self, version: str | None = None) -> list[Measurement]:
        """Every measurement in ``version`` (default: the latest; [] for an empty store)."""
        version = version or self.latest_version()
        if version is None:
            return []
        if version == "latest":
            return self.read_version(None)
        key = f"{VERSIONS_PREFIX}{version}.parquet"
        try:
            data = self._blobs.read(key)
        except Exception as exc:
            known = ", ".join(self.versions()[-5:]) or "none"
            raise GridStoreError(
                f"grid store {self.location}: no readable version {version!r} "
                f"({exc}); recent versions: {known}"
            ) from exc
        return _from_parquet(data, f"version {version} at {self.location}")

    def measurements(self, *, include_pending: bool = True) -> list[Measurement]:
        """The latest version plus (by default) journal rows not yet published."""
        rows = self.read_version()
        if include_pending:
            seen = {r.measurement_id for r in rows}
            rows += [r for r in self.pending() if r.measurement_id not in seen]
        return rows

    def publish(self, *, force: bool = False) -> str | None:
        """Fold the journal into a new immutable version; None when there was nothing new."""
        journal = self._journal_keys()
        if not journal and not force:
            return None
        base = self.read_version()
        seen = {r.measurement_id for r in base}
        new = [r for r in self.pending() if r.measurement_id not in seen]
        rows = sorted(base + new, key=lambda r: (r.measured_at, r.src, r.dst))
        version = new_version_id()
        key = f"{VERSIONS_PREFIX}{version}.parquet"
        self._call(f"write {key}", self._blobs.write, key, _to_parquet(rows))
        pointer = {
            "version": version,
            "key": key,
            "rows": len(rows),
            "new_rows": len(new),
            "published_at": utcnow().isoformat(),
        }
        self._call("write LATEST", self._blobs.write, LATEST_KEY, json.dumps(pointer).encode())
        for jkey in journal:
            self._call(f"delete {jkey}", self._blobs.delete, jkey)
        return version

    # -- views for the planner and the CLI ---------------------------------------------------

    def latest(
        self, version: str | None = None, *, include_pending: bool = False
    ) -> dict[tuple[str, str], Measurement]:
        """Newest measurement of each pair in ``version`` (default: latest)."""
        rows = (
            self.read_version(version)
            if version
            else self.measurements(include_pending=include_pending)
        )
        return latest_per_pair(rows)

    def status(
        self,
        stale_after_s: float,
        *,
        version: str | None = None,
        now: datetime | None = None,
        include_pending: bool = False,
    ) -> list[PairStatus]:
        """Per-pair age and a staleness flag for pairs older than ``stale_after_s``."""
        now = now or utcnow()
        out = []
        for (src, dst), m in sorted(self.latest(version, include_pending=include_pending).items()):
            age = m.age_s(now)
            out.append(
                PairStatus(
                    src,
                    dst,
                    m.gbps,
                    m.rtt_ms,
                    m.measured_at,
                    age,
                    age > stale_after_s,
                    m.connections,
                    m.run_id,
                )
            )
        return out

    def diff(self, version_a: str, version_b: str) -> list[PairChange]:
        """Latest rate of every pair in either version, side by side."""
        a, b = self.latest(version_a), self.latest(version_b)
        return [
            PairChange(
                src,
                dst,
                a[(src, dst)].gbps if (src, dst) in a else None,
                b[(src, dst)].gbps if (src, dst) in b else None,
            )
            for src, dst in sorted(set(a) | set(b))
        ]

    def export(self, path: str, version: str | None = None) -> int:
        """Write a measured-grid file (.parquet or .csv) that ``skyplane-ops plan
        --measured-grid`` and ``load_measured_grid`` read; returns rows. Per pair: every row
        of its newest profiler run (each connection count: the per-connection and saturation
        rates the store's plans use come from them all) and the newest row when it is newer."""
        rows = sorted(export_rows(self.read_version(version)), key=lambda r: (r.src, r.dst))
        table = to_table(rows)
        try:
            if path.endswith(".csv"):
                import pyarrow.csv as pacsv

                pacsv.write_csv(table, path)
            else:
                pq.write_table(table, path)
        except (OSError, pa.ArrowException) as exc:
            raise GridStoreError(f"cannot write {path}: {exc}") from exc
        return len(rows)

    def iter_history(self) -> Iterator[tuple[str, list[Measurement]]]:
        for version in self.versions():
            yield version, self.read_version(version)


def export_rows(rows: list[Measurement]) -> list[Measurement]:
    """The rows ``export`` writes: each pair's newest active run whole (as ``link_estimates``
    reads it), plus the pair's newest row when that run does not hold it (a passive one)."""
    active = latest_per_pair([r for r in rows if r.source != SOURCE_PASSIVE and r.run_id])
    out = [
        r
        for r in rows
        if r.source != SOURCE_PASSIVE and r.pair in active and r.run_id == active[r.pair].run_id
    ]
    held = {id(r) for r in out}
    out += [r for r in latest_per_pair(rows).values() if id(r) not in held]
    return out
