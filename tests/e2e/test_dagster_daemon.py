"""Dagster as people deploy it: ``dagster-daemon`` on Postgres run/event storage.

The daemon (with its code server) runs a code location with a partitioned replica, a job with
the multiprocess executor, a schedule and a sensor; the instance keeps runs and events in
Postgres (a private process, ``skyplane_ops.testing.services``), queues runs
(``QueuedRunCoordinator``) and re-executes a failed run from the failure (``run_retries``).
Stores are buckets of an S3 emulator (moto); the source is read through a rate-limited
forwarder (``testing.throttle``) so a transfer lasts long enough to be killed; the resource's
``state_store`` is another bucket. Gateways are local processes (no cloud account here).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.services import postgres_bindir, run_postgres
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

if postgres_bindir() is None:  # pragma: no cover - tool missing
    pytest.skip("PostgreSQL missing (run scripts/install-test-tools.sh)", allow_module_level=True)

SOURCE_RATE_BPS = 3e6
SCHEDULED_DAY, SENSED_DAY, KILLED_DAY = "2026-11-20", "2026-11-21", "2026-11-22"
SMALL = {"part-0.bin": 1 << 20, "part-1.bin": (1 << 20) + 1}
# As in the Airflow test: two small chunks land ~10 s before the two big ones.
BIG = {"small-0.bin": 7 << 20, "small-1.bin": (7 << 20) + 1}
BIG |= {"big-0.bin": 24 << 20, "big-1.bin": (24 << 20) + 1}

INSTANCE = """
storage:
  postgres:
    postgres_db:
      username: {user}
      hostname: 127.0.0.1
      port: {port}
      db_name: dagster
      scheme: postgresql+psycopg2
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
run_retries:
  enabled: true
  max_retries: 1
telemetry:
  enabled: false
"""

DEFS = """
import json
import os

import dagster as dg
from skyplane_ops.dagster import (
    ReplicaDestination, ReplicaSource, SkyplaneResource, replicated_dataset, skyplane_definitions,
)

daily = dg.DailyPartitionsDefinition(start_date="2026-11-01", end_offset=1)
SRC, DST = os.environ["E2E_SRC"], os.environ["E2E_DST"]
SCHEDULED = os.environ["E2E_SCHEDULED"]  # the schedule's day; the sensor leaves it alone
replica = replicated_dataset(
    "events_replication",
    source=ReplicaSource(uri=SRC, region="aws:us-east-1"),
    destinations=[ReplicaDestination(key="events_eu", uri=DST, region="aws:eu-west-1")],
    partitions_def=daily,
)
replicate = dg.define_asset_job(
    "replicate_events",
    selection=dg.AssetSelection.assets(*replica.keys),
    partitions_def=daily,
    executor_def=dg.multiprocess_executor,
)


