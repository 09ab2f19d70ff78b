"""Gateway data-path throughput on loopback, against iperf3 in the same run.

Synthetic source (``synthetic://``) and null sink (``null://``), so only the gateways are
measured: framing, HMAC-authenticated connections, CRC32C at source and sink, relaying and flow
control. Rows:

* ``iperf3 -P N``: the loopback ceiling of this machine right now;
* ``iperf3 -P N via splice relay``: the same through a minimal kernel-splice relay process, as
  a ratio of iperf3 direct: the relay/direct ratio the machine itself allows (three busy
  processes on the same cores);
* ``direct``: source gateway -> sink gateway, N connections, checksums on (target >= 0.5 of iperf3);
* ``relay``: source -> relay -> sink (target >= 0.85 of direct);
  both rows also give each gateway's CPU seconds per GiB moved (user + system, from /proc),
  which is steadier than Gbit/s on a shared machine;
* ``direct+encrypt`` / ``direct+zstd``: AES-GCM / zstd per hop (reported);
* ``relay RSS``: downstream throttled to 10% of upstream; the relay's peak RSS must stay within
  its buffer budget + 150 MB.

Usage: ``python benchmarks/gateway.py [--quick] [--connections 8] [--gib 4]``.
Writes ``benchmarks/results/gateway.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway_agent.auth import load_secret  # noqa: E402
from gateway_agent.client import GatewayClient  # noqa: E402
from skyplane_ops.provision.fleet import GatewayFleet  # noqa: E402
from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402

MiB = 1024 * 1024
RESULTS = REPO / "benchmarks" / "results"


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Move one direction of a connection socket -> pipe -> socket in the kernel (splice)."""
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, 1031, MiB)  # F_SETPIPE_SZ, as the gateways' relays use
    try:
        while True:
            n = os.splice(src.fileno(), w, MiB)
            if n == 0:
                break
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        os.close(r)
        os.close(w)


