"""Assemble a Profile (catalog + prices + throughput) from the shipped defaults, user
overrides and an optional measured grid.

The default throughput grid is the published Skyplane measurements (published.py) where they
exist, laid over the calibrated model (model.py) for every other pair. The model part is
computed at load time (a pure function of the catalog, the fitted parameters and the VM caps);
both are cached per set of caps.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles._data import default_file, read_json
from skyplane_ops.profiles.catalog import PROVIDERS, RegionCatalog, load_catalog
from skyplane_ops.profiles.custom import CustomRegion, as_custom_regions
from skyplane_ops.profiles.measured import load_measured_grid
from skyplane_ops.profiles.model import ModelParams, modelled_gbps
from skyplane_ops.profiles.overrides import apply_overrides
from skyplane_ops.profiles.prices import PriceGrid
from skyplane_ops.profiles.published import COLUMNS, published_grid
from skyplane_ops.profiles.throughput import ThroughputGrid


@dataclass
class Profile:
    """Everything the planner needs about the clouds."""

    catalog: RegionCatalog
    prices: PriceGrid
    throughput: ThroughputGrid

    def with_regions(self, specs: Iterable[CustomRegion | Mapping[str, Any]]) -> Profile:
        """A new profile that also knows the user's own regions (``site:lab-a``).

        ``specs`` are CustomRegion objects or dicts with the same fields (id; provider
        "own"; egress_usd_per_gb 0; vm_usd_per_hour 0; egress/ingress_cap_gbps inf; hosts 1,
        the VM limit there). Their links are unknown until measured: merge a measured grid
        (``with_measured``) or the profiler's store over the result. This profile is unchanged.
        """
        regions = as_custom_regions(specs)
        catalog = self.catalog.with_regions(r.region() for r in regions)
        return Profile(
            catalog=catalog,
            prices=self.prices.with_regions(regions, catalog),
            throughput=self.throughput.with_catalog(catalog),
        )

    def with_measured(self, path: str | Path) -> Profile:
        """A new profile with a measured grid file (CSV/Parquet) laid over the throughput."""
        grid = load_measured_grid(path, self.catalog, connections=self.throughput.connections)
        return Profile(self.catalog, self.prices, self.throughput.merge(grid))


@functools.cache
def default_catalog() -> RegionCatalog:
    """The shipped region catalog (immutable, so shared)."""
    return load_catalog()


@functools.cache
def _default_prices_document() -> dict[str, Any]:
    return read_json(default_file("prices.json"))


@functools.cache
def _model_document() -> dict[str, Any]:
    return read_json(default_file("throughput_model.json"))


def model_params() -> ModelParams:
    """Parameters of the default throughput model."""
    return ModelParams.from_document(_model_document(), "throughput_model.json")


@functools.cache
def _modelled_grid(caps: tuple[tuple[str, float, float], ...]) -> ThroughputGrid:
    catalog = default_catalog()
    doc = _model_document()
    params = model_params()
    egress = {p: e for p, e, _ in caps}
    ingress = {p: i for p, _, i in caps}
    regions = list(catalog)
    values = {
        (s.id, t.id): modelled_gbps(params, s, t, egress, ingress) for s in regions for t in regions
    }
    provenance = {k: v for k, v in doc.items() if k != "calibration"}
    provenance["caps_gbps"] = {p: {"egress": egress[p], "ingress": ingress[p]} for p in egress}
    return ThroughputGrid(catalog, values, connections=params.connections, provenance=provenance)


def _caps(prices: PriceGrid) -> tuple[tuple[str, float, float], ...]:
    return tuple(
        (p, prices.vm(p).egress_cap_gbps, prices.vm(p).ingress_cap_gbps) for p in PROVIDERS
    )


def modelled_grid(prices: PriceGrid) -> ThroughputGrid:
    """The model's grid alone for the VM caps in ``prices`` (cached per set of caps)."""
    return _modelled_grid(_caps(prices))


@functools.cache
def _default_grid(caps: tuple[tuple[str, float, float], ...], column: str) -> ThroughputGrid:
    model = _modelled_grid(caps)
    if column == "none":
        return model
    return model.merge(published_grid(default_catalog(), column))


def default_grid(prices: PriceGrid, published: str = "received") -> ThroughputGrid:
    """Published measurements (``received`` or ``sent`` column; ``none`` = model only) over
    the model for the VM caps in ``prices`` (cached)."""
    if published not in (*COLUMNS, "none"):
        raise ProfileError(f"published must be one of {', '.join((*COLUMNS, 'none'))}")
    return _default_grid(_caps(prices), published)


def _describe_source(file: str | Path | None, kwargs: dict[str, Any]) -> str:
    """Name what a price error came from: the override file if any, else the defaults."""
    if file is not None:
        return str(file)
    return "prices.json with keyword overrides" if kwargs else "prices.json"


def load_profile(
    *,
    overrides: str | Path | None = None,
    measured_grid: str | Path | None = None,
    gcp_tier: str = "premium",
    measured_only: bool = False,
    custom_regions: Iterable[CustomRegion | Mapping[str, Any]] = (),
    published: str = "received",
    **price_overrides: Any,
) -> Profile:
    """Load the default profile with user overrides (a JSON file, then keyword arguments,
    both partial prices.json documents) and an optional measured grid merged over the model
    (or, with ``measured_only=True``, used in its place: pairs it lacks are then unknown).
    ``custom_regions`` are added first (see Profile.with_regions), so the measured grid may
    name them. ``published`` picks the shipped measurements' column (``received``, ``sent``)
    or turns them off (``none``: the model everywhere).
    """
    catalog = default_catalog()
    document, applied = apply_overrides(
        _default_prices_document(), file=overrides, kwargs=price_overrides
    )
    prices = PriceGrid(
        document,
        catalog,
        gcp_tier=gcp_tier,
        source=_describe_source(overrides, price_overrides),
        applied_overrides=applied,
    )
    throughput = default_grid(prices, published)
    regions = as_custom_regions(custom_regions)
    if regions:
        catalog = catalog.with_regions(r.region() for r in regions)
        prices = prices.with_regions(regions, catalog)
        throughput = throughput.with_catalog(catalog)
    if measured_grid is not None:
        grid = load_measured_grid(measured_grid, catalog, connections=throughput.connections)
        throughput = grid if measured_only else throughput.merge(grid)
    elif measured_only:
        raise ProfileError("measured_only=True needs a measured_grid")
    return Profile(catalog=catalog, prices=prices, throughput=throughput)


def load_default_profile(*, gcp_tier: str = "premium") -> Profile:
    """The shipped profile as is (GCP network tier chosen here)."""
    return load_profile(gcp_tier=gcp_tier)


def default_prices_document() -> dict[str, Any]:
    """A copy of the shipped prices.json, e.g. to write a starting point for overrides."""
    return copy.deepcopy(_default_prices_document())
