"""Every transfer is a measurement: path reports, hop rows, where they go (and where not).

The first tests drive ``after_transfer`` with hand-made path statistics (the dispatcher is not
under test there); the last one runs a real transfer through real local gateway agents.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.profiler import GridStore, planner_grid
from skyplane_ops.profiler.passive import ENV_STORE, after_transfer, passive_store
from skyplane_ops.profiles import load_default_profile
from skyplane_ops.transfer.result import path_warnings

S, R, D = "aws:us-east-1", "aws:us-east-2", "aws:us-west-2"


def _plan(store: str | None = None) -> TransferPlan:
    return TransferPlan(
        src=S,
        dsts=(D,),
        volume_gb=1.0,
        mode="min_cost",
        paths=[PlanPath((S, D), 0.5, 1.0), PlanPath((S, R, D), 0.5, 1.0)],
        hops=[Hop(S, D, 1.0, 16), Hop(S, R, 1.0, 16), Hop(R, D, 1.0, 16)],
        vms={S: 1, R: 1, D: 1},
        predicted_gbps=2.0,
        egress_cost_usd=0.0,
        vm_cost_usd=0.0,
        details={"grid": {"store": store}} if store else {},
    )


ROUTES = [([S, D], 0.5), ([S, R, D], 0.5)]
GB = 10**9


def test_a_slow_path_is_reported_and_the_next_plan_sees_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ENV_STORE, raising=False)
    store_uri = str(tmp_path / "grid")
    # Direct path: 1 GB in 8 s = 1 Gbit/s (as planned); relay path: 1 GB in 20 s = 0.4.
    paths = after_transfer(_plan(store_uri), "ssh", "job-1", ROUTES, {0: GB, 1: GB}, {0: 8, 1: 20})
    by_route = {tuple(p["regions"]): p for p in paths}
    assert not by_route[(S, D)]["under"] and by_route[(S, D)]["ratio"] == 1.0
    assert by_route[(S, R, D)]["under"] and by_route[(S, R, D)]["ratio"] == 0.4
    rows = GridStore(store_uri).read_version()
    assert sorted(r.pair for r in rows) == sorted([(S, D), (S, R), (R, D)])
    hop = next(r for r in rows if r.pair == (S, R))
    assert hop.source == "passive" and hop.connections == 16 and hop.bytes_received == GB
    assert hop.duration_s == 20 and abs(hop.gbps - 0.4) < 1e-9 and hop.backend == "ssh"
    # The next plan's grid: the relay hops are lowered to what they delivered.
    grid = planner_grid(store_uri, load_default_profile().throughput)
    assert abs(grid.links()[(S, R)].gbps - 0.4) < 1e-9
    assert grid.links()[(S, R)].source == "passive"


def test_loopback_transfers_are_never_recorded_unless_a_scratch_store_is_named(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv(ENV_STORE, raising=False)
    store_uri = str(tmp_path / "grid")
    assert passive_store(_plan(store_uri), "local") is None
    after_transfer(_plan(store_uri), "local", "job-2", ROUTES, {0: GB}, {0: 8})
    assert GridStore(store_uri).latest_version() is None
    monkeypatch.setenv(ENV_STORE, str(tmp_path / "scratch"))
    assert passive_store(_plan(store_uri), "local") == str(tmp_path / "scratch")
    monkeypatch.setenv("SKYPLANE_OPS_PASSIVE", "0")
    assert passive_store(_plan(store_uri), "ssh") is None


def test_a_slow_path_is_only_called_slow_on_enough_data_and_recorded_only_if_it_was(
    tmp_path: Path, monkeypatch
) -> None:
    """A path that moved a few KiB in a few ms (a small sync) measured start-up, not a
    rate: no warning. The warning says "recorded for the next plan" only where it was."""
    monkeypatch.delenv(ENV_STORE, raising=False)
    store_uri = str(tmp_path / "grid")
    tiny = after_transfer(_plan(store_uri), "ssh", "job-4", ROUTES, {0: 4096}, {0: 0.03})
    assert tiny[0]["ratio"] < 0.01 and not tiny[0]["under"] and path_warnings(tiny) == []
    slow = {0: GB}, {0: 20}  # 0.4 of the 1 Gbit/s planned, over 20 s
    recorded = after_transfer(_plan(store_uri), "ssh", "job-5", ROUTES, *slow)
    assert recorded[0]["under"] and recorded[0]["recorded"]
    assert path_warnings(recorded)[0].endswith("(40%); recorded for the next plan")
    loopback = after_transfer(_plan(store_uri), "local", "job-6", ROUTES, *slow)
    assert loopback[0]["under"] and not loopback[0]["recorded"]
    assert path_warnings(loopback)[0].endswith("(40%)")


def test_a_broken_store_never_fails_the_transfer(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(ENV_STORE, str(blocker / "grid"))
    paths = after_transfer(_plan(), "ssh", "job-3", ROUTES, {0: GB}, {0: 8})
    assert len(paths) == 1


@pytest.mark.timeout(120)
def test_a_real_transfer_reports_its_paths_and_records_its_hops(tmp_path: Path, monkeypatch):
    from skyplane_ops.testing.transfer import copy_dirs, local_fleet, make_plan

    scratch = str(tmp_path / "scratch")
    monkeypatch.setenv(ENV_STORE, scratch)
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "journal"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}").write_bytes(bytes([i]) * (3 << 20))
    plan = make_plan(["test:src", "test:dst"], ["test:src", "test:relay", "test:dst"])
    with local_fleet(plan, hooks=False) as (_, fleet):
        result = copy_dirs(plan, fleet, (src, dst, journal))
    assert sum(p["bytes"] for p in result.paths) == 12 << 20
    assert {tuple(p["regions"]) for p in result.paths} <= {
        ("test:src", "test:dst"),
        ("test:src", "test:relay", "test:dst"),
    }
    assert all(p["achieved_gbps"] > 0 and p["seconds"] > 0 for p in result.paths)
    rows = GridStore(scratch).read_version()
    assert rows and all(r.source == "passive" and r.backend == "local" for r in rows)
