"""The kill matrix: source, relay, sink and CLI x SIGKILL, SIGSTOP, SIGTERM, all real processes.

Each case copies a folder (three multi-part objects and forty small ones, some with an older
version already at the destination) through ``src -> relay -> sink`` gateway processes started
by the local backend, signals one process once a quarter of the bytes are journaled, and then
asserts that nothing was lost: the source is unchanged and every destination object is its old
version or its new one, byte-identical, never partial. A hop that stops moving bytes must end
in a clear error naming the hop (hop timeout 3 s here), a CLI that dies must not leave its
gateways running (lease 4 s here), and a re-run on a fresh fleet completes byte-identical
without re-sending journaled bytes. The same cases with the default timeouts are
``benchmarks/kill_matrix.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skyplane_ops.testing.gateways import (
    REGION_OF,
    cli_kill_case,
    gateway_kill_case,
    start_agent,
    wait_for,
)
from skyplane_ops.testing.transfer import DST, RELAY, SRC

HOP_TIMEOUT = 3.0
LEASE = 4.0
RATE_BPS = 1.0e6
# Two 5 MiB objects and forty small ones: enough for every process to hold work when signalled.
SIZE: dict[str, int] = {"big": 2, "big_mib": 5}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP", "SIGTERM"])
@pytest.mark.parametrize("target", ["source", "relay", "sink"])
def test_gateway_killed_mid_copy(tmp_path: Path, target: str, sig: str) -> None:
    case = gateway_kill_case(
        target, sig, tmp_path, hop_timeout=HOP_TIMEOUT, lease_s=LEASE, rate_bps=RATE_BPS, **SIZE
    )
    assert case.problems == []
    if case.outcome == "completed":  # the signal landed after the last byte: nothing to check
        pytest.skip("the copy finished before the signal landed")
    assert case.outcome == "failed cleanly", case
    # The error names a hop into (or out of) the signalled gateway's region.
    region = {"source": "test:src", "relay": "test:relay", "sink": "test:dst"}[target]
    assert "hop " in case.error and region in case.error, case.error
    assert case.bytes_resent_on_resume == 0


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP", "SIGTERM"])
def test_cli_killed_mid_copy(tmp_path: Path, sig: str) -> None:
    case = cli_kill_case(
        sig, tmp_path, hop_timeout=HOP_TIMEOUT, lease_s=LEASE, rate_bps=RATE_BPS, **SIZE
    )
    assert case.problems == []
    if case.outcome == "completed":
        pytest.skip("the copy finished before the signal landed")
    assert case.gateways_left_after_s is not None  # every gateway of the CLI stopped
    if sig != "SIGKILL":
        assert case.error.startswith("exit status") and "Traceback" not in case.error
    assert case.bytes_resent_on_resume == 0


def test_a_stopped_relay_is_routed_around(tmp_path: Path) -> None:
    """With a second path in the plan, the stopped relay's chunks go the other way."""
    # A wider window than the matrix: the path left must not look stalled while it takes on
    # the rerouted chunks (each 2 MiB chunk takes ~1.4 s to read at the hooked source rate).
    case = gateway_kill_case(
        "relay", "SIGSTOP", tmp_path, hop_timeout=6.0, lease_s=8.0, rate_bps=1.5e6,
        paths=([SRC, RELAY, DST], [SRC, DST]),
    )  # fmt: skip
    assert case.problems == []
    assert case.outcome == "completed", case


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("target", ["source", "relay", "sink"])
def test_a_dead_gateway_among_live_ones_is_left_out(tmp_path: Path, target: str, sig: str) -> None:
    """Two gateways in the signalled region: the other one carries the copy to the end,
    byte-identical, and the result says which gateway was routed around."""
    case = gateway_kill_case(
        target, sig, tmp_path, hop_timeout=HOP_TIMEOUT, lease_s=LEASE, rate_bps=RATE_BPS,
        vms=2, **SIZE,
    )  # fmt: skip
    assert case.problems == []
    assert case.outcome == "completed", case
    if not case.routed_around:  # the signal landed after the last chunk it held had landed
        pytest.skip("the signalled gateway held no work when it died")
    region = REGION_OF[target]
    assert any(f"in {region} died" in line for line in case.routed_around), case


def test_a_gateway_stops_when_its_lease_lapses(tmp_path: Path) -> None:
    agent = start_agent(tmp_path, "gw-lease", "--lease", "5", "--idle-timeout", "0")
    try:
        client = agent.client()
        for _ in range(8):  # renewed once a second: alive well past its first lease (5 s)
            assert client.renew_lease(5)["ok"]
            assert agent.proc.poll() is None
            time.sleep(1)
        wait_for(lambda: agent.proc.poll() is not None, 60, "the lease to lapse", step=0.2)
        assert agent.proc.returncode == 0
        assert "lease lapsed" in agent.log.read_text()
    finally:
        agent.stop()
