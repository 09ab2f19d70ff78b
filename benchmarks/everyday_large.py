"""The everyday job's large case (issue 38): 4 GiB with the fleet's VMs taking ``boot_delay`` 30 s.

Run by ``benchmarks/everyday.py --large-gb 4``. The source is ``--large-gb`` GiB of 64 MiB
files on this machine's disk (``file://``: moto keeps every object in its own memory, and
4 GiB in, three copies out, does not fit it quickly); each run copies them to a fresh folder:

* ``skyplane-ops cp`` (auto): the schedule runs the worker from t = 0 and the overlay's
  gateways join when they are up (30 s);
* ``--vms-only``: the overlay alone, waiting for its VMs;
* ``--no-vms``: the worker alone;
* ``rclone copy`` held to the worker's rate (``--bwlimit``): the tool the user would run on
  the same machine.

The worker is this machine, held to ``--worker-gbps`` (default 0.5 Gbit/s: an Airflow worker's
share of its NIC) for every run of ours and for rclone, so the overlay's gateways (local
processes, not held) stand for a fleet that moves more than one worker can. Reported: seconds
from start to exit, time to the first byte at the destination (any file, staged part or
object, polled every 20 ms), gateway processes started, and for ours what the schedule did
(when the overlay joined, bytes on each kind of path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from skyplane_ops.testing.transfer import agents_of

SRC_REGION, DST_REGION = "aws:us-east-1", "aws:eu-west-1"
FILE_BYTES = 64 << 20


def fill(src: Path, gib: float) -> int:
    """``gib`` GiB of 64 MiB files (one random block, each file's first bytes its own)."""
    src.mkdir(parents=True, exist_ok=True)
    block = bytearray(os.urandom(FILE_BYTES))
    count = max(1, round(gib * (1 << 30) / FILE_BYTES))
    for i in range(count):
        block[:8] = i.to_bytes(8, "big")
        (src / f"dt=2026-11-27/part-{i:04d}.bin").parent.mkdir(exist_ok=True)
        (src / f"dt=2026-11-27/part-{i:04d}.bin").write_bytes(block)
    return count * FILE_BYTES


def _first_file(dst: Path, start: float, seen: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        if dst.exists() and any(p.is_file() for p in dst.rglob("*")):
            seen.append(time.perf_counter() - start)
            return
        stop.wait(0.02)


def _timed(cmd: list[str], env: dict[str, str], dst: Path, home: Path | None) -> dict[str, Any]:
    start = time.perf_counter()
    seen: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_first_file, args=(dst, start, seen, stop), daemon=True)
    watcher.start()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    gateways: set[int] = set()
    while proc.poll() is None:
        if home is not None:
            gateways.update(agents_of(home))
        try:
            proc.wait(timeout=0.02)
        except subprocess.TimeoutExpired:
            pass
    seconds = time.perf_counter() - start
    out, err = proc.communicate()
    stop.set()
    watcher.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {err[-1500:]}")
    return {
        "seconds": round(seconds, 2),
        "first_byte_s": round(seen[0], 2) if seen else None,
        "gateway_processes": len(gateways),
        "out": out,
    }


def ours(
    src: Path, dst: Path, home: Path, env: dict[str, str], boot_delay: float,
    worker_gbps: float, *extra: str,
) -> dict[str, Any]:  # fmt: skip
    cmd = [
        sys.executable, "-m", "skyplane_ops.cli", "cp", f"file://{src}", f"file://{dst}",
        "--src-region", SRC_REGION, "--dst-region", DST_REGION,
        "--backend-options", json.dumps({"boot_delay": boot_delay}),
        "--worker-gbps", str(worker_gbps), "--json", *extra,
    ]  # fmt: skip
    row = _timed(cmd, {**env, "SKYPLANE_OPS_HOME": str(home)}, dst, home)
    result = json.loads(row.pop("out"))
    assert result["verification"]["status"] == "passed", result["verification"]
    row["schedule"] = result.get("schedule") or {}
    row["route"] = result["route"]
    row["paths"] = [
        {k: p.get(k) for k in ("regions", "bytes", "seconds", "achieved_gbps", "joined_s")}
        for p in result["paths"]
    ]
    row["steps"] = result["steps"]
    shutil.rmtree(home, ignore_errors=True)
    return row


def rclone(src: Path, dst: Path, env: dict[str, str], worker_gbps: float) -> dict[str, Any]:
    rate = f"{worker_gbps * 1e9 / 8 / (1 << 20):.1f}M"  # rclone's M: MiB/s
    cmd = ["rclone", "copy", str(src), str(dst), "--transfers", "16", "--bwlimit", rate,
           "--config", "/dev/null"]  # fmt: skip
    row = _timed(cmd, env, dst, None)
    row.pop("out")
    return row


def run_large(
    work: Path, gib: float, boot_delay: float, worker_gbps: float, out: Path
) -> list[dict[str, Any]]:
    """The four runs, one after another, each to a fresh folder removed after it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    src = work / "src"
    nbytes = fill(src, gib)
    runs: list[tuple[str, Any]] = [
        ("ours (auto: worker now, VMs join)", lambda d, h: ours(src, d, h, env, boot_delay,
                                                                worker_gbps)),
        ("ours --vms-only", lambda d, h: ours(src, d, h, env, boot_delay, worker_gbps,
                                              "--vms-only")),
        ("ours --no-vms", lambda d, h: ours(src, d, h, env, boot_delay, worker_gbps,
                                            "--no-vms")),
        ("rclone copy --bwlimit", lambda d, h: rclone(src, d, env, worker_gbps)),
    ]  # fmt: skip
    # One object first, unmeasured: the CLI's bytecode is compiled as an installed wheel's.
    warm = work / "warm"
    (warm / "src").mkdir(parents=True)
    (warm / "src" / "one").write_bytes(b"warm")
    ours(warm / "src", warm / "dst", warm / "home", env, boot_delay, worker_gbps)
    rows = []
    for tool, go in runs:
        dst = work / "dst"
        row = {"tool": tool, "bytes": nbytes, **go(dst, work / "home")}
        shutil.rmtree(dst, ignore_errors=True)
        rows.append(row)
        print_rows([row])
    print()
    print_rows(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "rows": rows, "gib": gib, "boot_delay_s": boot_delay, "worker_gbps": worker_gbps,
        "stores": "file:// on this machine's disk (moto cannot hold 4 GiB in and out quickly)",
        "note": "2-core machine shared with other jobs; the overlay's gateways are local processes",
    }, indent=2))  # fmt: skip
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'tool':<36} {'seconds':>8} {'1st byte':>8} {'gateways':>8} {'joined':>7} "
        f"{'worker GB':>9} {'overlay GB':>10}"
    )
    for r in rows:
        s = r.get("schedule") or {}
        joined = "-" if s.get("joined_s") is None else f"{s['joined_s']:.1f}"
        first = "-" if r["first_byte_s"] is None else f"{r['first_byte_s']:.2f}"
        gb = ["-" if k not in s else f"{s[k] / 1e9:.2f}" for k in ("worker_bytes", "overlay_bytes")]
        print(
            f"{r['tool']:<36} {r['seconds']:>8.2f} {first:>8} {r['gateway_processes']:>8} "
            f"{joined:>7} {gb[0]:>9} {gb[1]:>10}"
        )
