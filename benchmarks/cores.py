"""CPU cost of each data-plane stage, gateway Gbit/s on 1 and 2 cores, and the per-VM ceiling.

Part 1, stages in isolation, each through the agent's own code: ``read`` (LocalStore ranged
read, page cache warm), ``crc32c`` (``stores.checksum``), the end-to-end chunk tag of clear
hops (``wire.FrameTagger``: GMAC alone, and ``crc32c+tag``, the source's one pass), ``zstd``
compress at the levels
the agent is driven with (1; 3 is ``cp --compress``) on random and on 2:1-compressible data, and
decompress, ``aes-gcm`` seal/open in the wire's 1 MiB records, ``send``/``receive``
(``wire.send_frame``/``read_body``, clear, clear with the sink checking the tag, and sealed,
over a loopback TCP pair) and ``write``
(LocalStore multipart part write). Each stage is timed with per-thread CPU clocks
(``RUSAGE_THREAD``), so only the stage's own thread counts; ``GIL held`` is the share of the
stage's time it keeps the GIL, from how far a pure-Python spinning thread gets meanwhile (see
``spinner_ratio``): the stages that release it can use more cores of one process.

Part 2, a direct pair of real agent processes (synthetic source, null sink, 8 connections)
pinned with ``taskset -a -p -c 0`` and then ``-c 0,1``: clear+tag (what a clear hop is: every
chunk tagged at the source and checked at the sink), AES-GCM, zstd(3).

Part 3, MAC on clear frames vs plain vs AES-GCM (``modes``): per mode the CPU s/GiB of a
source's and a sink's wire work (checksum, tag, seal, send / receive, check, open; the store's
read and write are the same in every mode and left out), from the stages, and Gbit/s per core
(8.59 / that). ``plain`` (clear frames with a CRC32C only) is no longer what the agent does;
it is the baseline the tag is measured against.

Part 4, the projection for a 32-vCPU VM (1 vCPU taken as one core of this machine): one
process is bounded by its GIL-held CPU per GiB (the stages' measured GIL-held shares plus the
agent's own work, see ``project``), by its busy threads (one per connection) and by the VM's
vCPUs; a VM with enough processes by its vCPUs alone. Both against the NIC caps in
``/work/shared/CLOUD-FACTS.md``, with the worker processes each cap needs.

Usage: ``python benchmarks/cores.py [--mib 256] [--gib 1]``.
Writes ``benchmarks/results/cores.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from gateway import _cpu_seconds, run_job  # noqa: E402

from gateway_agent import wire  # noqa: E402
from gateway_agent.stores import open_store  # noqa: E402
from gateway_agent.stores.checksum import IMPLEMENTATION, crc32c  # noqa: E402
from skyplane_ops.provision.local import LocalProvisioner  # noqa: E402

MiB = 1024 * 1024
GIB_BITS = 8 * 1024**3 / 1e9  # Gbit in one GiB
CHUNK = 64 * MiB
RESULTS = REPO / "benchmarks" / "results"
# Per-VM NIC caps (Gbit/s) of the Skyplane paper's 32-vCPU classes (CLOUD-FACTS.md).
NIC_CAPS = {"aws m5.8xlarge (egress)": 5.0, "gcp n2-standard-32 (external)": 7.0,
            "aws m5.8xlarge (NIC)": 10.0, "azure D32_v5": 16.0}  # fmt: skip
VCPUS = 32
THREADS = 8  # busy threads per gateway process: one per connection (8 by default)


def thread_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


def proc_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(step: Callable[[], int], total: int) -> float:
    """Run ``step`` (returns bytes done) until ``total`` bytes; the calling thread's CPU s."""
    c0, done = thread_cpu(), 0
    while done < total:
        done += step()
    return thread_cpu() - c0


