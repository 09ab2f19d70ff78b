"""The high-level Python API: plan, provision, transfer, deprovision, copy.

This is the one surface the faces (CLI, Airflow, Dagster) build on, so that every feature lives
in the core first and the integrations stay thin adapters. Every function takes and returns
small JSON-friendly objects (``TransferPlan``, ``GatewayFleet``, ``TransferResult``).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Public types re-exported (``X as X``) for the faces, which import only this module.
from skyplane_ops.errors import PlanningError as PlanningError
from skyplane_ops.errors import SkyplaneOpsError as SkyplaneOpsError
from skyplane_ops.errors import TransferError as TransferError
from skyplane_ops.planner.plan import TransferPlan as TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet as GatewayFleet
from skyplane_ops.transfer import TransferResult as TransferResult
from skyplane_ops.transfer import check_request, run_transfer
from skyplane_ops.transfer import preview_transfer as preview_transfer
from skyplane_ops.transfer import transfer_lock as transfer_lock
from skyplane_ops.transfer.progress import Progress as Progress
from skyplane_ops.transfer.progress_text import ProgressLine as ProgressLine
from skyplane_ops.transfer.progress_text import plan_paths as plan_paths
from skyplane_ops.transfer.request import Listing as Listing
from skyplane_ops.transfer.request import list_request as list_request
from skyplane_ops.transfer.state import TransferState as TransferState
from skyplane_ops.transfer.state import default_state_uri as default_state_uri
from skyplane_ops.transfer.state import heartbeat_age as heartbeat_age
from skyplane_ops.transfer.uptodate import quick_listing as quick_listing
from skyplane_ops.transfer.uptodate import sync_check as sync_check
from skyplane_ops.transfer.uptodate import sync_up_to_date as sync_up_to_date

if TYPE_CHECKING:
    from skyplane_ops.profiler import RefreshResult
    from skyplane_ops.profiler.universe import FleetUniverse
    from skyplane_ops.profiles import Profile

# Gateways per region the local backend starts at most: one machine gains nothing from more
# processes per "region" than it has cores, and the plan's VM counts are cloud VM counts.
LOCAL_MAX_GATEWAYS_PER_REGION = 1


def new_transfer_id(prefix: str = "sk") -> str:
    """A short unique id that tags every resource of one transfer."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


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
    relays_allow: Sequence[str] | None = None,
    relays_deny: Sequence[str] | None = None,
    measured_only: bool = False,
    mip_gap: float | None = None,
    completion_tolerance: float | None = None,
    fleet: FleetUniverse | None = None,
) -> TransferPlan:
    """Plan a transfer on the default profile (plus overrides and measured throughput).

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
    """
    from skyplane_ops.errors import PlanningError
    from skyplane_ops.planner import plan_transfer
    from skyplane_ops.planner.problem import Objective, build_problem
    from skyplane_ops.planner.provisioning import default_provisioning_seconds

    bounds = [b for b in (min_throughput_gbps, max_cost_usd, deadline_seconds) if b is not None]
    if len(bounds) > 1:
        raise PlanningError(
            "give at most one of min_throughput_gbps, max_cost_usd and deadline_seconds"
        )
    if volume_gb < 0:
        raise PlanningError(f"volume must not be negative, got {volume_gb} GB")
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
        provisioning_seconds = default_provisioning_seconds(backend, provisioning_defaults)
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
        **extra,
    )
    if fleet is not None:
        problem = fleet.constrain(problem)
    from skyplane_ops.planner.api import DEFAULT_COMPLETION_TOLERANCE

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
    return result


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


def vms_for(
    plan_or_vms: TransferPlan | Mapping[str, int], *, max_per_region: int | None = None
) -> dict[str, int]:
    """Gateways to start per region: every region on a path of the plan, at least one each."""
    if isinstance(plan_or_vms, TransferPlan):
        used = {r for p in plan_or_vms.paths for r in p.regions}
        used |= {plan_or_vms.src, *plan_or_vms.dsts}
        vms = {r: max(1, int(plan_or_vms.vms.get(r, 1))) for r in used}
    else:
        vms = {r: int(n) for r, n in plan_or_vms.items()}
    if max_per_region is not None:
        vms = {r: min(n, max_per_region) for r, n in vms.items()}
    return vms


