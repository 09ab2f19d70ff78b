"""Warm fleets in every face: the several-destination run (``FanoutRun``), the Airflow split
operators and the Dagster step park and claim through the same ``sequence.warm`` calls as
``CopyRun``. Real gateway processes (the local backend), real folders; whether a run booted
is read from its phases and its gateways' pids, never from a timing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.provision.warm import WarmPool, default_state_uri
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.sequence.fanout import FanoutRun
from skyplane_ops.testing.transfer import read_tree, write_dataset
from tests.fixtures.fanout import fanout_request
from tests.integration.test_warm_fleets import BOOTING, A, B, Phases, _gone, _pids, _wait

C, D = "aws:eu-west-1", "aws:eu-central-1"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state home: its fleets, secrets and warm pool."""
    path = tmp_path / "home"
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(path))
    return path


def _fanout(tmp_path: Path, name: str, keep_warm: str | None) -> tuple[FanoutRun, Phases]:
    request, _ = fanout_request(
        tmp_path / name, A, [C, D], src=tmp_path / "src",
        planning={"vms": "only"}, keep_warm=keep_warm,
    )  # fmt: skip
    events = Phases()
    run = FanoutRun(request, Gateways(backend="local", backend_options=BOOTING), events)
    return run, events


def test_a_fanout_run_parks_and_the_next_claims(tmp_path: Path, home: Path) -> None:
    data = write_dataset(tmp_path / "src", {f"p/{i}": 4000 + i for i in range(6)})
    first, phases1 = _fanout(tmp_path, "one", "60s")
    out1 = first.run()
    assert out1.status == "ok" and out1.warm["parked"] and "warm fleet: parked" in out1.summary()
    fleet1 = phases1.fleets[0][0]  # the same fleet for every destination
    assert not _gone(_pids(fleet1))  # parked: still running
    assert [r.fleet_id for r in WarmPool(default_state_uri()).available()] == [out1.transfer_id]

    second, phases2 = _fanout(tmp_path, "two", None)
    out2 = second.run()
    assert out2.status == "ok" and out2.warm["claimed"] == out1.transfer_id
    assert out2.to_dict()["warm"]["idle_usd"] >= 0
    provisions = [p[2] for p in phases2.seen if p[0] == "provision"]
    assert len(provisions) == 1 and provisions[0].startswith("claimed warm fleet")
    fleet2 = phases2.fleets[0][0]
    assert _pids(fleet2) == _pids(fleet1)  # no gateway started
    for region in (C, D):
        assert read_tree(tmp_path / "two" / region.split(":")[1]) == data
    # Without keep_warm the claimant deletes the fleet, and the pool forgets it.
    _wait(lambda: _gone(_pids(fleet1)))
    assert WarmPool(default_state_uri()).records() == []


def test_a_failed_fanout_run_deletes_its_fleet(tmp_path: Path, home: Path) -> None:
    write_dataset(tmp_path / "src", {"a": 10})
    run, phases = _fanout(tmp_path, "one", "60s")
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "eu-central-1").write_text("a file where a folder must be")
    out = None
    try:
        run.run()
    except Exception as exc:
        out = getattr(exc, "result", None)
    assert out is not None and out.status == "partial" and "parked" not in out.warm
    fleet = phases.fleets[0][0]
    _wait(lambda: _gone(_pids(fleet)))
    assert WarmPool(default_state_uri()).records() == []


def test_the_dagster_step_parks_at_the_plans_price_and_a_failed_step_deletes(
    tmp_path: Path, home: Path
) -> None:
    import dagster as dg

    from skyplane_ops.dagster import (
        ReplicaDestination,
        ReplicaSource,
        SkyplaneResource,
        replicated_dataset,
    )

    src, store = tmp_path / "src", (tmp_path / "shared-state").as_uri()
    write_dataset(src, {f"{i}.csv": 3000 + i for i in range(4)})
    resource = SkyplaneResource(keep_warm="60s", state_store=store, max_vms_per_region=1)

    def materialise(dst: Path) -> Any:
        dataset = replicated_dataset(
            "warm_replication",
            ReplicaSource(f"file://{src}/", A),
            ReplicaDestination("warm_copy", f"file://{dst}/", "gcp:europe-west1"),
        )
        return dg.materialize(
            [dataset.assets_def], resources={"skyplane": resource}, raise_on_error=False
        )

    assert materialise(tmp_path / "d1").success
    (parked,) = WarmPool(store).available()
    assert parked.vm_usd_per_hour > 0  # the plan's VM price, not $0/h
    pids = _pids(parked.gateway_fleet())
    assert pids and not _gone(pids)
    # The next step claims it and fails (a file where its destination folder must be): the
    # claimed fleet is deleted, not parked again.
    (tmp_path / "d2").write_text("not a folder")
    assert not materialise(tmp_path / "d2").success
    _wait(lambda: _gone(pids))
    assert WarmPool(store).records() == []


