"""Small objects through the gateways alone (no CLI): ``file:// -> file://`` objects/s.

Two gateway processes (source and sink, one connection pool between them) copy COUNT objects of
1 KiB, submitted as batched chunk descriptors of 256 objects (as the control plane makes them),
straight through the control API; the run ends when the sink reported every chunk done. So the
figure is the gateway data path's own per-object cost (pinned source reads, framing, CRC32C,
sink writes), without listing, planning, journaling or end verification, next to
``rclone copy --transfers 16 --checkers 16`` of the same tree in the same run. Each gateway's
CPU seconds (user + system, from ``/proc``) are reported per 10k objects, steadier than
objects/s on a shared machine.

Usage: ``python benchmarks/gateway_small.py [--count 100000] [--work DIR] [--fsync]``.
Writes ``benchmarks/results/gateway_small.json``.
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
sys.path.insert(0, str(REPO))

from benchmarks.scale import generate  # noqa: E402
from gateway_agent.auth import load_secret, new_secret, seal, write_secret  # noqa: E402
from gateway_agent.client import GatewayClient  # noqa: E402
from gateway_agent.stores import open_store  # noqa: E402

BATCH = 256


def _start(work: Path, name: str, region: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    ready = work / f"{name}.ready"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
         "--control-port", "0", "--data-port", "0", "--secret-file", str(work / "secret"),
         "--ready-file", str(ready), "--gateway-id", name, "--region", region],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"gateway {name} did not start")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_ours(src: Path, dst: Path, work: Path, fsync: bool) -> dict[str, Any]:
    write_secret(str(work / "secret"), new_secret())
    secret = load_secret(str(work / "secret"))
    procs = [_start(work, "gw-src", "test:a"), _start(work, "gw-dst", "test:b")]
    try:
        clients = [GatewayClient("127.0.0.1", i["control_port"], secret) for _, i in procs]
        options = {"src": {}, "dst": {"fsync": True} if fsync else {}}
        spec = {
            "job_id": "small",
            "routes": {"0": ["test:a", "test:b"]},
            "gateways": {
                r: [{"id": n, "host": "127.0.0.1", "data_port": i["data_port"]}]
                for r, n, (_, i) in zip(
                    ("test:a", "test:b"), ("gw-src", "gw-dst"), procs, strict=True
                )
            },
            "hops": {"test:a>test:b": {"connections": 8}},
            "src_uri": f"file://{src}",
            "dst_uri": f"file://{dst}",
            "sealed_options": seal(secret, json.dumps(options).encode()),
        }
        infos = list(open_store(f"file://{src}").list())
        descs = [
            {
                "chunk": c,
                "path": "0",
                "segs": [
                    {"key": o.key, "offset": 0, "length": o.size, "part": 0, "version": o.version}
                    for o in infos[c * BATCH : (c + 1) * BATCH]
                ],
            }
            for c in range(-(-len(infos) // BATCH))
        ]
        cpu0 = [_cpu_s(p.pid) for p, _ in procs]
        t0 = time.perf_counter()
        clients[1].start_job(spec)
        clients[0].start_job(spec)
        for i in range(0, len(descs), 64):
            clients[0].submit_chunks("small", descs[i : i + 64])
        done, cursor, problems = 0, 0, []
        while done < len(descs):
            st = clients[1].status("small", cursor)
            cursor = st["cursor"]
            for ev in st["events"]:
                if ev.get("t") == "done":
                    done += 1
                else:
                    problems.append(ev)
            if problems or st["error"]:
                raise RuntimeError(f"copy failed: {problems[:3]} {st['error']}")
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        cpu = [round(_cpu_s(p.pid) - c, 2) for (p, _), c in zip(procs, cpu0, strict=True)]
    finally:
        for p, _ in procs:
            p.terminate()
            p.wait(timeout=30)
    per10k = [round(c * 10_000 / len(infos), 2) for c in cpu]
    return {"seconds": round(seconds, 3), "cpu_s": cpu, "cpu_s_per_10k": per10k}


def run_rclone(src: Path, dst: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    subprocess.run(
        ["rclone", "copy", str(src), str(dst), "--transfers", "16", "--checkers", "16",
         "--config", "/dev/null"],
        check=True,
    )  # fmt: skip
    return {"seconds": round(time.perf_counter() - t0, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--fsync", action="store_true", help="durable sink writes")
    out = REPO / "benchmarks" / "results" / "gateway_small.json"
    parser.add_argument("--out", default=str(out))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gw-small-", dir=args.work))
    try:
        src = work / "src"
        generate(src, args.count)
        os.sync()
        ours = run_ours(src, work / "dst-ours", work, args.fsync)
        os.sync()
        theirs = run_rclone(src, work / "dst-rclone")
        for name, dst in (("ours", work / "dst-ours"), ("rclone", work / "dst-rclone")):
            got = sum(len(f) for _b, _d, f in os.walk(dst))
            if got != args.count:
                raise RuntimeError(f"{name}: {got} of {args.count} objects landed")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row = {
        "objects": args.count,
        "fsync": args.fsync,
        "ours": ours,
        "rclone": theirs,
        "ours_objects_per_s": round(args.count / ours["seconds"]),
        "rclone_objects_per_s": round(args.count / theirs["seconds"]),
    }
    print(
        f"{'objects':>9} {'gateways s':>10} {'rclone s':>8} {'gw obj/s':>9} {'rc obj/s':>9} "
        f"{'src/sink CPU s per 10k':>22}"
    )
    print(
        f"{args.count:>9,} {ours['seconds']:10.2f} {theirs['seconds']:8.2f} "
        f"{row['ours_objects_per_s']:9,} {row['rclone_objects_per_s']:9,} "
        f"{'/'.join(str(c) for c in ours['cpu_s_per_10k']):>22}"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(row, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
