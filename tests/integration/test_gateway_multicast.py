"""Multicast on real gateway processes over loopback: a chunk read once at the source fans out
along its tree (a relay to two next hops, a destination that writes and forwards), and every
destination folder ends up byte-identical to the source; a slow sink holds back no other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.auth import load_secret, new_secret, write_secret
from gateway_agent.client import GatewayClient

CHUNK = 64 * 1024
N = 8
MiB = 1024 * 1024
#: Every gateway's byte budget: small, so a stalled branch backs up into its upstream.
BUDGET_MIB = 16
#: Regions: a (source), r (relay only), b and c (destinations), d (a destination behind c).
TREE = {"next": {"test:a": ["test:r"], "test:r": ["test:b", "test:c"], "test:c": ["test:d"]}}
SINKS = ["test:b", "test:c", "test:d"]


def _start(tmp: Path, name: str, region: str) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    ready = tmp / f"{name}.ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
         "--control-port", "0", "--data-port", "0", "--secret-file", str(tmp / "secret"),
         "--ready-file", str(ready), "--gateway-id", name, "--region", region,
         "--enable-test-hooks", "--idle-timeout", "120", "--buffer-mib", str(BUDGET_MIB)],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, f"{name} did not start"
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())


Gateways = tuple[dict[str, GatewayClient], dict[str, Any], dict[str, subprocess.Popen[bytes]]]


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Gateways]:
    write_secret(str(tmp_path / "secret"), new_secret())
    secret = load_secret(str(tmp_path / "secret"))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    clients, table = {}, {}
    try:
        for region in ("test:a", "test:r", "test:b", "test:c", "test:d"):
            name = "gw-" + region.split(":")[1]
            proc, info = _start(tmp_path, name, region)
            procs[region] = proc
            clients[region] = GatewayClient("127.0.0.1", info["control_port"], secret)
            table[region] = [{"id": name, "host": "127.0.0.1", "data_port": info["data_port"]}]
        yield clients, table, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _done(client: GatewayClient, job: str) -> set[int]:
    events = client.status(job)["events"]
    return {e["chunk"] for e in events if e["t"] == "done"}


def _spec(tmp_path: Path, table: dict[str, Any], data: dict[str, bytes]) -> dict[str, Any]:
    """A tree job from the folder ``src`` (filled with ``data``) to one folder per sink."""
    src = tmp_path / "src"
    src.mkdir()
    for key, body in data.items():
        (src / key).write_bytes(body)
    dsts = {r: tmp_path / r.split(":")[1] for r in SINKS}
    return {
        "job_id": "j-mc",
        "routes": {},
        "trees": {"m": {**TREE, "sinks": SINKS}},
        "gateways": table,
        "hops": {f"{u}>{v}": {"connections": 2} for u, vs in TREE["next"].items() for v in vs},
        "src_uri": f"file://{src}/",
        "dst_uris": {r: f"file://{p}/" for r, p in dsts.items()},
        "writer_threads": 1,
    }


def _descs(data: dict[str, bytes]) -> list[dict[str, Any]]:
    return [
        {"chunk": i, "path": "m", "segs": [{"key": k, "offset": 0, "length": len(b), "part": 1}]}
        for i, (k, b) in enumerate(data.items())
    ]


def test_a_chunk_read_once_reaches_every_destination_whole(
    tmp_path: Path, gateways: Gateways
) -> None:
    clients, table, _ = gateways
    data = {f"obj-{i}": os.urandom(CHUNK + i) for i in range(N)}
    spec = _spec(tmp_path, table, data)
    dsts = {r: tmp_path / r.split(":")[1] for r in SINKS}
    slow = {"test_hooks": {"sink_rate_bps": 50_000}}  # d writes 50 kB/s: >= 10 s for all
    for region in ("test:d", "test:c", "test:b", "test:r", "test:a"):
        clients[region].start_job({**spec, **(slow if region == "test:d" else {})})
    clients["test:a"].submit_chunks("j-mc", _descs(data))
    deadline = time.monotonic() + 60
    while _done(clients["test:b"], "j-mc") != set(range(N)):
        assert time.monotonic() < deadline, "b never got every chunk"
        time.sleep(0.05)
    # b is done while the slow sink behind c is still writing: d held nobody back.
    assert _done(clients["test:d"], "j-mc") != set(range(N))
    while _done(clients["test:d"], "j-mc") != set(range(N)) or _done(
        clients["test:c"], "j-mc"
    ) != set(range(N)):
        assert time.monotonic() < deadline, "c or d never got every chunk"
        time.sleep(0.05)
    for region, folder in dsts.items():
        for key, body in data.items():
            assert (folder / key).read_bytes() == body, f"{region} {key}"
        events = clients[region].status("j-mc")["events"]
        assert {e.get("dst") for e in events if e["t"] == "done"} == {region}
    total = sum(len(b) for b in data.values())
    counters = {r: c.status("j-mc")["counters"] for r, c in clients.items()}
    assert counters["test:a"]["bytes_read"] == total  # read once
    assert counters["test:a"]["bytes_sent"] == total  # the shared edge a -> r carries it once
    assert counters["test:r"]["bytes_sent"] == 2 * total  # to b and to c
    assert counters["test:c"]["bytes_sent"] == total  # c writes it and forwards it to d
    assert counters["test:r"]["bytes_written"] == 0
    for region in SINKS:
        assert counters[region]["bytes_written"] == total


def test_a_dead_destination_stops_holding_the_others_back(
    tmp_path: Path, gateways: Gateways
) -> None:
    """d's sink crawls, so its backlog fills c's budget, then r's: b stalls with it. Killing d
    mid-run frees them (c's sends to d fail and release their copies): b and c complete."""
    clients, table, procs = gateways
    n = 24
    data = {f"big-{i}": os.urandom(4 * MiB) for i in range(n)}  # 96 MiB: 2x the budgets
    spec = _spec(tmp_path, table, data)
    slow = {"test_hooks": {"sink_rate_bps": 1_000_000}}
    for region in ("test:d", "test:c", "test:b", "test:r", "test:a"):
        clients[region].start_job({**spec, **(slow if region == "test:d" else {})})
    clients["test:a"].submit_chunks("j-mc", _descs(data))
    deadline = time.monotonic() + 60
    # Back-pressure reached the fan-out at r: c and r hold full budgets, b waits.
    while min(clients[r].health()["buffer"]["in_use"] for r in ("test:c", "test:r")) < 12 * MiB:
        assert time.monotonic() < deadline, "the slow branch never backed up"
        time.sleep(0.05)
    assert len(_done(clients["test:b"], "j-mc")) < n
    procs["test:d"].kill()
    procs["test:d"].wait()
    while (_done(clients["test:b"], "j-mc"), _done(clients["test:c"], "j-mc")) != (
        set(range(n)),
        set(range(n)),
    ):
        assert time.monotonic() < deadline, "b and c did not complete without d"
        time.sleep(0.05)
    for region in ("test:b", "test:c"):
        folder = tmp_path / region.split(":")[1]
        assert all((folder / k).read_bytes() == body for k, body in data.items()), region
    events = clients["test:c"].status("j-mc")["events"]
    assert any(e["t"] in ("lost", "error") for e in events)  # d's copies, for a re-send


def test_a_big_object_lands_in_each_destinations_own_multipart_upload(
    tmp_path: Path, gateways: Gateways
) -> None:
    """Parts of one object fan out; each sink writes them to its destination's upload."""
    from gateway_agent.stores import open_store

    clients, table, _ = gateways
    body = os.urandom(3 * MiB + 123)
    spec = _spec(tmp_path, table, {"big.bin": body})
    stores = {r: open_store(spec["dst_uris"][r]) for r in SINKS}
    uploads = {r: s.create_multipart("big.bin") for r, s in stores.items()}
    assert len(set(uploads.values())) == len(SINKS)  # one upload per destination
    for region in ("test:d", "test:c", "test:b", "test:r", "test:a"):
        clients[region].start_job(spec)
    parts = []
    for n, offset in enumerate(range(0, len(body), MiB), start=1):
        seg = {"key": "big.bin", "offset": offset, "length": min(MiB, len(body) - offset)}
        parts.append({"chunk": n, "path": "m", "segs": [{**seg, "part": n, "upload_ids": uploads}]})
    clients["test:a"].submit_chunks("j-mc", parts)
    deadline = time.monotonic() + 60
    want = {p["chunk"] for p in parts}
    while any(_done(clients[r], "j-mc") != want for r in SINKS):
        assert time.monotonic() < deadline, "some sink never wrote every part"
        time.sleep(0.05)
    for region, store in stores.items():
        store.complete_multipart("big.bin", uploads[region], [p["chunk"] for p in parts])
        folder = tmp_path / region.split(":")[1]
        assert (folder / "big.bin").read_bytes() == body, region


def test_a_destination_that_cannot_write_still_forwards_to_the_next(
    tmp_path: Path, gateways: Gateways
) -> None:
    """c's destination refuses every write: c reports it, and still forwards to d; b and d
    complete byte-identical."""
    clients, table, _ = gateways
    data = {f"obj-{i}": os.urandom(CHUNK + i) for i in range(N)}
    spec = _spec(tmp_path, table, data)
    spec["dst_uris"]["test:c"] = "file:///proc/skyplane-not-writable/"
    for region in ("test:d", "test:c", "test:b", "test:r", "test:a"):
        clients[region].start_job(spec)
    clients["test:a"].submit_chunks("j-mc", _descs(data))
    deadline = time.monotonic() + 60
    while any(_done(clients[r], "j-mc") != set(range(N)) for r in ("test:b", "test:d")):
        assert time.monotonic() < deadline, "b or d never got every chunk"
        time.sleep(0.05)
    for region in ("test:b", "test:d"):
        folder = tmp_path / region.split(":")[1]
        assert all((folder / k).read_bytes() == body for k, body in data.items()), region
    status = clients["test:c"].status("j-mc")
    assert not _done(clients["test:c"], "j-mc")
    assert status["error"] or any(e["t"] == "failed" for e in status["events"])
    assert status["counters"]["bytes_sent"] == sum(len(b) for b in data.values())