def provision(
    plan_or_vms: TransferPlan | Mapping[str, int],
    *,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    transfer_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    max_per_region: int | None = None,
    early: Any = None,
) -> GatewayFleet:
    """Start gateways for every region of the plan; cleans up its own partial state on error.

    The local backend starts at most ``LOCAL_MAX_GATEWAYS_PER_REGION`` per region unless
    ``max_per_region`` says otherwise, and adopts the agents of ``early`` (``start_early``).
    """
    from skyplane_ops.provision import get_provisioner

    if max_per_region is None and backend == "local":
        max_per_region = LOCAL_MAX_GATEWAYS_PER_REGION
    provisioner = get_provisioner(backend, **dict(backend_options or {}))
    extra = {"early": early} if early is not None and backend == "local" else {}
    return provisioner.provision(
        vms_for(plan_or_vms, max_per_region=max_per_region),
        transfer_id=transfer_id or new_transfer_id(),
        tags=dict(tags or {}),
        **extra,
    )


def start_early(
    regions: Sequence[str], *, transfer_id: str, backend_options: Mapping[str, Any] | None = None
) -> Any:
    """Local backend: start the agents of ``regions`` now (a plan's source and destination,
    which every plan uses) so they boot while the source is listed; hand the result to
    ``provision(..., early=...)`` with the same ``transfer_id``, and ``cancel()`` it after."""
    from skyplane_ops.provision import get_provisioner

    provisioner: Any = get_provisioner("local", **dict(backend_options or {}))
    return provisioner.start_early(regions, transfer_id=transfer_id)


# The transfer step is the engine's own entry point, not a copy of its signature: re-running it
# with the same ``journal_dir`` resumes (only chunks not yet written are sent); ``part_size``,
# ``verify`` and ``dispatch`` tune the engine.
transfer = run_transfer
# Also from the engine: ``check_request`` (option ranges, source/destination overlap: for faces
# to call before planning or provisioning), ``preview_transfer`` (the dry run) and
# ``transfer_lock`` (the journal lock, for faces to take before provisioning), ``list_request``
# (one listing per run, handed to ``transfer(listing=...)``), ``sync_up_to_date`` (a sync
# with nothing to do, answered without a plan or fleet), ``quick_listing`` (the same
# between two local folders, answered before any listing, or a listing of what differs) and
# ``sync_check`` (both in turn: a sync's result when it has nothing to do, else its listing).


def deprovision(
    fleet: GatewayFleet | None = None,
    *,
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    transfer_id: str | None = None,
) -> list[str]:
    """Delete a fleet, or (with no fleet) every leftover tagged with ``transfer_id``.

    Idempotent: deleting what is already gone is not an error. Returns what was deleted when
    sweeping by tag (an empty list after deleting a known fleet).
    """
    from skyplane_ops.errors import ProvisionError
    from skyplane_ops.provision import get_provisioner

    name = backend or (fleet.backend if fleet is not None else None)
    if name is None:
        raise ProvisionError("deprovision needs a fleet or a backend name")
    provisioner = get_provisioner(name, **dict(backend_options or {}))
    if fleet is not None:
        provisioner.deprovision(fleet)
        return []
    if transfer_id is None:
        raise ProvisionError("deprovision needs a fleet or a transfer_id to sweep by tag")
    return provisioner.sweep(transfer_id=transfer_id)


