"""Profiles: the region catalog, the price grid and the throughput grid the planner uses.

``load_default_profile()`` gives the shipped profile; ``load_profile(...)`` adds user
overrides and a measured grid. See profiles/README.md for the data, its sources and the model.
"""

from skyplane_ops.profiles.catalog import Region, RegionCatalog, load_catalog
from skyplane_ops.profiles.custom import CustomRegion
from skyplane_ops.profiles.links import LinkEstimate, combine_counts
from skyplane_ops.profiles.loader import (
    Profile,
    default_prices_document,
    load_default_profile,
    load_profile,
    model_params,
    modelled_grid,
)
from skyplane_ops.profiles.measured import load_measured_grid
from skyplane_ops.profiles.prices import PriceGrid, VmClass
from skyplane_ops.profiles.throughput import ThroughputGrid

__all__ = [
    "CustomRegion",
    "LinkEstimate",
    "PriceGrid",
    "Profile",
    "Region",
    "RegionCatalog",
    "ThroughputGrid",
    "VmClass",
    "combine_counts",
    "default_prices_document",
    "load_catalog",
    "load_default_profile",
    "load_measured_grid",
    "load_profile",
    "model_params",
    "modelled_grid",
]