@dg.schedule(job=replicate, cron_schedule="* * * * *",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def every_minute(context: dg.ScheduleEvaluationContext):
    # A schedule's run key holds within one tick only: skip a day that already has a run.
    done = context.instance.get_runs(dg.RunsFilter(tags={"dagster/partition": SCHEDULED}), limit=1)
    if done:
        return dg.SkipReason(f"{SCHEDULED} has a run")
    return dg.RunRequest(run_key=f"scheduled-{SCHEDULED}", partition_key=SCHEDULED)


@dg.sensor(job=replicate, minimum_interval_seconds=3,
           default_status=dg.DefaultSensorStatus.RUNNING)
def new_days(context: dg.SensorEvaluationContext, skyplane: SkyplaneResource):
    \"\"\"A day's folder with a _READY marker in the source: replicate that partition.\"\"\"
    store = skyplane.open_store(SRC)
    for info in store.list(""):
        day, _, name = info.key.partition("/")
        if name == "_READY" and day != SCHEDULED:
            yield dg.RunRequest(run_key=day, partition_key=day)


defs = skyplane_definitions(
    [replica],
    skyplane=SkyplaneResource(
        backend="local",
        store_options=json.loads(os.environ["E2E_STORE_OPTIONS"]),
        state_store=os.environ["E2E_STATE"],
        journal_root=os.environ["E2E_JOURNALS"],
    ),
    jobs=[replicate],
    schedules=[every_minute],
    sensors=[new_days],
)
"""


@dataclass
class Deployment:
    base: Path
    s3: Emulator
    buckets: dict[str, str]
    daemon: Component
    home: Path

    def client(self) -> Any:
        return s3_client(self.s3)

    def put_day(self, day: str, sizes: dict[str, int]) -> dict[str, bytes]:
        client = self.client()
        blobs = {name: os.urandom(size) for name, size in sizes.items()}
        for name, blob in blobs.items():
            client.put_object(Bucket=self.buckets["src"], Key=f"{day}/{name}", Body=blob)
        client.put_object(Bucket=self.buckets["src"], Key=f"{day}/_READY", Body=b"")
        return blobs

    def replica(self, day: str, name: str) -> bytes:
        got = self.client().get_object(Bucket=self.buckets["dst"], Key=f"{day}/{name}")
        return bytes(got["Body"].read())

    def instance(self) -> Any:
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.home))

    def runs_of(self, day: str) -> list[Any]:
        """Runs of ``day``'s partition, oldest first."""
        import dagster as dg

        with self.instance() as instance:
            runs = instance.get_runs(dg.RunsFilter(tags={"dagster/partition": day}))
        return list(reversed(runs))  # get_runs: newest first

    def wait_success(self, day: str, timeout: float = 300) -> Any:
        import dagster as dg

        def done() -> Any:
            runs = [r for r in self.runs_of(day) if r.status == dg.DagsterRunStatus.SUCCESS]
            return runs[-1] if runs else None

        return wait_until(f"a successful run of {day}", done, timeout, [self.daemon], every=2)

    def describe(self) -> str:
        """Every run: id, root, status and tags (for a failing assertion)."""
        with self.instance() as instance:
            runs = instance.get_runs()
        return "\n".join(
            f"{r.run_id} root={r.root_run_id} {r.status.value} {dict(r.tags)}" for r in runs
        )

    def messages(self, run_id: str) -> str:
        with self.instance() as instance:
            return "\n".join(e.message or "" for e in instance.all_logs(run_id))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, moto_s3: Emulator) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("dagster")
    _suffix, buckets = make_buckets(moto_s3, "dg")
    home, code = base / "dagster_home", base / "code"
    home.mkdir()
    code.mkdir()
    (code / "e2e_defs.py").write_text(DEFS)
    (code / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: e2e_defs\n"
        f"      working_directory: {code}\n"
    )
    endpoint = moto_s3.options["endpoint_url"]
    with run_postgres() as pg, slow_s3(moto_s3, SOURCE_RATE_BPS) as slow:
        pg.create_database("dagster")
        (home / "dagster.yaml").write_text(INSTANCE.format(user=pg.user, port=pg.port))
        direct = {"endpoint_url": endpoint, "region": "us-east-1"}
        options = {
            "s3": {"endpoint_url": slow.endpoint, "region": "us-east-1"},
            f"s3://{buckets['dst']}/": direct,
            f"s3://{buckets['state']}/": direct,
        }
        env = clean_env(
            **moto_s3.env,
            DAGSTER_HOME=str(home),
            HOME=str(base),
            SKYPLANE_OPS_HOME=str(base / "skyplane"),
            PYTHONPATH=str(code),
            E2E_SRC=f"s3://{buckets['src']}/",
            E2E_DST=f"s3://{buckets['dst']}/",
            E2E_STATE=f"s3://{buckets['state']}/dagster",
            E2E_JOURNALS=str(base / "journals"),
            E2E_STORE_OPTIONS=json.dumps(options),
            E2E_SCHEDULED=SCHEDULED_DAY,
        )
        daemon = Component(
            "dagster-daemon",
            [str(BIN / "dagster-daemon"), "run", "-w", str(code / "workspace.yaml")],
            env,
            base / "daemon.log",
            cwd=REPO,
        ).start()
        try:
            yield Deployment(base, moto_s3, buckets, daemon, home)
        finally:
            stop_all([daemon])


