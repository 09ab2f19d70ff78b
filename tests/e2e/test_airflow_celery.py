"""Airflow as people deploy it: the CeleryExecutor on Postgres and Redis, two workers.

One deployment for the module: Postgres (metadata and Celery results) and Redis (the broker)
as private processes (``skyplane_ops.testing.services``), an api-server, a scheduler, a
DAG processor, a triggerer and two Celery workers, A and B. Every component has its own
``HOME``, ``AIRFLOW_HOME`` (its own copy of the DAG files), ``SKYPLANE_OPS_HOME`` and work
folder: they share nothing but the databases and the transfer state store, a bucket of an S3
emulator (moto). Each worker names itself (``[core] hostname_callable``), so the metadata
database records which worker ran which try. Source and destination are buckets of the same
emulator; the source is read through a rate-limited forwarder (``testing.throttle``) so that
a transfer lasts long enough to be killed half-way on any machine. Gateways are local
processes (the ``local`` backend: no cloud account here).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.ports import free_port
from skyplane_ops.testing.services import (
    Postgres,
    postgres_bindir,
    redis_binary,
    run_postgres,
    run_redis,
)
from tests.e2e.deployment import (
    BIN,
    REPO,
    Component,
    clean_env,
    gateway_processes,
    make_buckets,
    s3_client,
    slow_s3,
    stop_all,
    wait_until,
)

# The module's deployment starts with its first test: more than the suite's 300 s per test.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.emulator, pytest.mark.timeout(900)]

if postgres_bindir() is None or redis_binary() is None:  # pragma: no cover - tool missing
    pytest.skip(
        "PostgreSQL or redis-server missing (run scripts/install-test-tools.sh)",
        allow_module_level=True,
    )

SOURCE_RATE_BPS = 3e6  # the slow link in front of the source bucket: ~20 s for the objects
# One chunk each (whole objects under the 64 MiB part size, too big to batch together): the
# small ones land first, the big ones ~10 s later, which is when try 1 is killed.
OBJECTS = {"small-0.bin": 7 << 20, "small-1.bin": (7 << 20) + 1}
OBJECTS |= {"big-0.bin": 24 << 20, "big-1.bin": (24 << 20) + 1}

HOSTNAME = """
def name() -> str:
    return {name!r}
"""

DAGS = """
from datetime import datetime, timedelta

from airflow.sdk import DAG
from skyplane_ops.airflow import SkyplaneCopyOperator
from skyplane_ops.airflow.operators import (
    SkyplaneDeprovisionOperator,
    SkyplanePlanOperator,
    SkyplaneProvisionOperator,
    SkyplaneTransferOperator,
)

COMMON = dict(src_region="aws:us-east-1", src_conn_id="s3_src")

