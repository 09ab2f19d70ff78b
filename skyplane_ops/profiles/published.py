"""The published Skyplane grid (2022-01-29) shipped as ``published_grid.json``.

It holds the rate one VM pair reached with 64 connections between 63 AWS, Azure and GCP
regions, as a matrix (rows = source, columns = destination, ``null`` = not measured). Plans
use the ``received`` column (what arrived at the destination); ``sent`` (what Skyplane's own
planner used, about 1.3x higher) is kept for reference. ``scripts/calibrate_throughput.py``
writes the file from the published CSV; see profiles/README.md for provenance.
"""

from __future__ import annotations

import functools
import math
from datetime import datetime
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles._data import default_file, read_json
from skyplane_ops.profiles.catalog import RegionCatalog
from skyplane_ops.profiles.links import LinkEstimate
from skyplane_ops.profiles.throughput import Pair, ThroughputGrid

PUBLISHED_FILE = "published_grid.json"
COLUMNS = ("received", "sent")


@functools.cache
def published_document() -> dict[str, Any]:
    """The shipped published_grid.json (parsed once)."""
    return read_json(default_file(PUBLISHED_FILE))


def published_rates(
    doc: dict[str, Any] | None = None, column: str = "received"
) -> dict[Pair, float]:
    """Gbps per ordered pair of distinct regions from the document's ``column`` matrix."""
    if column not in COLUMNS:
        raise ProfileError(f"published column must be one of {', '.join(COLUMNS)}")
    doc = published_document() if doc is None else doc
    regions = doc.get("regions")
    matrix = doc.get(f"gbps_{column}")
    if not isinstance(regions, list) or not isinstance(matrix, list) or len(matrix) != len(regions):
        raise ProfileError(f"{PUBLISHED_FILE}: 'regions' and 'gbps_{column}' do not match")
    out: dict[Pair, float] = {}
    for src, row in zip(regions, matrix, strict=True):
        if not isinstance(row, list) or len(row) != len(regions):
            raise ProfileError(f"{PUBLISHED_FILE}: row {src!r} has the wrong length")
        for dst, value in zip(regions, row, strict=True):
            if value is None or src == dst:
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ProfileError(f"{PUBLISHED_FILE}: {src} -> {dst}: bad rate {value!r}")
            out[(str(src), str(dst))] = float(value)
    return out


def published_grid(catalog: RegionCatalog, column: str = "received") -> ThroughputGrid:
    """The published pairs as a measured grid (source "published", 64 connections)."""
    doc = published_document()
    stamp = datetime.fromisoformat(str(doc["measured_at"]))
    connections = int(doc["connections"])
    values = {
        (catalog.resolve(s), catalog.resolve(d)): g
        for (s, d), g in published_rates(doc, column).items()
    }
    links = {
        pair: LinkEstimate(
            gbps=g,
            connections=connections,
            per_conn_gbps=None,
            sat_gbps=None,
            region_cap_gbps=None,
            source="published",
            measured_at=stamp.isoformat(),
        )
        for pair, g in values.items()
    }
    provenance = {k: v for k, v in doc.items() if not k.startswith("gbps_") and k != "regions"}
    provenance["column"] = column
    return ThroughputGrid(
        catalog,
        values,
        connections=connections,
        provenance=provenance,
        measured_at=dict.fromkeys(values, stamp),
        links=links,
    )
