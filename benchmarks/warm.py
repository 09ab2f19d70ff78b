"""Warm fleets: a pipeline's consecutive runs, each booting its fleet or claiming a parked one.

``--runs`` (3) partitions of ``--objects`` (200) small objects (``--mb`` 20 MB in all) are copied
one after the other, as a schedule does, by

* ``skyplane-ops cp --vms-only`` on the local backend with ``{"boot_delay": D}`` (each gateway
  takes D s to come up, as a cloud VM does): every run boots its fleet;
* the same with ``--keep-warm 5m``: the first run boots and parks its fleet, every later run
  claims it (its ``provision`` phase says "claimed warm fleet");
* ``rclone copy --transfers 16`` of the same partitions (no VM at all).

Reported per tool and run: seconds from start to exit, the ``provision`` phase's seconds and
whether the run claimed a warm fleet. Local folders on this machine: the figures show the
start-up a warm fleet saves, not a WAN. The parked fleet is deleted at the end
(``deprovision --all``).

Usage: ``python benchmarks/warm.py [--runs 3] [--objects 200] [--mb 20] [--boot-delay 10]``.
Writes ``benchmarks/results/warm.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
REGIONS = ["--src-region", "aws:us-east-1", "--dst-region", "aws:us-west-2"]


def _partition(root: Path, objects: int, total_bytes: int) -> None:
    size = max(1, total_bytes // objects)
    root.mkdir(parents=True)
    for i in range(objects):
        (root / f"part-{i:05d}.bin").write_bytes(os.urandom(size))


def _ours(src: Path, dst: Path, home: Path, extra: list[str]) -> dict[str, Any]:
    env = {**os.environ, "SKYPLANE_OPS_HOME": str(home)}  # each tool its own pool
    cmd = [sys.executable, "-m", "skyplane_ops.cli", "cp", src.as_uri(), dst.as_uri(), *REGIONS,
           "--vms-only", *extra, "--json"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cp failed: {done.stderr[-800:]}")
    provision, claimed, phases = 0.0, False, {}
    for line in done.stderr.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        done_phase = event.get("event") == "phase" and event.get("state") == "done"
        if done_phase:
            phases[event["phase"]] = round(phases.get(event["phase"], 0) + event["seconds"], 2)
        if done_phase and event.get("phase") == "provision":
            provision += float(event.get("seconds") or 0)
            claimed = claimed or "claimed warm fleet" in str(event.get("info", ""))
    return {
        "seconds": round(seconds, 2),
        "provision_s": round(provision, 2),
        "claimed": claimed,
        "phases": phases,
    }


def _rclone(src: Path, dst: Path) -> dict[str, Any]:
    start = time.perf_counter()
    subprocess.run(["rclone", "copy", "--transfers", "16", str(src), str(dst)], check=True)
    return {"seconds": round(time.perf_counter() - start, 2), "provision_s": 0.0, "claimed": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--mb", type=float, default=20)
    parser.add_argument("--boot-delay", type=float, default=10.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="warm-bench-"))
    booting = ["--backend-options", json.dumps({"boot_delay": args.boot_delay})]
    tools: dict[str, list[dict[str, Any]]] = {
        "boot every run": [],
        "keep_warm 5m": [],
        "rclone": [],
    }
    try:
        for run in range(args.runs):
            src = work / f"src-{run}"
            _partition(src, args.objects, int(args.mb * 1e6))
            tools["boot every run"].append(_ours(src, work / f"a-{run}", work / "home-a", booting))
            warm = [*booting, "--keep-warm", "5m"]
            tools["keep_warm 5m"].append(_ours(src, work / f"b-{run}", work / "home-b", warm))
            if shutil.which("rclone"):
                tools["rclone"].append(_rclone(src, work / f"c-{run}"))
    finally:
        subprocess.run(
            [sys.executable, "-m", "skyplane_ops.cli", "deprovision", "--all",
             "--backend", "local"], env={**os.environ, "SKYPLANE_OPS_HOME": str(work / "home-b")},
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'tool':<16} {'run':>3} {'seconds':>8} {'provision':>9} {'claimed':>8}  phases")
    for tool, rows in tools.items():
        for i, row in enumerate(rows, 1):
            print(
                f"{tool:<16} {i:>3} {row['seconds']:>8.2f} {row['provision_s']:>9.2f} "
                f"{'yes' if row['claimed'] else '-':>8}  {row.get('phases', '')}"
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"params": vars(args), "tools": tools}
    (RESULTS / "warm.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
