"""One measurement of one ordered region pair, with its provenance, and its Parquet schema.

The columns ``src, dst, gbps, connections, measured_at`` are the ones the profiles loader
(``load_measured_grid``) reads, so a version file is also a valid measured grid on its own.
"""

from __future__ import annotations

import array
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


def __getattr__(name: str) -> Any:
    """``SCHEMA`` on first use: importing pyarrow costs every transfer ~0.3 s, and most
    (the loopback backend) never record a row."""
    if name == "SCHEMA":
        return schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def schema() -> pa.Schema:
    """The Parquet schema of measurements (column order is stable across versions)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("measurement_id", pa.string()),
            ("run_id", pa.string()),
            ("src", pa.string()),
            ("dst", pa.string()),
            ("gbps", pa.float64()),
            ("sent_gbps", pa.float64()),
            ("received_gbps", pa.float64()),
            ("rtt_ms", pa.float64()),
            ("connections", pa.int32()),
            ("duration_s", pa.float64()),
            ("bytes_sent", pa.int64()),
            ("bytes_received", pa.int64()),
            ("measured_at", pa.timestamp("us", tz="UTC")),
            ("vm_class", pa.string()),
            ("tier", pa.string()),
            ("backend", pa.string()),
            ("source", pa.string()),
            ("error", pa.string()),
        ]
    )


#: ``source`` of a probe taken by the profiler, and of a rate a past transfer achieved.
SOURCE_PROFILE = "profile"
SOURCE_PASSIVE = "passive"


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Measurement:
    """A probe result for ``src -> dst``; ``gbps`` is the received rate the planner uses."""

    src: str
    dst: str
    gbps: float
    sent_gbps: float
    received_gbps: float
    rtt_ms: float
    connections: int
    duration_s: float
    measured_at: datetime
    run_id: str = ""
    bytes_sent: int = 0
    bytes_received: int = 0
    vm_class: str = ""
    tier: str = ""
    backend: str = ""
    measurement_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # "profile" (an active probe) or "passive" (a hop of a past transfer).
    source: str = SOURCE_PROFILE
    # Non-empty for a pair the probe could not reach: a "no link" row (gbps 0).
    error: str = ""

    @property
    def no_link(self) -> bool:
        """The pair could not be reached when this row was taken."""
        return bool(self.error)

    @property
    def pair(self) -> tuple[str, str]:
        return (self.src, self.dst)

    def age_s(self, now: datetime | None = None) -> float:
        return ((now or utcnow()) - self.measured_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["measured_at"] = self.measured_at.isoformat()
        return data


def to_table(rows: list[Measurement]) -> pa.Table:
    """Rows as an Arrow table in the fixed schema (column order is stable across versions).

    Columns are built from raw buffers, not with ``pa.array``: that one imports pandas on first
    use (to ask whether the input is a pandas object), about a second of every transfer's
    passive record and of every profile on a loaded machine.
    """
    import pyarrow as pa

    SCHEMA = schema()
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for row in rows:
        data = asdict(row)
        for name in SCHEMA.names:
            columns[name].append(data[name])
    arrays = [_column(columns[f.name], f.type) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICKS = {
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
    "us": timedelta(microseconds=1),
}
_TYPECODES = {"int32": "i", "int64": "q", "double": "d"}  # by str(type)


def _column(values: list[Any], type_: pa.DataType) -> pa.Array:
    """One column of ``SCHEMA`` (no nulls: every field has a value) from its raw buffers."""
    import pyarrow as pa

    if pa.types.is_timestamp(type_):  # ticks since the epoch (naive values count as UTC)
        tick = _TICKS[type_.unit]
        values = [(at if at.tzinfo else at.replace(tzinfo=UTC)) - _EPOCH for at in values]
        data = array.array("q", [delta // tick for delta in values])
    elif pa.types.is_string(type_):
        encoded = [str(v).encode() for v in values]
        offsets = array.array("i", [0])
        for item in encoded:
            offsets.append(offsets[-1] + len(item))
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(type_, len(values), buffers)
    else:
        data = array.array(_TYPECODES[str(type_)], values)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])


def from_table(table: pa.Table) -> list[Measurement]:
    """Rows of a version or journal file; columns missing in older files take defaults."""
    import pyarrow as pa

    missing = {"src", "dst", "gbps", "measured_at"} - set(table.column_names)
    if missing:
        raise ValueError(f"missing columns {sorted(missing)}")
    at_type = table.schema.field("measured_at").type
    if pa.types.is_timestamp(at_type) and at_type.tz is not None:
        # Naive UTC (the stored values are UTC): converting tz-aware values to Python imports
        # pandas, a second of start-up for a few rows. Made aware again below.
        # (``view``, not ``cast``: a cast imports pyarrow.compute, another 0.2 s.)
        index = table.schema.get_field_index("measured_at")
        naive = pa.timestamp(at_type.unit)
        column = pa.chunked_array([c.view(naive) for c in table.column(index).chunks], naive)
        table = table.set_column(index, "measured_at", column)
    rows = []
    for rec in table.to_pylist():
        at = rec["measured_at"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at)
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        gbps = float(rec["gbps"])
        no_link = bool(rec.get("error"))
        rows.append(
            Measurement(
                src=str(rec["src"]),
                dst=str(rec["dst"]),
                gbps=gbps,
                sent_gbps=0.0 if no_link else float(rec.get("sent_gbps") or gbps),
                received_gbps=0.0 if no_link else float(rec.get("received_gbps") or gbps),
                rtt_ms=float(rec.get("rtt_ms") or 0.0),
                connections=int(rec.get("connections") or 0),
                duration_s=float(rec.get("duration_s") or 0.0),
                measured_at=at,
                run_id=str(rec.get("run_id") or ""),
                bytes_sent=int(rec.get("bytes_sent") or 0),
                bytes_received=int(rec.get("bytes_received") or 0),
                vm_class=str(rec.get("vm_class") or ""),
                tier=str(rec.get("tier") or ""),
                backend=str(rec.get("backend") or ""),
                measurement_id=str(rec.get("measurement_id") or uuid.uuid4().hex),
                source=str(rec.get("source") or SOURCE_PROFILE),
                error=str(rec.get("error") or ""),
            )
        )
    return rows


def latest_per_pair(rows: list[Measurement]) -> dict[tuple[str, str], Measurement]:
    """The newest measurement of each pair (ties: the later row wins)."""
    best: dict[tuple[str, str], Measurement] = {}
    for row in rows:
        cur = best.get(row.pair)
        if cur is None or row.measured_at >= cur.measured_at:
            best[row.pair] = row
    return best
