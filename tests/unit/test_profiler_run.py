"""Profiler runs on the local backend: real gateway agents on loopback, real probes.

Budget refusal, deprovisioning on success, failure and Ctrl-C, and resume after a run that
was killed half-way (SIGKILL of a real ``skyplane-ops profile`` process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.probe import ProbeResult
from skyplane_ops.cli import main as cli_main
from skyplane_ops.profiler import (
    BudgetExceededError,
    GridStore,
    ProfilerError,
    estimate_cost,
    refresh_grid,
)
from skyplane_ops.profiler.drivers import AgentProbeDriver
from skyplane_ops.profiles import load_default_profile
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.local import LocalProvisioner

REGIONS = ["aws:us-east-1", "aws:us-west-2", "gcp:us-central1"]
FAST: dict[str, Any] = {"connections": 4, "duration_s": 0.6}
REPO = Path(__file__).resolve().parents[2]


class Recording:
    """The real local provisioner, recording what it was asked to do."""

    name = "local"

    def __init__(self) -> None:
        self.inner = LocalProvisioner(idle_timeout=120)
        self.provisioned: list[GatewayFleet] = []
        self.deprovisioned: list[str] = []

    def provision(
        self, vms: Mapping[str, int], *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet:
        fleet = self.inner.provision(vms, transfer_id=transfer_id, tags=tags)
        self.provisioned.append(fleet)
        return fleet

    def deprovision(self, fleet: GatewayFleet) -> None:
        self.inner.deprovision(fleet)
        self.deprovisioned.append(fleet.transfer_id)

    def sweep(self, **kwargs: Any) -> list[str]:
        return self.inner.sweep(**kwargs)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def _gone(fleet: GatewayFleet, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_run_measures_every_pair_publishes_and_deprovisions(tmp_path: Path) -> None:
    prov = Recording()
    events: list[dict[str, Any]] = []
    result = refresh_grid(
        REGIONS,
        backend="local",
        store_uri=str(tmp_path / "grid"),
        provisioner=prov,
        progress=events.append,
        **FAST,
    )
    assert result.measured == 6 and not result.failed and result.rounds == 2
    assert {(m.src, m.dst) for m in result.measurements} == {
        (a, b) for a in REGIONS for b in REGIONS if a != b
    }
    assert all(m.gbps > 0.05 and m.rtt_ms > 0 and m.connections == 4 for m in result.measurements)
    assert prov.deprovisioned == [result.run_id]
    assert _gone(prov.provisioned[0])
    store = GridStore(str(tmp_path / "grid"))
    assert store.latest_version() == result.version
    assert len(store.read_version()) == 6 and store.pending() == []
    assert [e["event"] for e in events][:3] == ["plan", "provision", "round"]
    summary = result.to_dict()
    assert summary["measured"] == 6 and summary["version"] == result.version
    assert len(str(summary)) < 2000  # small enough for XCom / Dagster metadata


def test_budget_refusal_happens_before_anything_is_provisioned(tmp_path: Path) -> None:
    prov = Recording()
    profile = load_default_profile()
    expected = estimate_cost(
        [(a, b) for a in REGIONS for b in REGIONS if a != b],
        5.0,
        profile.throughput.gbps,
        profile.prices.egress_usd_per_gb,
    ).total_usd
    assert expected > 0.01
    with pytest.raises(BudgetExceededError) as err:
        refresh_grid(
            REGIONS,
            store_uri=str(tmp_path / "grid"),
            provisioner=prov,
            budget_usd=0.01,
            connections=64,
            duration_s=5.0,
        )
    assert err.value.estimate_usd == pytest.approx(expected)
    assert err.value.budget_usd == 0.01 and err.value.pairs == 6
    assert prov.provisioned == []
    # A budget above the estimate lets the dry run through.
    from skyplane_ops.profiler.run import plan_run

    plan = plan_run(
        REGIONS, store_uri=str(tmp_path / "grid"), budget_usd=expected * 1.01, connections=64
    )
    assert plan["within_budget"] and plan["estimate_usd"] == pytest.approx(expected, rel=1e-4)
    # By default every pair is probed at 4 and at 64 connections: twice the probe time.
    both = plan_run(REGIONS, store_uri=str(tmp_path / "grid"), budget_usd=expected * 1.01)
    assert not both["within_budget"]
    assert both["estimate_usd"] == pytest.approx(2 * expected, rel=1e-4)


def test_cli_budget_refusal_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    rc = cli_main(
        ["profile", "--regions", ",".join(REGIONS), "--store", str(tmp_path), "--budget-usd", "0"]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "above the budget of $0.0000" in err and "Traceback" not in err


def test_fresh_pairs_are_skipped(tmp_path: Path) -> None:
    store_uri = str(tmp_path / "grid")
    first = refresh_grid(REGIONS[:2], store_uri=store_uri, **FAST)
    assert first.measured == 2
    prov = Recording()
    again = refresh_grid(REGIONS[:2], store_uri=store_uri, freshness_s=3600, provisioner=prov)
    assert again.measured == 0 and again.skipped_fresh == 2 and prov.provisioned == []
    grown = refresh_grid(REGIONS, store_uri=store_uri, freshness_s=3600, **FAST)
    assert grown.skipped_fresh == 2 and grown.measured == 4
    assert len(GridStore(store_uri).latest()) == 6


class FailOne(AgentProbeDriver):
    """The real agent driver, except that one pair's probe fails (a broken path)."""

    def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> ProbeResult:
        if (src.region, dst.region) == (REGIONS[0], REGIONS[1]):
            raise ProfilerError("simulated broken path")
        return super().probe(src, dst, connections, seconds)


