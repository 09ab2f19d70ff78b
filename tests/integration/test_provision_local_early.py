"""Local gateways started before the plan (``start_early``, while ``cp`` lists the source) are
adopted by ``provision`` as they are (same processes), the plan's other gateways are started
next to them, an early gateway the plan has no place for is stopped, one that died meanwhile is
replaced, and an early start no plan took leaves no process, folder or secret behind."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.local import LocalProvisioner
from skyplane_ops.provision.records import load_fleets

A, B, C = "aws:us-east-1", "aws:us-west-2", "aws:eu-west-1"


def _tid() -> str:
    return f"early-{uuid.uuid4().hex[:8]}"


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def _left(pids: list[int]) -> list[str]:
    """What is left of ``pids`` (their /proc stat lines): [] once all are gone and reaped."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                out.append(fh.read()[:80])
        except OSError:
            continue
    return out


def test_provision_adopts_the_early_agents_and_starts_the_rest() -> None:
    prov = LocalProvisioner()
    tid = _tid()
    early = prov.start_early([A, B], transfer_id=tid)
    early_pids = {gid: p.pid for gid, p in early.procs.items()}
    fleet = prov.provision({A: 1, B: 1, C: 1}, transfer_id=tid, early=early)
    try:
        pids = {g.gateway_id: int(g.resources["pid"]) for g in fleet.gateways}
        assert len(pids) == 3
        for gid, pid in early_pids.items():
            assert pids[gid] == pid  # the same process, not a second start
        early.cancel()  # after adoption: stops nothing, removes nothing the fleet owns
        assert [pid for pid in pids.values() if _gone(pid)] == []
        assert Path(fleet.resources["workdir"]).is_dir() and Path(fleet.secret_ref).exists()
    finally:
        prov.deprovision(fleet)
    assert _left(list(pids.values())) == []
    assert not Path(fleet.resources["workdir"]).exists() and not Path(fleet.secret_ref).exists()


def test_an_early_agent_the_plan_does_not_use_is_stopped() -> None:
    prov = LocalProvisioner()
    tid = _tid()
    early = prov.start_early([A, B], transfer_id=tid)
    unused = next(p for gid, p in early.procs.items() if "west-2" in gid)
    fleet = prov.provision({A: 1}, transfer_id=tid, early=early)
    try:
        assert [g.region for g in fleet.gateways] == [A]
        assert unused.poll() is not None or _gone(unused.pid)
    finally:
        prov.deprovision(fleet)


def test_an_early_agent_that_died_is_replaced() -> None:
    prov = LocalProvisioner()
    tid = _tid()
    early = prov.start_early([A], transfer_id=tid)
    (proc,) = early.procs.values()
    proc.kill()
    proc.wait()
    fleet = prov.provision({A: 1}, transfer_id=tid, early=early)
    try:
        (gw,) = fleet.gateways
        assert int(gw.resources["pid"]) != proc.pid
    finally:
        prov.deprovision(fleet)


def test_an_early_start_no_plan_took_leaves_nothing() -> None:
    tid = _tid()
    early = api.start_early([A, B], transfer_id=tid)
    procs = list(early.procs.values())
    workdir, secret = Path(early.workdir), Path(early.secret_ref)
    assert workdir.is_dir() and secret.exists()
    early.cancel()
    early.cancel()  # idempotent
    assert all(p.poll() is not None or _gone(p.pid) for p in procs)
    assert not workdir.exists() and not secret.exists()


def test_a_different_transfer_does_not_adopt_them() -> None:
    prov = LocalProvisioner()
    early = prov.start_early([A], transfer_id=_tid())
    (proc,) = early.procs.values()
    fleet = prov.provision({A: 1}, transfer_id=_tid(), early=early)
    try:
        assert int(fleet.gateways[0].resources["pid"]) != proc.pid
        assert proc.poll() is not None or _gone(proc.pid)
        assert not Path(early.workdir).exists()
    finally:
        prov.deprovision(fleet)


def test_early_agents_are_recorded_so_a_sweep_finds_them() -> None:
    """The control plane may die while it lists: the early agents are in the fleet records
    from the start, and a sweep stops them and removes their files like any fleet's."""
    tid = _tid()
    early = LocalProvisioner().start_early([A, B], transfer_id=tid)
    pids = [p.pid for p in early.procs.values()]
    (record,) = load_fleets(transfer_id=tid)
    assert sorted(int(g.resources["pid"]) for g in record.gateways) == sorted(pids)
    removed = LocalProvisioner().sweep(transfer_id=tid)
    assert sorted(removed) == sorted(early.procs)
    assert _left(pids) == []
    assert not Path(early.workdir).exists() and not Path(early.secret_ref).exists()
    assert load_fleets(transfer_id=tid) == []
    early.procs.clear()  # already stopped by the sweep


def test_no_record_is_left_by_a_cancel_or_a_failed_provision() -> None:
    tid = _tid()
    early = LocalProvisioner().start_early([A], transfer_id=tid)
    early.cancel()
    assert load_fleets(transfer_id=tid) == []
    tid = _tid()
    early = LocalProvisioner(start_timeout=0.001).start_early([A], transfer_id=tid)
    with pytest.raises(ProvisionError, match="not ready"):  # no agent is up in a millisecond
        LocalProvisioner(start_timeout=0.001).provision({A: 1, B: 1}, transfer_id=tid, early=early)
    assert load_fleets(transfer_id=tid) == []
    early.cancel()
