"""The Airflow face end to end: ``dag.test()`` runs with real local gateway processes and bytes.

Three DAG runs share one AIRFLOW_HOME (see ``tests/fixtures/airflow_env.py``):

* the shipped example (``examples/airflow_etl_dag.py``): Parquet produced with pyarrow,
  replicated by the task group, read back and checked downstream; the destination Asset event
  carries the transfer metadata;
* failure paths: a transfer that fails (the teardown still deletes the gateways) and a
  provision task that dies after starting its gateways and before returning the fleet (the
  teardown deletes them by tag);
* success paths: a deferrable transfer whose first attempt is stopped half-way (its driver is
  terminated once the journal holds finished chunks) and whose retry resumes, re-sending only
  the missing chunks; and a one-task copy of 10,000 objects whose XCom stays small.

Nothing is mocked: plans come from the real planner, gateways are ``gateway_agent`` processes
on loopback, stores are local folders. Task logs (the captured stdout/stderr of ``dag.test``)
are grepped for the credentials the connections hold.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import airflow_env

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SRC_REGION = "aws:us-east-1"
DST_REGION = "gcp:europe-west4"
AWS_SECRET = "aws-secret-Zq8vX3-never-logged"
SKYPLANE_SECRET = "skyplane-pw-Jm2kL7-never-logged"
BIG_FILES, BIG_MIB, PART = 8, 16, 1 << 20

TEST_DAGS = '''
"""DAGs of tests/integration/test_airflow_dags.py (written here by the test)."""
import json
import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, TaskGroup, TriggerRule

from skyplane_ops.airflow import (
    SkyplaneCopyOperator,
    SkyplaneDeprovisionOperator,
    SkyplanePlanOperator,
    SkyplaneProvisionOperator,
    SkyplaneTransferOperator,
    skyplane_transfer_group,
)

BASE = os.environ.get("SKYPLANE_AFTEST_DIR", "/nonexistent")
SRC_REGION, DST_REGION = "aws:us-east-1", "gcp:europe-west4"


class ProvisionThenCrash(SkyplaneProvisionOperator):
    """Starts the gateways, then dies before returning the fleet (like a killed worker)."""

    def execute(self, context):
        fleet = super().execute(context)
        with open(os.path.join(BASE, "crashed_fleet.json"), "w") as fh:
            json.dump(fleet, fh)
        raise RuntimeError("worker died after provisioning")


with DAG("skyplane_test_failures", schedule=None, start_date=datetime(2024, 1, 1)):
    skyplane_transfer_group(
        "bad_transfer",
        src=f"file://{BASE}/fsrc/",
        dst="file:///proc/skyplane-not-writable/",
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        volume_gb=0.001,
    )
    with TaskGroup("crash"):
        tid = "{{ dag.dag_id }}-{{ run_id }}-crash"
        plan = SkyplanePlanOperator(
            task_id="plan", src_region=SRC_REGION, dst_regions=DST_REGION, volume_gb=0.001,
            transfer_id=tid,
        )
        prov = ProvisionThenCrash(task_id="provision", plan=plan.output, transfer_id=tid)
        xfer = SkyplaneTransferOperator(
            task_id="transfer", src=f"file://{BASE}/fsrc/", dst=f"file://{BASE}/fdst/",
            plan=plan.output, fleet=prov.output, transfer_id=tid,
        )
        tear = SkyplaneDeprovisionOperator(
            task_id="deprovision", fleet_task_id="crash.provision", transfer_id=tid
        )
        plan >> prov >> xfer >> tear
        tear.as_teardown(setups=prov)
        tear.trigger_rule = TriggerRule.ALL_DONE


with DAG("skyplane_test_paths", schedule=None, start_date=datetime(2024, 1, 1)):
    skyplane_transfer_group(
        "resume",
        src=f"file://{BASE}/big/",
        dst=f"file://{BASE}/big-replica/",
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        deferrable=True,
        poll_interval=0.1,
        timeout=timedelta(minutes=5),
        engine_options={"part_size": 1 << 20},
        transfer_kwargs={"retries": 1, "retry_delay": timedelta(seconds=0)},
    )
    SkyplaneCopyOperator(
        task_id="copy_tiny",
        src=f"file://{BASE}/tiny/",
        dst=f"file://{BASE}/tiny-replica/",
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        src_conn_id="aftest_aws",
    )

with DAG("skyplane_test_sync", schedule=None, start_date=datetime(2024, 1, 1)):
    SkyplaneCopyOperator(
        task_id="sync_copy",
        src=f"file://{BASE}/syncsrc/",
        dst=f"file://{BASE}/syncdst/",
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        sync=True,
    )

with DAG("skyplane_test_selection", schedule=None, start_date=datetime(2024, 1, 1)):
    from airflow.sdk import task

    @task
    def landed():
        return ["in/b.bin", "in/c.bin"]  # what an upstream task wrote

    names = landed()
    names >> SkyplaneCopyOperator(
        task_id="copy_named",
        src=f"file://{BASE}/selsrc/",
        dst=f"file://{BASE}/seldst/",
        src_region=SRC_REGION,
        dst_region=DST_REGION,
        files_from="{{ ti.xcom_pull(task_ids='landed') }}",
        changed_before="{{ macros.datetime(2100, 1, 1) }}",
        ignore_existing=True,
    )
'''


@pytest.fixture(scope="session")
def af(airflow_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The DAGs folder (example + test DAGs), connections and a data folder for this module."""
    base = tmp_path_factory.mktemp("airflow-e2e")
    dags = Path(airflow_env.AIRFLOW_HOME) / "dags"
    (dags / "airflow_etl_dag.py").write_text((REPO / "examples" / "airflow_etl_dag.py").read_text())
    (dags / "skyplane_test_dags.py").write_text(TEST_DAGS)
    for shipped in (REPO / "dags").glob("*.py"):
        (dags / shipped.name).write_text(shipped.read_text())
    env = {
        "SKYPLANE_AFTEST_DIR": str(base),
        "SKYPLANE_EXAMPLE_DIR": str(base / "example"),
        "AIRFLOW_CONN_SKYPLANE_DEFAULT": json.dumps(
            {
                "conn_type": "skyplane",
                "password": SKYPLANE_SECRET,
                "extra": {"backend": "local", "work_dir": str(base / "work")},
            }
        ),
        "AIRFLOW_CONN_AFTEST_AWS": json.dumps(
            {"conn_type": "aws", "login": "AKIAAFTESTEXAMPLE", "password": AWS_SECRET}
        ),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield base
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(Path(airflow_env.AIRFLOW_HOME) / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _asset_events(name: str) -> list[dict[str, Any]]:
    """The extras of the Asset events of the Asset named ``name``, newest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        found = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == name)
            .order_by(AssetEvent.id.desc())
        ).all()
        return [dict(e.extra) for e in found]


def _xcom(run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == run.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == "return_value",
            )
        ).first()
        if row is None:
            return None
        value = row.value
    return json.loads(value) if isinstance(value, str) else value


def _gateways_alive(fleet: dict[str, Any]) -> list[int]:
    alive = []
    for gateway in fleet["gateways"]:
        pid = int(gateway["resources"].get("pid", 0))
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"gateway_agent" in cmdline:
            alive.append(pid)
    return alive


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a transfer id)."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if text.encode() in Path(path).read_bytes():
                found.append(int(path.split("/")[2]))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def _assert_no_secret(text: str) -> None:
    for secret in (AWS_SECRET, SKYPLANE_SECRET):
        assert secret not in text, f"a credential leaked into the task logs: {secret}"


def _log_files_text(base: Path) -> str:
    texts = []
    for root in (Path(airflow_env.AIRFLOW_HOME) / "logs", base / "work"):
        for path in root.rglob("*"):
            if path.is_file() and path.suffix in (".log", ".json", ".jsonl", ""):
                texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def test_every_dag_file_imports_cleanly() -> None:
    """DagBag over dags/ and examples/: no import error, the expected DAGs are there."""
    from airflow.dag_processing.dagbag import DagBag

    found: set[str] = set()
    for folder in ("dags", "examples"):
        path = REPO / folder
        if not path.exists():
            continue
        bag = DagBag(dag_folder=str(path))
        assert not bag.import_errors, bag.import_errors
        found |= set(bag.dag_ids)
    assert "skyplane_etl_example" in found
    if (REPO / "dags" / "skyplane_grid_refresh.py").exists():
        assert "skyplane_grid_refresh" in found


def test_example_etl_dag_replicates_parquet_and_checks_it(
    af: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    run = _dag("skyplane_etl_example").test()
    logs = capfd.readouterr()
    states = _states(run)
    assert set(states.values()) == {"success"}, states
    checked = _xcom(run, "check_replica")
    assert checked["ok"] and checked["rows"] == 200_000 and checked["files"] == 8
    summary = _xcom(run, "replicate.transfer")
    assert summary["objects"] == 8 and summary["verification"]["status"] == "passed"
    assert summary["plan_uri"] and Path(summary["plan_uri"].removeprefix("file://")).exists()
    assert len(json.dumps(summary)) < 4096
    fleet = _xcom(run, "replicate.provision")
    assert fleet["gateways"] and not _gateways_alive(fleet)
    # the teardown counts the gateways it deleted (it said "0 resources")
    torn = _xcom(run, "replicate.deprovision")
    assert torn["deleted_count"] >= len(fleet["gateways"]), torn
    # The destination Asset event carries the transfer's numbers.
    with create_session() as session:
        event = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == "events_replica")
            .order_by(AssetEvent.id.desc())
        ).first()
        assert event is not None
        extra = dict(event.extra)
    assert extra["bytes"] == summary["bytes"] and extra["objects"] == 8
    assert extra["route"] and extra["gbps"] is not None and extra["cost_usd"] is not None
    _assert_no_secret(logs.out + logs.err)


def test_failures_still_tear_the_gateways_down(af: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = af / "fsrc"
    src.mkdir(exist_ok=True)
    for i in range(3):
        (src / f"obj-{i}.bin").write_bytes(os.urandom(200_000))
    run = _dag("skyplane_test_failures").test()
    logs = capfd.readouterr()
    states = _states(run)
    # A failed transfer: its teardown still ran and the gateways are gone.
    assert states["bad_transfer.transfer"] == "failed", states
    assert states["bad_transfer.deprovision"] == "success", states
    fleet = _xcom(run, "bad_transfer.provision")
    assert fleet["gateways"] and not _gateways_alive(fleet)
    assert not _processes_mentioning(fleet["transfer_id"])
    # Provisioning died after starting gateways and left no XCom: deleted by tag.
    assert states["crash.provision"] == "failed", states
    assert states["crash.transfer"] == "upstream_failed", states
    assert states["crash.deprovision"] == "success", states
    assert _xcom(run, "crash.provision") is None
    crashed = json.loads((af / "crashed_fleet.json").read_text())
    swept = _xcom(run, "crash.deprovision")
    assert swept["had_fleet"] is False and swept["deleted_count"] >= len(crashed["gateways"])
    assert swept["transfer_id"] == crashed["transfer_id"]
    assert not _gateways_alive(crashed)
    assert not _processes_mentioning(crashed["transfer_id"])
    _assert_no_secret(logs.out + logs.err)


def _stop_first_driver_midway(base: Path, done: threading.Event, out: dict[str, Any]) -> None:
    """Terminate the deferrable transfer's driver once its journal holds finished chunks.

    Only "done" records count: the journal also records multipart uploads up front.
    """
    deadline = time.monotonic() + 240
    while not done.is_set() and time.monotonic() < deadline:
        for status_path in glob.glob(str(base / "work" / "state" / "*" / "status.json")):
            try:
                status = json.loads(Path(status_path).read_text())
            except (OSError, ValueError):
                continue
            tid = Path(status_path).parent.name
            journaled = 0
            for journal in glob.glob(str(base / "work" / "journals" / tid / "*.jsonl")):
                with open(journal) as fh:
                    journaled += sum(1 for line in fh if '"t":"done"' in line)
            if status.get("pid") and journaled > 0:
                out["journaled_before_stop"] = journaled
                out["status_when_stopped"] = status.get("state")
                os.killpg(int(status["pid"]), signal.SIGTERM)
                return
        time.sleep(0.005)


def test_deferred_transfer_retry_resumes_and_copy_xcom_stays_small(
    af: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    big = af / "big"
    big.mkdir(exist_ok=True)
    for i in range(BIG_FILES):
        (big / f"part-{i}.bin").write_bytes(os.urandom(BIG_MIB << 20))
    tiny = af / "tiny"
    tiny.mkdir(exist_ok=True)
    for i in range(10_000):
        (tiny / f"k{i:05d}.txt").write_bytes(os.urandom(64))
    done = threading.Event()
    seen: dict[str, Any] = {}
    watcher = threading.Thread(target=_stop_first_driver_midway, args=(af, done, seen))
    watcher.start()
    try:
        run = _dag("skyplane_test_paths").test()
    finally:
        done.set()
        watcher.join()
    logs = capfd.readouterr()
    states = _states(run)
    assert set(states.values()) == {"success"}, states
    # The first attempt was stopped half-way; the retry re-sent only the missing chunks.
    assert seen.get("journaled_before_stop", 0) > 0, seen
    from airflow.models.taskinstance import TaskInstance

    ti = run.get_task_instance("resume.transfer")
    assert isinstance(ti, TaskInstance) and ti.try_number == 2
    summary = _xcom(run, "resume.transfer")
    total = BIG_FILES * BIG_MIB * (1 << 20) // PART
    assert summary["chunks_resumed"] > 0, summary
    assert summary["chunks"] + summary["chunks_resumed"] == total, summary
    assert summary["chunks"] < total
    assert summary["verification"]["status"] == "passed"
    for i in range(BIG_FILES):
        name = f"part-{i}.bin"
        assert (af / "big-replica" / name).read_bytes() == (big / name).read_bytes()
    fleet = _xcom(run, "resume.provision")
    assert not _gateways_alive(fleet)
    # 10,000 objects in one task: the XCom is a small summary, not a key list.
    copied = _xcom(run, "copy_tiny")
    assert copied["objects"] == 10_000
    assert len(json.dumps(copied)) < 4096
    replicas = [p for p in (af / "tiny-replica").iterdir() if not p.name.startswith(".")]
    assert len(replicas) == 10_000
    assert not _processes_mentioning(copied["transfer_id"])
    _assert_no_secret(logs.out + logs.err + _log_files_text(af))
    shutil.rmtree(tiny, ignore_errors=True)
    shutil.rmtree(af / "tiny-replica", ignore_errors=True)


def test_copy_operator_sync_with_nothing_to_do_plans_and_starts_nothing(af: Path) -> None:
    """An up-to-date sync is answered from the listing: no plan is made or stored and so no
    fleet is provisioned (on a cloud backend: no VMs started for nothing)."""
    src, dst = af / "syncsrc", af / "syncdst"
    src.mkdir(exist_ok=True)
    for i in range(20):
        (src / f"f{i:02d}.bin").write_bytes(os.urandom(1000 + i))
    first = _dag("skyplane_test_sync").test()
    assert set(_states(first).values()) == {"success"}, _states(first)
    copied = _xcom(first, "sync_copy")
    assert copied["objects"] == 20 and copied["plan_uri"], copied
    events = _asset_events(f"file://{dst}/")
    assert len(events) == 1 and events[0]["objects"] == 20 and events[0]["verified"] is True
    assert events[0]["report_uri"].endswith("summary.json")

    again = _dag("skyplane_test_sync").test()
    assert set(_states(again).values()) == {"success"}, _states(again)
    skipped = _xcom(again, "sync_copy")
    assert skipped["objects"] == 0 and skipped["objects_skipped"] == 20, skipped
    assert skipped["verification"]["method"] == "sync: up to date", skipped
    assert skipped["plan_uri"] is None, skipped  # never planned, so never provisioned
    assert not list((af / "work" / "plans").glob(f"{skipped['transfer_id']}*"))
    # Nothing changed at the destination: no Asset event (it would re-trigger every DAG
    # scheduled on the replica).
    assert len(_asset_events(f"file://{dst}/")) == 1

    (src / "f00.bin").write_bytes(os.urandom(5000))  # a change is still copied
    changed = _xcom(_dag("skyplane_test_sync").test(), "sync_copy")
    assert changed["objects"] == 1 and changed["plan_uri"], changed
    assert [e["objects"] for e in _asset_events(f"file://{dst}/")] == [1, 20]
    for i in range(20):
        name = f"f{i:02d}.bin"
        assert (dst / name).read_bytes() == (src / name).read_bytes()


def _trigger_status(trigger: Any) -> dict[str, Any] | None:
    from skyplane_ops.api import TransferState

    return TransferState(trigger.state_uri, trigger.transfer_id).read_status()


def test_transfer_operator_on_kill_stops_the_driver_and_the_gateways(af: Path) -> None:
    """Killing a deferred transfer task stops its driver and its gateways (real processes)."""
    from airflow.sdk.exceptions import TaskDeferred

    from skyplane_ops import api
    from skyplane_ops.airflow import driver
    from skyplane_ops.airflow.operators import SkyplaneTransferOperator

    src = af / "kill-src"
    src.mkdir(exist_ok=True)
    for i in range(6):  # big enough that the driver is still at work when the task is killed
        (src / f"blob-{i}.bin").write_bytes(os.urandom(32 << 20))
    plan = api.plan(SRC_REGION, DST_REGION, 0.2)
    fleet = api.provision(plan, transfer_id=f"af-onkill-{os.getpid()}")
    try:
        op = SkyplaneTransferOperator(
            task_id="transfer",
            src=f"file://{src}/",
            dst=f"file://{af}/kill-dst/",
            plan=plan.to_dict(),
            fleet=fleet.to_dict(),
            deferrable=True,
            engine_options={"part_size": PART},
            timeout=600,
        )
        with pytest.raises(TaskDeferred) as deferred:
            op.execute({"run_id": "manual__on-kill"})
        trigger = deferred.value.trigger
        assert trigger.deadline is not None and trigger.deadline > time.time() + 500
        pid = trigger.driver_pid
        assert driver.is_alive(pid), _trigger_status(trigger)
        assert _gateways_alive(fleet.to_dict())
        # A retry while the driver still runs (the worker died, not the driver) follows the
        # running driver instead of starting a second one on the same journal.
        deadline = time.monotonic() + 30
        while (_trigger_status(trigger) or {}).get("state") != "running":
            assert time.monotonic() < deadline, _trigger_status(trigger)
            time.sleep(0.02)
        with pytest.raises(TaskDeferred) as again:
            op.execute({"run_id": "manual__on-kill"})
        assert again.value.trigger.driver_pid == pid
        op.on_kill()
        assert not driver.is_alive(pid), _trigger_status(trigger)
        assert not _gateways_alive(fleet.to_dict()), fleet.to_dict()
        status = _trigger_status(trigger) or {}
        assert status.get("state") != "success", status
    finally:
        api.deprovision(fleet)


def test_grid_refresh_dag_publishes_once_per_interval_within_budget(
    af: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The shipped grid-refresh DAG on the local backend: real probes between real gateways."""
    from datetime import UTC, datetime

    from skyplane_ops.airflow.hooks import SkyplaneHook
    from skyplane_ops.profiler import GridStore

    dag = _dag("skyplane_grid_refresh")
    when = datetime(2026, 1, 4, tzinfo=UTC)
    conf = {
        "regions": [SRC_REGION, DST_REGION, "aws:us-west-2"],
        "connections": 2,
        "duration_s": 0.3,
        "budget_usd": 1.0,
    }
    # Unpaused as shipped on the local backend: loopback figures go to the scratch store only.
    # A leftover driver folder and an empty journal folder, both old, are cleaned up.
    old = time.time() - 30 * 86400
    for leftover in (af / "work" / "runs" / "old-run", af / "work" / "journals" / "old-journal"):
        leftover.mkdir(parents=True, exist_ok=True)
        os.utime(leftover, (old, old))
    kept = af / "work" / "journals" / "old-but-resumable"
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "j.jsonl").write_text("{}\n")
    os.utime(kept, (old, old))
    scratch_run = dag.test(logical_date=datetime(2025, 12, 1, tzinfo=UTC), run_conf=conf)
    assert set(_states(scratch_run).values()) == {"success"}, _states(scratch_run)
    scratch = _xcom(scratch_run, "refresh")
    assert scratch["scratch"] is True and "scratch store" in scratch["publish_reason"], scratch
    assert _asset_events("skyplane_throughput_grid") == []  # scratch is not the planning grid
    assert GridStore(str(af / "work" / "grid-scratch")).latest_version() == scratch["version"]
    store = GridStore(str(af / "work" / "grid"))
    assert store.latest_version() is None
    assert SkyplaneHook().plan(SRC_REGION, DST_REGION, 1.0).details["grid"]["version"] is None
    assert not (af / "work" / "runs" / "old-run").exists()
    assert not (af / "work" / "journals" / "old-journal").exists()
    assert (kept / "j.jsonl").exists()
    # A testbed that wants its figures planned with says so explicitly.
    conf["publish_emulated"] = True
    first = dag.test(logical_date=when, run_conf=conf)
    assert set(_states(first).values()) == {"success"}, _states(first)
    summary = _xcom(first, "refresh")
    assert summary["measured"] == 6 and summary["version"], summary
    assert summary["scratch"] is False
    (event,) = _asset_events("skyplane_throughput_grid")
    assert event["version"] == summary["version"] and event["scratch"] is False
    run_id = summary["run_id"]
    assert not _processes_mentioning(run_id)
    assert store.latest_version() == summary["version"]
    # Plans made with the connection now use that version (its default grid store).
    plan = SkyplaneHook().plan(SRC_REGION, DST_REGION, 1.0)
    assert plan.details["grid"] == {"store": store.location, "version": summary["version"]}
    # The same interval again: everything is fresh, nothing is probed or published.
    again = dag.test(logical_date=when, run_conf=conf)
    repeat = _xcom(again, "refresh")
    assert repeat["run_id"] == run_id and repeat["measured"] == 0, repeat
    assert repeat["skipped_fresh"] == 6 and store.latest_version() == summary["version"]
    # A new region over a tiny budget: refused before any gateway starts; the teardown ran.
    poor = dag.test(
        logical_date=datetime(2026, 1, 7, tzinfo=UTC),
        run_conf={**conf, "regions": [*conf["regions"], "azure:westeurope"], "budget_usd": 1e-9},
    )
    states = _states(poor)
    assert states["refresh"] == "failed" and states["sweep"] == "success", states
    assert store.latest_version() == summary["version"]
    assert "budget" in capfd.readouterr().out.lower()


def test_trigger_on_kill_also_deletes_the_fleet(af: Path) -> None:
    """A user killing a deferred task: the trigger stops its driver and deletes the gateways."""
    import asyncio
    import socket
    import subprocess
    import sys

    from skyplane_ops import api
    from skyplane_ops.airflow import driver
    from skyplane_ops.airflow.triggers import SkyplaneTransferTrigger

    plan = api.plan(SRC_REGION, DST_REGION, 0.01)
    fleet = api.provision(plan, transfer_id=f"af-trigkill-{os.getpid()}")
    idle = subprocess.Popen(  # a real driver process that waits on its stdin
        [sys.executable, "-m", driver.MODULE], stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while not driver.is_alive(idle.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        trigger = SkyplaneTransferTrigger(
            transfer_id=fleet.transfer_id,
            state_uri=(af / "trigkill-state").as_uri(),
            driver_pid=idle.pid,
            driver_host=socket.gethostname(),
            fleet=fleet.to_dict(),
            skyplane_conn_id="skyplane_default",
        )
        assert _gateways_alive(fleet.to_dict())
        asyncio.run(trigger.on_kill())
        assert not driver.is_alive(idle.pid)
        assert not _gateways_alive(fleet.to_dict())
    finally:
        if idle.poll() is None:
            idle.kill()
        idle.wait(timeout=10)
        api.deprovision(fleet)


def test_copy_operator_copies_the_keys_an_upstream_task_names_and_keeps_existing_ones(
    af: Path,
) -> None:
    """``files_from`` from an upstream XCom and a templated timestamp (issue 39): only the
    named keys are copied, and ``ignore_existing`` keeps the destination's own copy."""
    src, dst = af / "selsrc", af / "seldst"
    (src / "in").mkdir(parents=True, exist_ok=True)
    (dst / "in").mkdir(parents=True, exist_ok=True)
    for name in ("a", "b", "c"):
        (src / "in" / f"{name}.bin").write_bytes(os.urandom(3000))
    (dst / "in" / "b.bin").write_bytes(b"theirs")
    run = _dag("skyplane_test_selection").test()
    assert set(_states(run).values()) == {"success"}, _states(run)
    copied = _xcom(run, "copy_named")
    assert copied["objects"] == 1 and copied["objects_skipped"] == 1, copied
    assert sorted(p.name for p in (dst / "in").iterdir()) == ["b.bin", "c.bin"]
    assert (dst / "in" / "b.bin").read_bytes() == b"theirs"
    assert (dst / "in" / "c.bin").read_bytes() == (src / "in" / "c.bin").read_bytes()
