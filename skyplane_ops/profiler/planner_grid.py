"""The grid the planner loads: measured links where the store has them, the base elsewhere.

Per pair the store's rows become one ``LinkEstimate`` by the rule in ``profiler.links``
(newest profiler run, per-connection and saturation rates from its two or more connection
counts, passive measurements of past transfers laid over it, "no link" for pairs no probe
reached). The estimates are laid over ``base`` with the profiles' ``ThroughputGrid.merge`` (a
measurement beats a model value, a newer measurement an older one); a pair's ``gbps()`` is
its estimate's rate at the base grid's connection count and ``links()`` carries the
per-connection and saturation rates to the planner. A "no link" pair the base knows gets rate
0; one it does not know (an own site) stays out of the grid. Rows naming regions outside the
base catalog (e.g. an inventory's own sites when planning on the cloud catalog) are left out
and listed in the provenance.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from skyplane_ops.profiler.links import link_estimates
from skyplane_ops.profiler.records import Measurement
from skyplane_ops.profiles import ThroughputGrid
from skyplane_ops.profiles.links import LinkEstimate

if TYPE_CHECKING:  # the store (pyarrow) is imported when a grid is read, not by every transfer
    from skyplane_ops.profiler.store import GridStore

Pair = tuple[str, str]


def measured_grid(
    rows: list[Measurement], base: ThroughputGrid, provenance: dict[str, Any] | None = None
) -> ThroughputGrid:
    """The rows' link estimates as a measured grid over ``base``'s catalog and connections."""
    catalog = base.catalog
    known = set(base.pairs())
    values: dict[Pair, float] = {}
    when: dict[Pair, datetime] = {}
    links: dict[Pair, LinkEstimate] = {}
    outside: set[str] = set()
    for (src, dst), link in link_estimates(rows).items():
        if src not in catalog or dst not in catalog:
            outside.update(r for r in (src, dst) if r not in catalog)
            continue
        pair = (catalog.resolve(src), catalog.resolve(dst))
        if link is None:
            if pair in known:
                values[pair] = 0.0  # no link: the base's figure must not be used
                when[pair] = max(r.measured_at for r in rows if r.pair == (src, dst))
            continue
        links[pair] = link
        values[pair] = link.scaled_gbps(base.connections)
        when[pair] = datetime.fromisoformat(link.measured_at or "")
    prov = {"source": "measured", **(provenance or {})}
    if outside:
        prov["ignored_regions"] = sorted(outside)
    return ThroughputGrid(
        catalog,
        values,
        connections=base.connections,
        provenance=prov,
        measured_at=when,
        links=links,
    )


def planner_grid(
    store: GridStore | str,
    base: ThroughputGrid | None = None,
    *,
    version: str | None = None,
    include_pending: bool = False,
) -> ThroughputGrid:
    """``base`` (default: the shipped grid) with the store's measurements laid over."""
    if isinstance(store, str):
        from skyplane_ops.profiler.store import GridStore

        store = GridStore(store)
    if base is None:
        from skyplane_ops.profiles import load_default_profile

        base = load_default_profile().throughput
    if version:
        rows = store.read_version(version)
    else:
        rows = store.measurements(include_pending=include_pending)
        version = store.latest_version()
    return base.merge(measured_grid(rows, base, {"store": store.location, "version": version}))
