"""``skyplane_definitions``: a ``Definitions`` with replicas, checks, sweepers and the resource.

It is a convenience, not a requirement: everything it adds is public and can be passed to
``dg.Definitions`` by hand (``dataset.assets_def``, ``dataset.checks``,
``build_leftover_sweepers(...)`` and the resource under the ``skyplane`` key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from skyplane_ops.dagster.factory import RESOURCE_KEY, ReplicatedDataset
from skyplane_ops.dagster.grid import GridRefresh
from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.sensors import build_leftover_sweepers


def skyplane_definitions(
    datasets: Sequence[ReplicatedDataset],
    *,
    skyplane: SkyplaneResource,
    assets: Sequence[Any] = (),
    asset_checks: Sequence[dg.AssetChecksDefinition] = (),
    schedules: Sequence[Any] = (),
    sensors: Sequence[Any] = (),
    jobs: Sequence[Any] = (),
    resources: Mapping[str, Any] | None = None,
    grid: GridRefresh | None = None,
    sweep_leftovers: bool = True,
    **kwargs: Any,
) -> dg.Definitions:
    """Your assets plus every dataset's replicas and checks (and the grid refresh), bound to
    ``skyplane``; with ``sweep_leftovers`` also the sensors that clean up after dead runs."""
    sweepers = (
        build_leftover_sweepers([d.spec for d in datasets]) if sweep_leftovers and datasets else []
    )
    return dg.Definitions(
        assets=[*assets, *(d.assets_def for d in datasets), *([grid.asset] if grid else [])],
        asset_checks=[*asset_checks, *(c for d in datasets for c in d.checks)],
        schedules=[*schedules, *([grid.schedule] if grid else [])],
        sensors=[*sensors, *sweepers],
        jobs=[*jobs, *([grid.job] if grid else [])],
        resources={**(resources or {}), RESOURCE_KEY: skyplane},
        **kwargs,
    )
