"""``skyplane-ops profile``: measure the throughput grid between regions and store a version."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import click

from skyplane_ops import api
from skyplane_ops.commands.base import to_args
from skyplane_ops.commands.options import (
    DURATION,
    backend_option,
    backend_options_option,
    deprecated_alias,
    dry_run_option,
    grid_store_options,
    json_option,
)

SkyplaneOpsError = api.SkyplaneOpsError

EPILOG = """
\b
Examples:
  skyplane-ops profile --regions aws:us-east-1,aws:eu-west-1,gcp:europe-west4 \\
      --budget-usd 2 --grid-store s3://ops/grid --dry-run
  skyplane-ops profile --backend ssh --backend-options hosts.toml --freshness 3d
  skyplane-ops profile --regions lab:a,lab:b --backend netns --probe-duration 2s
"""


@click.command(epilog=EPILOG)
@click.option(
    "--regions",
    default=None,
    metavar="IDS",
    help="comma-separated region ids (two or more); default with --backend ssh or netns: "
    "every region of the inventory / test-bed grid",
)
@backend_option(default="local")
@backend_options_option()
@click.option(
    "--probe-connections",
    "connections",
    default="4,64",
    show_default=True,
    metavar="N,N",
    help="TCP connection counts each pair is probed at, comma-separated: a few give the "
    "per-connection rate, many the saturation rate",
)
@deprecated_alias("--connections", "--probe-connections", "connections")
@click.option(
    "--probe-duration",
    "duration",
    type=DURATION,
    default=5.0,
    show_default=True,
    help="time per probe (e.g. 5s, 1m; a bare number is seconds)",
)
@deprecated_alias("--duration", "--probe-duration", "duration", type=DURATION)
@click.option(
    "--budget-usd",
    type=click.FloatRange(0),
    default=None,
    metavar="USD",
    help="refuse to start when the estimated egress cost is above this, in US$",
)
@grid_store_options(
    "grid store to publish to (path or URI; default $SKYPLANE_OPS_HOME/grid); the local "
    "backend needs one (a scratch store)"
)
@click.option(
    "--freshness",
    type=DURATION,
    default=0.0,
    help="skip pairs measured within this window, e.g. 3d (resumes a dead run) [default: 0s]",
)
@click.option(
    "--exclusive",
    is_flag=True,
    help="a gateway takes part in one probe per round (send or receive), not one of each",
)
@click.option(
    "--probe-port",
    type=int,
    default=0,
    metavar="PORT",
    help="port the gateways take probes on (default: any)",
)
@click.option(
    "--run-id", default=None, metavar="ID", help="run id (tags the gateways); default: new"
)
@dry_run_option("print the probe schedule and the cost estimate only; start nothing")
@json_option()
@click.pass_context
def profile(ctx: click.Context, **params: Any) -> int:
    """Measure the throughput grid between regions with gateway probes and publish a version.

    Provisions one gateway per region with the chosen backend, probes every ordered pair (N
    parallel TCP connections for T seconds) in rounds where no gateway sends or receives two
    probes at once, always deprovisions, and publishes a new grid version at --grid-store.
    Refuses to start when the estimated egress cost is above --budget-usd.
    """
    return run(to_args(ctx, params))


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SkyplaneOpsError(
            f"--probe-connections takes comma-separated integers, e.g. 4,64; got {text!r}"
        ) from None
    if not counts:
        raise SkyplaneOpsError("--probe-connections needs at least one count")
    return counts


def _progress(event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "plan":
        line = (
            f"run {event['run_id']}: {event['pairs']} pair(s) to measure in {event['rounds']} "
            f"round(s), {event['skipped']} fresh pair(s) skipped, estimated egress "
            f"${event['estimate_usd']:.4f}"
        )
    elif kind == "provision":
        line = f"provisioning one gateway in each of {len(event['regions'])} regions"
    elif kind == "round":
        line = f"round {event['round']}/{event['rounds']}: {len(event['pairs'])} probe(s)"
    elif kind == "measured":
        line = (
            f"  {event['src']} -> {event['dst']} ({event.get('connections', '?')} conns): "
            f"{event['gbps']:.3f} Gbit/s, RTT {event['rtt_ms']:.2f} ms"
        )
    elif kind == "failed":
        line = (
            f"  {event['src']} -> {event['dst']} ({event.get('connections', '?')} conns): "
            f"FAILED {event['error']}"
        )
    elif kind == "deprovision":
        line = "deprovisioning"
    else:
        line = json.dumps(event)
    print(line, file=sys.stderr, flush=True)


def run(args: SimpleNamespace) -> int:
    options = api.backend_options_for(args.backend_options, args.backend)
    if args.regions:
        regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    else:
        fleet = api.FleetUniverse.from_backend(args.backend, options)
        if fleet is None:
            raise SkyplaneOpsError(
                "--regions is needed unless --backend ssh (with an inventory) or netns (with "
                "a grid) names the regions"
            )
        regions = fleet.ids()
    kwargs: dict[str, Any] = {
        "backend": args.backend,
        "backend_options": options,
        "connections": _counts(args.connections),
        "duration_s": args.duration,
        "budget_usd": args.budget_usd,
        "store_uri": args.grid_store or api.default_store_uri(),
        "store_options": args.grid_store_options or {},
        "freshness_s": args.freshness,
        "exclusive": args.exclusive,
        "run_id": args.run_id,
        "probe_port": args.probe_port,
    }
    if args.dry_run:
        plan = api.plan_profile_run(regions, **kwargs)
        print(json.dumps(plan, indent=2) if args.as_json else _plan_text(plan))
        return 0
    result = api.refresh_grid(regions, progress=None if args.as_json else _progress, **kwargs)
    print(json.dumps(result.to_dict(), indent=2) if args.as_json else _summary(result))
    if result.failed:
        # Recorded as "no link" (plans avoid the pair); the rest of the grid is published.
        print(
            f"warning: {len(result.failed)} pair(s) could not be measured and are recorded as "
            "no link: " + ", ".join(sorted(result.failed)),
            file=sys.stderr,
        )
    return 0


def _plan_text(plan: dict[str, Any]) -> str:
    lines = [
        f"{plan['pairs']} pair(s) to measure in {plan['rounds']} round(s), "
        f"{plan['skipped_fresh']} fresh; estimated egress {plan['estimate_gb']:.3f} GB, "
        f"${plan['estimate_usd']:.4f}"
    ]
    for i, rnd in enumerate(plan["schedule"], 1):
        lines.append(f"  round {i}: " + ", ".join(f"{s}->{d}" for s, d in rnd))
    return "\n".join(lines)


def _summary(result: Any) -> str:
    rows = [("src", "dst", "Gbit/s recv", "Gbit/s sent", "RTT ms", "conns")]
    for m in sorted(result.measurements, key=lambda m: (m.src, m.dst)):
        rows.append(
            (
                m.src,
                m.dst,
                f"{m.received_gbps:.3f}",
                f"{m.sent_gbps:.3f}",
                f"{m.rtt_ms:.2f}",
                str(m.connections),
            )
        )
    for pair, error in sorted(result.failed.items()):
        src, _, dst = pair.partition("->")
        rows.append((src, dst, "no link", "", "", error[:60]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    d = result.to_dict()
    table.append("")
    table.append(
        f"run {d['run_id']}: measured {len({m.pair for m in result.measurements})}/"
        f"{d['pairs_total']} pair(s) ({d['measured']} probes at {d['connections']} conns), "
        f"{d['skipped_fresh']} fresh skipped, {d['failed']} failed, {d['rounds']} round(s) "
        f"in {d['seconds']:.1f}s; estimated egress ${d['estimate_usd']:.4f}"
    )
    table.append(f"published version {d['version'] or '(none)'} at {d['store_uri']}")
    return "\n".join(table)
