"""End to end in the real services: ``airflow standalone`` (scheduler, DAG processor, API
server and a triggerer) and the ``dagster`` CLI, each in a private home.

Airflow: a DAG with a ``SkyplaneCopyOperator`` that defers because the deployment sets
``[operators] default_deferrable = True``; the triggerer follows the driver through the state
store until success, and the OpenLineage provider writes its events through a file transport
(input and output datasets named by the naming spec). Dagster: the example project's
partitioned replica and its partitioned "replica matches source" check, materialised by
``dagster asset materialize``. Gateways are local processes (no cloud account here).
"""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.testing.ports import free_port
from tests.e2e.deployment import BIN, REPO, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
DAG = """
from datetime import datetime

from airflow.sdk import DAG
from skyplane_ops.airflow import SkyplaneCopyOperator

with DAG("skyplane_e2e_copy", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    SkyplaneCopyOperator(
        task_id="copy",
        src="file://{root}/us/",
        dst="file://{root}/eu/",
        src_region="aws:us-east-1",
        dst_region="aws:eu-west-1",
        poll_interval=1.0,
        transfer_id="e2e-copy",
    )
"""


def _wait(what: str, predicate: object, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        assert proc.poll() is None, f"airflow standalone exited while waiting for {what}"
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    root = tmp_path / "data"
    (root / "us").mkdir(parents=True)
    (home / "dags" / "e2e.py").write_text(DAG.format(root=root))
    lineage = tmp_path / "lineage.jsonl"
    port = free_port()
    env = clean_env(
        AIRFLOW_HOME=str(home),
        HOME=str(tmp_path),
        SKYPLANE_OPS_HOME=str(tmp_path / "skyplane"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__PARALLELISM="2",
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
        AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="5",
        AIRFLOW__OPENLINEAGE__NAMESPACE="skyplane-e2e",
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(lineage), "append": True}
        ),
        AIRFLOW_CONN_SKYPLANE_DEFAULT=json.dumps(
            {
                "conn_type": "skyplane",
                "extra": {"backend": "local", "work_dir": str(tmp_path / "w")},
            }
        ),
    )
    log = open(tmp_path / "standalone.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(BIN / "airflow"), "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield env, tmp_path
    finally:
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        # The scheduler's executor workers can outlive the main process: end the whole group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _airflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=180
    )


def test_deferred_copy_under_airflow_standalone_emits_lineage(
    standalone: tuple[dict[str, str], Path],
) -> None:
    env, base = standalone
    blobs = {f"part-{i}.bin": os.urandom((4 << 20) + i) for i in range(3)}
    for name, blob in blobs.items():
        (base / "data" / "us" / name).write_bytes(blob)

    db = base / "airflow" / "airflow.db"

    def query(sql: str) -> list[tuple[object, ...]]:
        """Read the metadata DB directly: cheaper than an `airflow` CLI start per poll."""
        if not db.exists():
            return []
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                return list(conn.execute(sql))
        except sqlite3.Error:
            return []

    # The DAG processor must have parsed the file before the DAG can be unpaused.
    deadline = time.monotonic() + 300
    while not query("select dag_id from dag where dag_id = 'skyplane_e2e_copy'"):
        assert time.monotonic() < deadline, (base / "standalone.log").read_text()[-4000:]
        time.sleep(2)
    unpaused = _airflow(env, "dags", "unpause", "skyplane_e2e_copy")
    assert unpaused.returncode == 0, unpaused.stderr[-2000:]
    triggered = _airflow(env, "dags", "trigger", "skyplane_e2e_copy")
    assert triggered.returncode == 0, triggered.stderr[-2000:]
    state = ""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        rows = query("select state from dag_run where dag_id = 'skyplane_e2e_copy'")
        state = str(rows[0][0]) if rows else ""
        if state in ("success", "failed"):
            break
        time.sleep(1)
    log_tail = (base / "standalone.log").read_text(errors="replace")[-6000:]
    assert state == "success", log_tail
    # It deferred to the triggerer (the task log says so, the triggerer wrote its own log) and
    # logged the plan as a table.
    logs = {
        p.name: p.read_text(errors="replace") for p in (base / "airflow" / "logs").rglob("*.log")
    }
    task_log = "".join(text for name, text in logs.items() if name.startswith("attempt="))
    assert "Pausing task as DEFERRED" in task_log, task_log[-3000:]
    assert any(".log.trigger." in name for name in logs), sorted(logs)
    assert "Paths:" in task_log and "transfer e2e-copy done" in task_log
    for name, blob in blobs.items():
        assert (base / "data" / "eu" / name).read_bytes() == blob
    # It deferred: the detached driver ran and reported through the state store (kept for the
    # record), and deleted the fleet and, with it, the fleet secret there.
    state = base / "w" / "state" / "e2e-copy"
    status = json.loads((state / "status.json").read_text())
    assert status["state"] == "success" and status["result"]["objects"] == 3
    assert not (state / "secret").exists()

    # OpenLineage events through the file transport, with spec-named datasets. The task's
    # COMPLETE event is written by the listener after the task's state is saved, so under load
    # it may land after the run reads "success": wait for it (the DAG run's own event, job
    # "skyplane_e2e_copy", has no datasets).
    def task_events() -> list[dict[str, Any]]:
        lines = (base / "lineage.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        return [
            e
            for e in events
            if e.get("eventType") == "COMPLETE" and e["job"]["name"].endswith(".copy")
        ]

    deadline = time.monotonic() + 120
    while not (complete := task_events()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert complete, (base / "lineage.jsonl").read_text()[-3000:]
    # Named as Airflow's own common.io converter names ``Asset("file:///abs/p")``: ``file``
    # without a host, so the lineage joins the Asset events of the same task.
    inputs = {(d["namespace"], d["name"]) for e in complete for d in e.get("inputs", [])}
    outputs = {(d["namespace"], d["name"]) for e in complete for d in e.get("outputs", [])}
    assert ("file", str(base / "data" / "us")) in inputs, complete
    assert ("file", str(base / "data" / "eu")) in outputs, complete


def test_dagster_materialises_a_partitioned_replica_with_its_check(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "dagster_project", project)
    (tmp_path / "dagster").mkdir()
    env = clean_env(
        DAGSTER_HOME=str(tmp_path / "dagster"),
        SKYPLANE_OPS_HOME=str(tmp_path / "skyplane"),
        SKYPLANE_EXAMPLE_DATA=str(tmp_path / "data"),
        SKYPLANE_EXAMPLE_ROWS="5000",
        PYTHONPATH=str(project),
    )
    day = "2026-11-20"
    done = subprocess.run(
        [
            str(BIN / "dagster"),
            "asset",
            "materialize",
            "-m",
            "skyplane_example.definitions",
            "--select",
            "events,events_eu",
            "--partition",
            day,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(project),
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "Asset check 'replica_matches_source' on 'events_eu' passed" in out, out[-6000:]
    replica = tmp_path / "data" / "eu-west-1" / "events" / day
    source = tmp_path / "data" / "us-east-1" / "events" / day
    assert sorted(p.name for p in replica.iterdir()) == sorted(p.name for p in source.iterdir())
