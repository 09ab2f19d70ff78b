"""Selection at scale: a few named keys, or what is new, out of a big bucket; ours next to rclone.

The bucket (``--objects``, 1,000,000 by default) is written straight into the benchmark S3
server's folder (``s3_server.py``: PUTting a million objects would take longer than the
benchmark), dated two days back except ``--new`` objects (1,000) dated now, and served on
loopback behind ``latency_proxy.py`` (``--delay``, 20 ms per request). The server counts the
requests it answers by kind, so each row says how many listings, HEADs and GETs a tool sent.

- ``files-from``: ``--named`` keys (1,000, spread over the bucket) copied s3:// -> a local
  folder by ``run_transfer(files_from=...)`` (local gateways, direct plan) and by
  ``rclone copy --files-from LIST --no-traverse``. Ours must send no listing request.
- ``max-age``: the ``--new`` objects copied by ``run_transfer(max_age="1h")`` and by
  ``rclone copy --max-age 1h --use-server-modtime``: both must list the bucket (no index by
  time exists); the row says how long and how many requests. (Without
  ``--use-server-modtime`` rclone HEADs every listed object for its time: 20,221 requests and
  59.6 s at 20,000 objects, against our 2.9 s.)

Both tools run with 16 transfers/checkers for rclone and the engine's defaults for ours;
every copy is checked (the right keys, and only them, at the destination).

Usage: ``python benchmarks/selection.py [--objects N] [--named N] [--new N] [--delay S]
[--work DIR]``. Writes ``benchmarks/results/selection.json``.
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
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from latency_proxy import LatencyProxy  # noqa: E402
from s3_server import bench_stats, run_s3_server  # noqa: E402

from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402
from skyplane_ops.testing.transfer import direct_plan  # noqa: E402
from skyplane_ops.transfer import run_transfer  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SRC, DST = "aws:us-east-1", "aws:us-west-2"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
BUCKET = "big"


def key_of(i: int) -> str:
    return f"d{i // 1000:04d}/o{i:07d}"


def make_bucket(root: Path, objects: int, new: set[int]) -> None:
    """``objects`` small files in the server's folder, dated 2 days back except ``new``."""
    folder = root / BUCKET
    folder.mkdir(parents=True)
    old = time.time() - 2 * 86400
    for i in range(objects):
        path = folder / quote(key_of(i), safe="")
        path.write_bytes(f"object {i}\n".encode())
        if i not in new:
            os.utime(path, (old, old))


