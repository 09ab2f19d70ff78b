"""Multicast benchmark (plans only) on the default grid: one source, three destinations.

For 20 fixed triples of destinations, plan the replica with ``plan_multicast`` (the default
objective: the cheapest plan finishing within 5% of the fastest, provisioning included; up
to 8 VMs per region) and compare with three separate unicast plans of the same settings:

- source egress: GB the source sends, as a multiple of the dataset (target <= 1.1x; three
  unicasts send 3x);
- modelled cost against the three unicasts (the saving);
- completion time against the slowest single unicast (target <= 1.1x).

Then the same at a throughput floor (mode a, the cheapest plan at least that fast): half the
rate of the slower of the unicast plans (separate, and in one job) in the default mode, per
destination, for multicast and the unicasts alike ("at floor" columns).

Figures come from the planner's model; the lead re-runs them on a quiet machine.

``--wan MIB`` (root) instead runs on the netns WAN of ``skyplane_ops.testing.multicast`` (a
source, a relay, three destinations, tc-shaped links): the planner's multicast trees on real
gateways against the direct star (the source sending to each destination itself), and
``FanoutRun`` (the control plane's tree pass, then each destination's commit and
verification) against the slowest single unicast (each destination alone on its route):
measured time, rate per destination and bytes the source sent.

    .venv/bin/python benchmarks/multicast.py [--quick] [--volume-gb 100] [--out FILE]
    sudo .venv/bin/python benchmarks/multicast.py --wan 64
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from skyplane_ops.planner.multicast.api import plan_multicast
from skyplane_ops.planner.problem import build_problem
from skyplane_ops.profiles import load_default_profile

TRIPLES: list[tuple[str, tuple[str, str, str]]] = [
    ("aws:us-east-1", ("aws:eu-west-1", "aws:eu-central-1", "aws:ap-northeast-1")),
    ("aws:us-east-1", ("aws:us-west-2", "aws:eu-west-1", "aws:ap-southeast-1")),
    ("aws:us-east-1", ("gcp:europe-west1", "gcp:asia-east1", "gcp:us-west1")),
    ("aws:eu-west-1", ("aws:us-east-1", "aws:us-west-2", "aws:ap-south-1")),
    ("aws:us-west-2", ("aws:ap-northeast-1", "aws:ap-southeast-2", "aws:ap-south-1")),
    ("aws:eu-central-1", ("azure:westeurope", "gcp:europe-west4", "aws:eu-west-2")),
    ("aws:sa-east-1", ("aws:us-east-1", "aws:eu-west-1", "aws:ap-northeast-1")),
    ("azure:eastus", ("azure:westeurope", "azure:japaneast", "azure:australiaeast")),
    ("azure:westeurope", ("azure:eastus", "azure:westus2", "azure:brazilsouth")),
    ("azure:canadacentral", ("gcp:asia-northeast1", "aws:ap-northeast-1", "azure:japaneast")),
    ("azure:uksouth", ("aws:us-east-1", "gcp:us-central1", "azure:eastus2")),
    ("azure:southeastasia", ("azure:northeurope", "aws:eu-west-1", "gcp:europe-west1")),
    ("gcp:us-central1", ("gcp:europe-west1", "gcp:asia-southeast1", "gcp:australia-southeast1")),
    ("gcp:europe-west4", ("gcp:us-east4", "gcp:us-west1", "gcp:asia-east1")),
    ("gcp:asia-east1", ("aws:us-west-2", "azure:westus2", "gcp:us-west1")),
    ("gcp:us-east4", ("aws:eu-west-2", "azure:uksouth", "gcp:europe-west2")),
    ("gcp:southamerica-east1", ("gcp:us-east1", "aws:us-east-1", "azure:eastus")),
    ("aws:ap-southeast-2", ("aws:ap-northeast-1", "aws:us-west-2", "aws:eu-central-1")),
    ("aws:ca-central-1", ("gcp:asia-south1", "aws:ap-south-1", "azure:centralindia")),
    ("azure:australiaeast", ("aws:eu-central-1", "gcp:europe-west3", "azure:germanywestcentral")),
]
RESULTS = Path(__file__).parent / "results" / "multicast.json"
MAX_VMS = 8


_KEYS = ("predicted_gbps", "completion_seconds", "total_cost_usd", "source_egress_gb")


def _nan(row: dict[str, Any] | None) -> dict[str, Any]:
    """A comparison row, or NaN figures where the unicast planner could not make one."""
    return row or {**dict.fromkeys(_KEYS, math.nan), "slowest_single_seconds": math.nan}


def one(profile: Any, src: str, dsts: tuple[str, ...], volume_gb: float) -> dict[str, Any]:
    problem = build_problem(profile, src, dsts, volume_gb, max_vms=MAX_VMS)
    start = time.perf_counter()
    plan = plan_multicast(problem)
    seconds = time.perf_counter() - start
    rows = plan.details["multicast"]
    this, uni, star, joint = rows["this"], _nan(rows["unicasts"]), rows["star"], _nan(rows["joint"])
    # Half of what the slowest of the unicast plans reaches, so that each can meet it.
    known = [g for g in (uni["predicted_gbps"], joint["predicted_gbps"]) if not math.isnan(g)]
    floor = 0.5 * min(known or [this["predicted_gbps"]])
    at_floor = plan_multicast(problem.with_objective("min_cost", floor))
    f_rows = at_floor.details["multicast"]
    f_this, f_uni, f_joint = f_rows["this"], _nan(f_rows["unicasts"]), _nan(f_rows["joint"])
    return {
        "floor_gbps": floor,
        "floor_source_egress_x": f_this["source_egress_gb"] / volume_gb,
        "floor_cost_usd": f_this["total_cost_usd"],
        "floor_unicasts_cost_usd": f_uni["total_cost_usd"],
        "floor_saving": 1 - f_this["total_cost_usd"] / f_uni["total_cost_usd"],
        "floor_joint_saving": 1 - f_this["total_cost_usd"] / f_joint["total_cost_usd"],
        "src": src,
        "dsts": list(dsts),
        "relays": sorted({r for p in plan.paths for r in p.regions[1:-1]}),
        "plan_seconds": seconds,
        "source_egress_x": this["source_egress_gb"] / volume_gb,
        "unicasts_source_egress_x": uni["source_egress_gb"] / volume_gb,
        "cost_usd": this["total_cost_usd"],
        "unicasts_cost_usd": uni["total_cost_usd"],
        "star_cost_usd": star["total_cost_usd"] if star else None,
        "saving": 1 - this["total_cost_usd"] / uni["total_cost_usd"],
        "joint_cost_usd": joint["total_cost_usd"],
        "joint_saving": 1 - this["total_cost_usd"] / joint["total_cost_usd"],
        "joint_time_x": this["completion_seconds"] / joint["completion_seconds"],
        "completion_s": this["completion_seconds"],
        "slowest_unicast_s": uni["slowest_single_seconds"],
        "time_x": this["completion_seconds"] / uni["slowest_single_seconds"],
        "star_completion_s": star["completion_seconds"] if star else None,
        "trees": len(rows["trees"]),
        "tree_excess": rows["tree_excess"],
    }


def _known(rows: list[dict[str, Any]], key: str) -> list[float]:
    """The figures of ``key`` where the compared plan exists (NaN: it cannot meet the bound)."""
    return [r[key] for r in rows if not math.isnan(r[key])] or [math.nan]


def table(rows: list[dict[str, Any]]) -> str:
    head = ["source", "destinations", "egress x", "uni x", "cost", "3 unicasts", "saving"]
    head += ["time x", "vs 1 job: saving", "time x"]
    head += ["at floor: Gbps", "egress x", "cost", "3 unicasts", "saving", "vs 1 job"]
    lines = [head]
    for r in rows:
        lines.append(
            [
                r["src"],
                ", ".join(d.split(":", 1)[1] for d in r["dsts"]),
                f"{r['source_egress_x']:.2f}",
                f"{r['unicasts_source_egress_x']:.2f}",
                f"${r['cost_usd']:.2f}",
                f"${r['unicasts_cost_usd']:.2f}",
                f"{100 * r['saving']:.1f}%",
                f"{r['time_x']:.2f}",
                f"{100 * r['joint_saving']:.1f}%",
                f"{r['joint_time_x']:.2f}",
                f"{r['floor_gbps']:.1f}",
                f"{r['floor_source_egress_x']:.2f}",
                f"${r['floor_cost_usd']:.2f}",
                f"${r['floor_unicasts_cost_usd']:.2f}",
                f"{100 * r['floor_saving']:.1f}%",
                f"{100 * r['floor_joint_saving']:.1f}%",
            ]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def wan(mib: int, out: Path) -> int:
    """The netns WAN run (see the module docstring)."""
    import tempfile
    import uuid

    from skyplane_ops.provision import get_provisioner
    from skyplane_ops.testing import multicast as mc
    from skyplane_ops.testing.transfer import read_tree, write_dataset

    with tempfile.TemporaryDirectory(prefix="mc-wan-") as tmp:
        root = Path(tmp)
        data = write_dataset(root / "src", {f"p{i:03d}": 2**21 for i in range(mib // 2)})
        total = sum(len(b) for b in data.values())
        plan = plan_multicast(mc.wan_problem(total / 1e9, 3.0), compare=False)
        star = [(1.0, {"next": {mc.WAN_SRC: list(mc.WAN_DSTS)}, "sinks": list(mc.WAN_DSTS)})]
        prov = get_provisioner("netns", grid=mc.wan_grid(), scale=mc.WAN_SCALE)
        nodes = (mc.WAN_SRC, mc.WAN_RELAY, *mc.WAN_DSTS)
        fleet = prov.provision(dict.fromkeys(nodes, 1), transfer_id=f"mcb-{uuid.uuid4().hex[:6]}")
        rows = []
        try:
            for name, trees in (
                ("multicast (planner's trees)", mc.job_trees(plan)),
                ("star", star),
            ):
                dsts = {d: root / name[:4] / d.split(":")[1] for d in mc.WAN_DSTS}
                run = mc.run_trees(
                    fleet,
                    trees,
                    f"file://{root / 'src'}/",
                    {d: f"file://{p}/" for d, p in dsts.items()},
                    mc.folder_chunks(root / "src"),
                    job_id=f"j-{name[:4]}",
                    timeout=1200,
                )
                same = all(read_tree(p) == data for p in dsts.values())
                sent = run.counters[mc.WAN_SRC]["bytes_sent"]
                rows.append(
                    {
                        "plan": name,
                        "seconds": run.seconds,
                        "mbit_per_destination": 8 * total / run.seconds / 1e6,
                        "source_sent_x": sent / total,
                        "byte_identical": same,
                    }
                )
            unicasts = _wan_unicasts(fleet, root, data)
            rows.append(_wan_fanout(fleet, plan, root, data))
        finally:
            prov.deprovision(fleet)
    print(f"netns WAN, {total / 2**20:.0f} MiB to 3 destinations "
          f"(planned {plan.predicted_gbps * mc.WAN_SCALE * 1000:.0f} Mbit/s each):")  # fmt: skip
    for r in rows:
        print(
            f"  {r['plan']:<40} {r['seconds']:7.2f} s  {r['mbit_per_destination']:6.1f} Mbit/s/dst"
            f"  source sent {r['source_sent_x']:.2f}x  identical: {r['byte_identical']}"
        )
    slowest = max(u["run_seconds"] for u in unicasts.values())
    slowest_move = max(u["move_seconds"] for u in unicasts.values())
    fan = rows[-1]
    print(
        f"  slowest single unicast (CopyRun to one destination on its own plan): run "
        f"{slowest:.2f} s, move {slowest_move:.2f} s; FanoutRun: run {fan['run_seconds']:.2f} s "
        f"({fan['run_seconds'] / slowest:.2f}x), tree pass {fan['seconds']:.2f} s "
        f"({fan['seconds'] / slowest_move:.2f}x the move)"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "slowest_unicast_run_seconds": slowest,
        "slowest_unicast_move_seconds": slowest_move,
        "fanout_run_time_x": fan["run_seconds"] / slowest,
        "fanout_move_time_x": fan["seconds"] / slowest_move,
        "fanout_source_sent_x": fan["source_sent_x"],
    }
    out.write_text(
        json.dumps({"mib": mib, "rows": rows, "unicasts": unicasts, "summary": summary}, indent=2)
    )
    print(f"wrote {out}")
    return 0


def _wan_unicasts(fleet: Any, root: Path, data: dict[str, bytes]) -> dict[str, dict[str, float]]:
    """Each destination copied alone (``CopyRun``, the unicast engine) along the planner's
    plan for it alone, on the same gateways: the run's seconds and its move's."""
    import dataclasses
    import time

    from skyplane_ops.sequence.copy_run import CopyRun, Gateways
    from skyplane_ops.testing import multicast as mc
    from skyplane_ops.testing.transfer import read_tree
    from skyplane_ops.transfer.request import TransferRequest

    total = sum(len(b) for b in data.values())
    out = {}
    for d in mc.WAN_DSTS:
        problem = dataclasses.replace(mc.wan_problem(total / 1e9, 3.0), dsts=(d,))
        plan = plan_multicast(problem, compare=False)
        folder = root / "unicast" / d.split(":")[1]
        request = TransferRequest.build(
            f"file://{root / 'src'}",
            f"file://{folder}",
            src_region=mc.WAN_SRC,
            dst_region=d,
            journal_dir=str(root / "journal"),
        )
        t0 = time.perf_counter()
        result = CopyRun(request, Gateways(fleet=fleet, plan=plan)).run()
        seconds = time.perf_counter() - t0
        assert result.status == "ok" and read_tree(folder) == data, d
        out[d] = {"run_seconds": seconds, "move_seconds": result.steps["move"]}
    return out


def _wan_fanout(fleet: Any, plan: Any, root: Path, data: dict[str, bytes]) -> dict[str, Any]:
    """``FanoutRun`` on the same gateways and plan: the control plane's tree pass, then each
    destination's commit and verification."""
    import time

    from skyplane_ops.sequence.copy_run import Gateways
    from skyplane_ops.sequence.fanout import FanoutRun
    from skyplane_ops.testing import multicast as mc
    from skyplane_ops.testing.transfer import read_tree
    from skyplane_ops.transfer.request import TransferRequest

    dsts = {d: root / "fanout" / d.split(":")[1] for d in mc.WAN_DSTS}
    request = TransferRequest.build(
        f"file://{root / 'src'}",
        [f"file://{p}" for p in dsts.values()],
        src_region=mc.WAN_SRC,
        dst_region=list(dsts),
        journal_dir=str(root / "journal"),
    )
    run = FanoutRun(request, Gateways(fleet=fleet, plan=plan))
    t0 = time.perf_counter()
    result = run.run()
    seconds = time.perf_counter() - t0
    assert result.status == "ok" and run.tree is not None and run.tree.served
    total = sum(len(b) for b in data.values())
    return {
        "plan": "FanoutRun (tree pass, then commits)",
        "seconds": run.tree.seconds,
        "run_seconds": seconds,
        "mbit_per_destination": 8 * total / run.tree.seconds / 1e6,
        "source_sent_x": run.tree.source_bytes_sent / total,
        "source_read_x": run.tree.source_bytes_read / total,
        "chunks_sent_after_the_pass": sum(r.chunks for r in result.results.values()),
        "byte_identical": all(read_tree(p) == data for p in dsts.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 4 triples only")
    parser.add_argument("--volume-gb", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--wan", type=int, metavar="MIB", help="run on the netns WAN instead")
    args = parser.parse_args(argv)
    if args.wan:
        return wan(args.wan, args.out or RESULTS.with_name("multicast_wan.json"))
    args.out = args.out or RESULTS
    profile = load_default_profile()
    triples = TRIPLES[:4] if args.quick else TRIPLES
    rows = [one(profile, src, dsts, args.volume_gb) for src, dsts in triples]
    print(table(rows))
    summary = {
        "triples": len(rows),
        "max_source_egress_x": max(r["source_egress_x"] for r in rows),
        "median_saving": statistics.median(_known(rows, "saving")),
        "min_saving": min(_known(rows, "saving")),
        "max_saving": max(_known(rows, "saving")),
        "max_time_x": max(_known(rows, "time_x")),
        "median_time_x": statistics.median(_known(rows, "time_x")),
        "floor_max_source_egress_x": max(r["floor_source_egress_x"] for r in rows),
        "floor_median_saving": statistics.median(_known(rows, "floor_saving")),
        "floor_min_saving": min(_known(rows, "floor_saving")),
        "floor_max_saving": max(_known(rows, "floor_saving")),
        "median_joint_saving": statistics.median(_known(rows, "joint_saving")),
        "median_joint_time_x": statistics.median(_known(rows, "joint_time_x")),
        "floor_median_joint_saving": statistics.median(_known(rows, "floor_joint_saving")),
        "floor_min_joint_saving": min(_known(rows, "floor_joint_saving")),
        "joint_infeasible": sum(math.isnan(r["joint_saving"]) for r in rows),
        "floor_joint_infeasible": sum(math.isnan(r["floor_joint_saving"]) for r in rows),
        "max_tree_excess": max(r["tree_excess"] for r in rows),
        "median_plan_seconds": statistics.median(r["plan_seconds"] for r in rows),
    }
    print()
    print(
        f"source egress <= {summary['max_source_egress_x']:.2f}x the dataset (3 unicasts: 3x); "
        f"saving vs 3 unicasts: median {100 * summary['median_saving']:.1f}% "
        f"(min {100 * summary['min_saving']:.1f}%, max {100 * summary['max_saving']:.1f}%); "
        f"time vs slowest single unicast: max {summary['max_time_x']:.2f}x, "
        f"median {summary['median_time_x']:.2f}x; plan {summary['median_plan_seconds']:.1f} s; "
        f"trees overload an edge by <= {100 * summary['max_tree_excess']:.1f}%"
    )
    print(
        f"at a floor: source egress <= {summary['floor_max_source_egress_x']:.2f}x; saving "
        f"median {100 * summary['floor_median_saving']:.1f}% "
        f"(min {100 * summary['floor_min_saving']:.1f}%, "
        f"max {100 * summary['floor_max_saving']:.1f}%); vs the unicasts in one job: median "
        f"{100 * summary['floor_median_joint_saving']:.1f}% "
        f"(min {100 * summary['floor_min_joint_saving']:.1f}%)"
    )
    print(
        f"default mode vs the unicasts in one job: saving median "
        f"{100 * summary['median_joint_saving']:.1f}%, time median "
        f"{summary['median_joint_time_x']:.2f}x"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "volume_gb": args.volume_gb,
                "max_vms_per_region": MAX_VMS,
                "python": platform.python_version(),
                "rows": rows,
                "summary": summary,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