def test_a_failed_probe_is_reported_and_the_rest_is_kept(tmp_path: Path) -> None:
    prov = Recording()
    result = refresh_grid(
        REGIONS, store_uri=str(tmp_path), provisioner=prov, driver=FailOne(), **FAST
    )
    assert list(result.failed) == [f"{REGIONS[0]}->{REGIONS[1]}"]
    assert result.measured == 5 and prov.deprovisioned == [result.run_id]
    # The unreachable pair is recorded as "no link" (rate 0, with the error), not left out.
    latest = GridStore(str(tmp_path)).latest()
    row = latest[(REGIONS[0], REGIONS[1])]
    assert row.no_link and row.gbps == 0 and "simulated broken path" in row.error
    assert not latest[(REGIONS[1], REGIONS[0])].no_link


def test_each_pair_is_probed_at_every_connection_count(tmp_path: Path) -> None:
    result = refresh_grid(REGIONS[:2], store_uri=str(tmp_path), connections=[8, 2], duration_s=0.6)
    assert result.connections == (2, 8)
    got = sorted((m.src, m.dst, m.connections) for m in GridStore(str(tmp_path)).measurements())
    a, b = REGIONS[:2]
    assert got == [(a, b, 2), (a, b, 8), (b, a, 2), (b, a, 8)]
    assert all(m.gbps > 0 and m.source == "profile" for m in result.measurements)


def test_profile_cli_warns_and_exits_0_when_one_pair_is_unreachable(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from skyplane_ops.profiler import run as run_module

    monkeypatch.setattr(run_module, "_default_driver", lambda backend, port=0: FailOne())
    argv = ["profile", "--regions", ",".join(REGIONS[:2]), "--store", str(tmp_path)]
    assert cli_main([*argv, "--connections", "2", "--duration", "0.6"]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 pair(s) could not be measured" in err and "no link" in err


def test_profile_fails_when_nothing_could_be_measured(tmp_path: Path, monkeypatch) -> None:
    from skyplane_ops.profiler import run as run_module

    class AllFail(AgentProbeDriver):
        def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> Any:
            raise ProfilerError("no route")

    monkeypatch.setattr(run_module, "_default_driver", lambda backend, port=0: AllFail())
    argv = ["profile", "--regions", ",".join(REGIONS[:2]), "--store", str(tmp_path)]
    assert cli_main([*argv, "--connections", "2", "--duration", "0.6"]) != 0


def test_loopback_never_enters_the_default_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path))
    prov = Recording()
    with pytest.raises(ProfilerError, match="scratch store"):
        refresh_grid(REGIONS[:2], store_uri=str(tmp_path / "grid"), provisioner=prov, **FAST)
    assert prov.provisioned == []
    assert cli_main(["profile", "--regions", ",".join(REGIONS[:2])]) != 0


