"""``skyplane-ops cp`` and ``skyplane-ops sync``: plan, provision, transfer, always deprovision.

A thin face over ``skyplane_ops.api``: the options become one ``TransferRequest``
(``build_request``) and the gateways' origin an ``api.Gateways`` (``local`` by default:
gateways as local processes, no cloud account; ``--backend-options`` for ssh/netns/aws;
``--fleet`` for a fleet a pipeline's own provision step started, left running); then the one
run sequence (``api.CopyRun``) lists, plans (on a measured grid store with ``--grid-store``),
provisions, moves, verifies and tears down on success, failure, Ctrl-C and SIGTERM alike.
Progress goes to stderr (``progress_view``); the summary to stdout (text, or one JSON object
with ``--json``).
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import click
from click.core import ParameterSource

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.cp_options import CP_EPILOG, MV_EPILOG, SYNC_EPILOG, transfer_options
from skyplane_ops.commands.options import JSON_OBJECT, plan_arguments, to_uri
from skyplane_ops.commands.progress_view import RunView, pick_mode
from skyplane_ops.commands.summary import summary_lines

TransferError = api.TransferError
ArgsNS = SimpleNamespace


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


@click.command(epilog=MV_EPILOG)
@transfer_options("mv")
@click.option("--sync", is_flag=True, help="copy only objects missing or different at DST")
@click.option(
    "--max-delete",
    type=int,
    default=None,
    metavar="N",
    help="refuse the whole move (nothing copied or deleted) when more than N source objects "
    "would be deleted",
)
@click.pass_context
def mv(ctx: click.Context, **params: Any) -> int:
    """Move objects from SRC to DST: copy, verify, then delete each verified source object.

    A source object is deleted only after its copy is committed and verified, and only if it
    is still the version that was copied; a failed, partial or interrupted move deletes
    nothing it has not verified (re-run it to move the rest). Objects skipped (up to date,
    --ignore-existing, --update) stay at SRC.
    """
    args = _args(ctx, params)
    args.move = True
    return _execute(args, sync=bool(params["sync"]))


def _args(ctx: click.Context, params: dict[str, Any]) -> ArgsNS:
    """The run's ``args``; with ``--fleet`` the backend is the fleet's (a different
    ``--backend`` given with it is a usage error)."""
    args = _split_destinations(to_args(ctx, params))
    if args.fleet is not None:
        given = ctx.get_parameter_source("backend") not in (None, ParameterSource.DEFAULT)
        if given and args.backend != args.fleet.backend:
            raise click.UsageError(
                f"--backend {args.backend} does not match --fleet, a {args.fleet.backend} fleet"
            )
        args.backend = args.fleet.backend
    return args


def _split_destinations(args: ArgsNS) -> ArgsNS:
    """Several DSTs (one source, many replicas): ``dsts``/``dst_regions`` keep them all,
    ``dst``/``dst_region`` the first, as with one destination (idempotent)."""
    if not isinstance(args.dst, (tuple, list)):
        return args
    args.dsts, args.dst_regions = tuple(args.dst), tuple(args.dst_region)
    args.dst, args.dst_region = args.dsts[0], args.dst_regions[0]
    if len(args.dsts) != len(args.dst_regions):
        raise click.UsageError(
            f"give one --dst-region per DST, in order ({len(args.dsts)} DST, "
            f"{len(args.dst_regions)} --dst-region)"
        )
    return args


def _links(args: ArgsNS) -> str | None:
    if args.copy_links and args.store_links:
        raise click.UsageError("give --copy-links (-L) or --links (-l), not both")
    return "follow" if args.copy_links else "store" if args.store_links else None


def _store_options(uri: str, given: dict[str, Any] | None, links: str | None) -> dict[str, Any]:
    """``--src-options``/``--dst-options``, plus the local store's ``links`` for file:// URIs."""
    options = dict(given or {})
    if links and uri.startswith("file://"):
        options.setdefault("links", links)
    return options


