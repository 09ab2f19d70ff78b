"""The gateway probe over loopback, with real sockets and a real ProbeServer."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time

import pytest

from gateway_agent.probe import (
    ProbeAuthError,
    ProbeError,
    ProbeResult,
    ProbeServer,
    run_probe,
)
from gateway_agent.wire import CHALLENGE_BYTES, HANDSHAKE_TIMEOUT_S, MAGIC
from tests.fixtures.ports import free_port


@pytest.fixture
def server() -> ProbeServer:
    srv = ProbeServer(b"probe-secret").start()
    yield srv
    srv.stop()


def test_probe_reports_both_ends_and_rtt(server: ProbeServer) -> None:
    result = run_probe("127.0.0.1", server.port, b"probe-secret", connections=4, seconds=1.0)
    assert result.connections == 4
    assert result.bytes_received > 0 and result.bytes_sent > 0
    assert result.received_gbps > 0.1 and result.sent_gbps > 0.1
    assert result.gbps == result.received_gbps
    # Both ends count the same stream over nearly the same window.
    assert 0.5 < result.received_gbps / result.sent_gbps < 2.0
    assert 0 < result.rtt_ms < 50
    assert ProbeResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_probe_takes_the_requested_time(server: ProbeServer) -> None:
    t0 = time.monotonic()
    run_probe("127.0.0.1", server.port, "probe-secret", connections=2, seconds=1.5)
    assert 1.4 < time.monotonic() - t0 < 4.0


def test_wrong_secret_is_refused(server: ProbeServer) -> None:
    with pytest.raises(ProbeAuthError):
        run_probe("127.0.0.1", server.port, b"not-the-secret", connections=2, seconds=0.5)
    # The server still serves honest clients afterwards.
    assert run_probe("127.0.0.1", server.port, b"probe-secret", 1, 0.5).bytes_received > 0


def test_unauthenticated_client_is_dropped(server: ProbeServer) -> None:
    """A raw client that cannot answer the agent's challenge is cut off before anything counts."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        hello = sock.recv(len(MAGIC) + CHALLENGE_BYTES)
        assert hello.startswith(MAGIC)
        # A whole wire-v2 answer (challenge, flags, name length 0, proof), all zeros: a wrong
        # proof, so the server closes at once (a short answer would wait out its timeout).
        sock.sendall(b"\x00" * (CHALLENGE_BYTES + 2 + 32))
        sock.settimeout(4 * HANDSHAKE_TIMEOUT_S)
        t0 = time.monotonic()
        assert sock.recv(64) == b""  # closed without a server proof
        assert time.monotonic() - t0 < HANDSHAKE_TIMEOUT_S  # refused, not timed out


def test_unreachable_peer_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="cannot reach"):
        run_probe("127.0.0.1", free_port(), b"x", connections=1, seconds=0.5)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        run_probe("127.0.0.1", 1, b"x", connections=0, seconds=1)
    with pytest.raises(ValueError):
        run_probe("127.0.0.1", 1, b"x", connections=1, seconds=0)


def _read_line_within(proc: subprocess.Popen, seconds: float) -> str:
    """The process's first stdout line, or a failure naming why it never came (no hang)."""
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    if not ready:
        raise AssertionError(f"probe server printed nothing within {seconds:.0f}s")
    return proc.stdout.readline()


def test_probe_cli_serve_and_run(tmp_path) -> None:
    """The stand-alone CLI the profiler uses where the agent is not running.

    The server is bounded by itself: ``--exit-on-stdin-eof`` ends it when we close its stdin
    (the condition we wait on, no signal needed, so it works with SIGINT ignored too) and
    ``--max-seconds`` ends it even if this test died; the client's probe is bounded by its own
    connect timeout. The waits below are generous ceilings, not expected durations.
    """
    secret = tmp_path / "secret"
    secret.write_text(b"cli-secret".hex())
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway_agent.probe",
            "serve",
            "--secret-file",
            str(secret),
            "--exit-on-stdin-eof",
            "--max-seconds",
            "300",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = json.loads(_read_line_within(serve, 120))["port"]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway_agent.probe",
                "run",
                "--peer",
                f"127.0.0.1:{port}",
                "--secret-file",
                str(secret),
                "--connections",
                "3",
                "--seconds",
                "0.8",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        result = ProbeResult.from_dict(json.loads(out.stdout))
        assert result.connections == 3 and result.bytes_received > 0
        serve.stdin.close()  # the server's own exit condition
        assert serve.wait(timeout=120) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _start_agent(tmp_path, name: str, secret_file) -> tuple[subprocess.Popen, dict]:
    ready = tmp_path / f"{name}.ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway_agent",
            "serve",
            "--secret-file",
            str(secret_file),
            "--ready-file",
            str(ready),
            "--gateway-id",
            name,
            "--region",
            f"test:{name}",
            "--idle-timeout",
            "60",
        ]
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None, "agent exited early"
        assert time.monotonic() < deadline, "agent never became ready"
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def test_probe_through_the_agent_control_api(tmp_path) -> None:
    """Two real gateway agents: A probes B over the signed control API route /v1/probe."""
    from gateway_agent.auth import new_secret, write_secret
    from gateway_agent.client import GatewayClient

    secret = new_secret()
    secret_file = tmp_path / "secret"
    write_secret(str(secret_file), secret)
    procs = []
    try:
        a_proc, a = _start_agent(tmp_path, "a", secret_file)
        procs.append(a_proc)
        b_proc, b = _start_agent(tmp_path, "b", secret_file)
        procs.append(b_proc)
        client_a = GatewayClient("127.0.0.1", a["control_port"], secret, timeout=30)
        client_b = GatewayClient("127.0.0.1", b["control_port"], secret, timeout=30)
        fixed = free_port()  # e.g. the one port a cloud firewall opens for probes
        port = client_b.probe_listen(fixed)
        assert port == fixed
        assert client_b.probe_listen() == port  # idempotent: the open server's port
        result = client_a.probe("127.0.0.1", port, connections=4, seconds=1.0)
        assert result.connections == 4 and result.received_gbps > 0.1
        # The agent's probe server speaks the agent's handshake: a wrong secret is refused.
        with pytest.raises(ProbeAuthError):
            run_probe("127.0.0.1", port, b"wrong", connections=1, seconds=0.5)
        assert client_b.probe_close() is True
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
