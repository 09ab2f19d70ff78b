"""``skyplane-ops plan``: plan an overlay transfer on a profile and print it."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import (
    backend_option,
    backend_options_option,
    compose,
    json_option,
    plan_arguments,
    plan_options,
)

DEFAULT_PLOT_POINTS = 40

EPILOG = """
\b
Examples:
  skyplane-ops plan --src aws:us-east-1 --dst gcp:europe-west4 --volume-gb 500
  skyplane-ops plan --src azure:canadacentral --dst gcp:asia-northeast1 --volume-gb 100 \\
      --min-throughput-gbps 12 --max-vms-per-region 2 --plot frontier.png --route route.svg
  skyplane-ops plan --src lab:a --dst lab:c --volume-gb 10 --backend ssh \\
      --backend-options hosts.toml --json > plan.json
  skyplane-ops plan --src aws:us-east-1 --dst aws:eu-west-1 --volume-gb 0.05 --no-vms
"""


@click.command(epilog=EPILOG)
@click.option("--src", required=True, metavar="REGION", help="source region, e.g. aws:us-east-1")
@click.option(
    "--dst",
    required=True,
    multiple=True,
    metavar="REGION",
    help="destination region (repeat for several)",
)
@click.option(
    "--volume-gb",
    type=click.FloatRange(0),
    required=True,
    metavar="GB",
    help="data volume, in GB (10^9 bytes)",
)
@plan_options()
@compose(
    backend_option(default=None),
    backend_options_option(),
    click.option(
        "--gcp-tier",
        type=click.Choice(["premium", "standard"]),
        default="premium",
        show_default=True,
        help="GCP network tier (prices and throughput)",
    ),
    click.option(
        "--profile-overrides", metavar="FILE", help="JSON overrides of prices and VM limits"
    ),
    click.option(
        "--measured-grid", metavar="FILE", help="measured throughput grid file (CSV/Parquet)"
    ),
    click.option(
        "--exact-floor",
        is_flag=True,
        help="size the plan for exactly the throughput floor, even if a faster plan is cheaper",
    ),
    click.option("--lp", is_flag=True, help="LP relaxation + rounding (reports the gap)"),
    click.option(
        "--frontier",
        type=click.IntRange(0),
        default=0,
        metavar="N",
        help="compute an N-point Pareto frontier (cost vs Gbit/s)",
    ),
    json_option("the plan"),
    click.option("--mermaid", is_flag=True, help="also print a Mermaid graph of the route"),
    click.option(
        "--plot",
        metavar="FILE.png",
        help="write the Pareto frontier (with your bound, the plan and the baselines) as PNG "
        "or SVG (by the file's extension)",
    ),
    click.option(
        "--route",
        metavar="FILE.svg",
        help="write the route (regions by hop, edge widths by Gbit/s) as SVG or PNG",
    ),
)
@click.pass_context
def plan(ctx: click.Context, **params: Any) -> int:
    """Plan a transfer: relay regions, VMs per region and connections per hop, with cost and
    throughput.

    Without a bound the plan is the cheapest of those finishing (provisioning + transfer)
    within a few percent of the fastest. The hop table shows where each edge's figures came
    from (published, profile, passive, model) and when.
    """
    return run(to_args(ctx, params))


def _fleet(args: SimpleNamespace) -> Any:
    """The fleet universe of ``--backend`` (None: plan on the cloud catalog)."""
    if not args.backend:
        return None
    options = api.backend_options_for(args.backend_options, args.backend)
    return api.FleetUniverse.from_backend(args.backend, options)


def _backend_options(args: SimpleNamespace) -> dict[str, Any]:
    """``--backend-options`` of ``--backend`` (its ``boot_delay`` is part of ``t0``)."""
    if not args.backend:
        return {}
    return api.backend_options_for(args.backend_options, args.backend)


def run(args: SimpleNamespace) -> int:
    result = api.plan(
        args.src,
        list(args.dst),
        args.volume_gb,
        **plan_arguments(args),
        profile_overrides=args.profile_overrides,
        measured_grid=args.measured_grid,
        gcp_tier=args.gcp_tier,
        lp=args.lp,
        exact_floor=args.exact_floor,
        frontier_points=args.frontier or (DEFAULT_PLOT_POINTS if args.plot else 0),
        fleet=_fleet(args),
        backend_options=_backend_options(args),
    )
    if args.as_json:
        sys.stdout.write(result.to_json() + "\n")
    else:
        sys.stdout.write(api.render_text(result))
    if args.mermaid:
        sys.stdout.write("\n```mermaid\n" + api.render_mermaid(result) + "```\n")
    if args.plot:
        out = api.plot_frontier(result, args.plot, max_vms_per_region=args.max_vms_per_region)
        print(f"wrote {out}", file=sys.stderr)
    if args.route:
        print(f"wrote {api.write_route(result, args.route)}", file=sys.stderr)
    return 0