def build_request(args: ArgsNS, sync: bool) -> api.TransferRequest:
    """The run's ``TransferRequest`` from the command's options (checked as it is built)."""
    args = _split_destinations(args)
    src, dst = to_uri(args.src), to_uri(args.dst)
    links = _links(args)
    delete = bool(getattr(args, "delete", False))
    move = bool(getattr(args, "move", False))
    max_delete = getattr(args, "max_delete", None)
    if max_delete is not None and not (delete or move):
        raise TransferError("--max-delete only applies with --delete")
    planning = plan_arguments(args)
    planning.pop("backend", None)  # the run's backend: ``Gateways``
    several = len(args.dsts) > 1
    return api.TransferRequest.build(
        src,
        [to_uri(d) for d in args.dsts] if several else dst,
        src_options=_store_options(src, args.src_options, links),
        dst_options={
            **_store_options(dst, args.dst_options, "store" if links == "store" else None),
            **api.portable_dst_options(dst, args.storage_class, args.kms_key),
        },
        src_region=args.src_region,
        dst_region=list(args.dst_regions) if several else args.dst_region,
        include=tuple(args.include),
        exclude=tuple(args.exclude),
        sync=sync or delete,
        delete=delete,
        max_delete=max_delete,
        verify=args.verify,
        part_size=args.chunk_mib * api.MiB,
        connections_per_hop=args.connections,
        encrypt=args.encrypt,
        compress_level=3 if args.compress else 0,
        journal_dir=args.journal_dir,
        report_uri=getattr(args, "report_uri", None),
        report_options=getattr(args, "report_options", None) or {},
        wait_lock=args.wait_lock,
        metadata=not args.no_metadata,
        metadata_set=list(args.metadata_set),
        plan_options=planning,
        max_age=args.max_age,
        min_age=args.min_age,
        changed_since=args.changed_since,
        changed_before=args.changed_before,
        files_from=_files_from(args, src),
        ignore_existing=args.ignore_existing,
        update=args.update,
        move=move,
        bwlimit=args.bwlimit,
        keep_warm=getattr(args, "keep_warm", None),
    )


def _files_from(args: ArgsNS, src: str) -> tuple[str, ...] | None:
    """The keys of ``--files-from``; an object URI on the source's store is read with
    ``--src-options`` (its endpoint, its region)."""
    spec = args.files_from
    if spec is None:
        return None
    same_store = "://" in spec and spec.split("://")[0] == src.split("://")[0]
    return api.read_files_from(spec, args.src_options if same_store else None)


