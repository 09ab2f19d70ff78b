"""``skyplane-ops cp`` and ``skyplane-ops sync``: plan, provision, transfer, always deprovision.

A thin face over ``skyplane_ops.api``: the source is listed once to size the plan
(``api.source_volume_gb``); ``api.plan`` picks the route (on a measured grid store with
``--grid-store``); the chosen backend (``local`` by default: gateways as local processes, no
cloud account; ``--backend-options`` for ssh/netns/aws) provisions the plan's regions
(``api.provision``); ``api.transfer`` moves and verifies the data; the fleet is torn down on
success, failure, Ctrl-C and SIGTERM alike. Progress goes to stderr (a bar on a terminal, JSON
lines otherwise); the summary to stdout (text, or one JSON object with ``--json``).

Option ranges and a source/destination overlap are checked before anything is listed or
started (``api.check_request``). ``--dry-run`` lists what would be copied and deleted.
``sync --delete`` (``--max-delete N``) mirrors like ``rclone sync``. Exit status: 0 done,
2 error (nothing lost; re-run to resume), 3 partial (some objects failed or changed; the rest is
verified; re-run to copy them), 130/143 interrupted by SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from skyplane_ops import api
from skyplane_ops.commands.planning import add_plan_arguments, plan_arguments
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.sweeper import backend_options_for
from skyplane_ops.transfer import EXIT_PARTIAL, DispatchOptions, PartialTransferError
from skyplane_ops.transfer.manifest import MiB
from skyplane_ops.transfer.progress import JsonProgress, default_progress


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="source URI (file://, s3://, gs://, az://, ...)")
    p.add_argument("dst", metavar="DST", help="destination URI")
    p.add_argument("--src-region", required=True, help="region of the source, e.g. aws:us-east-1")
    p.add_argument("--dst-region", required=True, help="region of the destination")
    p.add_argument("--plan", metavar="FILE", help="use this plan JSON instead of planning")
    add_plan_arguments(p)
    p.add_argument("--backend", default="local", help="provisioning backend (default: local)")
    p.add_argument(
        "--backend-options",
        metavar="JSON_OR_FILE",
        help="backend options: inline JSON or a JSON/TOML file (flat, or per backend)",
    )
    p.add_argument(
        "--local-gateways-per-region",
        type=int,
        default=1,
        help="local backend: at most this many gateway processes per region",
    )
    p.add_argument("--connections", type=int, default=None, help="TCP connections per hop pair")
    p.add_argument("--chunk-mib", type=int, default=64, help="part/chunk size in MiB")
    p.add_argument("--include", action="append", default=[], help="glob of keys to copy")
    p.add_argument("--exclude", action="append", default=[], help="glob of keys to skip")
    p.add_argument(
        "--encrypt",
        nargs="?",
        const="all",
        choices=("all", "cross-cloud", "none"),
        default="none",
        help="AES-GCM per frame on every hop (default when given) or only between providers",
    )
    p.add_argument("--compress", action="store_true", help="zstd on every hop")
    links = p.add_mutually_exclusive_group()
    links.add_argument(
        "-L",
        "--copy-links",
        dest="links",
        action="store_const",
        const="follow",
        help="file:// source: follow symbolic links (default: skip them with a warning)",
    )
    links.add_argument(
        "-l",
        "--links",
        dest="links",
        action="store_const",
        const="store",
        help="file://: copy symbolic links as NAME.rclonelink objects (and back into links)",
    )
    p.add_argument("--verify", choices=("full", "size"), default="full")
    p.add_argument("--journal-dir", default=None, help="where resume journals live")
    p.add_argument(
        "--wait-lock",
        action="store_true",
        help="wait for another run of the same transfer instead of stopping",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would be copied (and deleted) without starting anything",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true")
    # Tests only: JSON {region-or-gateway-id: hooks}; local gateways then honour them.
    p.add_argument("--gateway-test-hooks", default=None, help=argparse.SUPPRESS)


def register(subparsers: Any) -> None:
    cp = subparsers.add_parser(
        "cp", help="copy objects through planned gateways", description=__doc__
    )
    _add_arguments(cp)
    cp.add_argument("--sync", action="store_true", help="copy only missing/different objects")
    cp.set_defaults(func=run_cp)
    sync = subparsers.add_parser(
        "sync", help="copy only objects missing or different at the destination"
    )
    _add_arguments(sync)
    sync.add_argument(
        "--delete",
        action="store_true",
        help="also remove destination objects absent from the source (only if nothing failed)",
    )
    sync.add_argument(
        "--max-delete",
        type=int,
        default=None,
        metavar="N",
        help="with --delete: refuse every delete when more than N objects would go",
    )
    sync.set_defaults(func=run_sync)


def make_plan(
    args: argparse.Namespace, volume_gb: float, backend_options: dict[str, Any] | None = None
) -> TransferPlan:
    """``api.plan`` with the command's bound and limits (or the plan JSON of ``--plan``); on
    the ssh backend with an inventory (or netns with a grid) the plan stays in that fleet."""
    if args.plan:
        try:
            with open(args.plan) as fh:
                return TransferPlan.from_json(fh.read())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TransferError(f"cannot read plan {args.plan}: {exc}") from exc
    from skyplane_ops.provision.universe import FleetUniverse

    return api.plan(
        args.src_region,
        args.dst_region,
        volume_gb,
        **plan_arguments(args),
        fleet=FleetUniverse.from_backend(args.backend, backend_options),
    )


def _backend_options(args: argparse.Namespace, hooks: dict[str, Any]) -> dict[str, Any]:
    options = backend_options_for(args.backend_options, args.backend)
    if hooks and args.backend == "local":
        options["extra_args"] = [*options.get("extra_args", []), "--enable-test-hooks"]
    return options


def _dispatch_options(args: argparse.Namespace, hooks: dict[str, Any]) -> DispatchOptions:
    return DispatchOptions(
        connections=args.connections,
        encrypt={"all": True, "none": False}.get(args.encrypt, args.encrypt),
        compress_level=3 if args.compress else 0,
        test_hooks=hooks,
    )


def _dry_run(
    args: argparse.Namespace,
    sync: bool,
    delete: bool,
    max_delete: int | None,
    options: tuple[dict[str, Any], dict[str, Any]],
) -> int:
    preview = api.preview_transfer(
        args.src,
        args.dst,
        src_options=options[0],
        dst_options=options[1],
        include=args.include,
        exclude=args.exclude,
        sync=sync,
        delete=delete,
        max_delete=max_delete,
    )
    if args.json:
        print(json.dumps(preview.to_dict(), indent=2))
    else:
        print("\n".join(preview.lines()))
    return 0


def _store_options(uri: str, links: str | None) -> dict[str, Any]:
    """The local store's ``links`` option, for ``file://`` URIs only (the clouds have none)."""
    return {"links": links} if links and uri.startswith("file://") else {}


