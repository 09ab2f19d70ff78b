"""Time to profile N regions on the netns testbed, and the measured-vs-shaped error per link.

For N = 3, 4, 5 regions the netns backend builds an emulated WAN whose links are shaped with
``tc tbf`` to rates drawn (seeded) from 30..250 Mbit/s, different per direction; the profiler
provisions one real gateway agent per region, probes every ordered pair in n-1 rounds and
deprovisions. Reported per N: wall time split into provisioning, probing and tear-down, and the
relative error of each measured link against its shaped rate.

Usage: ``python benchmarks/profiler.py [--quick] [--connections 64] [--duration 5]``
(root needed). Writes ``benchmarks/results/profiler.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.profiler import refresh_grid  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
REGIONS = [
    "aws:us-east-1",
    "aws:us-west-2",
    "gcp:us-central1",
    "azure:westeurope",
    "aws:ap-northeast-1",
]
SCALE = 0.1  # grid Gbps -> testbed Mbit/s: 1 Gbps becomes 100 Mbit/s
RATES_GBPS = [0.3, 0.5, 0.8, 1.2, 1.6, 2.0, 2.5]


def shaped_grid(regions: list[str], seed: int) -> dict[tuple[str, str], float]:
    rng = random.Random(seed)
    return {(a, b): rng.choice(RATES_GBPS) for a in regions for b in regions if a != b}


def profile_once(n: int, connections: int, duration: float, seed: int) -> dict[str, Any]:
    regions = REGIONS[:n]
    grid = shaped_grid(regions, seed + n)
    marks: dict[str, float] = {}

    def progress(event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind not in marks or kind == "measured":
            marks[kind] = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="bench-profiler-") as tmp:
        t0 = time.monotonic()
        result = refresh_grid(
            regions,
            backend="netns",
            backend_options={
                "grid": {f"{a}->{b}": g for (a, b), g in grid.items()},
                "scale": SCALE,
            },
            connections=connections,
            duration_s=duration,
            store_uri=str(Path(tmp) / "grid"),
            progress=progress,
        )
        total = time.monotonic() - t0
    links = []
    for m in sorted(result.measurements, key=lambda m: (m.src, m.dst)):
        shaped = grid[(m.src, m.dst)] * 1000 * SCALE
        measured = m.gbps * 1000
        links.append(
            {
                "src": m.src,
                "dst": m.dst,
                "shaped_mbit": shaped,
                "measured_mbit": round(measured, 2),
                "sent_mbit": round(m.sent_gbps * 1000, 2),
                "rtt_ms": round(m.rtt_ms, 3),
                "error_pct": round((measured - shaped) / shaped * 100, 2),
            }
        )
    errors = [abs(link["error_pct"]) for link in links]
    provision_s = marks.get("round", t0) - marks.get("provision", t0)
    probing_s = marks.get("deprovision", t0) - marks.get("round", t0)
    return {
        "regions": n,
        "pairs": n * (n - 1),
        "rounds": result.rounds,
        "measured": result.measured,
        "failed": len(result.failed),
        "total_s": round(total, 2),
        "provision_s": round(provision_s, 2),
        "probing_s": round(probing_s, 2),
        "teardown_s": round(t0 + total - marks.get("deprovision", t0 + total), 2),
        "mean_abs_error_pct": round(statistics.mean(errors), 2) if errors else None,
        "max_abs_error_pct": round(max(errors), 2) if errors else None,
        "links": links,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=3 only, 8 connections, 2 s")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--sizes", default="3,4,5", help="region counts to profile")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/profiler.py needs root (network namespaces)", file=sys.stderr)
        return 2
    sizes = [3] if args.quick else [int(s) for s in args.sizes.split(",")]
    connections = 8 if args.quick else args.connections
    duration = 2.0 if args.quick else args.duration
    runs = [profile_once(n, connections, duration, args.seed) for n in sizes]

    print(f"profiling on netns, {connections} connections x {duration:g} s per pair")
    header = f"{'N':>2} {'pairs':>5} {'rounds':>6} {'total s':>8} {'prov s':>7} {'probe s':>8} "
    header += f"{'down s':>7} {'mean|err|%':>10} {'max|err|%':>9}"
    print(header)
    for r in runs:
        print(
            f"{r['regions']:>2} {r['pairs']:>5} {r['rounds']:>6} {r['total_s']:>8.1f} "
            f"{r['provision_s']:>7.1f} {r['probing_s']:>8.1f} {r['teardown_s']:>7.1f} "
            f"{r['mean_abs_error_pct']:>10.2f} {r['max_abs_error_pct']:>9.2f}"
        )
    print("\nper link (largest N):")
    print(f"{'src':<20} {'dst':<20} {'shaped':>7} {'measured':>9} {'error %':>8}")
    for link in runs[-1]["links"]:
        print(
            f"{link['src']:<20} {link['dst']:<20} {link['shaped_mbit']:>7.0f} "
            f"{link['measured_mbit']:>9.1f} {link['error_pct']:>+8.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "profiler.json"
    out.write_text(
        json.dumps(
            {
                "connections": connections,
                "duration_s": duration,
                "scale_mbit_per_gbps": 1000 * SCALE,
                "runs": runs,
                "machine": f"{os.cpu_count()} cores, shared with other jobs",
            },
            indent=2,
        )
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