class _TaskInstance:
    """The part of Airflow's task instance the split operators use (their XCom), for calling
    ``execute`` in this process without a scheduler (as ``test_airflow_fanout`` does)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results, self.pushed = results, {}
        self.try_number = 1

    def xcom_pull(self, task_ids: str) -> Any:
        return self.results.get(task_ids)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def test_the_airflow_split_operators_claim_and_park(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow")
    import json

    from skyplane_ops.airflow.operators import (
        SkyplaneDeprovisionOperator,
        SkyplanePlanOperator,
        SkyplaneProvisionOperator,
        SkyplaneTransferOperator,
    )

    store = (tmp_path / "state").as_uri()
    extra = {"backend": "local", "backend_options": BOOTING, "state_store": store,
             "work_dir": str(tmp_path / "work")}  # fmt: skip
    conn = json.dumps({"conn_type": "skyplane", "extra": extra})
    monkeypatch.setenv("AIRFLOW_CONN_SKYPLANE_DEFAULT", conn)
    src = tmp_path / "src"
    data = write_dataset(src, {f"{i}.csv": 2000 + i for i in range(4)})
    assert "keep_warm" in SkyplaneDeprovisionOperator.template_fields
    with pytest.raises(ValueError, match="transfer_task_id"):
        SkyplaneDeprovisionOperator(task_id="t", keep_warm="60s")

    def dag_run(n: int, transfer_ok: bool) -> tuple[dict[str, Any], dict[str, Any], Any]:
        ctx: dict[str, Any] = {"run_id": f"manual__warm{n}"}
        plan = SkyplanePlanOperator(task_id="plan", src_region=A, dst_regions="gcp:europe-west4",
                                    src=f"file://{src}").execute(ctx)  # fmt: skip
        ti = _TaskInstance({})
        fleet = SkyplaneProvisionOperator(task_id="provision", plan=plan).execute({**ctx, "ti": ti})
        dst = tmp_path / f"dst{n}"
        summary = SkyplaneTransferOperator(
            task_id="transfer", src=f"file://{src}", dst=f"file://{dst}", plan=plan,
            fleet=fleet, deferrable=False,
        ).execute(ctx)  # fmt: skip
        assert read_tree(dst) == data
        ti.results["transfer"] = summary if transfer_ok else {**summary, "status": "failed"}
        teardown = SkyplaneDeprovisionOperator(
            task_id="teardown", fleet=fleet, keep_warm="60s", transfer_task_id="transfer",
            plan=plan,
        )  # fmt: skip
        return fleet, ti.pushed.get("warm", {}), teardown.execute({**ctx, "ti": ti})

    fleet1, claimed1, gone1 = dag_run(1, transfer_ok=True)
    assert not claimed1 and gone1["warm"]["parked"] == fleet1["transfer_id"]
    (parked,) = WarmPool(store).available()
    assert parked.vm_usd_per_hour > 0
    pids = _pids(parked.gateway_fleet())
    fleet2, claimed2, gone2 = dag_run(2, transfer_ok=False)  # claims it, then fails: deleted
    assert claimed2["claimed"] == fleet1["transfer_id"] and claimed2["idle_usd"] >= 0
    assert fleet2["transfer_id"] == fleet1["transfer_id"] and "warm" not in gone2
    _wait(lambda: _gone(pids))
    assert WarmPool(store).records() == []


def test_the_airflow_deferred_copy_result_carries_the_claims_idle(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task claims (its plan weighs the warm fleet's 1 s claim against the worker), the
    detached driver moves and parks: the result has the claim's idle, as an in-task run's."""
    pytest.importorskip("airflow")
    import asyncio
    import json

    from airflow.sdk.exceptions import TaskDeferred

    from skyplane_ops import api
    from skyplane_ops.airflow.operators.copy import SkyplaneCopyOperator
    from skyplane_ops.provision.local import LocalProvisioner
    from skyplane_ops.sequence.warm import park

    store = (tmp_path / "state").as_uri()
    extra = {"backend": "local", "backend_options": BOOTING, "state_store": store,
             "work_dir": str(tmp_path / "work")}  # fmt: skip
    monkeypatch.setenv(
        "AIRFLOW_CONN_SKYPLANE_DEFAULT", json.dumps({"conn_type": "skyplane", "extra": extra})
    )
    fleet = LocalProvisioner().provision({A: 1, B: 1}, transfer_id="af-parked")
    park(fleet, usd_per_hour=3.0, keep_warm_s=60, pool=WarmPool(store), backend_options=BOOTING)
    data = write_dataset(tmp_path / "src", {f"{i}": 3000 for i in range(4)})
    ctx: dict[str, Any] = {"run_id": "manual__warm_deferred"}

    def op() -> SkyplaneCopyOperator:
        return SkyplaneCopyOperator(
            task_id="copy", src=f"file://{tmp_path / 'src'}", dst=f"file://{tmp_path / 'dst'}",
            src_region=A, dst_region=B, volume_gb=2, keep_warm="60s", deferrable=True,
            poll_interval=0.2,
        )  # fmt: skip

    try:
        with pytest.raises(TaskDeferred) as deferred:
            op().execute(ctx)

        async def first() -> Any:
            async for event in deferred.value.trigger.run():
                return event.payload

        event = asyncio.run(asyncio.wait_for(first(), 120))
        summary = op().execute_complete(ctx, event, **(deferred.value.kwargs or {}))
        assert read_tree(tmp_path / "dst") == data
        warm = summary["warm"]
        assert warm["claimed"] == "af-parked" and warm["idle_usd"] > 0  # billed at $3/h
        assert warm["parked"] == "af-parked" and warm["vm_usd_per_hour"] > 0  # parked again
        assert [r.fleet_id for r in WarmPool(store).available()] == ["af-parked"]
    finally:
        api.deprovision(fleet)
        WarmPool(store).forget("af-parked")


