"""Small objects to and from an S3 store with request latency: the gateways next to rclone.

``s3_server.py`` (a minimal S3-compatible benchmark server, a few thousand requests/s on one core:
moto's 50-100/s would bound both tools) runs on loopback behind ``latency_proxy.py`` (``--delay``,
20 ms per request by default). ``--count`` files of 1 KiB (10,000; ``--quick``: 2,000) are
copied local -> s3:// through the proxy by ``run_transfer`` (``--gateways`` local gateways per
region, direct plan) and by ``rclone copy --transfers 16 --checkers 16 --s3-no-head``, in the
same run; ``--download`` also copies them back s3:// -> local with both tools.

Both sides check every upload in the store: rclone sends Content-MD5, ours CRC32C, and the server
refuses a body that does not match; neither reads anything back. Ours verifies the listing
(``verify="full"``: sizes, and the CRC32C that each PUT's answer vouched for; ``--verify-size``:
sizes only). Before the copies, a calibration with rclone at ``--transfers 64`` straight to the
server (no proxy) shows what the server and this machine can do at all; the server's own CPU
time per request is printed too. The server's files and the source tree live under ``--work``
(default: ``/dev/shm`` where it exists): the server writes a file and renames it per PUT, and on
this machine's disk that cost varies fourfold between runs (0.14-0.72 ms of server CPU per
request), which bounded both tools by the disk instead of by the latency under test.

CPU per object is printed per process (from /proc/PID/stat and getrusage): the control plane
(this process), the source and sink gateways (startup included), the server, the proxy, and
rclone, so one sees what a run on a few shared cores is bound by. ``--object-threads`` sets the
gateways' objects in flight per job (default: the engine's); ``--store-options`` adds S3 store
options as JSON (e.g. ``'{"fast_put": false}'`` for the boto3-only path).

Usage: ``python benchmarks/s3_latency.py [--quick] [--count N] [--delay 0.02 [0.05 ...]]
[--gateways 1] [--download] [--verify-size] [--object-threads N] [--store-options JSON]
[--work DIR]``.
Writes ``benchmarks/results/s3_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
sys.path.insert(0, str(REPO / "benchmarks"))

from latency_proxy import LatencyProxy  # noqa: E402
from s3_server import run_s3_server  # noqa: E402

from skyplane_ops.planner.plan import TransferPlan  # noqa: E402
from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402
from skyplane_ops.testing.transfer import direct_plan  # noqa: E402
from skyplane_ops.transfer import run_transfer  # noqa: E402
from skyplane_ops.transfer.dispatch import DispatchOptions  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SRC, DST = "aws:us-east-1", "aws:us-west-2"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


def plan(gateways: int) -> TransferPlan:
    p = direct_plan(SRC, DST, volume_gb=0.01)
    p.vms = {SRC: gateways, DST: gateways}
    return p


def make_tree(root: Path, count: int) -> None:
    body = os.urandom(1024)
    for i in range(count):
        d = root / f"p{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"o{i:06d}").write_bytes(body)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def proxy_pid(port: int) -> int:
    """The latency proxy's process (started with ``--port <port>``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--port" in argv and str(port).encode() in argv and any(b"proxy" in a for a in argv):
            return int(entry.name)
    raise RuntimeError(f"no proxy process on port {port}")


