"""The agent's launch contract with provisioning: ready file, signed control API, idle exit."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway_agent.auth import new_secret, write_secret
from gateway_agent.client import GatewayClient, GatewayError


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], dict[str, int], bytes]:
    secret = new_secret()
    write_secret(str(tmp_path / "secret"), secret)
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
         "--control-port", "0", "--data-port", "0", "--secret-file", str(tmp_path / "secret"),
         "--ready-file", str(ready), "--gateway-id", "gw-t-0", "--region", "test:a", *extra],
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
        client.shutdown()
        assert proc.wait(timeout=10) == 0
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
