"""The everyday job: a daily partition copied with the fleet's VMs taking ``boot_delay`` to boot.

A partition (``--objects`` 500 objects, ``--mb`` 50 MB in all) is put in an S3 bucket (moto) and
copied S3 -> S3 (moto, two buckets as two regions) and S3 -> GCS (the GCS emulator) by

* ``skyplane-ops cp`` on the local backend with ``{"boot_delay": 30}`` (each gateway takes 30 s
  to come up, as a cloud VM does): the plan's schedule decides; it should start **no gateway**
  and copy on the worker (this process): S3 -> S3 by server-side copy (CopyObject, the bytes
  never pass through this machine; the ``route`` column says ``server-side``), S3 -> GCS by
  reading and writing;
* the same with ``--vms-only`` (the overlay, waiting for its VMs), for the difference t0 makes;
* ``rclone copy --transfers 16`` (S3 -> S3 only: rclone's GCS backend cannot be pointed at the
  emulator without credentials files);
* a plain copy as ``S3ToGCSOperator``/a boto3 script does it: list, then get and put each object
  in turn through this process.

Reported per tool: seconds from start to exit, time to the first byte (the same for every tool:
the first object visible at the destination, polled every 20 ms from the tool's start), for
ours the time the data path starts (the ``transfer`` phase: imports, listing, plan done), gateway
processes started (sampled from ``/proc`` every 20 ms over the whole run) and the CLI's own fixed
costs (list, plan, provision phases). Both stores are emulators on this machine: the figures show
fixed costs and t0, not a WAN.

The CLI runs with its bytecode compiled (a warm-up copy of one object first, without
``PYTHONDONTWRITEBYTECODE``), as an installed wheel has it; ``--cold`` measures every start
compiling its modules as well.

Usage: ``python benchmarks/everyday.py [--objects 500] [--mb 50] [--boot-delay 30] [--cold]``.
Writes ``benchmarks/results/everyday.json``. ``--large-gb 4`` runs the issue's large case
instead (``everyday_large.py``: the worker from t = 0 and the VMs joining, against
``--vms-only``, ``--no-vms`` and rclone), written to ``everyday_large.json``.
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skyplane_ops.testing.emulators import Emulator, run_gcs, run_moto  # noqa: E402
from skyplane_ops.testing.transfer import agents_of  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SRC_REGION, S3_DST, GCS_DST = "aws:us-east-1", "aws:eu-west-1", "gcp:europe-west4"


class FirstObject:
    """Seconds from ``start`` until the destination shows its first object: the same measure for
    every tool (a progress report comes only when a whole chunk is done, so it says when the
    first chunk finished, not when bytes began to land). ``exists`` is one cheap listing call
    (at most one key); it is polled every 20 ms on its own thread until it answers true."""

    def __init__(self, exists: Callable[[], bool]) -> None:
        self._exists = exists
        self._start = time.perf_counter()
        self._seen: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self._exists():
                self._seen = time.perf_counter() - self._start
                return
            self._stop.wait(0.02)

    def seconds(self) -> float | None:
        """The time of the first object (None: none appeared), once the tool has exited."""
        self._stop.set()
        self._thread.join(timeout=30)
        return None if self._seen is None else round(self._seen, 2)


def s3_client(moto: Emulator) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto.options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def has_object(store: Emulator, bucket: str) -> Callable[[], bool]:
    """Whether ``bucket`` (on moto or the GCS emulator) holds any object: one list call."""
    if store.scheme_root.startswith("s3:"):
        client = s3_client(store)
        return lambda: client.list_objects_v2(Bucket=bucket, MaxKeys=1).get("KeyCount", 0) > 0
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    gcs = storage.Client(
        project="test", credentials=AnonymousCredentials(),
        client_options={"api_endpoint": store.env["STORAGE_EMULATOR_HOST"]},
    )  # fmt: skip
    return lambda: any(True for _ in gcs.list_blobs(bucket, max_results=1))


def warm_up(
    moto: Emulator, gcs: Emulator, env: dict[str, str], home: Path, s3_opts: str,
    gcs_opts: str, boot_delay: float,
) -> None:  # fmt: skip
    """One object copied to each kind of destination, unmeasured: the CLI's modules get their
    bytecode written (as ``pip install`` compiles a wheel's), so the measured runs do not pay
    this machine's ``PYTHONDONTWRITEBYTECODE`` compile of every module at each start."""
    moto.make_bucket("warm-src")
    s3_client(moto).put_object(Bucket="warm-src", Key="warm", Body=b"warm")
    for store, region, opts in ((moto, S3_DST, s3_opts), (gcs, GCS_DST, gcs_opts)):
        store.make_bucket("warm-dst")
        ours(env, home, moto.uri_for("warm-src"), store.uri_for("warm-dst"), region, s3_opts,
             opts, boot_delay, has_object(store, "warm-dst"))  # fmt: skip


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
    dst_options: str, boot_delay: float, exists: Callable[[], bool], *extra: str,
) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "cp", src, dst,
        "--src-region", SRC_REGION, "--dst-region", dst_region,
        "--src-options", src_options, "--dst-options", dst_options,
        "--backend-options", json.dumps({"boot_delay": boot_delay}),
        "--journal-dir", str(home / "journal"), "--json", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    first = FirstObject(exists)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "SKYPLANE_OPS_HOME": str(home)})  # fmt: skip
    first_progress: list[float] = []
    data_path: list[float] = []
    phases: dict[str, float] = {}
    tail: list[str] = []

    def read_events() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail[:] = [*tail[-20:], line]
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            now = time.perf_counter() - start
            if event.get("event") == "progress" and event["bytes_done"] > 0 and not first_progress:
                first_progress.append(now)
            started = event.get("event") == "phase" and event.get("state") == "started"
            if started and event["phase"] == "transfer" and not data_path:
                data_path.append(now)
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
    seconds = time.perf_counter() - start
    first_byte = first.seconds()
    reader.join(timeout=30)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit("skyplane-ops cp failed: " + "".join(tail))
    result = json.loads(out)
    assert result["verification"]["status"] == "passed", result["verification"]
    shutil.rmtree(home, ignore_errors=True)
    return {
        "seconds": round(seconds, 2),
        "first_byte_s": first_byte,
        "data_path_s": round(data_path[0], 2) if data_path else None,
        "first_progress_s": round(first_progress[0], 2) if first_progress else None,
        "gateway_processes": len(gateways),
        "phases": phases,
        "objects": result["objects"],
        "route": result.get("route", []),  # "server-side (100%)" where the stores copied
    }


