"""Gateway data-path throughput on loopback, against iperf3 in the same run.

Synthetic source (``synthetic://``) and null sink (``null://``), so only the gateways are
measured: framing, HMAC-authenticated connections, CRC32C at source and sink, relaying and flow
control. Rows:

* ``iperf3 -P N``: the loopback ceiling of this machine right now;
* ``direct``: source gateway -> sink gateway, N connections, checksums on (target >= 0.5 of iperf3);
* ``relay``: source -> relay -> sink (target >= 0.85 of direct);
* ``direct+encrypt`` / ``direct+zstd``: AES-GCM / zstd per hop (reported);
* ``relay RSS``: downstream throttled to 10% of upstream; the relay's peak RSS must stay within
  its buffer budget + 150 MB.

Usage: ``python benchmarks/gateway.py [--quick] [--connections 8] [--gib 4]``.
Writes ``benchmarks/results/gateway.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
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


def iperf3(connections: int, seconds: float) -> float:
    """Gbit/s of ``iperf3 -P N`` over loopback (server started and stopped here)."""
    port = "5299"
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        out = subprocess.run(
            [
                "iperf3",
                "-c",
                "127.0.0.1",
                "-p",
                port,
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
        server.kill()
        server.wait()


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
    health = {r: c.health() for r, c in clients.items()}
    for c in clients.values():
        c.stop_job(job_id)
    return {
        "gbps": chunks * chunk_bytes * 8 / 1e9 / seconds,
        "seconds": seconds,
        "bytes": chunks * chunk_bytes,
        "health": health,
    }


def _dump_logs(fleet: GatewayFleet) -> None:
    """Print the tail of every gateway's log (called when a run fails)."""
    for g in fleet.gateways:
        path = Path(g.resources.get("log", ""))
        if path.is_file():
            print(f"--- {g.gateway_id} ---\n{path.read_text(errors='replace')[-2000:]}")


def main() -> int:
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
    base = iperf3(args.connections, 3 if args.quick else 8)
    rows.append({"case": f"iperf3 -P {args.connections}", "gbps": base})

    route3 = ["bench:src", "bench:relay", "bench:dst"]
    prov = LocalProvisioner(idle_timeout=300, buffer_mib=1024, extra_args=["--enable-test-hooks"])
    fleet = prov.provision(dict.fromkeys(route3, 1), transfer_id=f"bench-{uuid.uuid4().hex[:8]}")
    try:
        direct_route = [route3[0], route3[2]]
        kw = {"chunks": chunks, "chunk_bytes": chunk, "connections": args.connections}
        # Warm-up (buffer pools, page faults, TCP windows) is not part of any figure.
        run_job(fleet, route3, **{**kw, "chunks": max(8, chunks // 4)})
        direct = run_job(fleet, direct_route, **kw)["gbps"]
        rows.append({"case": "direct", "gbps": direct, "ratio": direct / base, "target": 0.5})
        relay = run_job(fleet, route3, **kw)["gbps"]
        rows.append(
            {
                "case": "relay",
                "gbps": relay,
                "ratio": relay / direct,
                "target": 0.85,
                "ratio_of": "direct",
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
    sink_rate = max(0.05, 0.1 * rows[1]["gbps"]) * 1e9 / 8  # 10% of the direct rate
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
