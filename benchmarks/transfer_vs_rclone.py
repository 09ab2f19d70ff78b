"""Local -> local transfers through the gateways vs ``rclone copy`` of the same data.

Two datasets, generated into a temporary directory and removed afterwards:

* large: 2 GiB in 32 files of 64 MiB (``--quick``: 512 MiB in 8 files);
* small: 10,000 files of 4 KiB (``--quick``: 2,000 files).

Each is copied with ``run_transfer`` (direct plan, one local gateway per region, checksums and
end verification on, as a user gets them) and with ``rclone copy --transfers 8`` (which checks
hashes too). Reported: seconds, Gbit/s and objects/s and their ratios (gateways / rclone).

Usage: ``python benchmarks/transfer_vs_rclone.py [--quick]``.
Writes ``benchmarks/results/transfer_vs_rclone.json``.
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
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.planner.plan import TransferPlan  # noqa: E402
from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402
from skyplane_ops.testing.transfer import direct_plan  # noqa: E402
from skyplane_ops.transfer import DispatchOptions, run_transfer  # noqa: E402

MiB = 1024 * 1024
RESULTS = REPO / "benchmarks" / "results"
SRC, DST = "bench:src", "bench:dst"


def generate(root: Path, count: int, size: int) -> None:
    """``count`` files of ``size`` bytes; distinct contents without paying for urandom on all."""
    root.mkdir(parents=True)
    block = os.urandom(min(size, 4 * MiB))
    for i in range(count):
        with open(root / f"f{i:05d}.bin", "wb") as fh:
            left = size
            tag = i.to_bytes(8, "big")
            while left > 0:
                piece = (tag + block)[: min(left, len(block) + 8)]
                fh.write(piece)
                left -= len(piece)


def plan() -> TransferPlan:
    return direct_plan(SRC, DST, volume_gb=1.0)


def run_gateways(src: Path, dst: Path, journal: Path, connections: int) -> dict[str, Any]:
    p = plan()
    prov = LocalProvisioner(idle_timeout=300)
    fleet = prov.provision(p.vms, transfer_id=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        t0 = time.perf_counter()
        result = run_transfer(
            p,
            fleet,
            f"file://{src}",
            f"file://{dst}",
            journal_dir=journal,
            dispatch=DispatchOptions(connections=connections),
        )
        seconds = time.perf_counter() - t0
    finally:
        prov.deprovision(fleet)
    assert result.verified
    return {
        "seconds": seconds,
        "objects": result.objects,
        "bytes": result.bytes,
        "transfer_seconds": result.verification.get("transfer_seconds"),
    }


def run_rclone(src: Path, dst: Path, transfers: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    t0 = time.perf_counter()
    subprocess.run(
        [
            "rclone",
            "copy",
            str(src),
            str(dst),
            "--transfers",
            str(transfers),
            "--checkers",
            str(2 * transfers),
            "--config",
            "/dev/null",
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    seconds = time.perf_counter() - t0
    files = [p for p in dst.rglob("*") if p.is_file()]
    return {
        "seconds": seconds,
        "objects": len(files),
        "bytes": sum(p.stat().st_size for p in files),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    datasets = (
        [("large 8 x 64 MiB", 8, 64 * MiB), ("small 2,000 x 4 KiB", 2000, 4096)]
        if args.quick
        else [("large 32 x 64 MiB", 32, 64 * MiB), ("small 10,000 x 4 KiB", 10_000, 4096)]
    )
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="skyplane-bench-"))
    try:
        for name, count, size in datasets:
            src = tmp / "src"
            generate(src, count, size)
            gw_dst, rc_dst = tmp / "dst-gw", tmp / "dst-rclone"
            rc_dst.mkdir()
            gw_dst.mkdir()
            rc = run_rclone(src, rc_dst, args.connections)
            gw = run_gateways(src, gw_dst, tmp / "journal", args.connections)
            for r in (rc, gw):
                r["gbps"] = r["bytes"] * 8 / 1e9 / r["seconds"]
                r["objects_per_s"] = r["objects"] / r["seconds"]
            rows.append(
                {
                    "dataset": name,
                    "gateways": gw,
                    "rclone": rc,
                    "gbps_ratio": gw["gbps"] / rc["gbps"],
                    "objects_ratio": gw["objects_per_s"] / rc["objects_per_s"],
                }
            )
            for d in (src, gw_dst, rc_dst):
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{'dataset':24} {'gw s':>7} {'rclone s':>8} {'gw Gbit/s':>9} {'rc Gbit/s':>9} "
        f"{'gw obj/s':>9} {'rc obj/s':>9} {'ratio':>6}"
    )
    for r in rows:
        gw, rc = r["gateways"], r["rclone"]
        print(
            f"{r['dataset']:24} {gw['seconds']:7.2f} {rc['seconds']:8.2f} {gw['gbps']:9.2f} "
            f"{rc['gbps']:9.2f} {gw['objects_per_s']:9.0f} {rc['objects_per_s']:9.0f} "
            f"{r['gbps_ratio']:6.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "quick": args.quick,
        "connections": args.connections,
        "rows": rows,
        "note": "machine shared with other jobs; ratio = gateways / rclone",
    }
    (RESULTS / "transfer_vs_rclone.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
