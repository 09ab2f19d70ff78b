"""``POST /v1/rekey`` on a real agent process: a warm gateway handed to the next transfer
takes a new secret (sealed with the current one, for that gateway), forgets the previous
transfer's jobs and their credentials, and answers to the old secret no more."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from gateway_agent.auth import load_secret, rekey_context, seal
from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.testing.gateways import start_agent


def test_a_rekeyed_gateway_drops_its_jobs_and_the_old_secret(tmp_path: Path) -> None:
    agent = start_agent(tmp_path, "gw-rk-0")
    try:
        old = agent.client(timeout=5)
        me = [{"id": "gw-rk-0", "host": "127.0.0.1", "data_port": agent.data_port}]
        up = [{"id": "gw-up-0", "host": "127.0.0.1", "data_port": 9}]
        spec = {
            "job_id": "job-1",
            "routes": {"0": ["test:a", "test:f"]},
            "gateways": {"test:a": up, "test:f": me},
            "dst_uri": "null://",
        }
        assert old.start_job(spec)["started"]
        assert list(old.health()["jobs"]) == ["job-1"]
        new = secrets.token_bytes(32)
        assert old.rekey(new) == {"ok": True, "jobs_dropped": 1}
        # The same client now signs with the new secret; the agent has no job left.
        assert old.health()["jobs"] == {}
        with pytest.raises(GatewayError):
            GatewayClient("127.0.0.1", agent.control_port, agent.secret, attempts=1).health()
        # A restarted agent would read the new secret from its file.
        assert load_secret(str(tmp_path / "gw-rk-0.secret")) == new
    finally:
        agent.stop()


def test_a_new_secret_not_sealed_for_this_gateway_is_refused(tmp_path: Path) -> None:
    agent = start_agent(tmp_path, "gw-rk-1")
    try:
        client = agent.client(timeout=5)
        other = seal(agent.secret, secrets.token_bytes(32), rekey_context("gw-other-0"))
        with pytest.raises(GatewayError, match="does not open"):
            client._call("POST", "/v1/rekey", {"sealed": other}, attempts=1)
        client.health()  # still the old secret
    finally:
        agent.stop()
