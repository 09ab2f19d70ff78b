"""Strangers on a gateway's ports: memory, threads and descriptors stay bounded, work goes on.

Rows (one real agent process each, peaks sampled from /proc every 50 ms):

* ``baseline``: the agent at rest;
* ``32 x 64 MiB bodies``: 32 strangers, each announcing a 64 MiB body with a forged
  signature and streaming it as fast as the gateway takes it, over and over;
* ``N idle (control) + N idle (data)``: N connections to each port that never send a byte
  (default N = 2000, like the issue's attack);
* ``transfer under attack``: both attacks at once on every gateway of a local
  ``src -> dst`` fleet while it copies a folder; the copy must complete byte-identical.

Targets: RSS grows by at most 32 MiB over the baseline; threads and descriptors stay under
``2 * max_pending + 40`` per agent (max_pending = 64).

Usage: ``python benchmarks/strangers.py [--idle 2000] [--mib 64]``.
Writes ``benchmarks/results/strangers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway_agent.control import MAX_PENDING  # noqa: E402
from skyplane_ops.testing.gateways import (  # noqa: E402
    announce_body,
    dataset,
    idle_connections,
    proc_usage,
    start_agent,
)
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan, read_tree  # noqa: E402
from skyplane_ops.transfer import DispatchOptions, run_transfer  # noqa: E402

MiB = 1024 * 1024
CAP = 2 * MAX_PENDING + 40
STRANGERS = 32


class Sampler:
    """Peak RSS, threads and descriptors of some processes while a phase runs."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak = {p: {"rss_kib": 0, "threads": 0, "fds": 0} for p in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for p in self.pids:
                try:
                    now = proc_usage(p)
                except OSError:
                    continue
                for k, v in now.items():
                    self.peak[p][k] = max(self.peak[p][k], v)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def stream_body(port: int, nbytes: int) -> None:
    """A stranger that announces ``nbytes`` and pushes them until the gateway hangs up."""
    import socket

    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {nbytes}\r\n"
        f"X-Sky-Timestamp: {time.time():.3f}\r\nX-Sky-Signature: {'ab' * 32}\r\n\r\n"
    ).encode()
    block = b"\0" * MiB
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(head)
            for _ in range(nbytes // MiB):
                s.sendall(block)
    except OSError:
        pass  # refused and closed: what a gateway should do


@contextmanager
def announcers(ports: list[int], nbytes: int, streaming: bool = True) -> Iterator[list[int]]:
    """``STRANGERS`` threads per port announcing (and streaming) bodies until the block ends."""
    stop = threading.Event()
    count = [0]

    def run(port: int) -> None:
        while not stop.is_set():
            if streaming:
                stream_body(port, nbytes)
            else:
                announce_body(port, nbytes)
            count[0] += 1

    threads = [
        threading.Thread(target=run, args=(p,), daemon=True)
        for p in ports
        for _ in range(STRANGERS)
    ]
    for t in threads:
        t.start()
    try:
        yield count
    finally:
        stop.set()
        for t in threads:
            t.join()


def phase(name: str, pid: int, base: dict[str, int], body: Callable[[], Any]) -> dict[str, Any]:
    with Sampler([pid]) as s:
        t0 = time.monotonic()
        extra = body() or {}
        seconds = time.monotonic() - t0
    peak = s.peak[pid]
    growth = (peak["rss_kib"] - base["rss_kib"]) / 1024
    row = {
        "phase": name,
        "rss_growth_mib": round(growth, 1),
        "peak_threads": peak["threads"],
        "peak_fds": peak["fds"],
        "seconds": round(seconds, 1),
        "ok": growth <= 32 and peak["threads"] <= CAP and peak["fds"] <= CAP,
        **extra,
    }
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=int, default=2000, help="idle connections per port")
    ap.add_argument("--mib", type=int, default=64, help="announced body size")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the body attack")
    args = ap.parse_args()
    os.environ["SKYPLANE_OPS_HOME"] = tempfile.mkdtemp(prefix="strangers-home-")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        agent = start_agent(Path(tmp))
        try:
            pid = agent.proc.pid
            time.sleep(1.0)
            base = proc_usage(pid)
            rows.append({"phase": "baseline", **base, "ok": True})

            def bodies() -> dict[str, Any]:
                with announcers([agent.control_port], args.mib * MiB) as count:
                    time.sleep(args.seconds)
                health = agent.client().health()
                return {"requests": count[0], "answered_after": bool(health["ok"])}

            rows.append(phase(f"{STRANGERS} x {args.mib} MiB bodies", pid, base, bodies))

            def idle() -> dict[str, Any]:
                with (
                    idle_connections(agent.control_port, args.idle),
                    idle_connections(agent.data_port, args.idle),
                ):
                    t0 = time.monotonic()
                    health = agent.client().health()
                    return {
                        "health_s": round(time.monotonic() - t0, 3),
                        "evicted": health["control"]["evicted"]
                        + health["evicted_data_connections"],
                    }

            rows.append(
                phase(f"{args.idle} idle (control) + {args.idle} idle (data)", pid, base, idle)
            )
        finally:
            agent.stop()
        rows.append(transfer_under_attack(Path(tmp), args))
    width = max(len(r["phase"]) for r in rows)
    print(f"{'phase':<{width}}  rss+MiB  threads  fds  ok   extra")
    for r in rows:
        extra = {k: v for k, v in r.items() if k not in ("phase", "rss_growth_mib", "peak_threads",
                                                          "peak_fds", "ok")}  # fmt: skip
        print(
            f"{r['phase']:<{width}}  {r.get('rss_growth_mib', 0):>7}  "
            f"{r.get('peak_threads', r.get('threads', '')):>7}  "
            f"{r.get('peak_fds', r.get('fds', '')):>4}  {r['ok']!s:<5} {extra}"
        )
    out = REPO / "benchmarks" / "results" / "strangers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cap": CAP, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0 if all(r["ok"] for r in rows) else 1