def _plan_file(args: ArgsNS) -> api.TransferPlan | None:
    """The plan JSON of ``--plan``, followed instead of planning."""
    if not args.plan_file:
        return None
    try:
        return api.TransferPlan.from_dict(api.read_document(args.plan_file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TransferError(f"cannot read plan {args.plan_file}: {exc}") from exc


def _gateways(args: ArgsNS, hooks: dict[str, Any]) -> api.Gateways:
    """Where the run's gateways come from: ``--fleet`` (left running), or ``--backend`` with
    its options (bad options fail here, before any listing)."""
    options = api.backend_options_for(args.backend_options, args.backend)
    if hooks and args.backend == "local":
        options["extra_args"] = [*options.get("extra_args", []), "--enable-test-hooks"]
    if args.local_gateways_per_region < 1:
        raise TransferError(
            f"--local-gateways-per-region must be at least 1, got {args.local_gateways_per_region}"
        )
    return api.Gateways(
        backend=args.backend,
        backend_options=options,
        fleet=args.fleet,
        plan=_plan_file(args),
        tags={"skyplane-ops:command": "cp"},
        max_per_region=args.local_gateways_per_region if args.backend == "local" else None,
    )


def _dry_run(args: ArgsNS, request: api.TransferRequest) -> int:
    with api.preview_transfer(request) as preview:  # streamed from the catalog, line by line
        if args.as_json:
            preview.write_json(sys.stdout)
        else:
            for line in preview.lines():
                print(line)
    return 0


class _ViewEvents(api.RunEvents):
    """The run's phases, listing counts and progress on the command's ``RunView``."""

    def __init__(self, view: RunView, capped: bool = False) -> None:
        self.view = view
        self.wants_progress = view.mode != "off"
        self.capped = capped

    def phase(self, name: str, detail: str) -> Any:
        return self.view.phase(name, detail)

    def listing(self, src_objects: int, dst_objects: int) -> None:
        self.view.listing(src_objects, dst_objects)

    def progress(self, update: Any) -> None:
        self.view.transfer(update)

    def provisioned(self, fleet: Any) -> None:
        if self.capped:
            print(
                f"skyplane-ops: transfer {fleet.transfer_id}; change its cap while it runs: "
                f"skyplane-ops bwlimit {fleet.transfer_id} RATE",
                file=sys.stderr,
                flush=True,
            )


def make_run(
    args: ArgsNS,
    sync: bool,
    events: api.RunEvents | None = None,
    *,
    volume_gb: float | None = None,
) -> api.CopyRun:
    """The command's run: its request, its gateways (``--fleet``, ``--plan``, ``--backend``)
    and, for tests, the gateways' test hooks; ``volume_gb`` plans for that volume."""
    request = build_request(args, sync)
    hooks = json.loads(args.gateway_test_hooks) if args.gateway_test_hooks else {}
    return api.CopyRun(
        request,
        _gateways(args, hooks),
        events,
        tuning=api.DispatchOptions(test_hooks=hooks),
        volume_gb=volume_gb,
    )


def _execute(args: ArgsNS, sync: bool) -> int:
    """Build the request (bad numbers and overlapping ends fail here, before any listing),
    then run the one sequence: list, plan, provision, transfer, verify, always tear down."""
    if args.dry_run:
        if len(args.dsts) > 1:
            raise TransferError("--dry-run previews one DST at a time")
        return _dry_run(args, build_request(args, sync))
    view = RunView(sys.stderr, pick_mode(sys.stderr, as_json=args.as_json, quiet=args.no_progress))
    if len(args.dsts) > 1:
        return _execute_fanout(args, sync, view)
    run = make_run(args, sync, _ViewEvents(view, capped=args.bwlimit is not None))
    metrics = _metrics(args, run)
    status = 0
    try:
        try:
            result = run.run()
        except api.PartialTransferError as exc:
            result, status = exc.result, api.EXIT_PARTIAL
            print(f"skyplane-ops {args.command}: {exc}", file=sys.stderr)
        if metrics is not None:
            metrics.observe_result(result)
            if getattr(args, "metrics_textfile", None):
                metrics.write_textfile(args.metrics_textfile)
        return _report(args, result, None if run.up_to_date else run.plan, view, status)
    finally:
        view.close()


def _execute_fanout(args: ArgsNS, sync: bool, view: RunView) -> int:
    """Several DSTs: one plan and fleet, each destination copied and verified on its own;
    the summary per destination (exit 3 when some destination was not copied)."""
    request = build_request(args, sync)
    hooks = json.loads(args.gateway_test_hooks) if args.gateway_test_hooks else {}
    tuning = api.DispatchOptions(test_hooks=hooks)
    status = 0
    try:
        try:
            result = api.FanoutRun(
                request, _gateways(args, hooks), _ViewEvents(view), tuning=tuning
            ).run()
        except api.FanoutError as exc:
            result, status = exc.result, api.EXIT_PARTIAL
            print(f"skyplane-ops {args.command}: {exc}", file=sys.stderr)
        view.close()
        print(json.dumps(result.to_dict(), indent=2) if args.as_json else result.summary())
        return status
    finally:
        view.close()


def _metrics(args: ArgsNS, run: api.CopyRun) -> api.RunMetrics | None:
    """``--metrics-port``/``--metrics-textfile``: the run's Prometheus metrics, fed by its
    events; served on loopback (``--metrics-addr`` to widen) while it runs."""
    port = getattr(args, "metrics_port", None)
    if port is None and not getattr(args, "metrics_textfile", None):
        return None
    metrics = api.RunMetrics(run.transfer_id)
    run.events = api.MetricsEvents(metrics, run.events)
    if port is not None:
        server = metrics.serve(port, getattr(args, "metrics_addr", "127.0.0.1"))
        print(
            f"skyplane-ops {args.command}: metrics on http://{server.server_address[0]}:"
            f"{server.server_port}/metrics",
            file=sys.stderr,
        )
    return metrics


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


@click.command()
@click.argument("transfer_id", metavar="TRANSFER_ID")
@click.argument("rate", metavar="RATE")
@click.option(
    "--state-store",
    default=None,
    metavar="URI",
    help="the transfer's state store (s3://, gs://, az://, file://): reaches a run on "
    "another host, such as an Airflow deferred driver (the connection's state_store)",
)
@click.option(
    "--state-options",
    type=JSON_OBJECT,
    default=None,
    help="state store options, inline JSON or a JSON/TOML file (endpoint_url, region...)",
)
def bwlimit(
    transfer_id: str, rate: str, state_store: str | None, state_options: dict[str, Any] | None
) -> int:
    """Change the bandwidth cap of a running transfer to RATE per second.

    RATE is a number with its unit, summed over all paths: 200Mbit, 1.5Gbit, 25MiB (a bare
    number is refused). The run (cp, sync or mv with this TRANSFER_ID, on this host, with the
    same SKYPLANE_OPS_HOME) applies it within a second; its gateways enforce it per hop. With
    --state-store, a run on any host that uses that state store (the Airflow driver, a
    Dagster step) applies it within a few seconds.

    \b
    Examples:
      skyplane-ops bwlimit cp-20261127-ab12cd 50MiB
      skyplane-ops bwlimit cp-20261127-ab12cd 1.5Gbit
      skyplane-ops bwlimit my-dag-run-id 200Mbit --state-store s3://ops-bucket/skyplane-state
    """
    value = api.set_bwlimit(transfer_id, rate, state_uri=state_store, state_options=state_options)
    where = f" (through {state_store})" if state_store else ""
    print(f"transfer {transfer_id}: cap {api.format_rate(value)}{where}")
    return 0
