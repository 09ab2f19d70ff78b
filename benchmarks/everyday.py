"""The everyday job: a daily partition copied with the fleet's VMs taking ``boot_delay`` to boot.

A partition (``--objects`` 500 objects, ``--mb`` 50 MB in all) is put in an S3 bucket (moto) and
copied S3 -> S3 (moto, two buckets as two regions) and S3 -> GCS (the GCS emulator) by

* ``skyplane-ops cp`` on the local backend with ``{"boot_delay": 30}`` (each gateway takes 30 s
  to come up, as a cloud VM does): the plan's schedule decides; it should start **no gateway**
  and copy on the worker (this process);
* the same with ``--vms-only`` (the overlay, waiting for its VMs), for the difference t0 makes;
* ``rclone copy --transfers 16`` (S3 -> S3 only: rclone's GCS backend cannot be pointed at the
  emulator without credentials files);
* a plain copy as ``S3ToGCSOperator``/a boto3 script does it: list, then get and put each object
  in turn through this process.

Reported per tool: seconds from start to exit, time to the first byte on the data path (ours:
the first progress report with bytes moved, counted from the CLI's start), gateway processes
started (sampled from ``/proc`` every 20 ms over the whole run) and the CLI's own fixed costs
(list, plan, provision phases). Both stores are emulators on this machine: the figures show
fixed costs and t0, not a WAN.

Usage: ``python benchmarks/everyday.py [--objects 500] [--mb 50] [--boot-delay 30]``.
Writes ``benchmarks/results/everyday.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.testing.emulators import Emulator, run_gcs, run_moto  # noqa: E402
from skyplane_ops.testing.transfer import agents_of  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SRC_REGION, S3_DST, GCS_DST = "aws:us-east-1", "aws:eu-west-1", "gcp:europe-west4"


def s3_client(moto: Emulator) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto.options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def fill(moto: Emulator, bucket: str, objects: int, total: int) -> int:
    """``objects`` distinct objects of ``total`` bytes in all, as a daily partition's files."""
    client = s3_client(moto)
    size = max(1, total // objects)
    body = os.urandom(size)

    def put(i: int) -> None:
        key = f"dt=2026-11-27/part-{i:05d}.json"
        client.put_object(Bucket=bucket, Key=key, Body=i.to_bytes(8, "big") + body[8:])

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(objects)))
    return size * objects


def ours(
    env: dict[str, str], home: Path, src: str, dst: str, dst_region: str, src_options: str,
    dst_options: str, boot_delay: float, *extra: str,
) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "cp", src, dst,
        "--src-region", SRC_REGION, "--dst-region", dst_region,
        "--src-options", src_options, "--dst-options", dst_options,
        "--backend-options", json.dumps({"boot_delay": boot_delay}),
        "--journal-dir", str(home / "journal"), "--json", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "SKYPLANE_OPS_HOME": str(home)})  # fmt: skip
    first_byte: list[float] = []
    phases: dict[str, float] = {}
    tail: list[str] = []

    def read_events() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail[:] = [*tail[-20:], line]
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("event") == "progress" and event["bytes_done"] > 0 and not first_byte:
                first_byte.append(time.perf_counter() - start)
            if event.get("event") == "phase" and event.get("state") == "done":
                phases[event["phase"]] = event["seconds"]

    reader = threading.Thread(target=read_events, daemon=True)
    reader.start()
    gateways: set[int] = set()
    while proc.poll() is None:  # every gateway process the run starts is seen
        gateways.update(agents_of(home))
        try:
            proc.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            pass
    reader.join(timeout=30)
    seconds = time.perf_counter() - start
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit("skyplane-ops cp failed: " + "".join(tail))
    result = json.loads(out)
    assert result["verification"]["status"] == "passed", result["verification"]
    shutil.rmtree(home, ignore_errors=True)
    return {
        "seconds": round(seconds, 2),
        "first_byte_s": round(first_byte[0], 2) if first_byte else None,
        "gateway_processes": len(gateways),
        "phases": phases,
        "objects": result["objects"],
    }


