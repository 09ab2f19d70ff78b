"""``skyplane-ops plan``: plan an overlay transfer on a profile and print it.

Without a bound the plan is the cheapest of those that finish (provisioning + transfer)
within a few percent of the fastest (see ``skyplane_ops.planner.api``). The hop table shows
where each edge's figures came from (published, profile, passive, model) and when.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from skyplane_ops import api
from skyplane_ops.commands.planning import add_plan_arguments, plan_arguments
from skyplane_ops.planner import plot_frontier, render_mermaid, render_text
from skyplane_ops.planner.problem import InvalidProblemError

DEFAULT_PLOT_POINTS = 40


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "plan",
        help="plan a transfer: relays, VMs and connections, with cost and throughput",
        description=__doc__,
    )
    p.add_argument("--src", required=True, help="source region, e.g. aws:us-east-1")
    p.add_argument(
        "--dst", required=True, action="append", help="destination region (repeat for several)"
    )
    p.add_argument("--volume-gb", type=float, required=True, help="data volume in GB")
    add_plan_arguments(p)
    p.add_argument(
        "--backend",
        help="plan for this provisioning backend: its start-up time (ssh, netns, aws) and, for "
        "ssh with an inventory or netns with a grid, its fleet (regions, hosts, relays)",
    )
    p.add_argument("--gcp-tier", choices=("premium", "standard"), default="premium")
    p.add_argument("--profile-overrides", metavar="FILE", help="JSON overrides of prices/VMs")
    p.add_argument("--measured-grid", metavar="FILE", help="measured throughput CSV/Parquet")
    p.add_argument(
        "--backend-options",
        metavar="JSON_OR_FILE",
        help="backend options (the ssh inventory, the netns grid)",
    )
    p.add_argument(
        "--exact-floor",
        action="store_true",
        help="size the plan for exactly the floor, even if a faster plan is cheaper",
    )
    p.add_argument("--lp", action="store_true", help="LP relaxation + rounding (reports the gap)")
    p.add_argument("--frontier", type=int, default=0, metavar="N", help="N-point Pareto frontier")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--mermaid", action="store_true", help="also print a Mermaid graph")
    p.add_argument("--plot", metavar="FILE.png", help="write a PNG of the Pareto frontier")
    p.set_defaults(func=run)


def _fleet(args: argparse.Namespace) -> Any:
    """The fleet universe of ``--backend`` (None: plan on the cloud catalog)."""
    if not args.backend:
        return None
    from skyplane_ops.provision.sweeper import backend_options_for
    from skyplane_ops.provision.universe import FleetUniverse

    options = backend_options_for(args.backend_options, args.backend)
    return FleetUniverse.from_backend(args.backend, options)


def run(args: argparse.Namespace) -> int:
    if args.frontier < 0:
        raise InvalidProblemError("--frontier must be a non-negative number of points")
    plan = api.plan(
        args.src,
        args.dst,
        args.volume_gb,
        **plan_arguments(args),
        profile_overrides=args.profile_overrides,
        measured_grid=args.measured_grid,
        gcp_tier=args.gcp_tier,
        lp=args.lp,
        exact_floor=args.exact_floor,
        frontier_points=args.frontier or (DEFAULT_PLOT_POINTS if args.plot else 0),
        fleet=_fleet(args),
    )
    if args.json:
        sys.stdout.write(plan.to_json() + "\n")
    else:
        sys.stdout.write(render_text(plan))
    if args.mermaid:
        sys.stdout.write("\n```mermaid\n" + render_mermaid(plan) + "```\n")
    if args.plot:
        out = plot_frontier(plan, args.plot)
        print(f"wrote {out}", file=sys.stderr)
    return 0