def spinner_ratio(run: Callable[[], object], calls: int = 3) -> float:
    """How far a pure-Python thread gets while ``run()`` executes, relative to idle.

    A spinner thread counts loop turns (each needs the GIL). Its turns per second while
    ``run()`` executes are compared with its turns while this thread sleeps for the same time
    (the GIL free), interleaved so both see the same machine load: a stage that holds the GIL
    throughout stops the spinner (ratio 0); one that releases it lets it go on (a loaded CPU
    still slows it, so a releasing stage is well below 1: see ``held_share``).
    """
    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    busy = [0, 0.0]
    idle = [0, 0.0]
    try:
        for _ in range(calls):
            c0, t0 = count[0], time.perf_counter()
            run()
            dt = time.perf_counter() - t0
            busy[0] += count[0] - c0
            busy[1] += dt
            c0, t0 = count[0], time.perf_counter()
            time.sleep(dt)
            idle[0] += count[0] - c0
            idle[1] += time.perf_counter() - t0
    finally:
        stop.set()
        spinner.join()
    return (busy[0] / busy[1]) / max(idle[0] / idle[1], 1e-9)


def held_share(ratio: float, control: float) -> float:
    """GIL-held share from a spinner ratio, against a control that surely releases it (a
    CPU-bound ``hashlib.sha256`` of 64 MiB) measured under the same load: at the control's
    ratio 0, at a stopped spinner 1."""
    return min(1.0, max(0.0, 1 - ratio / max(control, 1e-9)))


def loopback_pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on 127.0.0.1, tuned as the agent tunes data connections."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    for s in (a, b):
        wire.tune_socket(s)
    return a, b


def wire_cost(
    payload: bytes, total: int, sealed: bool, sink_crc: bool, tagged: bool = False
) -> tuple[float, float]:
    """(sender, receiver) thread CPU s for ``total`` bytes of frames through the real wire;
    ``tagged``: the frames carry a chunk tag that the receiver (a sink) checks on arrival."""
    a, b = loopback_pair()
    key = AESGCM.generate_key(bit_length=256)
    frame_key = wire.frame_key(key)
    tx = wire.Session(AESGCM(key) if sealed else None)
    rx = wire.Session(AESGCM(key) if sealed else None, frame_key=frame_key)
    view = memoryview(payload)
    meta: dict[str, Any] = {"k": "x"}
    tagger = wire.FrameTagger(frame_key) if tagged else None
    crc = wire.crc_and_tag(payload, tagger)
    if tagger is not None:
        meta["tag"] = tagger.seal(meta, len(payload), crc)
    out: dict[str, float] = {}
    want = (lambda _m: True) if sink_crc else None

    def receive() -> None:
        buf = bytearray(len(payload))

        def step() -> int:
            frame = wire.read_body(b, rx, wire.read_header(b), buffer=buf, want_crc=want)
            assert not tagged or frame.tag_ok
            return len(frame.payload)

        out["rx"] = timed(step, total)

    t = threading.Thread(target=receive)
    t.start()
    out["tx"] = timed(lambda: wire.send_frame(a, tx, meta, view, crc) and len(view), total)
    t.join()
    a.close()
    b.close()
    return out["tx"], out["rx"]