def rclone(moto: Emulator, src_bucket: str, dst_bucket: str) -> dict[str, Any]:
    # rclone's S3 backend refuses an AWS_CA_BUNDLE (a test proxy's) with its own transport.
    env = {
        **{k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"},
        "RCLONE_CONFIG_MOTO_TYPE": "s3",
        "RCLONE_CONFIG_MOTO_PROVIDER": "Other",
        "RCLONE_CONFIG_MOTO_ENDPOINT": moto.options["endpoint_url"],
        "RCLONE_CONFIG_MOTO_ACCESS_KEY_ID": "testing",
        "RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY": "testing",
        "RCLONE_CONFIG_MOTO_REGION": "us-east-1",
    }
    cmd = ["rclone", "copy", f"moto:{src_bucket}", f"moto:{dst_bucket}", "--transfers", "16",
           "--checkers", "16", "--config", "/dev/null"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rclone failed: {done.stderr[-1500:]}")
    return {"seconds": round(time.perf_counter() - start, 2), "gateway_processes": 0}


def plain(moto: Emulator, src_bucket: str, put: Any) -> dict[str, Any]:
    """List, then get and put each object in turn (what an S3ToGCSOperator task does)."""
    client = s3_client(moto)
    start = time.perf_counter()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=src_bucket) for o in page.get("Contents", [])]  # fmt: skip
    first: float | None = None
    for key in keys:
        body = client.get_object(Bucket=src_bucket, Key=key)["Body"].read()
        put(key, body)
        first = first if first is not None else time.perf_counter() - start
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "first_byte_s": round(first or 0.0, 2),
        "gateway_processes": 0,
        "objects": len(keys),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--boot-delay", type=float, default=30.0)
    parser.add_argument("--out", default=str(RESULTS / "everyday.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="skyplane-everyday-"))
    rows: list[dict[str, Any]] = []
    try:
        with run_moto() as moto, run_gcs() as gcs:
            env = {**os.environ, **moto.env, **gcs.env}
            os.environ.update(moto.env)
            moto.make_bucket("partition")
            nbytes = fill(moto, "partition", args.objects, int(args.mb * 1e6))
            s3_opts = json.dumps(moto.options)
            gcs_opts = json.dumps(gcs.options)
            src = moto.uri_for("partition")
            for bucket in ("d-ours", "d-vms"):
                moto.make_bucket(bucket)
                gcs.make_bucket(bucket)
            client = s3_client(moto)
            moto.make_bucket("d-plain")
            moto.make_bucket("d-rclone")
            gcs.make_bucket("d-plain")

            def s3_put(key: str, body: bytes) -> None:
                client.put_object(Bucket="d-plain", Key=key, Body=body)

            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage

            gcs_bucket = storage.Client(
                project="test", credentials=AnonymousCredentials(),
                client_options={"api_endpoint": gcs.env["STORAGE_EMULATOR_HOST"]},
            ).bucket("d-plain")  # fmt: skip

            def gcs_put(key: str, body: bytes) -> None:
                gcs_bucket.blob(key).upload_from_string(body)

            for route, dst_region, dst_store, opts, put in (
                ("S3 -> S3", S3_DST, moto, s3_opts, s3_put),
                ("S3 -> GCS", GCS_DST, gcs, gcs_opts, gcs_put),
            ):
                run = [env, work / "home", src]
                row: dict[str, Any] = {"route": route, "objects": args.objects, "bytes": nbytes}
                row["ours"] = ours(*run[:2], src, dst_store.uri_for("d-ours"), dst_region,
                                   s3_opts, opts, args.boot_delay)  # fmt: skip
                row["ours_vms_only"] = ours(*run[:2], src, dst_store.uri_for("d-vms"),
                                            dst_region, s3_opts, opts, args.boot_delay,
                                            "--vms-only")  # fmt: skip
                row["plain"] = plain(moto, "partition", put)
                if route == "S3 -> S3":
                    row["rclone"] = rclone(moto, "partition", "d-rclone")
                rows.append(row)
                print_rows(rows[-1:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print_rows(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "rows": rows, "boot_delay_s": args.boot_delay,
        "note": "2-core machine shared with other jobs; moto and the GCS emulator on loopback",
    }, indent=2))  # fmt: skip
    return 0


TOOLS = (
    ("ours", "skyplane-ops cp (auto)"),
    ("ours_vms_only", "skyplane-ops cp --vms-only"),
    ("rclone", "rclone copy"),
    ("plain", "plain get/put (boto3)"),
)


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'route':<10} {'tool':<26} {'seconds':>8} {'1st byte':>8} {'gateways':>8}")
    for row in rows:
        for tool, label in TOOLS:
            r = row.get(tool)
            if r is None:
                continue
            fb = r.get("first_byte_s")
            first = "-" if fb is None else f"{fb:.2f}"
            print(
                f"{row['route']:<10} {label:<26} {r['seconds']:>8.2f} {first:>8} "
                f"{r['gateway_processes']:>8}"
            )


if __name__ == "__main__":
    sys.exit(main())