def rclone(endpoint: str, dst: Path, *extra: str) -> float:
    env = {**os.environ, "RCLONE_CONFIG_X_TYPE": "s3", "RCLONE_CONFIG_X_PROVIDER": "Other"}
    env |= {"RCLONE_CONFIG_X_ENDPOINT": endpoint, "RCLONE_CONFIG_X_ACCESS_KEY_ID": "bench"}
    env |= {"RCLONE_CONFIG_X_SECRET_ACCESS_KEY": "bench"}
    cmd = ["rclone", "copy", f"X:{BUCKET}", str(dst), "--config", "/dev/null"]
    cmd += ["--transfers", "16", "--checkers", "16", "--retries", "1", *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def ours(endpoint: str, dst: Path, **fields: Any) -> tuple[float, dict[str, float]]:
    plan = direct_plan(SRC, DST, volume_gb=0.01)
    prov = LocalProvisioner(idle_timeout=300)
    fleet = prov.provision(plan.vms, transfer_id=f"sel-{uuid.uuid4().hex[:8]}")
    options = {"endpoint_url": endpoint, "region": "us-east-1", "credentials": "forward"}
    try:
        t0 = time.perf_counter()
        result = run_transfer(
            plan, fleet, f"s3://{BUCKET}/", f"file://{dst}", src_options=options,
            journal_dir=Path(os.environ["SKYPLANE_OPS_HOME"]) / f"j-{uuid.uuid4().hex}",
            **fields,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
    finally:
        prov.deprovision(fleet)
    if not result.verified:
        raise RuntimeError(f"ours: verification {result.verification}")
    return seconds, result.steps


def files_in(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(set(after) | set(before))}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--named", type=int, default=1000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds added per request")
    parser.add_argument(
        "--work", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
        help="folder for the server's files (default: /dev/shm)",
    )  # fmt: skip
    args = parser.parse_args()
    os.environ.update(KEYS)
    os.environ.pop("AWS_CA_BUNDLE", None)
    work = Path(tempfile.mkdtemp(prefix="skyplane-selection-", dir=args.work))
    os.environ.setdefault("SKYPLANE_OPS_HOME", str(work / "home"))
    step = max(1, args.objects // args.named)
    named = {key_of(i) for i in range(0, args.objects, step)}
    new_ids = set(range(args.objects - args.new, args.objects))
    new = {key_of(i) for i in new_ids}
    row: dict[str, Any] = {"objects": args.objects, "delay_s": args.delay, "cases": []}
    try:
        t0 = time.perf_counter()
        make_bucket(work / "server", args.objects, new_ids)
        row["setup_s"] = round(time.perf_counter() - t0, 1)
        (work / "list.txt").write_text("".join(f"{k}\n" for k in sorted(named)))
        with (
            run_s3_server(work / "server", timeout=1800) as server,
            LatencyProxy(server.address, args.delay) as proxy,
        ):
            endpoint = f"http://127.0.0.1:{proxy.port}"
            cases = [
                ("files-from", named, {"files_from": sorted(named)},
                 ["--files-from", str(work / "list.txt"), "--no-traverse"]),
                # rclone reads an S3 object's time from its metadata, a HEAD per object,
                # unless told to use the server's (as ours does): given that, to be fair.
                ("max-age 1h", new, {"max_age": "1h"},
                 ["--max-age", "1h", "--use-server-modtime"]),
            ]  # fmt: skip
            for name, want, fields, flags in cases:
                case: dict[str, Any] = {"case": name, "selected": len(want)}
                for tool in ("ours", "rclone"):
                    dst = work / f"{tool}-{name.split()[0]}"
                    dst.mkdir()
                    before = bench_stats(server.endpoint)
                    if tool == "ours":
                        seconds, case["ours_steps"] = ours(endpoint, dst, **fields)
                    else:
                        seconds = rclone(endpoint, dst, *flags)
                    case[f"{tool}_s"] = round(seconds, 2)
                    case[f"{tool}_requests"] = delta(before, bench_stats(server.endpoint))
                    got = files_in(dst)
                    if got != want:
                        raise RuntimeError(f"{tool} {name}: {len(got)} files, {len(want)} wanted")
                case["ratio"] = round(case["rclone_s"] / case["ours_s"], 2)
                row["cases"].append(case)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "selection.json").write_text(json.dumps(row, indent=2))
    return 0


def report(row: dict[str, Any]) -> None:
    print(f"{row['objects']:,} objects, {row['delay_s'] * 1000:.0f} ms per request "
          f"(bucket written in {row['setup_s']} s)")  # fmt: skip
    print(f"{'case':<11} {'selected':>8} {'ours s':>7} {'rclone s':>8} {'speed-up':>8} "
          f"{'ours lists':>10} {'rc lists':>8} {'ours reqs':>9} {'rc reqs':>8}")  # fmt: skip
    for c in row["cases"]:
        ours_req, rc_req = c["ours_requests"], c["rclone_requests"]
        print(
            f"{c['case']:<11} {c['selected']:>8,} {c['ours_s']:7.2f} {c['rclone_s']:8.2f} "
            f"{c['ratio']:7.2f}x {ours_req.get('list', 0):>10,} {rc_req.get('list', 0):>8,} "
            f"{sum(ours_req.values()):>9,} {sum(rc_req.values()):>8,}"
        )
        print(f"  ours requests: {ours_req}; rclone: {rc_req}")
        print(f"  ours by step (s): {c['ours_steps']}")


if __name__ == "__main__":
    sys.exit(main())
