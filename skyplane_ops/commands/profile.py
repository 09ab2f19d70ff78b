"""``skyplane-ops profile``: measure the throughput grid between regions and store a version.

Provisions one gateway per region with the chosen backend, probes every ordered pair (N
parallel TCP connections for T seconds) in rounds where no gateway sends or receives two
probes at once, always deprovisions, and publishes a new grid version at ``--store``. Refuses
to start when the estimated egress cost is above ``--budget-usd``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from skyplane_ops.errors import SkyplaneOpsError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "profile",
        help="measure the throughput grid between regions with gateway probes",
        description=__doc__,
    )
    p.add_argument(
        "--regions",
        default=None,
        help="comma-separated region ids (two or more); default with --backend ssh or netns: "
        "every region of the inventory / testbed grid",
    )
    p.add_argument(
        "--backend", default="local", help="provisioning backend: local, ssh, netns, aws"
    )
    p.add_argument(
        "--backend-options",
        metavar="JSON_OR_FILE",
        help="backend options: inline JSON or a JSON/TOML file (flat, or per backend)",
    )
    p.add_argument(
        "--connections",
        default="4,64",
        help="TCP connection counts each pair is probed at, comma-separated (4,64): a few give "
        "the per-connection rate, many the saturation rate",
    )
    p.add_argument("--duration", type=float, default=5.0, help="seconds per probe (5)")
    p.add_argument(
        "--budget-usd", type=float, default=None, help="refuse to start above this egress cost"
    )
    p.add_argument(
        "--store",
        default=None,
        metavar="URI",
        help="grid store (path or URI); the local backend needs one (a scratch store)",
    )
    p.add_argument("--store-options", default="{}", metavar="JSON", help="object-store options")
    p.add_argument(
        "--freshness",
        default="0s",
        help="skip pairs measured within this window, e.g. 3d (resumes a dead run)",
    )
    p.add_argument(
        "--exclusive",
        action="store_true",
        help="a gateway takes part in one probe per round (send or receive), not one of each",
    )
    p.add_argument(
        "--probe-port", type=int, default=0, help="port gateways take probes on (default: any)"
    )
    p.add_argument("--run-id", default=None, help="run id (tags the gateways); default: new")
    p.add_argument("--dry-run", action="store_true", help="print the plan and estimate only")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _json_arg(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SkyplaneOpsError(f"{flag} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SkyplaneOpsError(f"{flag} must be a JSON object")
    return value


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SkyplaneOpsError(
            f"--connections takes comma-separated integers, e.g. 4,64; got {text!r}"
        ) from None
    if not counts:
        raise SkyplaneOpsError("--connections needs at least one count")
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


def run(args: argparse.Namespace) -> int:
    from skyplane_ops import api
    from skyplane_ops.profiler import parse_duration
    from skyplane_ops.profiler.store import default_store_uri
    from skyplane_ops.provision.sweeper import backend_options_for

    options = backend_options_for(args.backend_options, args.backend)
    if args.regions:
        regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    else:
        from skyplane_ops.provision.universe import FleetUniverse

        fleet = FleetUniverse.from_backend(args.backend, options)
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
        "store_uri": args.store or default_store_uri(),
        "store_options": _json_arg(args.store_options, "--store-options"),
        "freshness_s": parse_duration(args.freshness),
        "exclusive": args.exclusive,
        "run_id": args.run_id,
        "probe_port": args.probe_port,
    }
    if args.dry_run:
        from skyplane_ops.profiler.run import plan_run

        plan = plan_run(regions, **kwargs)
        print(json.dumps(plan, indent=2) if args.json else _plan_text(plan))
        return 0
    result = api.refresh_grid(regions, progress=None if args.json else _progress, **kwargs)
    print(json.dumps(result.to_dict(), indent=2) if args.json else _summary(result))
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
