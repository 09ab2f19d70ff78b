"""The grid the planner loads: measured links where the store has them, the base elsewhere.

Per pair the store's rows become one estimate by the rule in ``profiler.links`` (newest
profiler run, per-connection and saturation rates from its two or more connection counts,
passive measurements of past transfers laid over it, "no link" for pairs no probe reached).
The estimate is laid over ``base`` with the profiles' ``ThroughputGrid.merge`` (a measurement
beats a model value, a newer measurement an older one); its ``gbps()`` figure is the estimate's
rate at the base grid's connection count. ``links()`` gives the planner the per-connection and
saturation rates. Rows naming regions outside the base catalog (e.g. an inventory's own sites
when planning on the cloud catalog) are left out and listed in the provenance.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from skyplane_ops.profiler.links import MeasuredLink, link_estimates
from skyplane_ops.profiler.records import Measurement
from skyplane_ops.profiler.store import GridStore
from skyplane_ops.profiles import ThroughputGrid

Pair = tuple[str, str]


class LinkedGrid(ThroughputGrid):
    """A ``ThroughputGrid`` that also knows each pair's link estimate (``links()``)."""

    def __init__(self, grid: ThroughputGrid, links: Mapping[Pair, MeasuredLink | None]) -> None:
        super().__init__(
            grid.catalog,
            {pair: grid.gbps(*pair) for pair in grid.pairs()},
            connections=grid.connections,
            provenance=grid.provenance,
            measured_at=grid.measured_pairs(),
        )
        self._base_links = grid.links() if hasattr(grid, "links") else {}
        self._links = dict(links)

    def links(self) -> dict[Pair, Any]:
        """Per distinct pair: its measured estimate, else the base grid's figure as a
        single-count estimate (the planner then falls back to the linear model). Pairs with
        no link are left out, so no plan uses them."""
        out: dict[Pair, Any] = {}
        for pair, gbps in self.as_dict().items():
            if pair in self._links:
                link = self._links[pair]
                if link is not None:
                    out[pair] = link
                continue
            if pair in self._base_links:
                out[pair] = self._base_links[pair]
                continue
            at = self.measured_pairs().get(pair)
            out[pair] = MeasuredLink(
                gbps,
                self.connections,
                None,
                None,
                None,
                "published" if at is not None else "model",
                at.isoformat() if at is not None else None,
            )
        return out


def measured_grid(
    rows: list[Measurement], base: ThroughputGrid, provenance: dict[str, Any] | None = None
) -> LinkedGrid:
    """The rows' link estimates as a measured grid over ``base``'s catalog and connections."""
    catalog = base.catalog
    values: dict[Pair, float] = {}
    when: dict[Pair, datetime] = {}
    links: dict[Pair, MeasuredLink | None] = {}
    outside: set[str] = set()
    for (src, dst), link in link_estimates(rows).items():
        if src not in catalog or dst not in catalog:
            outside.update(r for r in (src, dst) if r not in catalog)
            continue
        pair = (catalog.resolve(src), catalog.resolve(dst))
        links[pair] = link
        values[pair] = 0.0 if link is None else link.predict(base.connections)
        stamp = None if link is None else link.measured_at
        when[pair] = datetime.fromisoformat(stamp) if stamp else _newest(rows, src, dst)
    prov = {"source": "measured", **(provenance or {})}
    if outside:
        prov["ignored_regions"] = sorted(outside)
    grid = ThroughputGrid(
        catalog, values, connections=base.connections, provenance=prov, measured_at=when
    )
    return LinkedGrid(grid, links)


def _newest(rows: list[Measurement], src: str, dst: str) -> datetime:
    return max(r.measured_at for r in rows if r.pair == (src, dst))


def planner_grid(
    store: GridStore | str,
    base: ThroughputGrid | None = None,
    *,
    version: str | None = None,
    include_pending: bool = False,
) -> LinkedGrid:
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
    return LinkedGrid(base.merge(measured), measured._links)
