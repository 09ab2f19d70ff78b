"""Where a small PutObject's time and CPU go: one S3 store, N threads, behind request latency.

No gateways, no transfer engine: one process writes ``--count`` objects of 1 KiB with
``S3Store.write`` from ``--threads`` threads (each thread one request in flight) to
``s3_server.py`` behind ``latency_proxy.py`` (``--delay``, 20 ms by default), once through
boto3's pipeline (``fast_put: false``) and once through the fast path (``stores/s3/fast.py``).
Printed per case: objects/s, the ceiling that many requests in flight allow (threads /
delay), and the CPU milliseconds per object of the client, the server and the proxy (from
/proc/PID/stat), so one sees whether the client is bound by requests in flight or by CPU.

Usage: ``python benchmarks/s3_put_threads.py [--count 3000] [--delay 0.02] [--threads 16 32 64]``.
Writes ``benchmarks/results/s3_put_threads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from latency_proxy import LatencyProxy  # noqa: E402
from s3_latency import cpu_seconds, proxy_pid  # noqa: E402
from s3_server import run_s3_server  # noqa: E402

from gateway_agent.stores import open_store  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


def run_case(
    endpoint: str, bucket: str, fast: bool, threads: int, count: int, pids: dict[str, int]
) -> dict[str, Any]:
    opts = {"endpoint_url": endpoint, "region": "us-east-1", "fast_put": fast}
    opts["max_pool_connections"] = max(64, threads)
    store = open_store(f"s3://{bucket}/", opts)
    body = os.urandom(1024)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: store.write(f"warm/{i}", body), range(threads)))
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        me0, t0 = time.process_time(), time.perf_counter()
        list(pool.map(lambda i: store.write(f"o/{i:06d}", body), range(count)))
        seconds = time.perf_counter() - t0
        me = time.process_time() - me0
    row: dict[str, Any] = {"path": "fast" if fast else "boto3", "threads": threads}
    row |= {"seconds": round(seconds, 2), "obj_per_s": round(count / seconds)}
    row["client_cpu_ms_per_obj"] = round(1000 * me / count, 3)
    for name, pid in pids.items():
        row[f"{name}_cpu_ms_per_obj"] = round(1000 * (cpu_seconds(pid) - cpu0[name]) / count, 3)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--threads", type=int, nargs="+", default=[16, 32, 64])
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    os.environ.pop("AWS_CA_BUNDLE", None)
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="skyplane-s3put-") as tmp,
        run_s3_server(Path(tmp) / "server") as server,
        LatencyProxy(server.address, args.delay) as proxy,
    ):
        import boto3

        direct = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        pids = {"server": server.pid, "proxy": proxy_pid(proxy.port)}
        endpoint = f"http://127.0.0.1:{proxy.port}"
        for n, threads in enumerate(args.threads):
            for fast in (False, True):
                bucket = f"b{n}-{'fast' if fast else 'boto3'}"
                direct.create_bucket(Bucket=bucket)
                rows.append(run_case(endpoint, bucket, fast, threads, args.count, pids))
    print(f"{args.count:,} PUTs of 1 KiB, {args.delay * 1000:.0f} ms added per request")
    print(f"{'path':<6} {'threads':>7} {'obj/s':>6} {'ceiling':>7} {'client ms/obj':>13} "
          f"{'server ms/obj':>13} {'proxy ms/obj':>12}")  # fmt: skip
    for r in rows:
        ceiling = r["threads"] / args.delay
        print(
            f"{r['path']:<6} {r['threads']:>7} {r['obj_per_s']:>6} {ceiling:>7.0f} "
            f"{r['client_cpu_ms_per_obj']:>13.3f} {r['server_cpu_ms_per_obj']:>13.3f} "
            f"{r['proxy_cpu_ms_per_obj']:>12.3f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"count": args.count, "delay_s": args.delay, "cases": rows}
    (RESULTS / "s3_put_threads.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