def splice_relay(listen_port: int, target_port: int) -> None:
    """The smallest relay: every accepted connection is spliced to ``target_port`` both ways.

    Run as its own process (``--splice-relay``) in the reference row: what a relay costs on
    this machine when it does nothing but move bytes in the kernel (no framing, no checksums).
    """
    server = socket.create_server(("127.0.0.1", listen_port))
    print("ready", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def iperf3(connections: int, seconds: float, via_relay: bool = False) -> float:
    """Gbit/s of ``iperf3 -P N`` over loopback (server started and stopped here); with
    ``via_relay`` the client connects through a ``splice_relay`` process."""
    port = "5299"
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    relay: subprocess.Popen[str] | None = None
    client_port = port
    try:
        if via_relay:
            client_port = "5298"
            relay = subprocess.Popen(
                [sys.executable, __file__, "--splice-relay", client_port, port],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert relay.stdout is not None
            relay.stdout.readline()  # "ready"
        time.sleep(0.5)
        out = subprocess.run(
            [
                "iperf3",
                "-c",
                "127.0.0.1",
                "-p",
                client_port,
                "-P",
                str(connections),
                "-t",
                str(seconds),
                "-J",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e9
    finally:
        for proc in (server, relay):
            if proc is not None:
                proc.kill()
                proc.wait()


def run_job(
    fleet: GatewayFleet,
    route: list[str],
    *,
    chunks: int,
    chunk_bytes: int,
    connections: int,
    encrypt: bool = False,
    compress_level: int = 0,
    hooks: dict[str, dict[str, Any]] | None = None,
    writer_threads: int = 8,
) -> dict[str, Any]:
    """Push ``chunks`` synthetic chunks along ``route``; returns Gbit/s and gateway health."""
    secret = load_secret(fleet.secret_ref)
    gws = {r: fleet.in_region(r)[0] for r in route}
    clients = {r: GatewayClient(g.host, g.control_port, secret) for r, g in gws.items()}
    job_id = f"bench-{uuid.uuid4().hex[:8]}"
    hops = {
        f"{u}>{v}": {
            "connections": connections,
            "encrypt": encrypt,
            "compress_level": compress_level,
        }
        for u, v in itertools.pairwise(route)
    }
    spec_base = {
        "job_id": job_id,
        "routes": {"0": route},
        "gateways": {
            r: [{"id": g.gateway_id, "host": g.host, "data_port": g.data_port}]
            for r, g in gws.items()
        },
        "hops": hops,
        "src_uri": f"synthetic://{chunks}x{chunk_bytes}",
        "dst_uri": "null://",
        "writer_threads": writer_threads,
    }
    for r in reversed(route):
        clients[r].start_job({**spec_base, "test_hooks": (hooks or {}).get(r, {})})
    descs = [
        {
            "chunk": i,
            "path": "0",
            "segs": [
                {
                    "key": f"obj-{i:06d}",
                    "offset": 0,
                    "length": chunk_bytes,
                    "part": 1,
                    "upload_id": "null",
                }
            ],
        }
        for i in range(chunks)
    ]
    sink = clients[route[-1]]
    cpu0 = {r: _cpu_seconds(g) for r, g in gws.items()}
    t0 = time.perf_counter()
    clients[route[0]].submit_chunks(job_id, descs)
    done, cursor = 0, 0
    while done < chunks:
        st = sink.status(job_id, cursor)
        cursor = st["cursor"]
        done += sum(1 for e in st["events"] if e["t"] == "done")
        for r, c in clients.items():
            if r != route[-1] and c.status(job_id, 10**9)["error"]:
                raise RuntimeError(c.status(job_id, 0)["error"])
        if st["error"]:
            raise RuntimeError(st["error"])
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    gib = chunks * chunk_bytes / 1024**3
    cpu = {r.split(":")[-1]: (_cpu_seconds(g) - cpu0[r]) / gib for r, g in gws.items()}
    health = {r: c.health() for r, c in clients.items()}
    for c in clients.values():
        c.stop_job(job_id)
    return {
        "gbps": chunks * chunk_bytes * 8 / 1e9 / seconds,
        "seconds": seconds,
        "bytes": chunks * chunk_bytes,
        "health": health,
        "cpu_s_per_gib": cpu,
    }


def _cpu_seconds(gateway: Any) -> float:
    """User + system CPU seconds of a local gateway process so far (from /proc)."""
    try:
        with open(f"/proc/{int(gateway.resources['pid'])}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, KeyError, ValueError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _dump_logs(fleet: GatewayFleet) -> None:
    """Print the tail of every gateway's log (called when a run fails)."""
    for g in fleet.gateways:
        path = Path(g.resources.get("log", ""))
        if path.is_file():
            print(f"--- {g.gateway_id} ---\n{path.read_text(errors='replace')[-2000:]}")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--splice-relay":
        splice_relay(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small volumes, one smoke figure")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--gib", type=float, default=8.0, help="volume per throughput row")
    parser.add_argument("--chunk-mib", type=int, default=64)
    parser.add_argument("--relay-buffer-mib", type=int, default=256)
    args = parser.parse_args()
    gib = 2.0 if args.quick else args.gib
    chunk = args.chunk_mib * MiB
    chunks = max(8, int(gib * 1024 / args.chunk_mib))
    rows: list[dict[str, Any]] = []
    secs = 3 if args.quick else 8
    base = iperf3(args.connections, secs)
    rows.append({"case": f"iperf3 -P {args.connections}", "gbps": base})
    # The machine's own relay ceiling: the same iperf3 through a kernel-splice relay process
    # (a third process on the same cores), as a ratio of iperf3 direct.
    ref = iperf3(args.connections, secs, via_relay=True)
    rows.append(
        {
            "case": f"iperf3 -P {args.connections} via splice relay",
            "gbps": ref,
            "ratio": ref / base,
            "ratio_of": "iperf3 direct",
        }
    )

    route3 = ["bench:src", "bench:relay", "bench:dst"]
    prov = LocalProvisioner(idle_timeout=300, buffer_mib=1024, extra_args=["--enable-test-hooks"])
    fleet = prov.provision(dict.fromkeys(route3, 1), transfer_id=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        direct_route = [route3[0], route3[2]]
        kw = {"chunks": chunks, "chunk_bytes": chunk, "connections": args.connections}
        # Warm-up (buffer pools, page faults, TCP windows) is not part of any figure.
        run_job(fleet, route3, **{**kw, "chunks": max(8, chunks // 4)})
        res = run_job(fleet, direct_route, **kw)
        direct = res["gbps"]
        rows.append(
            {
                "case": "direct",
                "gbps": direct,
                "ratio": direct / base,
                "target": 0.5,
                "cpu_s_per_gib": res["cpu_s_per_gib"],
            }
        )
        direct_row = rows[-1]
        res = run_job(fleet, route3, **kw)
        relay = res["gbps"]
        rows.append(
            {
                "case": "relay",
                "gbps": relay,
                "ratio": relay / direct,
                "target": 0.85,
                "ratio_of": "direct",
                "cpu_s_per_gib": res["cpu_s_per_gib"],
            }
        )
        enc = run_job(fleet, direct_route, encrypt=True, **kw)["gbps"]
        rows.append(
            {"case": "direct+encrypt", "gbps": enc, "ratio": enc / direct, "ratio_of": "direct"}
        )
        kw_small = {**kw, "chunks": max(4, chunks // 4)}
        zstd = run_job(fleet, direct_route, compress_level=1, **kw_small)["gbps"]
        rows.append(
            {
                "case": "direct+zstd(1), random data",
                "gbps": zstd,
                "ratio": zstd / direct,
                "ratio_of": "direct",
            }
        )
    except BaseException:
        _dump_logs(fleet)
        raise
    finally:
        prov.deprovision(fleet)

    # Memory bound under a slow downstream, once with the relay splicing frames kernel-side and
    # once forced through its buffers (any test hook disables splicing); fresh fleets each time
    # so peak RSS starts clean.
    budget = args.relay_buffer_mib
    sink_rate = max(0.05, 0.1 * direct_row["gbps"]) * 1e9 / 8  # 10% of the direct rate
    n = max(8, int((1.0 if args.quick else 3.0) * 1024 / args.chunk_mib))
    for mode, relay_hooks in (("spliced", {}), ("buffered", {"relay_delay_s": 0})):
        prov = LocalProvisioner(
            idle_timeout=300, buffer_mib=budget, extra_args=["--enable-test-hooks"]
        )
        fleet = prov.provision(
            dict.fromkeys(route3, 1), transfer_id=f"bench-{uuid.uuid4().hex[:8]}"
        )
        try:
            res = run_job(
                fleet,
                route3,
                chunks=n,
                chunk_bytes=chunk,
                connections=args.connections,
                hooks={route3[1]: relay_hooks, route3[2]: {"sink_rate_bps": sink_rate}},
                writer_threads=1,
            )
            rss_mb = res["health"][route3[1]]["max_rss_kb"] / 1024
            peak_buf = res["health"][route3[1]]["buffer"]["peak"] / MiB
            rows.append(
                {
                    "case": f"relay RSS ({mode}), sink at 10%",
                    "gbps": res["gbps"],
                    "relay_peak_rss_mb": rss_mb,
                    "relay_peak_buffer_mib": peak_buf,
                    "limit_mb": budget + 150,
                    "ok": rss_mb <= budget + 150,
                }
            )
        except BaseException:
            _dump_logs(fleet)
            raise
        finally:
            prov.deprovision(fleet)

    print(f"{'case':34} {'Gbit/s':>8} {'ratio':>7} {'target':>7}  notes")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        target = f"{r['target']:.2f}" if "target" in r else ""
        notes = ""
        if "relay_peak_rss_mb" in r:
            notes = (
                f"peak RSS {r['relay_peak_rss_mb']:.0f} MB (limit {r['limit_mb']} MB), "
                f"peak buffer {r['relay_peak_buffer_mib']:.0f} MiB"
            )
        elif "ratio_of" in r:
            notes = f"ratio of {r['ratio_of']}"
        if "cpu_s_per_gib" in r:
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_s_per_gib"].items())
            notes = f"{notes}; " if notes else ""
            notes += f"CPU s/GiB: {cpu}"
        print(f"{r['case']:34} {r['gbps']:8.2f} {ratio:>7} {target:>7}  {notes}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "connections": args.connections,
        "chunk_mib": args.chunk_mib,
        "gib": gib,
        "quick": args.quick,
        "rows": rows,
        "note": "machine shared with other jobs",
    }
    (RESULTS / "gateway.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
