"""Measured-grid files: their columns, their format (by extension) and the writer.

Kept apart from ``measured`` (the reader, which builds ``ThroughputGrid`` objects) so that
``ThroughputGrid.write`` can use the writer without an import circle.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyplane_ops.errors import ProfileError

if TYPE_CHECKING:
    from skyplane_ops.profiles.throughput import ThroughputGrid

REQUIRED_COLUMNS = ("src", "dst", "gbps", "connections")
LINK_COLUMNS = ("per_conn_gbps", "sat_gbps", "region_cap_gbps")
OUTPUT_COLUMNS = (*REQUIRED_COLUMNS, "measured_at", *LINK_COLUMNS, "source")


def _format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise ProfileError(f"{path}: unknown grid format {suffix!r} (use .csv or .parquet)")


def _cell(value: Any) -> Any:
    """CSV text of one value: empty for None, ISO 8601 for times, exact repr for floats."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value) if isinstance(value, float) else value


def write_grid(grid: ThroughputGrid, path: str | Path) -> None:
    """Write every pair of ``grid`` as CSV or Parquet with its link columns and source."""
    fmt = _format(path)
    measured = grid.measured_pairs()
    as_rows: list[dict[str, Any]] = []
    for src, dst in grid.pairs():
        link = grid.link(src, dst)
        stamp = measured.get((src, dst))
        as_rows.append(
            {
                "src": src,
                "dst": dst,
                "gbps": grid.gbps(src, dst),
                "connections": grid.connections,
                "measured_at": stamp,
                "per_conn_gbps": link.per_conn_gbps,
                "sat_gbps": link.sat_gbps,
                "region_cap_gbps": link.region_cap_gbps,
                "source": link.source if stamp else "model",
            }
        )
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(OUTPUT_COLUMNS)
            for r in as_rows:
                writer.writerow([_cell(r[c]) for c in OUTPUT_COLUMNS])
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {
        "src": pa.string(),
        "dst": pa.string(),
        "gbps": pa.float64(),
        "connections": pa.int32(),
        "measured_at": pa.timestamp("us", tz="UTC"),
        "per_conn_gbps": pa.float64(),
        "sat_gbps": pa.float64(),
        "region_cap_gbps": pa.float64(),
        "source": pa.string(),
    }
    table = pa.table({c: pa.array([r[c] for r in as_rows], types[c]) for c in OUTPUT_COLUMNS})
    pq.write_table(table, path)
