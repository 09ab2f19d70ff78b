"""``skyplane-ops cp`` and ``skyplane-ops sync``: plan, provision, transfer, always deprovision.

A thin face over ``skyplane_ops.api``: the source is listed once to size the plan
(``api.source_volume_gb``); ``api.plan`` picks the route (on a measured grid store with
``--grid-store``); the chosen backend (``local`` by default: gateways as local processes, no
cloud account; ``--backend-options`` for ssh/netns/aws) provisions the plan's regions
(``api.provision``); ``api.transfer`` moves and verifies the data; the fleet is torn down on
success, failure, Ctrl-C and SIGTERM alike. ``--fleet`` runs on a fleet a pipeline's own
provision step started (the plan stays in its gateways) and leaves it running. Progress goes
to stderr (``progress_view``); the summary to stdout (text, or one JSON object with ``--json``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import click
from click.core import ParameterSource

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.cp_options import CP_EPILOG, SYNC_EPILOG, transfer_options
from skyplane_ops.commands.options import plan_arguments, to_uri
from skyplane_ops.commands.progress_view import RunView, pick_mode
from skyplane_ops.commands.summary import summary_lines

TransferError = api.TransferError
ArgsNS = SimpleNamespace


@dataclass(frozen=True)
class _How:
    """What the verb and its checked options make of a run (``args`` holds the rest)."""

    sync: bool
    delete: bool
    max_delete: int | None
    dispatch: Any
    backend_options: dict[str, Any]


@click.command(epilog=CP_EPILOG)
@transfer_options("cp")
@click.option("--sync", is_flag=True, help="copy only objects missing or different at DST")
@click.pass_context
def cp(ctx: click.Context, **params: Any) -> int:
    """Copy objects from SRC to DST through planned gateways.

    SRC and DST are store URIs (s3://, gs://, az://, file://) or plain local paths. The source
    is listed, a route is planned, gateways are started, the data is streamed, checksummed
    and verified, and the gateways are always torn down (with --fleet: a running fleet is
    used and left running). Re-running resumes.
    """
    return _execute(_args(ctx, params), sync=bool(params["sync"]))


@click.command(epilog=SYNC_EPILOG)
@transfer_options("sync")
@click.option(
    "--delete",
    is_flag=True,
    help="also remove destination objects absent from the source (only if nothing failed)",
)
@click.option(
    "--max-delete",
    type=int,
    default=None,
    metavar="N",
    help="with --delete: refuse every delete when more than N objects would go",
)
@click.pass_context
def sync(ctx: click.Context, **params: Any) -> int:
    """Copy only the objects missing or different at DST (like rclone sync; --delete mirrors)."""
    return _execute(_args(ctx, params), sync=True)


def _args(ctx: click.Context, params: dict[str, Any]) -> ArgsNS:
    """The run's ``args``; with ``--fleet`` the backend is the fleet's (a different
    ``--backend`` given with it is a usage error)."""
    args = to_args(ctx, params)
    if args.fleet is not None:
        given = ctx.get_parameter_source("backend") not in (None, ParameterSource.DEFAULT)
        if given and args.backend != args.fleet.backend:
            raise click.UsageError(
                f"--backend {args.backend} does not match --fleet, a {args.fleet.backend} fleet"
            )
        args.backend = args.fleet.backend
    return args


def _links(args: ArgsNS) -> str | None:
    if args.copy_links and args.store_links:
        raise click.UsageError("give --copy-links (-L) or --links (-l), not both")
    return "follow" if args.copy_links else "store" if args.store_links else None


def make_plan(
    args: ArgsNS, volume_gb: float, backend_options: dict[str, Any] | None = None
) -> api.TransferPlan:
    """``api.plan`` with the command's bound and limits (or the plan JSON of ``--plan``); on
    the ssh backend with an inventory (or netns with a grid) the plan stays in that fleet, and
    with ``--fleet`` in the regions and gateway counts of the running fleet."""
    if args.plan_file:
        try:
            with open(args.plan_file) as fh:
                return api.TransferPlan.from_json(fh.read())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TransferError(f"cannot read plan {args.plan_file}: {exc}") from exc
    return api.plan(
        args.src_region,
        args.dst_region,
        volume_gb,
        **plan_arguments(args),
        fleet=_universe(args, backend_options),
    )


def _universe(args: ArgsNS, backend_options: dict[str, Any] | None) -> Any:
    """Where the plan may go: the backend's hosts (ssh inventory, netns grid), and with
    ``--fleet`` only the running fleet's gateways; None: anywhere in the catalog."""
    universe = api.FleetUniverse.from_backend(args.backend, backend_options)
    if getattr(args, "fleet", None) is not None:
        universe = api.FleetUniverse.standing(args.fleet, universe)
    return universe


def _backend_options(args: ArgsNS, hooks: dict[str, Any]) -> dict[str, Any]:
    options = api.backend_options_for(args.backend_options, args.backend)
    if hooks and args.backend == "local":
        options["extra_args"] = [*options.get("extra_args", []), "--enable-test-hooks"]
    return options


def _dispatch_options(args: ArgsNS, hooks: dict[str, Any]) -> Any:
    return api.DispatchOptions(
        connections=args.connections,
        encrypt={"all": True, "none": False}.get(args.encrypt, args.encrypt),
        compress_level=3 if args.compress else 0,
        test_hooks=hooks,
    )


def _dry_run(args: ArgsNS, sync: bool, delete: bool, max_delete: int | None) -> int:
    preview = api.preview_transfer(
        args.src,
        args.dst,
        src_options=args.src_options,
        dst_options=args.dst_options,
        include=args.include,
        exclude=args.exclude,
        sync=sync,
        delete=delete,
        max_delete=max_delete,
        journal_dir=args.journal_dir,
    )
    with preview:  # streamed from the catalog: a line at a time, whatever the count
        if args.as_json:
            preview.write_json(sys.stdout)
        else:
            for line in preview.lines():
                print(line)
    return 0


def _store_options(uri: str, given: dict[str, Any] | None, links: str | None) -> dict[str, Any]:
    """``--src-options``/``--dst-options``, plus the local store's ``links`` for file:// URIs."""
    options = dict(given or {})
    if links and uri.startswith("file://"):
        options.setdefault("links", links)
    return options


def _execute(args: ArgsNS, sync: bool) -> int:
    args.src, args.dst = to_uri(args.src), to_uri(args.dst)
    args.include, args.exclude = list(args.include), list(args.exclude)
    links = _links(args)
    args.src_options = _store_options(args.src, args.src_options, links)
    args.dst_options = _store_options(
        args.dst, args.dst_options, "store" if links == "store" else None
    )
    delete = bool(getattr(args, "delete", False))
    max_delete = getattr(args, "max_delete", None)
    if max_delete is not None and not delete:
        raise TransferError("--max-delete only applies with --delete")
    if args.local_gateways_per_region < 1:
        raise TransferError(
            f"--local-gateways-per-region must be at least 1, got {args.local_gateways_per_region}"
        )
    hooks = json.loads(args.gateway_test_hooks) if args.gateway_test_hooks else {}
    dispatch = _dispatch_options(args, hooks)
    # Bad numbers and overlapping source/destination fail before any listing or planning.
    api.check_request(
        args.src,
        args.dst,
        src_options=args.src_options,
        dst_options=args.dst_options,
        part_size=args.chunk_mib * api.MiB,
        verify=args.verify,
        dispatch=dispatch,
        max_delete=max_delete,
    )
    if args.dry_run:
        return _dry_run(args, sync, delete, max_delete)
    backend_options = _backend_options(args, hooks)  # bad options fail before any listing
    if not args.plan_file:  # and so do regions outside the catalog (or the fleet)
        api.check_regions(
            [args.src_region, args.dst_region], fleet=_universe(args, backend_options)
        )
    # The journal lock next: a second identical run stops (or waits) before any listing,
    # planning or gateway; held until the fleet is gone.
    lock = api.transfer_lock(
        args.src,
        args.dst,
        journal_dir=args.journal_dir,
        part_size=args.chunk_mib * api.MiB,
        include=args.include,
        exclude=args.exclude,
        wait=args.wait_lock,
    )
    view = RunView(sys.stderr, pick_mode(sys.stderr, as_json=args.as_json, quiet=args.no_progress))
    try:
        return _locked(args, _How(sync, delete, max_delete, dispatch, backend_options), view)
    finally:
        view.close()
        lock.release()


@contextmanager
def _early_gateways(args: ArgsNS, backend_options: dict[str, Any]) -> Iterator[Any | None]:
    """On the local backend, start the gateways of the source and destination region (every
    plan has them) ahead of provision: a ``cp`` before listing, so they boot on the core the
    listing leaves idle; a sync once its listing found work, so they boot while it plans.
    Provision adopts them; whatever it did not adopt is stopped on the way out."""
    early = None
    if args.fleet is None and args.backend == "local" and args.src_region and args.dst_region:
        try:
            early = api.start_early(
                [args.src_region, args.dst_region],
                transfer_id=api.new_transfer_id("cp"),
                backend_options=backend_options,
            )
        except Exception:  # the provision step reports it, in its own words
            early = None
    try:
        yield early
    finally:
        if early is not None:
            early.cancel()


def _locked(args: ArgsNS, how: _How, view: RunView) -> int:
    """List, plan, provision, transfer (+ verify) and always tear down, under the lock.

    One listing for the whole run: it sizes the plan, lets an up-to-date sync skip planning
    and gateways, and is handed to the engine instead of listing again."""
    if how.sync:  # no gateway before listing: it may find nothing to do, and lists on 2 cores
        listing, volume_gb, done = _list(args, how, view)
        if done is not None:
            return _report(args, done, None, view, 0)
        with _early_gateways(args, how.backend_options) as early:
            return _run(args, how, view, early, listing, volume_gb)
    with _early_gateways(args, how.backend_options) as early:
        listing, volume_gb, _ = _list(args, how, view)
        return _run(args, how, view, early, listing, volume_gb)


def _list(args: ArgsNS, how: _How, view: RunView) -> tuple[Any, float, api.TransferResult | None]:
    """The run's one listing, its volume in GB, and, for a sync with nothing to do, its
    result."""
    with view.phase("list", args.src) as note:
        if how.sync:
            got = api.sync_check(
                args.src,
                args.dst,
                transfer_id=api.new_transfer_id("cp"),
                src_options=args.src_options,
                dst_options=args.dst_options,
                include=args.include,
                exclude=args.exclude,
                delete=how.delete,
                max_delete=how.max_delete,
                journal_dir=args.journal_dir,
                part_size=args.chunk_mib * api.MiB,
                progress=view.listing,
            )
            if isinstance(got, api.TransferResult):
                note["done"] = f"{got.objects_skipped:,} objects up to date"
                return None, 0.0, got
            listing = got
        else:
            listing = api.list_request(
                args.src,
                args.dst,
                src_options=args.src_options,
                dst_options=args.dst_options,
                include=args.include,
                exclude=args.exclude,
                journal_dir=args.journal_dir,
                progress=view.listing,
            )
        volume_gb = listing.volume_gb
        note["done"] = f"{volume_gb:.3f} GB to consider"
    return listing, volume_gb, None


def _run(args: ArgsNS, how: _How, view: RunView, early: Any, listing: Any, volume_gb: float) -> int:
    """Plan, provision (adopting ``early``'s gateways), transfer, always tear down; with
    ``--fleet`` the running fleet is used and left running."""
    with view.phase("plan", f"{args.src_region} -> {args.dst_region}") as note:
        plan = make_plan(args, volume_gb, how.backend_options)
        note["done"] = f"{len(plan.paths)} path(s), {plan.predicted_gbps:.2f} Gbit/s predicted"
    fleet: api.GatewayFleet | None = args.fleet
    ours = fleet is None  # a fleet this run starts is this run's to tear down
    status = 0
    try:
        if fleet is None:
            with view.phase("provision", f"{args.backend} backend") as note:
                fleet = api.provision(
                    plan,
                    backend=args.backend,
                    backend_options=how.backend_options,
                    transfer_id=early.transfer_id
                    if early is not None
                    else api.new_transfer_id("cp"),
                    tags={"skyplane-ops:command": "cp"},
                    max_per_region=args.local_gateways_per_region
                    if args.backend == "local"
                    else None,
                    early=early,
                )
                note["done"] = f"{len(fleet.gateways)} gateway(s)"
        with view.phase("transfer", f"{args.src} -> {args.dst}") as note:
            try:
                result = api.transfer(
                    plan,
                    fleet,
                    args.src,
                    args.dst,
                    src_options=args.src_options,
                    dst_options=args.dst_options,
                    include=args.include,
                    exclude=args.exclude,
                    journal_dir=args.journal_dir,
                    sync=how.sync,
                    delete=how.delete,
                    max_delete=how.max_delete,
                    wait_lock=args.wait_lock,
                    progress=None if view.mode == "off" else view.transfer,
                    part_size=args.chunk_mib * api.MiB,
                    verify=args.verify,
                    dispatch=how.dispatch,
                    listing=listing,
                )
            except api.PartialTransferError as exc:
                result, status = exc.result, api.EXIT_PARTIAL
                print(f"skyplane-ops {args.command}: {exc}", file=sys.stderr)
            note["done"] = f"verification {result.verification.get('status', 'n/a')}"
    finally:
        if ours and fleet is not None:
            with view.phase("teardown", f"{len(fleet.gateways)} gateway(s)"):
                api.deprovision(fleet, backend_options=how.backend_options)
    return _report(args, result, plan, view, status)


def _report(
    args: ArgsNS,
    result: api.TransferResult,
    plan: api.TransferPlan | None,
    view: RunView,
    status: int,
) -> int:
    """The summary on stdout; ``plan`` is None when an up-to-date sync planned nothing."""
    view.close()
    if args.as_json:
        out = {**result.to_dict(), "plan_summary": _plan_summary(args, plan), "phases": view.times}
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(summary_lines(result, view.times)))
        for line in result.first_errors:
            print(f"not copied: {line}")
    return status


def _plan_summary(args: ArgsNS, plan: api.TransferPlan | None) -> dict[str, Any]:
    if plan is None:  # nothing to move: no route, no VM, no cost
        return {
            "src": args.src_region,
            "dsts": [args.dst_region],
            "paths": [],
            "vms": {},
            "predicted_gbps": 0.0,
            "total_cost_usd": 0.0,
        }
    return {
        "src": plan.src,
        "dsts": list(plan.dsts),
        "paths": [{"regions": list(p.regions), "share": p.share} for p in plan.paths],
        "vms": plan.vms,
        "predicted_gbps": plan.predicted_gbps,
        "total_cost_usd": plan.total_cost_usd,
    }
