"""The gateway probe over loopback, with real sockets and a real ProbeServer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from gateway_agent.probe import (
    NONCE_BYTES,
    ProbeAuthError,
    ProbeError,
    ProbeResult,
    ProbeServer,
    auth_response,
    run_probe,
)
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


def test_unauthenticated_data_is_not_counted(server: ProbeServer) -> None:
    """A raw client that skips the challenge gets refused before any byte is counted."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        nonce = sock.recv(NONCE_BYTES)
        assert len(nonce) == NONCE_BYTES
        sock.sendall(b"\x00" * 32)
        assert sock.recv(1) == b"\x00"
        assert sock.recv(1) == b""  # closed
    good = auth_response(b"probe-secret", nonce)
    assert good != b"\x00" * 32


def test_unreachable_peer_is_a_probe_error() -> None:
    with pytest.raises(ProbeError, match="cannot reach"):
        run_probe("127.0.0.1", free_port(), b"x", connections=1, seconds=0.5)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        run_probe("127.0.0.1", 1, b"x", connections=0, seconds=1)
    with pytest.raises(ValueError):
        run_probe("127.0.0.1", 1, b"x", connections=1, seconds=0)


def test_probe_cli_serve_and_run(tmp_path) -> None:
    """The stand-alone CLI the profiler uses where the agent is not running."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"cli-secret\n")
    serve = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent.probe", "serve", "--secret-file", str(secret)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = json.loads(serve.stdout.readline())["port"]
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
            timeout=30,
            check=True,
        )
        result = ProbeResult.from_dict(json.loads(out.stdout))
        assert result.connections == 3 and result.bytes_received > 0
    finally:
        serve.terminate()
        serve.wait(timeout=10)