def test_a_fleet_claimed_from_another_home_is_not_the_parking_homes_to_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two hosts (two ``SKYPLANE_OPS_HOME``s) share one state store: host 1 parks, host 2
    claims; host 1's ``sweep``/``deprovision --all`` then forgets its record and leaves the
    fleet running; host 2 deletes it as its own."""
    from skyplane_ops import api
    from skyplane_ops.provision.local import LocalProvisioner
    from skyplane_ops.provision.records import load_fleets
    from skyplane_ops.sequence.warm import claim_warm, park_warm

    shared = (tmp_path / "shared-state").as_uri()
    host1, host2 = tmp_path / "host1", tmp_path / "host2"
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(host1))
    fleet = LocalProvisioner().provision({A: 1, B: 1}, transfer_id="two-homes")
    pids = _pids(fleet)
    assert park_warm(fleet, keep_warm_s=60, backend_options={}, state_uri=shared)
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(host2))
    got = claim_warm({A: 1, B: 1}, backend="local", backend_options={}, claimant="run-2",
                     state_uri=shared)  # fmt: skip
    assert got is not None and _pids(got[0]) == pids
    try:
        monkeypatch.setenv("SKYPLANE_OPS_HOME", str(host1))
        assert [f.transfer_id for f in load_fleets()] == ["two-homes"]  # parked, per host 1
        report = api.sweep(["local"])  # deprovision --all
        assert not report.errors and report.deleted["local"] == []
        assert load_fleets() == [] and not _gone(pids)  # forgotten here, running there
    finally:
        monkeypatch.setenv("SKYPLANE_OPS_HOME", str(host2))
        api.deprovision(got[0])
        api.forget_warm(got[0], state_uri=shared)
    _wait(lambda: _gone(pids))
    assert WarmPool(shared).records() == [] and api.sweep(["local"]).deleted["local"] == []


def test_a_parked_local_fleet_outlives_its_idle_timeout_until_keep_warm(home: Path) -> None:
    """Gateways that idle out after 1 s, parked for 4 s: parking raised their idle timeout
    past keep_warm (the signed ``POST /v1/lease``), so the lease, not the idle watchdog, ends
    them."""
    from skyplane_ops.provision.local import LocalProvisioner
    from skyplane_ops.sequence.warm import park

    options = {"idle_timeout": 1.0}
    fleet = LocalProvisioner(**options).provision({A: 1}, transfer_id="idle-short")
    pids = _pids(fleet)
    parked_at = time.monotonic()
    park(fleet, usd_per_hour=0.0, keep_warm_s=4.0, pool=WarmPool(default_state_uri()),
         backend_options=options)  # fmt: skip
    _wait(lambda: _gone(pids))
    assert time.monotonic() - parked_at >= 3.5  # not at the 1 s idle timeout


def test_the_lease_renewal_only_raises_an_idle_timeout(home: Path) -> None:
    """The signed ``POST /v1/lease`` on a real gateway: ``idle_timeout`` raises the agent's,
    never lowers it; a bad one is refused and changes nothing."""
    from gateway_agent.client import GatewayClient, GatewayError
    from skyplane_ops import api
    from skyplane_ops.provision.local import LocalProvisioner
    from skyplane_ops.provision.secrets import secret_bytes

    fleet = LocalProvisioner().provision({A: 1}, transfer_id="lease-idle")
    try:
        gw = fleet.gateways[0]
        client = GatewayClient(gw.host, gw.control_port, secret_bytes(fleet.secret_ref))
        assert client.renew_lease(60, idle_timeout=5)["idle_timeout_s"] == 600  # the default
        assert client.renew_lease(60, idle_timeout=1200)["idle_timeout_s"] == 1200
        with pytest.raises(GatewayError, match="idle_timeout"):
            client.renew_lease(60, idle_timeout=-1)
        assert client.renew_lease(60)["idle_timeout_s"] == 1200
    finally:
        api.deprovision(fleet)