def transfer_under_attack(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    src, dst, journal = tmp / "src", tmp / "dst", tmp / "journal"
    src.mkdir()
    dst.mkdir()
    _old, new = dataset(src, dst, big=4, big_mib=16, small=50)
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False, buffer_mib=256) as (_, fleet):
        pids = [int(g.resources["pid"]) for g in fleet.gateways]
        base = {p: proc_usage(p) for p in pids}
        controls = [g.control_port for g in fleet.gateways]
        datas = [g.data_port for g in fleet.gateways]
        idle = max(1, args.idle // 2)
        with (
            Sampler(pids) as s,
            announcers(controls, args.mib * MiB),
            idle_connections(controls[0], idle),
            idle_connections(controls[1], idle),
            idle_connections(datas[0], idle),
            idle_connections(datas[1], idle),
        ):
            t0 = time.monotonic()
            result = run_transfer(
                plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
                part_size=8 * MiB, dispatch=DispatchOptions(lease_linger_s=0),
            )  # fmt: skip
            seconds = time.monotonic() - t0
    identical = read_tree(dst) == new
    threads = max(s.peak[p]["threads"] for p in pids)
    fds = max(s.peak[p]["fds"] for p in pids)
    # RSS during a transfer includes its chunk buffers: reported, judged by the rows above.
    growth = max((s.peak[p]["rss_kib"] - base[p]["rss_kib"]) / 1024 for p in pids)
    return {
        "phase": f"transfer under attack ({idle} idle per port + {STRANGERS} announcers)",
        "rss_growth_mib": round(growth, 1),
        "peak_threads": threads,
        "peak_fds": fds,
        "seconds": round(seconds, 1),
        "bytes": result.bytes,
        "byte_identical": identical,
        "ok": identical and threads <= CAP + 40 and fds <= CAP + 40,
    }


if __name__ == "__main__":
    sys.exit(main())