with DAG("celery_copy", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    # Deferrable: [operators] default_deferrable = True in this deployment.
    SkyplaneCopyOperator(
        task_id="copy",
        src="s3://{src}/data/",
        dst="s3://{dst}/copy/",
        dst_region="aws:eu-west-1",
        dst_conn_id="s3_dst",
        poll_interval=1.0,
        transfer_id="{tid}",
        retries=1,
        retry_delay=timedelta(seconds=1),
        **COMMON,
    )

with DAG("celery_split", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    # Each task on the other worker than the one before; the plan is kept where both reach.
    tid = "{tid}-split"
    stored = dict(plan_uri="s3://{state}/plans/" + tid + ".json", plan_conn_id="s3_dst")
    plan = SkyplanePlanOperator(
        task_id="plan", dst_regions="aws:eu-west-1", src="s3://{src}/data/",
        transfer_id=tid, queue="a", **COMMON, **stored,
    )
    provision = SkyplaneProvisionOperator(
        task_id="provision", plan=plan.output, transfer_id=tid, queue="b",
        plan_conn_id="s3_dst",
    )
    transfer = SkyplaneTransferOperator(
        task_id="transfer", src="s3://{src}/data/", src_conn_id="s3_src",
        dst="s3://{dst}/split/", dst_conn_id="s3_dst", plan=plan.output,
        fleet=provision.output, transfer_id=tid, poll_interval=1.0, queue="a",
        plan_conn_id="s3_dst",
    )
    deprovision = SkyplaneDeprovisionOperator(
        task_id="deprovision", fleet_task_id="provision", transfer_id=tid, queue="b",
    )
    plan >> provision >> transfer >> deprovision
"""


@dataclass
class Deployment:
    base: Path
    pg: Postgres
    s3: Emulator
    buckets: dict[str, str]
    tid: str
    components: dict[str, Component]
    blobs: dict[str, bytes]

    def query(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        return self.pg.query("airflow", sql, *args)

    def airflow(self, *args: str) -> None:
        import subprocess

        done = subprocess.run(
            [str(BIN / "airflow"), *args],
            env=self.components["scheduler"].env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    def run_dag(self, dag_id: str) -> None:
        """Unpause and trigger ``dag_id`` once the DAG processor has stored it."""
        wait_until(
            f"the DAG processor to store {dag_id}",
            lambda: self.query("select 1 from dag where dag_id = %s", dag_id),
            300,
            self.components.values(),
            every=2,
        )
        self.airflow("dags", "unpause", dag_id)
        self.airflow("dags", "trigger", dag_id)

    def dag_state(self, dag_id: str) -> str:
        rows = self.query("select state from dag_run where dag_id = %s", dag_id)
        return str(rows[0][0]) if rows else ""

    def wait_dag(self, dag_id: str, timeout: float = 420) -> None:
        state = wait_until(
            f"the run of {dag_id} to end",
            lambda: self.dag_state(dag_id) in ("success", "failed") and self.dag_state(dag_id),
            timeout,
            [c for c in self.components.values() if c.alive],
        )
        assert state == "success", self.explain(dag_id)

    def tries(self, dag_id: str, task_id: str) -> list[tuple[int, str, str]]:
        """(try number, worker, state) of every try of a task, oldest first."""
        sql = (
            "select try_number, hostname, state from task_instance_history "
            "where dag_id = %s and task_id = %s union all "
            "select try_number, hostname, state from task_instance "
            "where dag_id = %s and task_id = %s order by 1"
        )
        rows = self.query(sql, dag_id, task_id, dag_id, task_id)
        return [(int(n), str(h), str(s)) for n, h, s in rows]

    def explain(self, dag_id: str) -> str:
        rows = self.query(
            "select task_id, try_number, hostname, state from task_instance where dag_id = %s",
            dag_id,
        )
        logs = "\n".join(
            f"--- {p} ---\n{p.read_text(errors='replace')[-2500:]}"
            for p in sorted(self.base.rglob("attempt=*.log"))
            if f"dag_id={dag_id}" in str(p)
        )
        return f"{rows}\n{logs}"

    def s3_client(self) -> Any:
        return s3_client(self.s3)


def _aws_conn(endpoint: str, s3: Emulator) -> str:
    return json.dumps(
        {
            "conn_type": "aws",
            "login": s3.env["AWS_ACCESS_KEY_ID"],
            "password": s3.env["AWS_SECRET_ACCESS_KEY"],
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
    )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, moto_s3: Emulator) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("celery")
    suffix, buckets = make_buckets(moto_s3)
    client = s3_client(moto_s3)
    blobs = {name: secrets.token_bytes(size) for name, size in OBJECTS.items()}
    for name, blob in blobs.items():
        client.put_object(Bucket=buckets["src"], Key=f"data/{name}", Body=blob)
    tid = f"celery-{suffix}"
    (base / "dags").mkdir()
    (base / "dags" / "celery_e2e.py").write_text(
        DAGS.replace("{src}", buckets["src"])
        .replace("{dst}", buckets["dst"])
        .replace("{state}", buckets["state"])
        .replace("{tid}", tid)
    )
    with run_postgres() as pg, run_redis() as redis, slow_s3(moto_s3, SOURCE_RATE_BPS) as slow:
        db = pg.create_database("airflow")
        port = free_port()
        shared = {
            **moto_s3.env,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
            "AIRFLOW__CELERY__BROKER_URL": redis.url(),
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + pg.url("airflow"),
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
            "AIRFLOW_CONN_S3_SRC": _aws_conn(slow.endpoint, moto_s3),
            "AIRFLOW_CONN_S3_DST": _aws_conn(moto_s3.options["endpoint_url"], moto_s3),
        }

        def env_of(name: str) -> dict[str, str]:
            """A private home: its own Airflow home, DAG copy, skyplane home and work dir."""
            home = base / name
            (home / "airflow" / "dags").mkdir(parents=True)
            (home / "airflow" / "dags" / "celery_e2e.py").write_text(
                (base / "dags" / "celery_e2e.py").read_text()
            )
            (home / "e2e_hostname.py").write_text(HOSTNAME.format(name=name))
            conn = {
                "backend": "local",
                "work_dir": str(home / "work"),
                "state_store": f"s3://{buckets['state']}",
                "state_store_options": moto_s3.options,
            }
            return clean_env(
                **shared,
                HOME=str(home),
                AIRFLOW_HOME=str(home / "airflow"),
                SKYPLANE_OPS_HOME=str(home / "skyplane"),
                PYTHONPATH=str(home),
                AIRFLOW__CORE__HOSTNAME_CALLABLE="e2e_hostname.name",
                AIRFLOW_CONN_SKYPLANE_DEFAULT=json.dumps({"conn_type": "skyplane", "extra": conn}),
            )

        airflow = str(BIN / "airflow")
        specs = {
            "api-server": [airflow, "api-server"],
            "scheduler": [airflow, "scheduler"],
            "dag-processor": [airflow, "dag-processor"],
            "triggerer": [airflow, "triggerer"],
        }
        for worker in ("a", "b"):
            specs[f"worker-{worker}"] = [
                *(airflow, "celery", "worker", "--queues", f"default,{worker}"),
                *("--celery-hostname", f"{worker}@%h", "--skip-serve-logs"),
            ]
        envs = {name: env_of(name) for name in specs}
        import subprocess

        migrated = subprocess.run(
            [airflow, "db", "migrate"],
            env=envs["scheduler"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        components: dict[str, Component] = {}
        try:
            for name, cmd in specs.items():
                log = base / "logs" / f"{name}.log"
                components[name] = Component(name, cmd, envs[name], log, cwd=REPO).start()
            yield Deployment(base, pg, moto_s3, buckets, tid, components, blobs)
        finally:
            stop_all(components.values())


def _status(deployment: Deployment, tid: str) -> dict[str, Any]:
    from skyplane_ops.api import TransferState

    state = TransferState(f"s3://{deployment.buckets['state']}", tid, deployment.s3.options)
    return state.read_status() or {}


def test_the_split_tasks_run_on_alternate_workers(deployment: Deployment) -> None:
    """plan on A, provision on B, the deferred transfer (its driver) on A, teardown on B:
    the plan, the fleet secret, the journal and the status cross hosts only through the
    state store and XCom."""
    dep = deployment
    dep.run_dag("celery_split")
    dep.wait_dag("celery_split")
    ran = {task: dep.tries("celery_split", task) for task in ("plan", "provision")}
    ran |= {task: dep.tries("celery_split", task) for task in ("transfer", "deprovision")}
    assert {task: [h for _, h, _ in tries] for task, tries in ran.items()} == {
        "plan": ["worker-a"],
        "provision": ["worker-b"],
        "transfer": ["worker-a"],
        "deprovision": ["worker-b"],
    }, ran
    client = dep.s3_client()
    for name, blob in dep.blobs.items():
        got = client.get_object(Bucket=dep.buckets["dst"], Key=f"split/{name}")["Body"].read()
        assert got == blob, name
    status = _status(dep, f"{dep.tid}-split")
    assert status.get("state") in (None, "success"), status
    # B made the fleet secret and deleted it with the fleet. (A's driver found it through the
    # fleet's reference: one machine has one disk; tests/integration/test_airflow_state.py
    # removes the file and shows the secret then comes from the state store.)
    assert not list((dep.base / "worker-b" / "skyplane" / "secrets").glob("*split*"))
    wait_until("every gateway to stop", lambda: not gateway_processes(str(dep.base)), 60)


def test_a_deferred_copy_killed_on_one_worker_resumes_on_the_other(
    deployment: Deployment,
) -> None:
    """(It kills a worker: the module's last test.) Try 1 runs on whichever worker takes it
    and defers; once its driver has journaled chunks, that worker dies (the Celery worker
    and the driver it started, SIGKILL). The trigger reports the driver lost, the other
    worker fails the try and deletes its gateways, and the retry on that worker restores
    the journal from the state store and resumes."""
    dep, tid = deployment, deployment.tid
    dep.run_dag("celery_copy")

    def journaled() -> dict[str, Any] | None:
        status = _status(dep, tid)
        progress = status.get("progress") or {}
        deferred = dep.query(
            "select 1 from task_instance where dag_id = 'celery_copy' and state = 'deferred'"
        )
        if not deferred or int(progress.get("chunks_done") or 0) < 1:
            return None
        snapshot = dep.s3_client().list_objects_v2(
            Bucket=dep.buckets["state"], Prefix=f"{tid}/journal/"
        )
        return status if snapshot.get("KeyCount") else None

    status: Any = wait_until("try 1 to journal chunks", journaled, 300, dep.components.values())
    first = dep.tries("celery_copy", "copy")[-1][1]
    assert first in ("worker-a", "worker-b"), dep.tries("celery_copy", "copy")
    total = sum(len(b) for b in dep.blobs.values())
    assert int(status["progress"].get("bytes_done") or 0) < total, "not mid-transfer"
    from skyplane_ops.airflow.driver import is_alive

    driver_pid = int(status["pid"])
    assert is_alive(driver_pid)
    # The worker's host dies: its Celery worker and the driver it started.
    dep.components[first].kill()
    import os
    import signal

    os.killpg(driver_pid, signal.SIGKILL)

    dep.wait_dag("celery_copy")
    tries = dep.tries("celery_copy", "copy")
    other = "worker-b" if first == "worker-a" else "worker-a"
    # Try 1 ended on the other worker (it resumed from the deferral, found the driver lost and
    # deleted the gateways), and so did all of try 2.
    assert [(n, h, s) for n, h, s in tries] == [(1, other, "failed"), (2, other, "success")]
    final = _status(dep, tid)
    assert final["state"] == "success", final
    result = final["result"]
    assert result["chunks_resumed"] > 0, result
    assert result["verification"]["status"] == "passed", result
    client = dep.s3_client()
    for name, blob in dep.blobs.items():
        got = client.get_object(Bucket=dep.buckets["dst"], Key=f"copy/{name}")["Body"].read()
        assert got == blob, name
    # No gateway of either try is left, and the fleet secret is gone from the state store.
    wait_until("every gateway to stop", lambda: not gateway_processes(str(dep.base)), 60)
    keys = [
        o["Key"] for o in client.list_objects_v2(Bucket=dep.buckets["state"]).get("Contents", [])
    ]
    assert f"{tid}/secret" not in keys, keys
