"""The high-level Python API: plan, provision, transfer, deprovision, copy.

This is the one surface the faces (CLI, Airflow, Dagster) build on, so that every feature lives
in the core first and the integrations stay thin adapters. Every function takes and returns
small JSON-friendly objects (``TransferPlan``, ``GatewayFleet``, ``TransferResult``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Public types re-exported (``X as X``) for the faces, which import only this module.
from gateway_agent.stores.base import ObjectInfo as ObjectInfo
from skyplane_ops.errors import PlanningError as PlanningError
from skyplane_ops.errors import SkyplaneOpsError as SkyplaneOpsError
from skyplane_ops.errors import TransferError as TransferError
from skyplane_ops.metrics import MetricsEvents as MetricsEvents
from skyplane_ops.metrics import RunMetrics as RunMetrics
from skyplane_ops.metrics import textfile_path as textfile_path
from skyplane_ops.metrics import write_final_metrics as write_final_metrics
from skyplane_ops.planner.plan import TransferPlan as TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet as GatewayFleet
from skyplane_ops.sequence import CopyRun as CopyRun
from skyplane_ops.sequence import Gateways as Gateways
from skyplane_ops.sequence import RunEvents as RunEvents
from skyplane_ops.sequence import run_copy as run_copy
from skyplane_ops.sequence.fleet import (
    LOCAL_MAX_GATEWAYS_PER_REGION as LOCAL_MAX_GATEWAYS_PER_REGION,
)
from skyplane_ops.sequence.fleet import deprovision as deprovision
from skyplane_ops.sequence.fleet import new_transfer_id as new_transfer_id
from skyplane_ops.sequence.fleet import provision as provision
from skyplane_ops.sequence.fleet import setup_backend as setup_backend
from skyplane_ops.sequence.fleet import start_early as start_early
from skyplane_ops.sequence.fleet import vms_for as vms_for
from skyplane_ops.sequence.planning import check_regions as check_regions
from skyplane_ops.sequence.planning import plan as plan
from skyplane_ops.sequence.planning import planning_profile as planning_profile
from skyplane_ops.transfer import DispatchOptions as DispatchOptions
from skyplane_ops.transfer import PlanOptions as PlanOptions
from skyplane_ops.transfer import StoreLocation as StoreLocation
from skyplane_ops.transfer import TransferRequest as TransferRequest
from skyplane_ops.transfer import TransferResult as TransferResult
from skyplane_ops.transfer import preview_transfer as preview_transfer
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer import transfer_lock as transfer_lock
from skyplane_ops.transfer.bwlimit import format_rate as format_rate
from skyplane_ops.transfer.bwlimit import live_path as live_path
from skyplane_ops.transfer.bwlimit import parse_rate as parse_rate
from skyplane_ops.transfer.bwlimit import set_bwlimit as set_bwlimit
from skyplane_ops.transfer.bwlimit_remote import CapFollower as CapFollower
from skyplane_ops.transfer.listing import Listing as Listing
from skyplane_ops.transfer.listing import list_request as list_request
from skyplane_ops.transfer.metadata import replica_properties as replica_properties
from skyplane_ops.transfer.progress import Progress as Progress
from skyplane_ops.transfer.progress import ProgressLine as ProgressLine
from skyplane_ops.transfer.progress import plan_paths as plan_paths
from skyplane_ops.transfer.report import find_reports as find_reports
from skyplane_ops.transfer.report import load_summary as load_summary
from skyplane_ops.transfer.report import summary_text as summary_text
from skyplane_ops.transfer.report.reader import failed_rows as failed_rows
from skyplane_ops.transfer.request import as_request as as_request
from skyplane_ops.transfer.request import portable_dst_options as portable_dst_options
from skyplane_ops.transfer.request import request_from
from skyplane_ops.transfer.request import store_write_options as store_write_options
from skyplane_ops.transfer.selection import read_files_from as read_files_from
from skyplane_ops.transfer.state import TransferState as TransferState
from skyplane_ops.transfer.state import default_state_uri as default_state_uri
from skyplane_ops.transfer.state import heartbeat_age as heartbeat_age
from skyplane_ops.transfer.uptodate import quick_listing as quick_listing
from skyplane_ops.transfer.uptodate import sync_check as sync_check
from skyplane_ops.transfer.uptodate import sync_up_to_date as sync_up_to_date

if TYPE_CHECKING:
    from skyplane_ops.profiler import RefreshResult

# The engine's entry point: ``transfer(plan, fleet, request)`` moves, checks, commits and
# verifies; re-running it with the same request resumes (only chunks not yet written are sent).
transfer = run_transfer


def open_store(uri: str, options: Mapping[str, Any] | None = None) -> Any:
    """The ``ObjectStore`` a URI names (cheap: no network call until the first operation);
    a bad URI or option is a ``TransferError``."""
    return StoreLocation(uri, dict(options or {})).open("store")


def source_totals(
    src_uri: str,
    src_options: Mapping[str, Any] | None = None,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    allow_empty: bool = False,
) -> tuple[int, int]:
    """(objects, bytes) a transfer of ``src_uri`` would copy, counted as the listing streams;
    an empty source is a ``TransferError`` unless ``allow_empty``."""
    from skyplane_ops.transfer.manifest import source_totals as totals

    store = open_store(src_uri, src_options)
    objects, nbytes = totals(store, src_uri, include, exclude, allow_empty=allow_empty)
    return int(objects), int(nbytes)


def source_volume_gb(
    src_uri: str,
    *,
    src_options: Mapping[str, Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> float:
    """Size of what a transfer of ``src_uri`` would copy, in GB (for planning)."""
    return source_totals(src_uri, src_options, include=include, exclude=exclude)[1] / 1e9


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
    request: TransferRequest | str,
    dst: str | Sequence[str] | None = None,
    *,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    events: RunEvents | None = None,
    tuning: DispatchOptions | None = None,
    **fields: Any,
) -> Any:
    """Plan, provision, transfer and always deprovision, in one call: the run sequence
    (``sequence.CopyRun``) on ``request``.

    ``request`` is a ``TransferRequest``, or the source URI with ``dst`` and the request's
    fields as keywords (``src_region=``, ``dst_region=``, ``src_options=``, ``include=``,
    ``sync=``, ``plan_options=``, ``dispatch=`` ... see ``TransferRequest.build``). Option
    ranges and source/destination overlap are checked before anything is listed; a sync
    with nothing to do starts no gateway.

    Several destinations (``dst`` a list, ``dst_region`` a list of their regions, or a
    request with ``destinations``): one multicast plan and fleet, each destination copied,
    committed and verified on its own (``sequence.FanoutRun``); returns a ``FanoutResult``
    (per destination) or raises ``FanoutError`` carrying it."""
    if not isinstance(request, TransferRequest) and "dispatch" in fields and tuning is None:
        tuning = fields["dispatch"]
    request = request_from(request, dst, **fields)
    gateways = Gateways(
        backend=backend, backend_options=dict(backend_options or {}), tags=dict(tags or {})
    )
    if request.multi:
        from skyplane_ops.sequence.fanout import FanoutRun

        return FanoutRun(request, gateways, events, tuning=tuning).run()
    return CopyRun(request, gateways, events, tuning=tuning).run()


# ---- the faces' one door: lazy re-exports (costly modules load on first use) ----------------
# The CLI commands and the Airflow/Dagster faces import these from here, never from the
# modules below, so that moving code inside the core does not ripple into the faces.
_LAZY: dict[str, str] = {
    "FanoutRun": "skyplane_ops.sequence.fanout",
    "FanoutResult": "skyplane_ops.sequence.fanout",
    "FanoutError": "skyplane_ops.sequence.fanout",
    "destination_plan": "skyplane_ops.sequence.fanout",
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
    "parse_document": "skyplane_ops.provision.documents",
    "read_document": "skyplane_ops.provision.documents",
    "load_backend_options": "skyplane_ops.provision.sweeper",
    "sweep": "skyplane_ops.provision.sweeper",
    "claim_warm": "skyplane_ops.sequence.warm",
    "park_warm": "skyplane_ops.sequence.warm",
    "forget_warm": "skyplane_ops.sequence.warm",
    "vm_usd_per_hour": "skyplane_ops.sequence.warm",
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
    from skyplane_ops.provision.documents import parse_document as parse_document
    from skyplane_ops.provision.documents import read_document as read_document
    from skyplane_ops.provision.mixed import PROVIDERS as PROVIDERS
    from skyplane_ops.provision.mixed import describe as _describe
    from skyplane_ops.provision.mixed import format_dry_run as format_dry_run
    from skyplane_ops.provision.records import load_fleets as load_fleets
    from skyplane_ops.provision.sweeper import backend_options_for as backend_options_for
    from skyplane_ops.provision.sweeper import load_backend_options as load_backend_options
    from skyplane_ops.provision.sweeper import sweep as sweep
    from skyplane_ops.sequence.warm import claim_warm as claim_warm
    from skyplane_ops.sequence.warm import forget_warm as forget_warm
    from skyplane_ops.sequence.warm import park_warm as park_warm
    from skyplane_ops.sequence.warm import vm_usd_per_hour as vm_usd_per_hour
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
