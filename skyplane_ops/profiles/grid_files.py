"""Measured-grid files: their columns, their format (by extension) and the row writer.

Knows rows, not grids: ``ThroughputGrid.write`` (``throughput.write_grid``) turns a grid into
rows and hands them to ``write_rows``, and ``measured`` (the reader) builds grids; neither
direction needs this module to import them.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError

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


def write_rows(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Write grid rows (dicts keyed by ``OUTPUT_COLUMNS``) as CSV or Parquet (by extension)."""
    fmt = _format(path)
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(OUTPUT_COLUMNS)
            for r in rows:
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
    table = pa.table({c: pa.array([r[c] for r in rows], types[c]) for c in OUTPUT_COLUMNS})
    pq.write_table(table, path)