def _execute(args: argparse.Namespace, sync: bool) -> int:
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
    src_options = _store_options(args.src, args.links)
    dst_options = _store_options(args.dst, "store" if args.links == "store" else None)
    # Bad numbers and overlapping source/destination fail before any listing or planning.
    api.check_request(
        args.src,
        args.dst,
        src_options=src_options,
        dst_options=dst_options,
        part_size=args.chunk_mib * MiB,
        verify=args.verify,
        dispatch=dispatch,
        max_delete=max_delete,
    )
    if args.dry_run:
        return _dry_run(args, sync, delete, max_delete, (src_options, dst_options))
    backend_options = _backend_options(args, hooks)  # bad options fail before any listing
    # The journal lock next: a second identical run stops (or waits) before any listing,
    # planning or gateway; held until the fleet is gone.
    lock = api.transfer_lock(
        args.src,
        args.dst,
        journal_dir=args.journal_dir,
        part_size=args.chunk_mib * MiB,
        include=args.include,
        exclude=args.exclude,
        wait=args.wait_lock,
    )
    try:
        return _locked(args, sync, delete, max_delete, dispatch, backend_options)
    finally:
        lock.release()


def _locked(
    args: argparse.Namespace,
    sync: bool,
    delete: bool,
    max_delete: int | None,
    dispatch: DispatchOptions,
    backend_options: dict[str, Any],
) -> int:
    """Plan, provision, transfer and always deprovision, under the journal lock."""
    src_options = _store_options(args.src, args.links)
    dst_options = _store_options(args.dst, "store" if args.links == "store" else None)
    volume_gb = api.source_volume_gb(
        args.src, src_options=src_options, include=args.include, exclude=args.exclude
    )
    plan = make_plan(args, volume_gb, backend_options)
    progress = None
    if not args.no_progress:
        progress = JsonProgress(sys.stderr) if args.json else default_progress(sys.stderr)
    fleet: GatewayFleet | None = None
    try:
        fleet = api.provision(
            plan,
            backend=args.backend,
            backend_options=backend_options,
            transfer_id=api.new_transfer_id("cp"),
            tags={"skyplane-ops:command": "cp"},
            max_per_region=args.local_gateways_per_region if args.backend == "local" else None,
        )
        status = 0
        try:
            result = api.transfer(
                plan,
                fleet,
                args.src,
                args.dst,
                src_options=src_options,
                dst_options=dst_options,
                include=args.include,
                exclude=args.exclude,
                journal_dir=args.journal_dir,
                sync=sync,
                delete=delete,
                max_delete=max_delete,
                wait_lock=args.wait_lock,
                progress=progress,
                part_size=args.chunk_mib * MiB,
                verify=args.verify,
                dispatch=dispatch,
            )
        except PartialTransferError as exc:
            result, status = exc.result, EXIT_PARTIAL
            print(f"skyplane-ops {args.command}: {exc}", file=sys.stderr)
    finally:
        if fleet is not None:
            api.deprovision(fleet, backend_options=backend_options)
    if args.json:
        print(json.dumps({**result.to_dict(), "plan_summary": _plan_summary(plan)}, indent=2))
    else:
        print(result.summary())
        for line in result.first_errors:
            print(f"not copied: {line}")
    return status


def _plan_summary(plan: TransferPlan) -> dict[str, Any]:
    return {
        "src": plan.src,
        "dsts": list(plan.dsts),
        "paths": [{"regions": list(p.regions), "share": p.share} for p in plan.paths],
        "vms": plan.vms,
        "predicted_gbps": plan.predicted_gbps,
        "total_cost_usd": plan.total_cost_usd,
    }


def run_cp(args: argparse.Namespace) -> int:
    return _execute(args, sync=bool(args.sync))


def run_sync(args: argparse.Namespace) -> int:
    return _execute(args, sync=True)