def stage_rows(mib: int, workdir: str) -> list[dict[str, Any]]:
    """CPU s/GiB and GIL-held share of every stage over ``mib`` MiB each."""
    total = mib * MiB
    rand = os.urandom(CHUNK)
    half = bytes(b & 0x0F for b in os.urandom(1 << 20)) * (CHUNK >> 20)  # ~2:1 for zstd
    store = open_store(f"file://{workdir}/store/")
    src_len = 4 * CHUNK
    with open(f"{workdir}/store/src.bin", "wb") as fh:
        for _ in range(4):
            fh.write(rand)
    store.read("src.bin", 0, src_len)  # warm the page cache: the read row is the store's CPU
    rows: list[dict[str, Any]] = []
    control = spinner_ratio(lambda: hashlib.sha256(rand))
    print(f"  control: spinner at {control:.2f} of idle beside sha256 (releases the GIL)")

    def gil_held(run: Callable[[], object]) -> float:
        return held_share(spinner_ratio(run), control)

    def add(stage: str, make: Callable[[], Callable[[], int]], vol: int = total) -> None:
        cpu = timed(make(), vol)
        row = {"stage": stage, "cpu_s_per_gib": cpu / (vol / 1024**3)}
        row["gil_held"] = gil_held(make())
        rows.append(row)
        print(
            f"  {stage:28} {cpu / (vol / 1024**3):7.3f} CPU s/GiB  GIL held {row['gil_held']:.2f}"
        )

    def reader() -> Callable[[], int]:
        pos = [0]

        def step() -> int:
            off = pos[0] % src_len
            pos[0] += CHUNK
            return len(store.read("src.bin", off, CHUNK))

        return step

    add("read (local, cached)", reader)
    add(f"crc32c ({IMPLEMENTATION})", lambda: lambda: crc32c(rand) and CHUNK)
    tag_key = wire.frame_key(b"k" * 32)

    def tag_only() -> Callable[[], int]:
        view = memoryview(rand)

        def step() -> int:
            tagger = wire.FrameTagger(tag_key)
            for pos in range(0, CHUNK, wire.CRC_PIECE):
                tagger.update(view[pos : pos + wire.CRC_PIECE])
            tagger.seal({"k": "x"}, CHUNK, 0)
            return CHUNK

        return step

    def crc_and_tag() -> Callable[[], int]:
        return lambda: wire.crc_and_tag(rand, wire.FrameTagger(tag_key)) * 0 + CHUNK

    add("tag (gmac, 1 MiB pieces)", tag_only)
    add("crc32c+tag (one pass)", crc_and_tag)
    for level in (1, 3):
        for name, data in (("random", rand), ("2:1", half)):
            vol = total if level == 1 else total // 2

            def comp(lv: int = level, d: bytes = data) -> Callable[[], int]:
                c = zstandard.ZstdCompressor(level=lv)
                return lambda: len(c.compress(d)) * 0 + len(d)

            add(f"zstd-{level} compress, {name}", comp, vol)
    packed = zstandard.ZstdCompressor(level=3).compress(half)

    def decomp() -> Callable[[], int]:
        d = zstandard.ZstdDecompressor()
        return lambda: len(d.decompress(packed, max_output_size=CHUNK))

    add("zstd decompress, 2:1", decomp)

    def sealer(open_: bool) -> Callable[[], int]:
        aead = AESGCM(AESGCM.generate_key(bit_length=256))
        rec = bytearray(wire.SEAL_PIECE + wire.TAG)
        plain = bytearray(wire.SEAL_PIECE)
        nonce = bytes(12)
        sealed = aead.encrypt(nonce, bytes(plain), b"aad")
        src = memoryview(rand)

        def step() -> int:
            for pos in range(0, CHUNK, wire.SEAL_PIECE):
                if open_:
                    aead.decrypt_into(nonce, sealed, b"aad", plain)
                else:
                    aead.encrypt_into(nonce, src[pos : pos + wire.SEAL_PIECE], b"aad", rec)
            return CHUNK

        return step

    add("aes-gcm seal (1 MiB records)", lambda: sealer(False))
    add("aes-gcm open (1 MiB records)", lambda: sealer(True))
    for kind, sealed, tagged in (
        ("clear", False, False),
        ("clear+tag", False, True),
        ("sealed", True, False),
    ):
        tx, rx = wire_cost(rand, total, sealed, sink_crc=True, tagged=tagged)
        # one figure for the pair: both threads run while the spinner measures
        held = gil_held(partial(wire_cost, rand, 2 * CHUNK, sealed, True, tagged))
        receive = "receive+crc32c+tag" if tagged else "receive+crc32c"
        for stage, cpu in ((f"send ({kind})", tx), (f"{receive} ({kind})", rx)):
            rows.append({"stage": stage, "cpu_s_per_gib": cpu / (total / 1024**3)})
            rows[-1]["gil_held"] = held
            print(f"  {stage:28} {rows[-1]['cpu_s_per_gib']:7.3f} CPU s/GiB  GIL held {held:.2f}")

    def writer() -> Callable[[], int]:
        key = f"dst-{uuid.uuid4().hex[:6]}.bin"
        state = {"upload": store.create_multipart(key), "part": 0}

        def step() -> int:
            if state["part"] == 8:  # keep the file small: drop it and start a new upload
                store.abort_multipart(key, str(state["upload"]))
                state.update(upload=store.create_multipart(key), part=0)
            state["part"] = int(state["part"]) + 1
            store.upload_part(key, str(state["upload"]), int(state["part"]), rand)
            return CHUNK

        return step

    add("write (local part, to cache)", writer)
    return rows


