"""Measured throughput grids: read and write CSV or Parquet.

Columns: ``src, dst, gbps, connections`` (required), and optionally ``measured_at``,
``per_conn_gbps``, ``sat_gbps``, ``region_cap_gbps`` and ``source``; other columns are ignored.

Per pair the rows are combined by ``links.combine_counts``: the newest row per connection
count, the counts measured within a day of the newest row (one session), per-connection and
saturation rates when two or more counts remain. The grid figure is the rate at the largest
count, scaled linearly to the grid's connection count (the Skyplane paper's assumption).
Explicit ``per_conn_gbps``/``sat_gbps``/``region_cap_gbps`` on that row win over derived ones.
``source`` is ``published``, ``profile``, ``passive`` or ``model`` (``measured`` and
``modelled``, the older names, mean ``profile`` and ``model``). A model row needs no
``measured_at`` and never replaces a measurement of the same pair: that is what
ThroughputGrid.write exports (``throughput.write_grid``), so exports round-trip.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles.catalog import RegionCatalog
from skyplane_ops.profiles.grid_files import (
    LINK_COLUMNS,
    REQUIRED_COLUMNS,
    _format,
)
from skyplane_ops.profiles.links import SOURCES, CountSample, LinkEstimate, combine_counts
from skyplane_ops.profiles.throughput import Pair, ThroughputGrid
from skyplane_ops.profiles.throughput import write_grid as write_grid  # its old home

_SOURCE_ALIASES = {"measured": "profile", "modelled": "model", "": "profile"}


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


def _gbps(value: Any, where: str, field: str = "gbps") -> float:
    try:
        gbps = float(value)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: field {field!r}: {value!r} is not a number") from None
    if not math.isfinite(gbps) or gbps < 0:
        raise ProfileError(f"{where}: field {field!r}: {gbps} must be a finite number >= 0")
    return gbps


def _optional_gbps(row: Mapping[str, Any], field: str, where: str) -> float | None:
    value = row.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return _gbps(value, where, field)


def _source(value: Any, where: str) -> str:
    text = str(value or "").strip().lower()
    text = _SOURCE_ALIASES.get(text, text)
    if text not in SOURCES:
        raise ProfileError(f"{where}: field 'source': {value!r} is not one of {', '.join(SOURCES)}")
    return text


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


class _PairRows:
    """Rows of one pair while loading: measured samples and an optional model row."""

    def __init__(self) -> None:
        self.samples: list[tuple[CountSample, str, Mapping[str, float | None]]] = []
        self.model: float | None = None


def load_measured_grid(
    path: str | Path, catalog: RegionCatalog, *, connections: int = 64
) -> ThroughputGrid:
    """Load a measured grid, scaled to ``connections`` flows per VM pair."""
    pairs: dict[Pair, _PairRows] = {}
    seen_connections: set[int] = set()
    rows = 0
    for where, row in _rows(path):
        rows += 1
        src = _region(catalog, row.get("src"), where, "src")
        dst = _region(catalog, row.get("dst"), where, "dst")
        gbps = _gbps(row.get("gbps"), where)
        conns = _connections(row.get("connections"), where)
        stamp = _timestamp(row.get("measured_at"), where)
        source = _source(row.get("source"), where)
        seen_connections.add(conns)
        entry = pairs.setdefault((src, dst), _PairRows())
        if source == "model":
            entry.model = gbps * connections / conns
            continue
        if stamp is None:
            raise ProfileError(f"{where}: field 'measured_at' is empty")
        extra = {c: _optional_gbps(row, c, where) for c in LINK_COLUMNS}
        sample = CountSample(gbps, conns, stamp, extra["region_cap_gbps"])
        entry.samples.append((sample, source, extra))
    if rows == 0:
        raise ProfileError(f"{path}: the grid has no rows")
    values: dict[Pair, float] = {}
    when: dict[Pair, datetime] = {}
    links: dict[Pair, LinkEstimate] = {}
    for pair, entry in pairs.items():
        if not entry.samples:
            if entry.model is not None:
                values[pair] = entry.model
            continue
        link = _combine(entry)
        values[pair] = link.gbps * connections / link.connections
        when[pair] = max(s.measured_at for s, _, _ in entry.samples)
        links[pair] = link
    provenance = {
        "method": "measured",
        "file": str(path),
        "rows": rows,
        "connections": connections,
        "measured_connections": sorted(seen_connections),
        "scaling": "linear in connections to the grid's connection count",
    }
    return ThroughputGrid(
        catalog,
        values,
        connections=connections,
        provenance=provenance,
        measured_at=when,
        links=links,
    )


def _combine(entry: _PairRows) -> LinkEstimate:
    """combine_counts over the pair's samples; the top row's explicit columns win."""
    link = combine_counts(s for s, _, _ in entry.samples)
    top = max(
        (x for x in entry.samples if x[0].connections == link.connections),
        key=lambda x: x[0].measured_at,
    )
    _, source, extra = top

    def pick(explicit: float | None, derived: float | None) -> float | None:
        return derived if explicit is None else explicit

    return replace(
        link,
        source=source,
        per_conn_gbps=pick(extra["per_conn_gbps"], link.per_conn_gbps),
        sat_gbps=pick(extra["sat_gbps"], link.sat_gbps),
        region_cap_gbps=pick(extra["region_cap_gbps"], link.region_cap_gbps),
    )