def source_volume_gb(
    src_uri: str,
    *,
    src_options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> float:
    """Size of what a transfer of ``src_uri`` would copy, in GB (for planning)."""
    from gateway_agent.stores import open_store
    from skyplane_ops.errors import TransferError
    from skyplane_ops.transfer.manifest import source_totals

    try:
        store = open_store(src_uri, dict(src_options or {}))
    except Exception as exc:
        raise TransferError(f"cannot open source {src_uri}: {exc}") from exc
    return source_totals(store, src_uri, include, exclude)[1] / 1e9


def refresh_grid(
    regions: Sequence[str],
    *,
    store_uri: str | None = None,
    store_options: Mapping[str, Any] | None = None,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    connections: int | Sequence[int] | None = None,
    duration_s: float | None = None,
    budget_usd: float | None = None,
    freshness_s: float = 0.0,
    exclusive: bool = False,
    run_id: str | None = None,
    probe_port: int = 0,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> RefreshResult:
    """Measure the throughput grid between ``regions`` and publish a version to a grid store.

    One gateway per region (``backend``), every ordered pair probed at each count of
    ``connections`` (default 4 and 64) for ``duration_s``; pairs measured within
    ``freshness_s`` are skipped, the fleet is always deprovisioned, and the result is what
    ``plan(grid_store=...)`` reads.
    ``store_uri`` defaults to ``$SKYPLANE_OPS_HOME/grid``. Raises ``BudgetExceededError``
    before provisioning anything when the egress estimate is above ``budget_usd``.
    """
    from skyplane_ops import profiler
    from skyplane_ops.profiler.errors import ProfilerError
    from skyplane_ops.profiler.store import default_store_uri

    # Numbers the profiler would only trip over after starting gateways.
    if isinstance(probe_port, bool) or not isinstance(probe_port, int):
        raise ProfilerError(f"probe_port must be a whole number, not {probe_port!r}")
    if not 0 <= probe_port <= 65535:
        raise ProfilerError(f"probe_port (--probe-port) must be in 0..65535, got {probe_port}")
    if budget_usd is not None and not budget_usd >= 0:  # also refuses NaN
        raise ProfilerError(f"budget_usd (--budget-usd) must not be negative, got {budget_usd}")
    if not freshness_s >= 0:
        raise ProfilerError(f"freshness must not be negative, got {freshness_s} s")
    sizing: dict[str, Any] = {}
    if connections is not None:
        sizing["connections"] = connections
    if duration_s is not None:
        sizing["duration_s"] = duration_s
    return profiler.refresh_grid(
        list(regions),
        backend=backend,
        backend_options=dict(backend_options or {}),
        budget_usd=budget_usd,
        store_uri=store_uri or default_store_uri(),
        store_options=store_options,
        freshness_s=freshness_s,
        exclusive=exclusive,
        run_id=run_id,
        probe_port=probe_port,
        progress=progress,
        **sizing,
    )


def copy(
    src_uri: str,
    dst_uri: str,
    *,
    src_region: str,
    dst_region: str,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    plan_options: Mapping[str, Any] | None = None,
    transfer_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    **transfer_options: Any,
) -> TransferResult:
    """Plan, provision, transfer and always deprovision, in one call.

    Option ranges and source/destination overlap are checked before anything is planned.
    """
    checked = ("part_size", "verify", "dispatch", "max_delete")
    check_request(
        src_uri,
        dst_uri,
        src_options=src_options,
        dst_options=dst_options,
        **{k: v for k, v in transfer_options.items() if k in checked},
    )
    selection: dict[str, Any] = {"src_options": src_options, "include": include, "exclude": exclude}
    # The journal lock before provisioning: a second identical call stops (or waits) first.
    with transfer_lock(
        src_uri,
        dst_uri,
        journal_dir=transfer_options.get("journal_dir"),
        include=include,
        exclude=exclude,
        wait=bool(transfer_options.get("wait_lock", False)),
        **{k: v for k, v in transfer_options.items() if k == "part_size"},
    ):
        listing: Listing | None = None
        if transfer_options.get("sync") or transfer_options.get("delete"):
            # Nothing to copy or delete: answered from the listing, before any gateway.
            got = sync_check(
                src_uri,
                dst_uri,
                transfer_id=transfer_id or new_transfer_id("copy"),
                dst_options=dst_options,
                delete=bool(transfer_options.get("delete")),
                max_delete=transfer_options.get("max_delete"),
                journal_dir=transfer_options.get("journal_dir"),
                **selection,
                **{k: v for k, v in transfer_options.items() if k == "part_size"},
            )
            if isinstance(got, TransferResult):
                return got
            listing = got  # sizes the plan and is what the transfer copies from
        try:
            volume_gb = (
                listing.volume_gb if listing is not None else source_volume_gb(src_uri, **selection)
            )
            options = dict(plan_options or {})
            if "fleet" not in options:  # an ssh inventory / netns grid is the planning universe
                from skyplane_ops.profiler.universe import FleetUniverse

                options["fleet"] = FleetUniverse.from_backend(backend, backend_options)
            the_plan = plan(src_region, dst_region, volume_gb, **options)
            fleet = provision(
                the_plan,
                backend=backend,
                backend_options=backend_options,
                transfer_id=transfer_id,
                tags=tags,
            )
            try:
                return transfer(
                    the_plan,
                    fleet,
                    src_uri,
                    dst_uri,
                    dst_options=dst_options,
                    listing=listing,
                    **selection,
                    **transfer_options,
                )
            finally:
                deprovision(fleet, backend_options=backend_options)
        finally:
            if listing is not None:
                listing.close()  # idempotent: the transfer closes it when it gets that far


# ---- the faces' one door: lazy re-exports (costly modules load on first use) ----------------
# The CLI commands and the Airflow/Dagster faces import these from here, never from the
# modules below, so that moving code inside the core does not ripple into the faces.
_LAZY: dict[str, str] = {
    "BudgetExceededError": "skyplane_ops.profiler.errors",
    "ProfileError": "skyplane_ops.errors",
    "ProvisionError": "skyplane_ops.errors",
    "InvalidProblemError": "skyplane_ops.planner.problem",
    "render_text": "skyplane_ops.planner.plan",
    "render_mermaid": "skyplane_ops.planner.plan",
    "route_svg": "skyplane_ops.planner.route",
    "FleetUniverse": "skyplane_ops.profiler.universe",
    "BACKENDS": "skyplane_ops.provision",
    "get_provisioner": "skyplane_ops.provision",
    "PROVIDERS": "skyplane_ops.provision.mixed",
    "describe_resources": "skyplane_ops.provision.mixed:describe",
    "format_dry_run": "skyplane_ops.provision.mixed",
    "load_fleets": "skyplane_ops.provision.records",
    "backend_options_for": "skyplane_ops.provision.sweeper",
    "load_backend_options": "skyplane_ops.provision.sweeper",
    "sweep": "skyplane_ops.provision.sweeper",
    "PublishTarget": "skyplane_ops.profiler.refresh_policy",
    "clean_leftovers": "skyplane_ops.profiler.refresh_policy",
    "publish_target": "skyplane_ops.profiler.refresh_policy",
    "parse_duration": "skyplane_ops.profiler.durations",
    "format_age": "skyplane_ops.profiler.durations",
    "GridStore": "skyplane_ops.profiler.store",
    "default_store_uri": "skyplane_ops.profiler.store",
    "Measurement": "skyplane_ops.profiler.records",
    "plan_profile_run": "skyplane_ops.profiler.run:plan_run",
    "load_default_profile": "skyplane_ops.profiles",
    "read_skyplane_csv": "skyplane_ops.profiles.skyplane_csv",
    "DispatchOptions": "skyplane_ops.transfer.dispatch",
    "PartialTransferError": "skyplane_ops.transfer.result",
    "EXIT_PARTIAL": "skyplane_ops.transfer.result",
    "path_warnings": "skyplane_ops.transfer.result",
    "MiB": "skyplane_ops.transfer.manifest",
    "JsonProgress": "skyplane_ops.transfer.progress",
}

if TYPE_CHECKING:
    from skyplane_ops.errors import ProfileError as ProfileError
    from skyplane_ops.errors import ProvisionError as ProvisionError
    from skyplane_ops.planner.plan import render_mermaid as render_mermaid
    from skyplane_ops.planner.plan import render_text as render_text
    from skyplane_ops.planner.problem import InvalidProblemError as InvalidProblemError
    from skyplane_ops.planner.route import route_svg as route_svg
    from skyplane_ops.profiler.durations import format_age as format_age
    from skyplane_ops.profiler.durations import parse_duration as parse_duration
    from skyplane_ops.profiler.errors import BudgetExceededError as BudgetExceededError
    from skyplane_ops.profiler.records import Measurement as Measurement
    from skyplane_ops.profiler.refresh_policy import PublishTarget as PublishTarget
    from skyplane_ops.profiler.refresh_policy import clean_leftovers as clean_leftovers
    from skyplane_ops.profiler.refresh_policy import publish_target as publish_target
    from skyplane_ops.profiler.run import plan_run as _plan_run
    from skyplane_ops.profiler.store import GridStore as GridStore
    from skyplane_ops.profiler.store import default_store_uri as default_store_uri
    from skyplane_ops.profiles import load_default_profile as load_default_profile
    from skyplane_ops.profiles.skyplane_csv import read_skyplane_csv as read_skyplane_csv
    from skyplane_ops.provision import BACKENDS as BACKENDS
    from skyplane_ops.provision import get_provisioner as get_provisioner
    from skyplane_ops.provision.mixed import PROVIDERS as PROVIDERS
    from skyplane_ops.provision.mixed import describe as _describe
    from skyplane_ops.provision.mixed import format_dry_run as format_dry_run
    from skyplane_ops.provision.records import load_fleets as load_fleets
    from skyplane_ops.provision.sweeper import backend_options_for as backend_options_for
    from skyplane_ops.provision.sweeper import load_backend_options as load_backend_options
    from skyplane_ops.provision.sweeper import sweep as sweep
    from skyplane_ops.transfer.dispatch import DispatchOptions as DispatchOptions
    from skyplane_ops.transfer.manifest import MiB as MiB
    from skyplane_ops.transfer.progress import JsonProgress as JsonProgress
    from skyplane_ops.transfer.result import EXIT_PARTIAL as EXIT_PARTIAL
    from skyplane_ops.transfer.result import PartialTransferError as PartialTransferError
    from skyplane_ops.transfer.result import path_warnings as path_warnings

    plan_profile_run = _plan_run
    describe_resources = _describe


def __getattr__(name: str) -> Any:
    """Lazy re-exports whose modules are costly to import (the profiler loads the grid code)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr or name)


# ---- files the planner's pictures go to (the planner itself returns text and bytes) ---------
def _image_target(path: str | Path) -> tuple[Path, str]:
    """Where matplotlib's ``savefig(path)`` would write and in which format: the suffix names
    the format; without one, PNG at ``path`` + ``.png``."""
    out = Path(path)
    fmt = out.suffix[1:].lower()
    if fmt:
        return out, fmt
    return Path(str(out).rstrip(".") + ".png"), "png"


def plot_frontier(
    plan: TransferPlan, path: str | Path, *, max_vms_per_region: int | None = None
) -> Path:
    """Write the plan's Pareto frontier (``planner.render.frontier_image``) as PNG or SVG (by
    suffix); returns ``path``."""
    from skyplane_ops.planner.render import frontier_image

    target, fmt = _image_target(path)
    target.write_bytes(frontier_image(plan, fmt, max_vms_per_region=max_vms_per_region))
    return Path(path)


def write_route(plan: TransferPlan, path: str | Path) -> Path:
    """Write the route picture: ``.svg`` as ``route_svg`` text, anything else via matplotlib
    (PNG) on the same layout (``planner.route.route_image``); returns ``path``."""
    from skyplane_ops.planner.route import route_image, route_svg

    out = Path(path)
    if out.suffix.lower() == ".svg":
        out.write_text(route_svg(plan))
        return out
    target, fmt = _image_target(out)
    target.write_bytes(route_image(plan, fmt))
    return out