def rclone(
    moto: Emulator, src_bucket: str, dst_bucket: str, exists: Callable[[], bool]
) -> dict[str, Any]:
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
    first = FirstObject(exists)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = round(time.perf_counter() - start, 2)
    if done.returncode != 0:
        raise SystemExit(f"rclone failed: {done.stderr[-1500:]}")
    return {"seconds": seconds, "first_byte_s": first.seconds(), "gateway_processes": 0}


def plain(moto: Emulator, src_bucket: str, put: Any, exists: Callable[[], bool]) -> dict[str, Any]:
    """List, then get and put each object in turn (what an S3ToGCSOperator task does); timed
    from before the imports a fresh task would pay are done (boto3 here is already imported)."""
    client = s3_client(moto)
    start = time.perf_counter()
    first = FirstObject(exists)
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=src_bucket) for o in page.get("Contents", [])]  # fmt: skip
    for key in keys:
        body = client.get_object(Bucket=src_bucket, Key=key)["Body"].read()
        put(key, body)
    seconds = round(time.perf_counter() - start, 2)
    return {
        "seconds": seconds,
        "first_byte_s": first.seconds(),
        "gateway_processes": 0,
        "objects": len(keys),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--boot-delay", type=float, default=30.0)
    parser.add_argument("--out", default=str(RESULTS / "everyday.json"))
    parser.add_argument(
        "--cold", action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE and skip the warm-up: every CLI start compiles its "
        "modules (an installed wheel has its bytecode compiled at install time)",
    )  # fmt: skip
    parser.add_argument("--large-gb", type=float, default=0.0, help="run the large case")
    parser.add_argument("--worker-gbps", type=float, default=0.5, help="large case: worker cap")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="skyplane-everyday-"))
    if args.large_gb:
        from everyday_large import run_large

        try:
            out = RESULTS / "everyday_large.json"
            run_large(work, args.large_gb, args.boot_delay, args.worker_gbps, out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    rows: list[dict[str, Any]] = []
    try:
        with run_moto() as moto, run_gcs() as gcs:
            env = {**os.environ, **moto.env, **gcs.env}
            os.environ.update(moto.env)
            if not args.cold:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
            moto.make_bucket("partition")
            nbytes = fill(moto, "partition", args.objects, int(args.mb * 1e6))
            s3_opts = json.dumps(moto.options)
            gcs_opts = json.dumps(gcs.options)
            src = moto.uri_for("partition")
            if not args.cold:  # one small copy first: bytecode compiled as an install has it
                warm_up(moto, gcs, env, work / "home", s3_opts, gcs_opts, args.boot_delay)
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
                                   s3_opts, opts, args.boot_delay,
                                   has_object(dst_store, "d-ours"))  # fmt: skip
                row["ours_vms_only"] = ours(*run[:2], src, dst_store.uri_for("d-vms"),
                                            dst_region, s3_opts, opts, args.boot_delay,
                                            has_object(dst_store, "d-vms"),
                                            "--vms-only")  # fmt: skip
                row["plain"] = plain(moto, "partition", put, has_object(dst_store, "d-plain"))
                if route == "S3 -> S3":
                    row["rclone"] = rclone(moto, "partition", "d-rclone",
                                           has_object(moto, "d-rclone"))  # fmt: skip
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
    print(
        f"{'route':<10} {'tool':<26} {'seconds':>8} {'1st byte':>8} {'data path':>9} "
        f"{'gateways':>8}  route"
    )
    for row in rows:
        for tool, label in TOOLS:
            r = row.get(tool)
            if r is None:
                continue
            first, data = (
                "-" if r.get(k) is None else f"{r[k]:.2f}" for k in ("first_byte_s", "data_path_s")
            )
            print(
                f"{row['route']:<10} {label:<26} {r['seconds']:>8.2f} {first:>8} {data:>9} "
                f"{r['gateway_processes']:>8}  {' | '.join(r.get('route') or ['-'])}"
            )


if __name__ == "__main__":
    sys.exit(main())
