"""The grid the planner loads: latest measurement per pair, the modelled default elsewhere.

Built on the profiles' ``ThroughputGrid.merge``: a measurement beats a model value, a newer
measurement beats an older one, and a model value never replaces a measurement. Measurements
taken with a different connection count are scaled linearly to the base grid's count (the
Skyplane paper's assumption, the same the profiles loader makes).
"""

from __future__ import annotations

from typing import Any

from skyplane_ops.profiler.errors import GridStoreError
from skyplane_ops.profiler.records import Measurement, latest_per_pair
from skyplane_ops.profiler.store import GridStore
from skyplane_ops.profiles import ThroughputGrid


def measured_grid(
    rows: list[Measurement], base: ThroughputGrid, provenance: dict[str, Any] | None = None
) -> ThroughputGrid:
    """Latest row per pair as a measured grid over ``base``'s catalog and connection count."""
    catalog = base.catalog
    values: dict[tuple[str, str], float] = {}
    when = {}
    outside = set()
    for (src, dst), row in latest_per_pair(rows).items():
        if src not in catalog or dst not in catalog:
            outside.add(src if src not in catalog else dst)
            continue
        pair = (catalog.resolve(src), catalog.resolve(dst))
        scale = base.connections / row.connections if row.connections > 0 else 1.0
        values[pair] = row.gbps * scale
        when[pair] = row.measured_at
    if outside:
        raise GridStoreError(
            f"measured grid names regions outside the catalog: {', '.join(sorted(outside))}"
        )
    return ThroughputGrid(
        catalog,
        values,
        connections=base.connections,
        provenance={"source": "measured", **(provenance or {})},
        measured_at=when,
    )


def planner_grid(
    store: GridStore | str,
    base: ThroughputGrid | None = None,
    *,
    version: str | None = None,
    include_pending: bool = False,
) -> ThroughputGrid:
    """``base`` (default: the shipped modelled grid) with the store's measurements laid over."""
    if isinstance(store, str):
        store = GridStore(store)
    if base is None:
        from skyplane_ops.profiles import load_default_profile

        base = load_default_profile().throughput
    if version:
        rows = store.read_version(version)
    else:
        rows = store.measurements(include_pending=include_pending)
        version = store.latest_version()
    measured = measured_grid(rows, base, {"store": store.location, "version": version})
    return base.merge(measured)
