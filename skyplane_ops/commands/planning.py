"""The planning flags ``plan`` and ``cp``/``sync`` share, and their mapping onto ``api.plan``.

One definition so that a bound or limit means the same in both commands (and reaches the
planner the same way).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The bound (at most one), the VM/connection/relay limits and the grid store."""
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--min-throughput-gbps", type=float, help="cheapest plan at least this fast")
    bound.add_argument(
        "--deadline-seconds", type=float, help="cheapest plan done in this time (incl. VM start)"
    )
    bound.add_argument("--max-cost-usd", type=float, help="fastest plan at most this dear")
    p.add_argument("--max-vms", type=int, help="VMs per region at most (default: provider limit)")
    p.add_argument("--max-conns", type=int, help="TCP connections per VM at most")
    p.add_argument("--max-relays", type=int, default=1, choices=(0, 1, 2), help="relays per path")
    p.add_argument(
        "--grid-store", metavar="URI", help="plan on this profiler grid store's latest version"
    )
    p.add_argument(
        "--provisioning-seconds",
        type=float,
        help="VM start-up time t0 (default: measured per backend, 60 for cloud VMs)",
    )
    p.add_argument(
        "--relays",
        metavar="PATTERNS",
        help="only these relay regions (comma-separated ids or patterns, e.g. 'aws:*')",
    )
    p.add_argument("--no-relays-in", metavar="PATTERNS", help="never relay through these regions")
    p.add_argument(
        "--measured-only", action="store_true", help="use only measured edges (no model values)"
    )
    p.add_argument("--mip-gap", type=float, help="relative MIP gap to stop at (default 0.001)")
    p.add_argument(
        "--completion-tolerance",
        type=float,
        help="plans finishing within this fraction of the fastest count as fast; the cheapest "
        "of them is taken (default 0.05; 0 = fastest)",
    )


def _patterns(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def plan_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """``api.plan`` keyword arguments from the flags ``add_plan_arguments`` defines."""
    return {
        "min_throughput_gbps": args.min_throughput_gbps,
        "max_cost_usd": args.max_cost_usd,
        "deadline_seconds": args.deadline_seconds,
        "max_vms_per_region": args.max_vms,
        "max_connections_per_vm": args.max_conns,
        "max_relays": args.max_relays,
        "grid_store": args.grid_store,
        "provisioning_seconds": args.provisioning_seconds,
        "relays_allow": _patterns(args.relays),
        "relays_deny": _patterns(args.no_relays_in),
        "measured_only": args.measured_only,
        "mip_gap": args.mip_gap,
        "completion_tolerance": args.completion_tolerance,
        "backend": getattr(args, "backend", None),
    }