def pin(fleet: Any, cpus: str) -> None:
    """``taskset -a -p -c cpus`` on every agent process (all its threads)."""
    for g in fleet.gateways:
        subprocess.run(
            ["taskset", "-a", "-p", "-c", cpus, str(g.resources["pid"])],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def gateway_rows(gib: float) -> list[dict[str, Any]]:
    """Direct pair of real agents on 1 and 2 cores: Gbit/s and CPU s/GiB per gateway."""
    route = ["cores:src", "cores:dst"]
    prov = LocalProvisioner(idle_timeout=300, buffer_mib=1024)
    fleet = prov.provision(dict.fromkeys(route, 1), transfer_id=f"cores-{uuid.uuid4().hex[:8]}")
    chunks = max(8, int(gib * 1024 / 64))
    rows: list[dict[str, Any]] = []
    try:
        kw: dict[str, Any] = {"chunks": chunks, "chunk_bytes": CHUNK, "connections": 8}
        run_job(fleet, route, **{**kw, "chunks": 8})  # warm-up, not a figure
        for cpus in ("0", "0,1", "0", "0,1"):  # twice, interleaved: best of two is kept
            pin(fleet, cpus)
            for mode, extra in (
                ("clear+tag", {}),  # a clear hop: chunks tagged at the source, checked at the sink
                ("aes-gcm", {"encrypt": True}),
                ("zstd-3", {"compress_level": 3, "chunks": max(4, chunks // 2)}),
            ):
                res = run_job(fleet, route, **{**kw, **extra})
                cpu = res["cpu_s_per_gib"]
                row = {"cores": len(cpus.split(",")), "mode": mode, "gbps": res["gbps"]}
                row.update({f"{k}_cpu_s_per_gib": v for k, v in cpu.items()})
                same = [r for r in rows if r["cores"] == row["cores"] and r["mode"] == mode]
                if same and same[0]["gbps"] >= row["gbps"]:
                    continue
                rows[:] = [r for r in rows if r not in same] + [row]
                print(
                    f"  {row['cores']} core(s) {mode:8} {res['gbps']:6.2f} Gbit/s  "
                    f"CPU s/GiB src {cpu['src']:.2f} dst {cpu['dst']:.2f}"
                )
        assert all(_cpu_seconds(g) > 0 for g in fleet.gateways)
    finally:
        prov.deprovision(fleet)
    return rows


def project(stages: list[dict[str, Any]], gws: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-process and per-VM Gbit/s ceilings of a source and a sink gateway (clear+tag and
    sealed; plain, untagged, as the baseline).

    A gateway's CPU per GiB is its stages' sum plus the agent's own work beyond them (queues,
    leases, status), taken as the best measured gateway CPU minus the stages that run in it
    (synthetic source, null sink: no read, no write) and counted as holding the GIL. One
    process tops out at the smallest of: (GIL-held s/GiB)^-1, its busy threads (``THREADS``:
    one per connection) each on a core, and the VM's 32 vCPUs; a VM (enough processes) at
    the last.
    """
    cost = {r["stage"]: r for r in stages}

    def pick(prefix: str) -> dict[str, Any]:
        return next(v for k, v in cost.items() if k.startswith(prefix))

    out: dict[str, Any] = {}
    for mode, roles in modes_stages().items():
        # The agent's work beyond the stages is the same with or without tags.
        measured = [g for g in gws if g["mode"] == ("clear+tag" if mode == "plain" else mode)]
        for role, (store, wire_stages) in roles.items():
            names = store + wire_stages
            cpu = sum(pick(n)["cpu_s_per_gib"] for n in names)
            gil = sum(pick(n)["cpu_s_per_gib"] * pick(n)["gil_held"] for n in names)
            overhead = 0.0
            if measured:
                agent = min(g[f"{role}_cpu_s_per_gib"] for g in measured)
                overhead = max(0.0, agent - sum(pick(n)["cpu_s_per_gib"] for n in wire_stages))
            cpu += overhead
            gil += overhead
            bounds = {
                "gil": GIB_BITS / max(gil, 1e-9),
                "threads": GIB_BITS * min(THREADS, VCPUS) / cpu,
                "vm": GIB_BITS * VCPUS / cpu,
            }
            one_proc = min(bounds.values())
            out[f"{mode}/{role}"] = {
                "cpu_s_per_gib": cpu,
                "agent_overhead_s_per_gib": overhead,
                "gil_held_s_per_gib": gil,
                "per_core_gbps": GIB_BITS / cpu,
                "bounds_gbps": bounds,
                "one_process_gbps": one_proc,
                "bound_by": min(bounds, key=lambda k: bounds[k]),
                "vm_32vcpu_gbps": bounds["vm"],
                "processes_for": {
                    name: math.ceil(cap / one_proc) for name, cap in NIC_CAPS.items()
                },
            }
    return out


def modes_stages() -> dict[str, dict[str, tuple[list[str], list[str]]]]:
    """Per mode and role: (store stages, stages the benchmark gateways also run)."""
    return {
        "plain": {
            "src": (["read"], ["crc32c (", "send (clear)"]),
            "dst": (["write"], ["receive+crc32c (clear)"]),
        },
        "clear+tag": {
            "src": (["read"], ["crc32c+tag", "send (clear+tag)"]),
            "dst": (["write"], ["receive+crc32c+tag (clear+tag)"]),
        },
        "aes-gcm": {
            "src": (["read"], ["crc32c (", "send (sealed)"]),
            "dst": (["write"], ["receive+crc32c (sealed)"]),
        },
    }


def modes(stages: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """MAC on clear frames vs plain vs AES-GCM: per mode and role the wire work's CPU s/GiB
    (store read/write left out: the same in every mode) and Gbit/s per core."""
    cost = {r["stage"]: r["cpu_s_per_gib"] for r in stages}

    def pick(prefix: str) -> float:
        return next(v for k, v in cost.items() if k.startswith(prefix))

    out: dict[str, dict[str, float]] = {}
    for mode, roles in modes_stages().items():
        row: dict[str, float] = {}
        for role, (_store, wire_stages) in roles.items():
            cpu = sum(pick(n) for n in wire_stages)
            row[f"{role}_cpu_s_per_gib"] = cpu
            row[f"{role}_gbps_per_core"] = GIB_BITS / cpu
        out[mode] = row
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="volume per stage")
    parser.add_argument("--gib", type=float, default=1.0, help="volume per gateway row")
    parser.add_argument("--skip-gateways", action="store_true")
    args = parser.parse_args()
    t0 = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="cores-")
    os.makedirs(f"{workdir}/store")
    try:
        print(f"stages ({args.mib} MiB each, 64 MiB buffers):")
        stages = stage_rows(args.mib, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    gws: list[dict[str, Any]] = []
    if not args.skip_gateways:
        print(f"direct pair of agents, {args.gib} GiB per row, 8 connections:")
        gws = gateway_rows(args.gib)
    proj = project(stages, gws)
    compared = modes(stages)
    print("MAC on clear frames vs plain vs AES-GCM (wire work only; store read/write left out):")
    for mode, row in compared.items():
        print(
            f"  {mode:10} source {row['src_cpu_s_per_gib']:.3f} CPU s/GiB "
            f"({row['src_gbps_per_core']:.1f} Gbit/s per core), sink "
            f"{row['dst_cpu_s_per_gib']:.3f} ({row['dst_gbps_per_core']:.1f})"
        )
    print(f"projection for a {VCPUS}-vCPU VM (1 vCPU = 1 core of this machine):")
    print(f"  {'mode/role':12} {'CPU s/GiB':>9} {'GIL s/GiB':>9} {'1 core':>7} {'1 proc':>7} "
          f"{'bound':>7} {'VM':>7}  processes for 5 / 7 / 10 / 16 Gbit/s")  # fmt: skip
    for name, p in proj.items():
        procs = " / ".join(str(v) for v in p["processes_for"].values())
        print(
            f"  {name:12} {p['cpu_s_per_gib']:9.3f} {p['gil_held_s_per_gib']:9.3f} "
            f"{p['per_core_gbps']:7.1f} {p['one_process_gbps']:7.1f} {p['bound_by']:>7} "
            f"{p['vm_32vcpu_gbps']:7.1f}  {procs}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "stage_mib": args.mib,
        "gateway_gib": args.gib,
        "crc32c": IMPLEMENTATION,
        "stages": stages,
        "gateways": gws,
        "modes": compared,
        "projection": proj,
        "nic_caps_gbps": NIC_CAPS,
        "seconds": time.perf_counter() - t0,
        "note": "2-core machine shared with other jobs; 1 vCPU assumed = 1 core here",
    }
    (RESULTS / "cores.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'cores.json'} in {out['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
