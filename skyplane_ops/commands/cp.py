"""``skyplane-ops cp`` and ``skyplane-ops sync``: plan, provision, transfer, always deprovision.

A thin face over ``skyplane_ops.api``: the source is listed once to size the plan
(``api.source_volume_gb``); ``api.plan`` picks the route (on a measured grid store with
``--grid-store``); the chosen backend (``local`` by default: gateways as local processes, no
cloud account; ``--backend-options`` for ssh/netns/aws) provisions the plan's regions
(``api.provision``); ``api.transfer`` moves and verifies the data; the fleet is torn down on
success, failure, Ctrl-C and SIGTERM alike. Progress goes to stderr (a bar on a terminal, JSON
lines otherwise); the summary to stdout (text, or one JSON object with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType
from typing import Any

from skyplane_ops import api
from skyplane_ops.commands.planning import add_plan_arguments, plan_arguments
from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.sweeper import backend_options_for
from skyplane_ops.transfer import DispatchOptions
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
    sync.set_defaults(func=run_sync)


def make_plan(args: argparse.Namespace, volume_gb: float) -> TransferPlan:
    """``api.plan`` with the command's bound and limits (or the plan JSON of ``--plan``)."""
    if args.plan:
        try:
            with open(args.plan) as fh:
                return TransferPlan.from_json(fh.read())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TransferError(f"cannot read plan {args.plan}: {exc}") from exc
    return api.plan(
        args.src_region,
        args.dst_region,
        volume_gb,
        **plan_arguments(args),
    )


def _backend_options(args: argparse.Namespace, hooks: dict[str, Any]) -> dict[str, Any]:
    options = backend_options_for(args.backend_options, args.backend)
    if hooks and args.backend == "local":
        options["extra_args"] = [*options.get("extra_args", []), "--enable-test-hooks"]
    return options


def _store_options(uri: str, links: str | None) -> dict[str, Any]:
    """The local store's ``links`` option, for ``file://`` URIs only (the clouds have none)."""
    return {"links": links} if links and uri.startswith("file://") else {}


def _execute(args: argparse.Namespace, sync: bool) -> int:
    hooks = json.loads(args.gateway_test_hooks) if args.gateway_test_hooks else {}
    backend_options = _backend_options(args, hooks)  # bad options fail before any listing
    src_options = _store_options(args.src, args.links)
    dst_options = _store_options(args.dst, "store" if args.links == "store" else None)
    volume_gb = api.source_volume_gb(
        args.src, src_options=src_options, include=args.include, exclude=args.exclude
    )
    plan = make_plan(args, volume_gb)
    progress = None
    if not args.no_progress:
        progress = JsonProgress(sys.stderr) if args.json else default_progress(sys.stderr)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    fleet: GatewayFleet | None = None
    try:
        fleet = api.provision(
            plan,
            backend=args.backend,
            backend_options=backend_options,
            transfer_id=api.new_transfer_id("cp"),
            tags={"skyplane-ops:command": "cp"},
            max_per_region=max(1, args.local_gateways_per_region)
            if args.backend == "local"
            else None,
        )
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
            progress=progress,
            part_size=args.chunk_mib * MiB,
            verify=args.verify,
            dispatch=DispatchOptions(
                connections=args.connections,
                encrypt={"all": True, "none": False}.get(args.encrypt, args.encrypt),
                compress_level=3 if args.compress else 0,
                test_hooks=hooks,
            ),
        )
    finally:
        if fleet is not None:
            api.deprovision(fleet, backend_options=backend_options)
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps({**result.to_dict(), "plan_summary": _plan_summary(plan)}, indent=2))
    else:
        print(result.summary())
    return 0


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
