"""The plan step of a run: the profile plans are made on (default profile, overrides, the
measured grid or the profiler's grid store) and ``plan``, the one call every face's plan
goes through; ``check_regions`` lets a run fail on a misspelt region before any listing."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyplane_ops.planner.plan import TransferPlan

if TYPE_CHECKING:
    from skyplane_ops.profiler.universe import FleetUniverse
    from skyplane_ops.profiles import Profile


def planning_profile(
    *,
    profile_overrides: str | None = None,
    measured_grid: str | None = None,
    grid_store: str | None = None,
    grid_store_options: Mapping[str, Any] | None = None,
    gcp_tier: str = "premium",
) -> tuple[Profile, dict[str, Any] | None]:
    """The profile plans are made on, and where its measured grid came from (or None).

    ``measured_grid`` is a grid file (CSV/Parquet); ``grid_store`` a profiler grid store whose
    latest published version is laid over the modelled grid. An empty store means the model.
    """
    from skyplane_ops.errors import PlanningError
    from skyplane_ops.profiles import load_profile

    if measured_grid is not None and grid_store is not None:
        raise PlanningError("give a measured_grid file or a grid_store, not both")
    profile = load_profile(
        overrides=profile_overrides, measured_grid=measured_grid, gcp_tier=gcp_tier
    )
    if grid_store is None:
        return profile, ({"file": measured_grid} if measured_grid is not None else None)
    from skyplane_ops.profiler import GridStore, planner_grid

    store = GridStore(grid_store, grid_store_options)
    version = store.latest_version()
    if version is None:
        return profile, {"store": grid_store, "version": None}
    grid = planner_grid(store, profile.throughput, version=version)
    return dataclasses.replace(profile, throughput=grid), {"store": grid_store, "version": version}


def plan(
    src_region: str,
    dst_regions: str | Sequence[str],
    volume_gb: float,
    *,
    min_throughput_gbps: float | None = None,
    max_cost_usd: float | None = None,
    deadline_seconds: float | None = None,
    max_vms_per_region: int | None = None,
    max_connections_per_vm: int | None = None,
    max_relays: int = 1,
    profile_overrides: str | None = None,
    measured_grid: str | None = None,
    grid_store: str | None = None,
    grid_store_options: Mapping[str, Any] | None = None,
    gcp_tier: str = "premium",
    provisioning_seconds: float | None = None,
    lp: bool = False,
    exact_floor: bool = False,
    frontier_points: int = 0,
    backend: str | None = None,
    provisioning_defaults: Mapping[str, float] | None = None,
    backend_options: Mapping[str, Any] | None = None,
    relays_allow: Sequence[str] | None = None,
    relays_deny: Sequence[str] | None = None,
    measured_only: bool = False,
    mip_gap: float | None = None,
    completion_tolerance: float | None = None,
    fleet: FleetUniverse | None = None,
    vms: str = "auto",
    worker_region: str | None = None,
    worker_gbps: float | None = None,
    server_side: bool = True,
    bwlimit_gbps: float | None = None,
) -> TransferPlan:
    """Plan a transfer on the default profile (plus overrides and measured throughput).

    Several destinations give a multicast plan (``planner.multicast``: a region may forward
    each chunk to several next hops, so a shared edge carries the data once), compared with
    separate unicasts and a direct star; ``lp`` and ``frontier_points`` apply to one
    destination only.

    Measured throughput comes from a grid file (``measured_grid``) or from the latest version
    a profiler run published to ``grid_store`` (``skyplane-ops profile --store``); the plan's
    ``details["grid"]`` then names it. ``fleet`` (``FleetUniverse.from_backend``: an ssh
    inventory, a netns grid) limits regions, relays and VMs to the user's hosts and adds
    their own regions. At most one bound may be given; with none, the planner's default
    applies (the cheapest plan finishing, provisioning included, within
    ``completion_tolerance`` of the fastest; a cost ceiling is refined the same way).
    Raises ``UnknownRegionError``, ``InfeasibleError``, ``PlanningError`` or
    ``GridStoreError``. Planner controls (README "Planner"): ``provisioning_seconds`` (t0;
    default per ``backend``, see ``planner.provisioning``), ``relays_allow`` /
    ``relays_deny`` (region ids or patterns), ``measured_only``, ``mip_gap`` and
    ``completion_tolerance`` (plans within it of the fastest completion count as fast).
    The plan is a schedule (``planner.schedule``, in ``details["schedule"]``): paths that need
    no VM (server-side copy where the stores do it, ``server_side``; the worker, in
    ``worker_region`` with ``worker_gbps``) from t = 0 and the overlay once its VMs are up;
    ``vms`` = ``auto`` starts VMs only when they pay, ``none`` never, ``only`` ignores the
    VM-less paths.
    ``bwlimit_gbps``: the transfer's bandwidth cap, a bound on the plan's throughput.
    """
    from skyplane_ops.errors import PlanningError
    from skyplane_ops.planner import plan_transfer
    from skyplane_ops.planner.problem import Objective, build_problem
    from skyplane_ops.planner.provisioning import backend_provisioning_seconds

    bounds = [b for b in (min_throughput_gbps, max_cost_usd, deadline_seconds) if b is not None]
    if len(bounds) > 1:
        raise PlanningError(
            "give at most one of min_throughput_gbps, max_cost_usd and deadline_seconds"
        )
    if volume_gb < 0:
        raise PlanningError(f"volume must not be negative, got {volume_gb} GB")
    if vms not in _FORCE:
        raise PlanningError(f"vms must be one of auto, none, only; not {vms!r}")
    profile, grid_source = planning_profile(
        profile_overrides=profile_overrides,
        measured_grid=measured_grid,
        grid_store=grid_store,
        grid_store_options=grid_store_options,
        gcp_tier=gcp_tier,
    )
    objective: Objective = "max_throughput" if max_cost_usd is not None else "min_cost"
    bound = max_cost_usd if max_cost_usd is not None else min_throughput_gbps
    extra: dict[str, Any] = {"mip_gap": mip_gap} if mip_gap is not None else {}
    if provisioning_seconds is None:
        provisioning_seconds = backend_provisioning_seconds(
            backend, backend_options, provisioning_defaults
        )
    dst_list = [dst_regions] if isinstance(dst_regions, str) else list(dst_regions)
    if fleet is not None:
        fleet.check_ends([src_region, *dst_list])
        version = (grid_source or {}).get("version")
        profile = fleet.profile(profile, grid_store, version)
        extra["regions"] = fleet.ids()
    problem = build_problem(
        profile,
        src_region,
        dst_regions,
        max(volume_gb, 1e-6),  # an empty source still gets a (trivial) plan
        objective=objective,
        bound=bound,
        deadline_seconds=deadline_seconds,
        max_vms=max_vms_per_region,
        max_conns_per_vm=max_connections_per_vm,
        max_relays=max_relays,
        provisioning_seconds=provisioning_seconds,
        relays_allow=relays_allow,
        relays_deny=relays_deny,
        measured_only=measured_only,
        max_gbps=bwlimit_gbps,
        **extra,
    )
    if fleet is not None:
        problem = fleet.constrain(problem)
    from skyplane_ops.planner.api import DEFAULT_COMPLETION_TOLERANCE
    from skyplane_ops.planner.vmless import DEFAULT_WORKER_GBPS

    tolerance = (
        DEFAULT_COMPLETION_TOLERANCE if completion_tolerance is None else completion_tolerance
    )
    if len(problem.dsts) > 1:  # one source, several destinations: a multicast plan
        from skyplane_ops.planner.multicast.api import plan_multicast

        if lp or frontier_points:
            raise PlanningError(
                "the LP relaxation and the Pareto frontier plan one destination; "
                "several destinations get an exact multicast plan"
            )

        result = plan_multicast(problem, exact_floor=exact_floor, completion_tolerance=tolerance)
        if grid_source is not None:
            result.details["grid"] = grid_source
        return result
    result = plan_transfer(
        problem,
        lp=lp,
        frontier_points=frontier_points,
        exact_floor=exact_floor,
        completion_tolerance=DEFAULT_COMPLETION_TOLERANCE
        if completion_tolerance is None
        else completion_tolerance,
    )
    if grid_source is not None:
        result.details["grid"] = grid_source
    if bwlimit_gbps is not None:  # the worker is held to the cap as every path is
        worker_gbps = min(worker_gbps or DEFAULT_WORKER_GBPS, bwlimit_gbps)
    schedule = (vms, worker_region, worker_gbps, server_side, completion_tolerance)
    return _scheduled(result, problem, profile, *schedule)


_FORCE = {"auto": None, "none": "none", "only": "overlay"}


def _scheduled(
    result: TransferPlan,
    problem: Any,
    profile: Profile,
    vms: str,
    worker_region: str | None,
    worker_gbps: float | None,
    server_side: bool,
    tolerance: float | None,
) -> TransferPlan:
    """``result`` with its schedule: VM-less paths from t = 0, the overlay when it pays."""
    from skyplane_ops.planner.api import DEFAULT_COMPLETION_TOLERANCE
    from skyplane_ops.planner.schedule import attach_schedule
    from skyplane_ops.planner.vmless import DEFAULT_WORKER_GBPS, WorkerSpec

    region = str(profile.catalog.get(worker_region).id) if worker_region else None
    worker = WorkerSpec(region, DEFAULT_WORKER_GBPS if worker_gbps is None else worker_gbps)
    return attach_schedule(
        result,
        problem,
        tolerance=DEFAULT_COMPLETION_TOLERANCE if tolerance is None else tolerance,
        force=_FORCE[vms],  # type: ignore[arg-type]
        worker=worker,
        server_side=server_side,
    )


def check_regions(regions: Sequence[str], *, fleet: FleetUniverse | None = None) -> None:
    """Every region is in the catalog (or, with ``fleet``, in the user's fleet): for faces to
    call before listing, so a misspelt region fails in milliseconds, not after a listing."""
    if fleet is not None:
        fleet.check_ends(regions)
        return
    from skyplane_ops.profiles.loader import default_catalog

    catalog = default_catalog()
    for region in regions:
        catalog.resolve(region)  # UnknownRegionError, with the closest ids


def warm_planning(gcp_tier: str = "premium") -> threading.Thread:
    """Load the planner's modules and the default profile on a daemon thread, so a run's plan
    step finds them ready: started while the listing waits on the store (about 0.3-0.5 s of
    imports and model grid on a loaded machine, otherwise paid between the last listing page
    and the first byte). Only caches are filled; any error is the plan step's to report."""

    def warm() -> None:
        try:
            from skyplane_ops.planner import plan_transfer  # noqa: F401  (OR-Tools, the model)
            from skyplane_ops.planner.schedule import attach_schedule  # noqa: F401
            from skyplane_ops.profiles import load_profile

            load_profile(gcp_tier=gcp_tier)
        except Exception:  # the plan step loads them again and says why
            return

    thread = threading.Thread(target=warm, name="warm-planning", daemon=True)
    thread.start()
    return thread