class Boom(AgentProbeDriver):
    def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> ProbeResult:
        raise RuntimeError("driver crashed")

    def start(self, fleet: GatewayFleet) -> None:
        super().start(fleet)
        raise RuntimeError("driver crashed at start")


def test_gateways_are_deprovisioned_when_the_run_fails(tmp_path: Path) -> None:
    prov = Recording()
    with pytest.raises(RuntimeError, match="crashed at start"):
        refresh_grid(REGIONS[:2], store_uri=str(tmp_path), provisioner=prov, driver=Boom(), **FAST)
    assert len(prov.deprovisioned) == 1 and _gone(prov.provisioned[0])


def _profile_cmd(store: Path, run_id: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "skyplane_ops.cli",
        "profile",
        "--regions",
        ",".join(REGIONS),
        "--backend",
        "local",
        "--connections",
        "4",
        "--duration",
        "1.0",
        "--store",
        str(store),
        "--run-id",
        run_id,
        *extra,
    ]


def _wait_for_journal(store: Path, run_id: str, count: int, proc: subprocess.Popen) -> int:
    journal = store / "journal" / run_id
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        n = len(list(journal.glob("*.parquet"))) if journal.exists() else 0
        if n >= count:
            return n
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.05)
    pytest.fail("the run never journalled a measurement")


@pytest.mark.slow
def test_resume_after_a_killed_run(tmp_path: Path) -> None:
    """SIGKILL a real run after its first measurements; the re-run measures only the rest."""
    store = tmp_path / "grid"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.Popen(
        _profile_cmd(store, "prof-killed", "--exclusive"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_journal(store, "prof-killed", 2, killed)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        # The gateways of a SIGKILLed run are left behind; the sweeper finds them by tag.
        assert LocalProvisioner().sweep(transfer_id="prof-killed")
    finally:
        if killed.poll() is None:
            killed.kill()
    kept = GridStore(str(store)).pending()
    assert 2 <= len(kept) < 6, "the dead run kept what it measured, and only that"
    done_before = {(m.src, m.dst) for m in kept}
    result = refresh_grid(REGIONS, store_uri=str(store), freshness_s=3600, **FAST)
    measured_now = {(m.src, m.dst) for m in result.measurements}
    assert result.skipped_fresh == len(done_before)
    assert measured_now.isdisjoint(done_before)
    assert measured_now | done_before == {(a, b) for a in REGIONS for b in REGIONS if a != b}
    assert len(GridStore(str(store)).latest()) == 6


@pytest.mark.slow
def test_ctrl_c_deprovisions_and_keeps_measurements(tmp_path: Path) -> None:
    store = tmp_path / "grid"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        _profile_cmd(store, "prof-interrupted", "--exclusive"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_journal(store, "prof-interrupted", 1, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "deprovisioning" in err
    assert LocalProvisioner().sweep(transfer_id="prof-interrupted") == []
    grid = GridStore(str(store))
    assert grid.latest_version() is not None and 1 <= len(grid.read_version()) < 6


def test_bad_store_fails_before_provisioning(tmp_path: Path) -> None:
    from skyplane_ops.profiler import GridStoreError

    prov = Recording()
    with pytest.raises(GridStoreError):
        refresh_grid(REGIONS, store_uri="mem://no-such-bucket/grid", provisioner=prov, **FAST)
    assert prov.provisioned == []


def test_process_driver_probes_from_each_gateway_host(tmp_path: Path) -> None:
    """The fallback for agents without the probe endpoint: probe processes per gateway."""
    from skyplane_ops.profiler.drivers import ProcessProbeDriver

    prov = Recording()
    result = refresh_grid(
        REGIONS[:2],
        store_uri=str(tmp_path),
        provisioner=prov,
        driver=ProcessProbeDriver(),
        **FAST,
    )
    assert result.measured == 2 and all(m.gbps > 0.05 for m in result.measurements)
    assert prov.deprovisioned == [result.run_id]
