"""Provisioning figures: SSH fleet bootstrap, netns testbed build/tear-down, shaped vs achieved.

Rows:

* ``ssh provision`` / ``ssh deprovision``: a 3-host fleet (one gateway per host, 3 regions) on
  three real OpenSSH sshd servers on loopback: connect + verify host key, upload the agent
  bundle and secret, start the agent, read its ports, health check; then stop and remove;
* ``netns build`` / ``netns teardown``: the 3-region testbed (namespaces, 3 veth links shaped
  on both ends, management links, routes) without agents; ``netns provision`` adds the agents;
* ``link X->Y``: iperf3 rate across each directed link vs the tbf rate it is shaped to;
* ``transfer ...``: the real transfer engine through netns gateways, steady rate vs shaped.

Usage: ``python benchmarks/provision.py [--quick] [--repeat 3]`` (root needed for netns rows).
Writes ``benchmarks/results/provision.json``. State goes to a temporary SKYPLANE_OPS_HOME.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["SKYPLANE_OPS_HOME"] = tempfile.mkdtemp(prefix="skyplane-ops-bench-")

from skyplane_ops.provision import get_provisioner  # noqa: E402
from skyplane_ops.provision.netns.testbed import Testbed  # noqa: E402
from skyplane_ops.testing.sshd import keygen, start_sshd, stop_sshd  # noqa: E402
from skyplane_ops.testing.transfer import make_plan, write_dataset  # noqa: E402
from skyplane_ops.transfer import run_transfer  # noqa: E402
from skyplane_ops.transfer.progress import Progress, steady_rate_mbit  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
A, B, C = "netns:A", "netns:B", "netns:C"
GRID = {f"{A}->{B}": 1.0, f"{A}->{C}": 4.0, f"{C}->{B}": 4.0}
MiB = 1024 * 1024


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def bench_ssh(repeat: int, work: Path) -> list[dict[str, Any]]:
    key = work / "client_key"
    keygen(key)
    servers = [start_sshd(work / f"sshd{i}", key) for i in range(3)]
    try:
        inventory = {
            f"ssh:r{i}": [
                {
                    "address": "127.0.0.1",
                    "port": s.port,
                    "user": s.user,
                    "key_path": str(key),
                    "host_key": s.host_key,
                    "python": sys.executable,
                    "bind_host": "127.0.0.1",
                    "remote_root": str(work / "remote"),
                }
            ]
            for i, s in enumerate(servers)
        }
        prov = get_provisioner("ssh", inventory=inventory)
        ups, downs = [], []
        for _ in range(repeat):
            tid = f"bench-{uuid.uuid4().hex[:8]}"
            t0 = time.perf_counter()
            fleet = prov.provision({r: 1 for r in inventory}, transfer_id=tid)
            up = time.perf_counter() - t0
            t0 = time.perf_counter()
            prov.deprovision(fleet)
            down = time.perf_counter() - t0
            ups.append(up)
            downs.append(down)
    finally:
        for s in servers:
            stop_sshd(s)
    return [
        {"row": "ssh provision (3 hosts)", "seconds": statistics.median(ups), "runs": ups},
        {"row": "ssh deprovision (3 hosts)", "seconds": statistics.median(downs), "runs": downs},
    ]


def bench_netns(repeat: int, seconds: float, mib: int, work: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    builds, teardowns = [], []
    for _ in range(repeat):
        tb = Testbed.plan(f"bench-{uuid.uuid4().hex[:8]}", [A, B, C], GRID, scale=0.1)
        up, _ = timed(tb.build)
        down, _ = timed(tb.teardown)
        builds.append(up)
        teardowns.append(down)
    rows.append({"row": "netns build (3 regions)", "seconds": statistics.median(builds)})
    rows.append({"row": "netns teardown (3 regions)", "seconds": statistics.median(teardowns)})

    tb = Testbed.plan(f"bench-{uuid.uuid4().hex[:8]}", [A, B, C], GRID, scale=0.1)
    tb.build()
    try:
        for src, dst in ((A, B), (B, A), (A, C), (C, A), (C, B), (B, C)):
            shaped = tb.shaped_mbit(src, dst)
            got = tb.iperf_mbit(src, dst, seconds)
            rows.append(
                {
                    "row": f"link {src[-1]}->{dst[-1]} (iperf3)",
                    "shaped_mbit": shaped,
                    "achieved_mbit": got,
                    "ratio": got / shaped,
                }
            )
    finally:
        tb.teardown()

    prov = get_provisioner("netns", grid=GRID, scale=0.1, idle_timeout=120)
    tid = f"bench-{uuid.uuid4().hex[:8]}"
    up, fleet = timed(lambda: prov.provision({A: 1, B: 1, C: 1}, transfer_id=tid))
    try:
        src = work / "src"
        write_dataset(src, {f"p{i:02d}.bin": 8 * MiB for i in range(mib // 8)})
        for route, shaped in (((A, B), 100.0), ((A, C, B), 400.0)):
            samples: list[Progress] = []
            run_transfer(
                make_plan(list(route)),
                fleet,
                f"file://{src}",
                f"file://{work / ('dst-' + str(len(route)))}",
                journal_dir=work / "journal",
                part_size=MiB,
                progress=samples.append,
                verify="size",
            )
            got = steady_rate_mbit(samples)
            rows.append(
                {
                    "row": f"transfer {'->'.join(r[-1] for r in route)} (engine)",
                    "shaped_mbit": shaped,
                    "achieved_mbit": got,
                    "ratio": got / shaped,
                }
            )
    finally:
        down, _ = timed(lambda: prov.deprovision(fleet))
    rows.insert(2, {"row": "netns provision (testbed + 3 agents)", "seconds": up})
    rows.insert(3, {"row": "netns deprovision (testbed + 3 agents)", "seconds": down})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, short runs")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    seconds = 1.0 if args.quick else 3.0
    mib = 40 if args.quick else 160
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-provision-") as tmp:
        work = Path(tmp)
        rows += bench_ssh(repeat, work)
        if os.geteuid() == 0:
            rows += bench_netns(repeat, seconds, mib, work)
        else:
            print("not root: netns rows skipped", file=sys.stderr)
    print(f"{'row':45} {'seconds':>8} {'shaped':>8} {'achieved':>9} {'ratio':>6}")
    for r in rows:
        sec = f"{r['seconds']:.2f}" if "seconds" in r else ""
        shaped = f"{r['shaped_mbit']:.0f}" if "shaped_mbit" in r else ""
        got = f"{r['achieved_mbit']:.1f}" if "achieved_mbit" in r else ""
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        print(f"{r['row']:45} {sec:>8} {shaped:>8} {got:>9} {ratio:>6}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "provision",
        "quick": args.quick,
        "repeat": repeat,
        "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "rows": rows,
    }
    (RESULTS / "provision.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'provision.json'} (Mbit/s; seconds are medians of {repeat})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
