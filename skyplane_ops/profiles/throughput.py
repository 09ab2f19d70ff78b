"""Throughput grid: Gbps per ordered region pair for one VM at each end and N connections.

A grid holds a value and a provenance per pair: ``modelled`` (from model.py) or ``measured``
(with the time it was measured). Merging lays one grid over another with the rules users
expect from a refresh job: a measurement beats a model value, a newer measurement beats an
older one, and a model value never replaces a measurement.

Next to the grid figure each pair may carry a ``LinkEstimate`` (links.py): per-connection and
saturation rates, a region-pair cap and a finer source ("published", "profile", "passive",
"model"). ``links()`` gives one for every pair, filling unknown fields with None.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles.catalog import RegionCatalog
from skyplane_ops.profiles.grid_files import write_rows
from skyplane_ops.profiles.links import LinkEstimate

Pair = tuple[str, str]


class ThroughputGrid:
    """Immutable mapping (src, dst) -> Gbps, with per-pair source and measured_at."""

    def __init__(
        self,
        catalog: RegionCatalog,
        values: Mapping[Pair, float],
        *,
        connections: int,
        provenance: Mapping[str, Any],
        measured_at: Mapping[Pair, datetime] | None = None,
        links: Mapping[Pair, LinkEstimate] | None = None,
    ) -> None:
        self._catalog = catalog
        self._values: dict[Pair, float] = dict(values)
        self._measured_at: dict[Pair, datetime] = dict(measured_at or {})
        self._link_records: dict[Pair, LinkEstimate] = {
            k: v for k, v in (links or {}).items() if k in self._values
        }
        self.connections = connections
        self.provenance: dict[str, Any] = copy.deepcopy(dict(provenance))
        self._distinct: dict[Pair, float] | None = None
        self._all_links: dict[Pair, LinkEstimate] | None = None

    @property
    def catalog(self) -> RegionCatalog:
        return self._catalog

    def _key(self, src: str, dst: str) -> Pair:
        key = (src, dst)
        if key in self._values:
            return key
        key = (self._catalog.resolve(src), self._catalog.resolve(dst))
        if key not in self._values:
            raise ProfileError(f"no throughput for {key[0]} -> {key[1]} in this grid")
        return key

    def gbps(self, src: str, dst: str) -> float:
        """Gbps between one VM in ``src`` and one in ``dst`` over ``connections`` flows."""
        return self._values[self._key(src, dst)]

    def source(self, src: str, dst: str) -> str:
        """``"measured"`` or ``"modelled"``."""
        return "measured" if self._key(src, dst) in self._measured_at else "modelled"

    def measured_at(self, src: str, dst: str) -> datetime | None:
        """When the pair was measured (timezone-aware UTC), or None for a model value."""
        return self._measured_at.get(self._key(src, dst))

    def link(self, src: str, dst: str) -> LinkEstimate:
        """The pair's link record (explicit if one was given, else derived from the figure)."""
        key = self._key(src, dst)
        return self._link_records.get(key) or self._derived_link(key)

    def _derived_link(self, key: Pair) -> LinkEstimate:
        stamp = self._measured_at.get(key)
        return LinkEstimate(
            gbps=self._values[key],
            connections=self.connections,
            per_conn_gbps=None,
            sat_gbps=None,
            region_cap_gbps=None,
            source="model" if stamp is None else "profile",
            measured_at=None if stamp is None else stamp.isoformat(),
        )

    def links(self) -> dict[Pair, LinkEstimate]:
        """A LinkEstimate for every ordered pair of DISTINCT regions (same keys as as_dict)."""
        if self._all_links is None:
            self._all_links = {
                k: self._link_records.get(k) or self._derived_link(k)
                for k in self._values
                if k[0] != k[1]
            }
        return dict(self._all_links)

    def links_of(self, pairs: Iterable[Pair]) -> dict[Pair, LinkEstimate]:
        """``links()`` of ``pairs`` only (those of distinct regions this grid has): a plan
        reads a few edges, and the whole grid is ~15k pairs."""
        return {
            k: self._link_records.get(k) or self._derived_link(k)
            for k in pairs
            if k in self._values and k[0] != k[1]
        }

    def with_catalog(self, catalog: RegionCatalog) -> ThroughputGrid:
        """The same figures and link records over a larger catalog, e.g. with custom regions
        added. Only the explicit records are handed on: the new grid derives the others from
        the same figures, times and connection count, as this one does."""
        return ThroughputGrid(
            catalog,
            self._values,
            connections=self.connections,
            provenance=self.provenance,
            measured_at=self._measured_at,
            links=self._link_records,
        )

    def __len__(self) -> int:
        return len(self._values)

    def pairs(self) -> list[Pair]:
        """Every pair this grid has a value for (including same-region pairs if present)."""
        return list(self._values)

    def measured_pairs(self) -> dict[Pair, datetime]:
        return dict(self._measured_at)

    def as_dict(self) -> dict[Pair, float]:
        """Gbps for every ordered pair of DISTINCT regions (same-region pairs are left out)."""
        if self._distinct is None:
            self._distinct = {k: v for k, v in self._values.items() if k[0] != k[1]}
        return dict(self._distinct)

    def merge(self, measured: ThroughputGrid) -> ThroughputGrid:
        """Lay ``measured`` over this grid and return the result (neither input changes).

        Per pair: measured beats modelled; of two measurements the newer wins (ties go to
        the argument); of two model values the argument wins. The argument's values are first
        scaled to this grid's connection count (linear, as the Skyplane paper assumes).
        """
        scale = self.connections / measured.connections
        values = dict(self._values)
        when = dict(self._measured_at)
        links = dict(self._link_records)
        their_links = measured.links()  # public: a subclass may keep its records elsewhere
        for pair, value in measured._values.items():
            if pair[0] not in self._catalog or pair[1] not in self._catalog:
                raise ProfileError(f"merged grid has a pair outside the catalog: {pair}")
            theirs = measured._measured_at.get(pair)
            mine = when.get(pair)
            if theirs is None and mine is not None:
                continue  # a model value never replaces a measurement
            if theirs is not None and mine is not None and theirs < mine:
                continue  # an older measurement never replaces a newer one
            values[pair] = value * scale
            links.pop(pair, None)
            if pair in their_links:
                links[pair] = their_links[pair]
            if theirs is not None:
                when[pair] = theirs
        provenance = copy.deepcopy(self.provenance)
        provenance.setdefault("merged", []).append(copy.deepcopy(measured.provenance))
        return ThroughputGrid(
            self._catalog,
            values,
            connections=self.connections,
            provenance=provenance,
            measured_at=when,
            links=links,
        )

    def write(self, path: str) -> None:
        """Export as CSV or Parquet (by extension) in the measured-grid format, with a
        ``source`` column; loading it back with load_measured_grid round-trips."""
        write_grid(self, path)


def write_grid(grid: ThroughputGrid, path: str | Path) -> None:
    """Write every pair of ``grid`` as CSV or Parquet with its link columns and source."""
    measured = grid.measured_pairs()
    rows: list[dict[str, Any]] = []
    for src, dst in grid.pairs():
        link = grid.link(src, dst)
        stamp = measured.get((src, dst))
        rows.append(
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
    write_rows(rows, path)
