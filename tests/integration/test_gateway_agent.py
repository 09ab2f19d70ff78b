"""The agent's launch contract with provisioning: ready file, signed control API, idle exit."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gateway_agent import wire
from gateway_agent.auth import load_secret, new_secret, write_secret
from gateway_agent.client import GatewayClient, GatewayError, ProbeFailedError


def _start(
    tmp_path: Path, *extra: str, name: str = "gw-t-0", region: str = "test:a"
) -> tuple[subprocess.Popen[bytes], dict[str, int], bytes]:
    secret_file = tmp_path / "secret"
    if not secret_file.exists():
        write_secret(str(secret_file), new_secret())
    secret = load_secret(str(secret_file))
    ready = tmp_path / f"{name}.ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
         "--control-port", "0", "--data-port", "0", "--secret-file", str(secret_file),
         "--ready-file", str(ready), "--gateway-id", name, "--region", region, *extra],
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "agent did not start"
        time.sleep(0.02)
    return proc, json.loads(ready.read_text()), secret


def test_ready_file_health_and_shutdown(tmp_path: Path) -> None:
    proc, info, secret = _start(tmp_path)
    try:
        assert set(info) == {"control_port", "data_port", "pid"} and info["pid"] == proc.pid
        client = GatewayClient("127.0.0.1", info["control_port"], secret)
        health = client.health()
        assert health["ok"] and health["gateway_id"] == "gw-t-0" and health["region"] == "test:a"
        assert health["data_port"] == info["data_port"]
        with pytest.raises(GatewayError) as err:
            GatewayClient("127.0.0.1", info["control_port"], b"not the secret").health()
        assert err.value.status == 401
        t0 = time.monotonic()
        client.shutdown()
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - t0 < 1.5  # prompt: ~0.05 s unloaded
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_idle_timeout_exits_without_control_requests(tmp_path: Path) -> None:
    proc, info, _secret = _start(tmp_path, "--idle-timeout", "1.5")
    try:
        t0 = time.monotonic()
        # Unauthenticated requests do not keep it alive.
        with pytest.raises(GatewayError):
            GatewayClient("127.0.0.1", info["control_port"], b"x" * 32).health()
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - t0 >= 1.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_loaded_agents_stop_promptly_on_sigterm(tmp_path: Path) -> None:
    """A source whose readers wait for budget and a sink stuck in a slow write both exit fast.

    The source's budget (16 MiB) is full because the sink writes at 1 MB/s (a test hook that
    stands for a slow store); SIGTERM must stop both jobs and both processes well within the
    bound (it took > 1.5 s when every blocked thread waited out its poll timeout).
    """
    src, src_info, secret = _start(tmp_path, "--buffer-mib", "16", "--enable-test-hooks")
    dst, dst_info, _ = _start(
        tmp_path, "--buffer-mib", "16", "--enable-test-hooks", name="gw-t-1", region="test:b"
    )
    procs = [src, dst]
    try:
        clients = [
            GatewayClient("127.0.0.1", i["control_port"], secret) for i in (src_info, dst_info)
        ]
        chunk = 4 * 1024 * 1024
        spec = {
            "job_id": "j-stop",
            "routes": {"0": ["test:a", "test:b"]},
            "gateways": {
                "test:a": [
                    {"id": "gw-t-0", "host": "127.0.0.1", "data_port": src_info["data_port"]}
                ],
                "test:b": [
                    {"id": "gw-t-1", "host": "127.0.0.1", "data_port": dst_info["data_port"]}
                ],
            },
            "hops": {"test:a>test:b": {"connections": 2}},
            "src_uri": f"synthetic://64x{chunk}",
            "dst_uri": "null://",
            "writer_threads": 2,
        }
        clients[1].start_job({**spec, "test_hooks": {"sink_rate_bps": 1e6}})
        clients[0].start_job(spec)
        descs = [
            {
                "chunk": i,
                "path": "0",
                "segs": [{"key": f"obj-{i:06d}", "offset": 0, "length": chunk, "part": 1}],
            }
            for i in range(64)
        ]
        clients[0].submit_chunks("j-stop", descs)
        deadline = time.monotonic() + 20
        while min(c.health()["buffer"]["in_use"] for c in clients) < 12 * 1024 * 1024:
            assert time.monotonic() < deadline, "budgets never filled up"
            time.sleep(0.05)
        t0 = time.monotonic()
        for p in procs:
            p.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=10) for p in procs] == [0, 0]
        assert time.monotonic() - t0 < 1.5  # ~0.1 s unloaded
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_probe_methods_and_run_is_never_retried(tmp_path: Path) -> None:
    """``probe_listen`` / ``probe`` / ``probe_close`` on real agents; a probe run is sent once.

    The no-retry half uses a real loopback listener that drops every connection without an
    answer: the idempotent ``probe_listen`` is retried (4 connections), ``probe`` is not (1).
    """
    a, a_info, secret = _start(tmp_path)
    b, b_info, _ = _start(tmp_path, name="gw-t-1", region="test:b")
    try:
        client_a = GatewayClient("127.0.0.1", a_info["control_port"], secret)
        client_b = GatewayClient("127.0.0.1", b_info["control_port"], secret)
        port = client_b.probe_listen()
        assert client_b.probe_listen() == port  # idempotent
        result = client_a.probe("127.0.0.1", port, connections=2, seconds=0.5)
        assert result.connections == 2 and result.bytes_received > 0
        assert client_b.probe_close()
        with pytest.raises(ProbeFailedError):  # nobody listens there any more
            client_a.probe("127.0.0.1", port, connections=1, seconds=0.2)
        assert not client_b.probe_close()
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(timeout=10)

    dropper = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def drop_all() -> None:
        while True:
            try:
                conn, _ = dropper.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=drop_all, daemon=True).start()
    try:
        client = GatewayClient("127.0.0.1", dropper.getsockname()[1], secret, attempts=4)
        with pytest.raises(GatewayError):
            client.probe_listen()
        assert len(accepted) == 4
        accepted.clear()
        with pytest.raises(GatewayError):
            client.probe("127.0.0.1", 9, connections=1, seconds=0.1)
        time.sleep(0.2)
        assert len(accepted) == 1
    finally:
        dropper.shutdown(socket.SHUT_RDWR)
        dropper.close()


def test_leave_out_cuts_only_the_dead_senders_half_sent_frame(tmp_path: Path) -> None:
    """Two upstream gateways (played by this test over real handshakes) are each half-way
    through a frame at a sink agent, holding its budget; ``leave_out`` of one cuts that
    connection alone and its budget comes back (a stopped sender used to hold it for the
    120 s I/O timeout)."""
    proc, info, secret = _start(tmp_path, name="gw-sink", region="test:b")
    conns: list[socket.socket] = []
    try:
        client = GatewayClient("127.0.0.1", info["control_port"], secret)
        upstream = [{"id": f"gw-up-{i}", "host": "127.0.0.1", "data_port": 9} for i in (0, 1)]
        sink = [{"id": "gw-sink", "host": "127.0.0.1", "data_port": info["data_port"]}]
        spec = {
            "job_id": "j-leave",
            "routes": {"0": ["test:a", "test:b"]},
            "gateways": {"test:a": upstream, "test:b": sink},
            "dst_uri": "null://",
        }
        client.start_job(spec)
        size = 4 * 1024 * 1024
        for i in (0, 1):
            # The frame's bytes as a sender puts them on the wire, then only half of them.
            a, b = socket.socketpair()
            meta = {"job": "j-leave", "chunk": i, "path": "0", "segs": [{"key": f"k{i}"}]}
            sending = threading.Thread(
                target=wire.send_frame, args=(a, wire.Session(None), meta, b"x" * size, 0)
            )
            sending.start()
            frame = bytearray()
            while len(frame) < size:
                frame += b.recv(1 << 20)
            sending.join()
            a.close()
            b.close()
            sock = socket.create_connection(("127.0.0.1", info["data_port"]), timeout=10)
            wire.client_handshake(sock, secret, encrypt=False, sender=f"gw-up-{i}")
            sock.sendall(frame[: len(frame) // 2])
            conns.append(sock)

        def in_use() -> int:
            return int(client.health()["buffer"]["in_use"])

        deadline = time.monotonic() + 20
        while in_use() < 2 * size:  # both half-read frames hold their lease
            assert time.monotonic() < deadline, "the frames never took their budget"
            time.sleep(0.05)
        assert client.leave_out("j-leave", "gw-up-0")["connections_cut"] == 1
        deadline = time.monotonic() + 20
        while in_use() > size:
            assert time.monotonic() < deadline, "the dead sender's budget did not come back"
            time.sleep(0.05)
        conns[0].settimeout(10)
        assert conns[0].recv(1) == b""  # cut by the agent
        conns[1].settimeout(0.5)
        with pytest.raises(TimeoutError):  # the live sender's connection is still open
            conns[1].recv(1)
    finally:
        for sock in conns:
            sock.close()
        proc.kill()
        proc.wait()
