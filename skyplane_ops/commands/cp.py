"""``skyplane-ops cp`` and ``skyplane-ops sync``: plan, provision, transfer, always deprovision.

The source is listed once to size the plan; the planner picks the route; the chosen backend
(``local`` by default: gateways as local processes, no cloud account) provisions the plan's
regions; ``run_transfer`` moves and verifies the data; the fleet is torn down on success,
failure and Ctrl-C alike. Progress goes to stderr (a bar on a terminal, JSON lines otherwise);
the summary to stdout (text, or one JSON object with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import uuid
from types import FrameType
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.transfer import DispatchOptions, run_transfer
from skyplane_ops.transfer.manifest import MiB, list_source
from skyplane_ops.transfer.progress import JsonProgress, default_progress


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="source URI (file://, s3://, gs://, az://, ...)")
    p.add_argument("dst", metavar="DST", help="destination URI")
    p.add_argument("--src-region", required=True, help="region of the source, e.g. aws:us-east-1")
    p.add_argument("--dst-region", required=True, help="region of the destination")
    p.add_argument("--plan", metavar="FILE", help="use this plan JSON instead of planning")
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--min-throughput-gbps", type=float, help="cheapest plan at least this fast")
    bound.add_argument("--max-cost-usd", type=float, help="fastest plan at most this dear")
    bound.add_argument("--deadline-seconds", type=float, help="cheapest plan that finishes in time")
    p.add_argument("--max-vms", type=int, default=None, help="VMs per region limit")
    p.add_argument("--max-conns", type=int, default=None, help="TCP connections per VM limit")
    p.add_argument("--max-relays", type=int, default=1, help="relay regions per path")
    p.add_argument("--backend", default="local", help="provisioning backend (default: local)")
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
    """Plan with H2's planner on the default profile (or load ``--plan``)."""
    if args.plan:
        try:
            with open(args.plan) as fh:
                return TransferPlan.from_json(fh.read())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TransferError(f"cannot read plan {args.plan}: {exc}") from exc
    from skyplane_ops.planner import plan_transfer
    from skyplane_ops.planner.problem import build_problem
    from skyplane_ops.profiles.loader import load_default_profile

    objective = "max_throughput" if args.max_cost_usd is not None else "min_cost"
    bound = args.max_cost_usd if args.max_cost_usd is not None else args.min_throughput_gbps
    problem = build_problem(
        load_default_profile(),
        args.src_region,
        args.dst_region,
        max(volume_gb, 1e-6),
        objective=objective,  # type: ignore[arg-type]
        bound=bound,
        deadline_seconds=args.deadline_seconds,
        max_vms=args.max_vms,
        max_conns_per_vm=args.max_conns,
        max_relays=args.max_relays,
    )
    return plan_transfer(problem)


def _vms_for(plan: TransferPlan, args: argparse.Namespace) -> dict[str, int]:
    used = {r for p in plan.paths for r in p.regions} or {plan.src, *plan.dsts}
    vms = {r: max(1, int(plan.vms.get(r, 1))) for r in used}
    if args.backend == "local":
        vms = {r: min(n, max(1, args.local_gateways_per_region)) for r, n in vms.items()}
    return vms


def _execute(args: argparse.Namespace, sync: bool) -> int:
    from gateway_agent.synthetic import open_any_store
    from skyplane_ops.provision import get_provisioner

    try:
        src_store = open_any_store(args.src, {})
    except Exception as exc:
        raise TransferError(f"cannot open source {args.src}: {exc}") from exc
    objects = list_source(src_store, args.src, args.include, args.exclude)
    volume_gb = sum(o.size for o in objects) / 1e9
    plan = make_plan(args, volume_gb)
    hooks = json.loads(args.gateway_test_hooks) if args.gateway_test_hooks else {}
    if hooks and args.backend == "local":
        provisioner = get_provisioner("local", extra_args=["--enable-test-hooks"])
    else:
        provisioner = get_provisioner(args.backend)
    transfer_id = f"cp-{uuid.uuid4().hex[:10]}"
    progress = None
    if not args.no_progress:
        progress = JsonProgress(sys.stderr) if args.json else default_progress(sys.stderr)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    fleet: GatewayFleet | None = None
    try:
        fleet = provisioner.provision(
            _vms_for(plan, args), transfer_id=transfer_id, tags={"skyplane-ops:command": "cp"}
        )
        result = run_transfer(
            plan,
            fleet,
            args.src,
            args.dst,
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
            provisioner.deprovision(fleet)
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