def rclone(endpoint: str, src: str, dst: str, transfers: int = 16) -> float:
    env = {**os.environ, "RCLONE_CONFIG_X_TYPE": "s3", "RCLONE_CONFIG_X_PROVIDER": "Other"}
    env |= {"RCLONE_CONFIG_X_ENDPOINT": endpoint, "RCLONE_CONFIG_X_ACCESS_KEY_ID": "bench"}
    env |= {"RCLONE_CONFIG_X_SECRET_ACCESS_KEY": "bench"}
    cmd = ["rclone", "copy", src, dst, "--config", "/dev/null", "--s3-no-head"]
    cmd += ["--transfers", str(transfers), "--checkers", "16", "--retries", "1"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def ours(
    gateways: int,
    src: str,
    dst: str,
    options: dict[str, Any],
    verify: str,
    dispatch: DispatchOptions | None,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Seconds, CPU seconds by process (``cli``, ``src_gw``, ``dst_gw``) and by step."""
    prov = LocalProvisioner(idle_timeout=300)
    fleet = prov.provision(plan(gateways).vms, transfer_id=f"s3lat-{uuid.uuid4().hex[:8]}")
    try:
        t0, cli0 = time.perf_counter(), time.process_time()
        side = "src_options" if src.startswith("s3://") else "dst_options"
        result = run_transfer(
            plan(gateways),
            fleet,
            src,
            dst,
            journal_dir=Path(os.environ["SKYPLANE_OPS_HOME"]) / f"journal-{uuid.uuid4().hex}",
            verify=verify,
            dispatch=dispatch,
            **{side: options},  # type: ignore[arg-type]
        )
        seconds = time.perf_counter() - t0
        cpu = {"cli": time.process_time() - cli0, "src_gw": 0.0, "dst_gw": 0.0}
        for g in fleet.gateways:
            cpu["src_gw" if g.region == SRC else "dst_gw"] += cpu_seconds(int(g.resources["pid"]))
    finally:
        prov.deprovision(fleet)
    if result.verification.get("status") != "passed":
        raise RuntimeError(f"ours: verification {result.verification}")
    return seconds, cpu, result.steps


def count_keys(client: Any, bucket: str) -> int:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(len(p.get("Contents", [])) for p in pages)


def count_files(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument(
        "--delay", type=float, nargs="+", default=[0.02], help="seconds added per request"
    )
    parser.add_argument("--gateways", type=int, default=1, help="local gateways per region")
    parser.add_argument("--download", action="store_true", help="also s3:// -> local")
    parser.add_argument("--verify-size", action="store_true")
    parser.add_argument("--object-threads", type=int, default=None)
    parser.add_argument("--store-options", default="{}", help="S3 store options (JSON)")
    parser.add_argument(
        "--work",
        default="/dev/shm" if Path("/dev/shm").is_dir() else None,
        help="folder for the server's files and the source tree (default: /dev/shm)",
    )
    args = parser.parse_args()
    dispatch = DispatchOptions(object_threads=args.object_threads) if args.object_threads else None
    count = args.count or (2000 if args.quick else 10_000)
    verify = "size" if args.verify_size else "full"
    os.environ.update(KEYS)  # the gateways inherit the credentials
    os.environ.pop("AWS_CA_BUNDLE", None)
    work = Path(tempfile.mkdtemp(prefix="skyplane-s3lat-", dir=args.work))
    os.environ.setdefault("SKYPLANE_OPS_HOME", str(work / "home"))
    row: dict[str, Any] = {"objects": count, "object_bytes": 1024, "verify": verify}
    row |= {"gateways_per_region": args.gateways, "rclone_transfers": 16, "cases": []}
    row |= {"object_threads": args.object_threads, "store_options": json.loads(args.store_options)}
    row["work"] = str(work.parent)
    try:
        make_tree(work / "src", count)
        with run_s3_server(work / "server") as server:
            import boto3

            direct = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
            direct.create_bucket(Bucket="calib")
            cpu0 = cpu_seconds(server.pid)
            seconds = rclone(server.endpoint, str(work / "src"), "X:calib", transfers=64)
            row["server_raw"] = {
                "rclone_transfers": 64,
                "seconds": round(seconds, 2),
                "requests_per_s": round(count / seconds),
                "server_cpu_ms_per_request": round(
                    1000 * (cpu_seconds(server.pid) - cpu0) / count, 3
                ),
            }
            got: dict[str, int] = {}
            for n, delay in enumerate(args.delay):
                for b in (f"up-ours-{n}", f"up-rclone-{n}"):
                    direct.create_bucket(Bucket=b)
                with LatencyProxy(server.address, delay) as proxy:
                    endpoint = f"http://127.0.0.1:{proxy.port}"
                    # The benchmark server has no STS: the gateways get this process's keys.
                    opts = {
                        "endpoint_url": endpoint,
                        "region": "us-east-1",
                        "credentials": "forward",
                    }
                    opts |= row["store_options"]
                    pids = {"server": server.pid, "proxy": proxy_pid(proxy.port)}
                    up, down = f"s3://up-ours-{n}/", f"file://{work}/down-ours-{n}/"
                    cases = [("upload", f"file://{work}/src/", up)]
                    if args.download:
                        cases.append(("download", up, down))
                    for name, src, dst in cases:
                        case: dict[str, Any] = {"case": name, "delay_s": delay}
                        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
                        seconds, cpu, case["ours_steps"] = ours(
                            args.gateways, src, dst, opts, verify, dispatch
                        )
                        case["ours_s"] = round(seconds, 2)
                        for k, pid in pids.items():
                            cpu[k] = cpu_seconds(pid) - cpu0[k]
                            cpu0[k] = cpu_seconds(pid)
                        case["ours_cpu_s"] = {k: round(v, 2) for k, v in cpu.items()}
                        case["gateway_cpu_s"] = round(cpu["src_gw"] + cpu["dst_gw"], 2)
                        rc0 = children_cpu()
                        if name == "upload":
                            rc = rclone(endpoint, str(work / "src"), f"X:up-rclone-{n}")
                        else:
                            rc = rclone(endpoint, f"X:up-ours-{n}", str(work / f"down-rclone-{n}"))
                        case["rclone_s"] = round(rc, 2)
                        rc_cpu = {"rclone": children_cpu() - rc0}
                        for k, pid in pids.items():
                            rc_cpu[k] = cpu_seconds(pid) - cpu0[k]
                        case["rclone_cpu_s"] = {k: round(v, 2) for k, v in rc_cpu.items()}
                        case["server_cpu_s"] = round(cpu["server"] + rc_cpu["server"], 2)
                        row["cases"].append(case)
                got[f"ours {n}"] = count_keys(direct, f"up-ours-{n}")
                got[f"rclone {n}"] = count_keys(direct, f"up-rclone-{n}")
                if args.download:
                    got[f"ours down {n}"] = count_files(work / f"down-ours-{n}")
                    got[f"rclone down {n}"] = count_files(work / f"down-rclone-{n}")
            for side, got_n in got.items():
                if got_n != count:
                    raise RuntimeError(f"{side}: {got_n} of {count} objects at the destination")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "s3_latency.json").write_text(json.dumps(row, indent=2))
    return 0


def report(row: dict[str, Any]) -> None:
    count, raw = row["objects"], row["server_raw"]
    print(
        f"server alone (rclone --transfers 64, no proxy): {raw['requests_per_s']:,} PUT/s; "
        f"server CPU {raw['server_cpu_ms_per_request']} ms/request"
    )
    print(f"{'case':<9} {'objects':>7} {'delay':>6} {'ours s':>7} {'rclone s':>8} "
          f"{'ours obj/s':>10} {'rc obj/s':>9} {'ratio':>6} {'gw cpu ms/obj':>13}")  # fmt: skip
    for case in row["cases"]:
        case["ours_obj_per_s"] = round(count / case["ours_s"], 1)
        case["rclone_obj_per_s"] = round(count / case["rclone_s"], 1)
        case["ratio"] = round(case["ours_obj_per_s"] / case["rclone_obj_per_s"], 2)
        print(
            f"{case['case']:<9} {count:>7,} {case['delay_s'] * 1000:4.0f}ms {case['ours_s']:7.1f} "
            f"{case['rclone_s']:8.1f} {case['ours_obj_per_s']:10.0f} "
            f"{case['rclone_obj_per_s']:9.0f} {case['ratio']:6.2f} "
            f"{1000 * case['gateway_cpu_s'] / count:13.2f}"
        )
        print(f"  ours by step (s): {case['ours_steps']}")
        for side in ("ours", "rclone"):
            per = {k: round(1000 * v / count, 2) for k, v in case[f"{side}_cpu_s"].items()}
            total = round(sum(per.values()), 2)
            print(f"  {side} CPU ms/object by process: {per} (total {total})")


if __name__ == "__main__":
    sys.exit(main())
