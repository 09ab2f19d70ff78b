"""Measured throughput grids: read and write CSV or Parquet (columns src, dst, gbps,
connections, measured_at; extra columns are allowed and ignored).

A value measured with c connections is scaled linearly to the grid's connection count
(gbps * grid_connections / c), as the Skyplane paper assumes for up to 64 flows per VM pair.
When a pair appears several times the newest ``measured_at`` wins (a tie goes to the later
row). An optional ``source`` column equal to ``modelled`` marks a model value (measured_at
may then be empty): that is what ThroughputGrid.write exports, so exports round-trip.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles.catalog import RegionCatalog
from skyplane_ops.profiles.throughput import Pair, ThroughputGrid

REQUIRED_COLUMNS = ("src", "dst", "gbps", "connections", "measured_at")
OUTPUT_COLUMNS = (*REQUIRED_COLUMNS, "source")


def _format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ProfileError(f"{path}: unknown grid format {suffix!r} (use .csv or .parquet)")


def _rows(path: str | Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield (location for error messages, row) after checking the columns exist."""
    if _format(path) == "csv":
        try:
            handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read grid: {exc}") from exc
        with handle:
            reader = csv.DictReader(handle)
            _check_columns(path, reader.fieldnames or [])
            for i, row in enumerate(reader, start=1):
                yield f"{path}: row {i} (line {reader.line_num})", row
        return
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
        raise ProfileError(f"{path}: cannot read Parquet grid: {exc}") from exc
    _check_columns(path, table.column_names)
    for i, row in enumerate(table.to_pylist(), start=1):
        yield f"{path}: row {i}", row


def _check_columns(path: str | Path, names: Sequence[str]) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ProfileError(f"{path}: missing column(s) {', '.join(missing)}")


def _region(catalog: RegionCatalog, value: Any, where: str, field: str) -> str:
    text = str(value or "").strip()
    try:
        return catalog.resolve(text)
    except UnknownRegionError as exc:
        raise ProfileError(f"{where}: field {field!r}: {exc}") from exc


def _gbps(value: Any, where: str) -> float:
    try:
        gbps = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: field 'gbps': {value!r} is not a number") from None
    if not math.isfinite(gbps) or gbps < 0:
        raise ProfileError(f"{where}: field 'gbps': {gbps} must be a finite number >= 0")
    return gbps


def _connections(value: Any, where: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: field 'connections': {value!r} is not a number") from None
    if not number.is_integer() or number < 1:
        raise ProfileError(f"{where}: field 'connections': {value!r} must be an integer >= 1")
    return int(number)


def _timestamp(value: Any, where: str) -> datetime | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, datetime):
        stamp = value
    else:
        try:
            stamp = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise ProfileError(
                f"{where}: field 'measured_at': {value!r} is not an ISO 8601 timestamp"
            ) from None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def load_measured_grid(
    path: str | Path, catalog: RegionCatalog, *, connections: int = 64
) -> ThroughputGrid:
    """Load a measured grid, scaled to ``connections`` flows per VM pair."""
    values: dict[Pair, float] = {}
    when: dict[Pair, datetime] = {}
    seen_connections: set[int] = set()
    rows = 0
    for where, row in _rows(path):
        rows += 1
        src = _region(catalog, row.get("src"), where, "src")
        dst = _region(catalog, row.get("dst"), where, "dst")
        gbps = _gbps(row.get("gbps"), where)
        conns = _connections(row.get("connections"), where)
        stamp = _timestamp(row.get("measured_at"), where)
        modelled = str(row.get("source") or "").strip() == "modelled"
        if stamp is None and not modelled:
            raise ProfileError(f"{where}: field 'measured_at' is empty")
        seen_connections.add(conns)
        pair = (src, dst)
        previous = when.get(pair)
        if modelled:
            if pair in when:
                continue  # a measurement of the pair beats a model value
        elif previous is not None and stamp is not None and stamp < previous:
            continue  # keep the newer measurement
        values[pair] = gbps * connections / conns
        if not modelled and stamp is not None:
            when[pair] = stamp
    if rows == 0:
        raise ProfileError(f"{path}: the grid has no rows")
    provenance = {
        "method": "measured",
        "file": str(path),
        "rows": rows,
        "connections": connections,
        "measured_connections": sorted(seen_connections),
        "scaling": "linear in connections to the grid's connection count",
    }
    return ThroughputGrid(
        catalog, values, connections=connections, provenance=provenance, measured_at=when
    )


def write_grid(grid: ThroughputGrid, path: str | Path) -> None:
    """Write every pair of ``grid`` as CSV or Parquet, with a ``source`` column."""
    fmt = _format(path)
    measured = grid.measured_pairs()
    as_rows = [
        (src, dst, grid.gbps(src, dst), grid.connections, measured.get((src, dst)))
        for src, dst in grid.pairs()
    ]
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(OUTPUT_COLUMNS)
            for src, dst, gbps, conns, stamp in as_rows:
                writer.writerow(
                    [
                        src,
                        dst,
                        repr(gbps),
                        conns,
                        stamp.isoformat() if stamp else "",
                        "measured" if stamp else "modelled",
                    ]
                )
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "src": pa.array([r[0] for r in as_rows], pa.string()),
            "dst": pa.array([r[1] for r in as_rows], pa.string()),
            "gbps": pa.array([r[2] for r in as_rows], pa.float64()),
            "connections": pa.array([r[3] for r in as_rows], pa.int32()),
            "measured_at": pa.array([r[4] for r in as_rows], pa.timestamp("us", tz="UTC")),
            "source": pa.array(["measured" if r[4] else "modelled" for r in as_rows]),
        }
    )
    pq.write_table(table, path)
