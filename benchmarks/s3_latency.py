"""Small objects against an S3 store with request latency: the gateways next to rclone.

moto's S3 server runs on loopback behind ``latency_proxy.LatencyProxy`` (``--delay``, 20 ms per
request by default). ``--count`` objects of 1 KiB (10,000; ``--quick``: 2,000) are put into a
source bucket directly, then copied bucket to bucket through the proxy by ``run_transfer`` (one
local gateway per region, direct plan) and by ``rclone copy --transfers 16 --checkers 16
--s3-no-head``. Both sides read every object from the source and write it to the destination
through the proxy. ``verify="size"`` for ours: rclone checks the upload's MD5 ETag and reads
nothing back; ``--verify-full`` makes ours read every object back as well (moto reports no
CRC32C, so the default ``full`` would re-read everything through the proxy).

Usage: ``python benchmarks/s3_latency.py [--quick] [--delay 0.02] [--count N] [--verify-full]``.
Writes ``benchmarks/results/s3_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from latency_proxy import LatencyProxy  # noqa: E402

from skyplane_ops.planner.plan import TransferPlan  # noqa: E402
from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402
from skyplane_ops.transfer import run_transfer  # noqa: E402
from tests.fixtures.emulators import MOTO_ENV, run_moto  # noqa: E402
from tests.integration.transfer_helpers import direct_plan  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SRC, DST = "aws:us-east-1", "aws:us-west-2"


def plan() -> TransferPlan:
    return direct_plan(SRC, DST, volume_gb=0.01)


def fill(client: Any, bucket: str, count: int) -> None:
    body = os.urandom(1024)

    def put(i: int) -> None:
        client.put_object(Bucket=bucket, Key=f"p{i // 1000:03d}/o{i:06d}", Body=body)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, range(count)))


def count_keys(client: Any, bucket: str) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(len(p.get("Contents", [])) for p in pages)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds added per request")
    parser.add_argument("--verify-full", action="store_true")
    args = parser.parse_args()
    count = args.count or (2000 if args.quick else 10_000)
    os.environ.update(MOTO_ENV)  # the gateways inherit the credentials
    os.environ.pop("AWS_CA_BUNDLE", None)
    os.environ.setdefault("SKYPLANE_OPS_HOME", tempfile.mkdtemp(prefix="skyplane-s3lat-"))
    row: dict[str, Any] = {"objects": count, "delay_s": args.delay}
    with run_moto() as moto:
        import boto3

        endpoint0 = moto.options["endpoint_url"]
        direct = boto3.client("s3", endpoint_url=endpoint0, region_name="us-east-1")
        for b in ("src", "dst-ours", "dst-rclone"):
            moto.make_bucket(b)
        fill(direct, "src", count)
        upstream = ("127.0.0.1", int(endpoint0.rsplit(":", 1)[1]))
        with LatencyProxy(upstream, args.delay) as proxy:
            endpoint = f"http://127.0.0.1:{proxy.port}"
            opts = {"endpoint_url": endpoint, "region": "us-east-1"}
            prov = LocalProvisioner(idle_timeout=300)
            fleet = prov.provision(plan().vms, transfer_id=f"s3lat-{uuid.uuid4().hex[:8]}")
            try:
                t0 = time.perf_counter()
                result = run_transfer(
                    plan(),
                    fleet,
                    "s3://src/",
                    "s3://dst-ours/",
                    src_options=opts,
                    dst_options=opts,
                    journal_dir=Path(os.environ["SKYPLANE_OPS_HOME"]) / "journal",
                    verify="full" if args.verify_full else "size",
                )
                row["ours"] = {"seconds": round(time.perf_counter() - t0, 2)}
            finally:
                prov.deprovision(fleet)
            assert result.objects == count
            rclone = ["rclone", "copy", ":s3:src", ":s3:dst-rclone", "--s3-provider", "Other"]
            rclone += ["--s3-endpoint", endpoint, "--s3-access-key-id", "testing"]
            rclone += ["--s3-secret-access-key", "testing", "--s3-no-head", "--config", "/dev/null"]
            rclone += ["--transfers", "16", "--checkers", "16"]
            t0 = time.perf_counter()
            subprocess.run(rclone, check=True, capture_output=True)
            row["rclone"] = {"seconds": round(time.perf_counter() - t0, 2)}
        for side, bucket in (("ours", "dst-ours"), ("rclone", "dst-rclone")):
            got = count_keys(direct, bucket)
            if got != count:
                raise RuntimeError(f"{side}: {got} of {count} objects at the destination")
            row[side]["objects_per_s"] = round(count / row[side]["seconds"], 1)
    row["ratio"] = round(row["ours"]["objects_per_s"] / row["rclone"]["objects_per_s"], 3)
    row["verify"] = "full" if args.verify_full else "size"
    print(f"{'objects':>8} {'delay':>6} {'ours s':>7} {'rclone s':>8} {'ours obj/s':>10} "
          f"{'rc obj/s':>9} {'ratio':>6}")  # fmt: skip
    print(
        f"{count:>8,} {args.delay * 1000:4.0f}ms {row['ours']['seconds']:7.1f} "
        f"{row['rclone']['seconds']:8.1f} {row['ours']['objects_per_s']:10.0f} "
        f"{row['rclone']['objects_per_s']:9.0f} {row['ratio']:6.2f}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "s3_latency.json").write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