def test_a_schedule_and_a_sensor_replicate_their_partitions(deployment: Deployment) -> None:
    """The schedule (every minute) replicates its day, the sensor the day whose source
    folder got a ``_READY`` marker; both on the multiprocess executor."""
    dep = deployment
    scheduled = dep.put_day(SCHEDULED_DAY, SMALL)
    sensed = dep.put_day(SENSED_DAY, SMALL)
    sensed_run = dep.wait_success(SENSED_DAY)
    scheduled_run = dep.wait_success(SCHEDULED_DAY, timeout=240)
    assert scheduled_run.tags.get("dagster/schedule_name") == "every_minute"
    assert sensed_run.tags.get("dagster/sensor_name") == "new_days"
    for day, blobs in ((SCHEDULED_DAY, scheduled), (SENSED_DAY, sensed)):
        for name, blob in blobs.items():
            assert dep.replica(day, name) == blob, (day, name)
    log = dep.messages(sensed_run.run_id)
    assert "multiprocess executor" in log, log[-3000:]
    for day in (SCHEDULED_DAY, SENSED_DAY):  # one run each: the run keys hold on later ticks
        assert len(dep.runs_of(day)) == 1, dep.describe()


def test_a_run_killed_mid_transfer_resumes_on_re_execution(deployment: Deployment) -> None:
    """The step process is killed (SIGKILL) once its journal is in the state store; the
    local journal goes with the machine (deleted here); the daemon re-executes the run from
    the failure, and the new step restores the journal from the state store and resumes."""
    dep = deployment
    blobs = dep.put_day(KILLED_DAY, BIG)
    client = dep.client()

    def journaled_step() -> int | None:
        snapshot = client.list_objects_v2(Bucket=dep.buckets["state"], Prefix="dagster/")
        if not any("/journal/" in o["Key"] for o in snapshot.get("Contents", [])):
            return None
        # The step process is the parent of the run's gateways (and one of this deployment's
        # processes: never an adoptive parent such as init).
        marker = f"DAGSTER_HOME={dep.home}".encode()
        for pid in gateway_processes(str(dep.base)):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                parent = int(stat.rsplit(")", 1)[1].split()[1])
                environ = Path(f"/proc/{parent}/environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if parent > 1 and parent != os.getpid() and marker in environ:
                return parent
        return None

    step = wait_until("the step to journal chunks", journaled_step, 300, [dep.daemon], every=0.5)
    assert isinstance(step, int)
    os.kill(step, signal.SIGKILL)
    import shutil

    shutil.rmtree(dep.base / "journals")  # the step's disk is gone with it
    final = dep.wait_success(KILLED_DAY, timeout=420)
    runs = dep.runs_of(KILLED_DAY)
    assert len(runs) == 2, dep.describe()
    first = next(r for r in runs if r.run_id != final.run_id)
    assert final.root_run_id == first.run_id, dep.describe()
    log = dep.messages(final.run_id)
    assert "restored" in log and "journal file(s) from s3://" in log, log[-4000:]
    assert "resumed from the journal" in log, log[-4000:]
    for name, blob in blobs.items():
        assert dep.replica(KILLED_DAY, name) == blob, name
    # The killed run's gateways were swept (failure sensor) or lapsed; the snapshot is gone.
    wait_until("every gateway to stop", lambda: not gateway_processes(str(dep.base)), 120)
    left = client.list_objects_v2(Bucket=dep.buckets["state"], Prefix="dagster/")
    assert not left.get("Contents"), left.get("Contents")
