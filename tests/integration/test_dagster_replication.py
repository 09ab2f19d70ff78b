"""The Dagster face end to end: the example project materialised in-process with real local
gateway processes moving real Parquet bytes between two "regions" (two folders on this host).

Nothing is mocked. ``skyplane_ops.api.provision`` is wrapped by a spy that only records the fleet
(and reads its per-transfer secret, to prove that the secret never reaches Dagster's event log).
"""

import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg
import pytest
from dagster._serdes import serialize_value

from skyplane_ops import api
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import read_secret

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dagster_project"
DAY = "2026-11-20"


class FleetSpy:
    """Records every fleet api.provision returns and the secret it was given (real call)."""

    def __init__(self) -> None:
        self.fleets: list[GatewayFleet] = []
        self.secrets: list[str] = []
        self.alive_at_start: list[list[int]] = []
        self._real = api.provision

    def __call__(self, *args: Any, **kwargs: Any) -> GatewayFleet:
        fleet = self._real(*args, **kwargs)
        self.fleets.append(fleet)
        self.secrets.append(read_secret(fleet.secret_ref))
        self.alive_at_start.append(_gateway_processes(fleet.transfer_id))
        return fleet


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The example's definitions module, pointed at a private data root and state home."""
    root = tmp_path_factory.mktemp("dagster-example")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYPLANE_EXAMPLE_DATA", str(root / "data"))
        mp.setenv("SKYPLANE_EXAMPLE_ROWS", "20000")
        mp.setenv("SKYPLANE_OPS_HOME", str(root / "home"))
        mp.setenv("DAGSTER_HOME", str(root / "dagster"))
        (root / "dagster").mkdir()
        mp.syspath_prepend(str(EXAMPLE))
        for name in [m for m in sys.modules if m.startswith("skyplane_example")]:
            del sys.modules[name]
        yield importlib.import_module("skyplane_example.definitions")
        for name in [m for m in sys.modules if m.startswith("skyplane_example")]:
            del sys.modules[name]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FleetSpy]:
    recorder = FleetSpy()
    monkeypatch.setattr(api, "provision", recorder)
    yield recorder
    for fleet in recorder.fleets:  # a failed test must not leave gateways running
        api.deprovision(fleet)


def _everything(example: ModuleType) -> list[Any]:
    ds = example.events_replicas
    return [example.events, ds.assets_def, example.events_eu_summary, *ds.checks]


def _run(
    example: ModuleType, instance: dg.DagsterInstance | None = None, **kwargs: Any
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        _everything(example),
        resources={"skyplane": example.skyplane},
        instance=instance or dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
        **kwargs,
    )


def _folder(example: ModuleType, which: str, day: str) -> Path:
    return Path(example.DATA_ROOT) / which / "events" / day


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _gateway_processes(transfer_id: str) -> list[int]:
    """Pids of live processes whose command line carries the transfer id (local agents do)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "status").read_text()
        except OSError:
            continue
        if transfer_id.encode() in cmdline and "\nState:\tZ" not in status:
            pids.append(int(entry.name))
    return pids


def _wait_gone(transfer_id: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = _gateway_processes(transfer_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _check_evaluations(result: dg.ExecuteInProcessResult) -> list[Any]:
    return [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]


def _materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {
        e.event_specific_data.materialization.asset_key.to_user_string()
        for e in result.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
    }


def _event_log_text(instance: dg.DagsterInstance, run_id: str) -> str:
    """Every stored event of the run (messages, metadata, errors), serialised."""
    return "\n".join(serialize_value(entry) for entry in instance.all_logs(run_id))


def test_example_replicates_real_parquet_and_check_passes(
    example: ModuleType, spy: FleetSpy, capfd: pytest.CaptureFixture[str]
) -> None:
    instance = dg.DagsterInstance.ephemeral()
    result = _run(example, instance, partition_key=DAY)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert _materialized(result) == {"events", "events_eu", "events_eu_summary"}

    # The replica holds the source's Parquet files, byte for byte, and pyarrow read it back.
    src, dst = (
        _files(_folder(example, "us-east-1", DAY)),
        _files(_folder(example, "eu-west-1", DAY)),
    )
    assert len(src) == 4 and src == dst
    summary = result.asset_materializations_for_node("events_eu_summary")[0].metadata
    assert summary["rows"].value == 4 * 20000

    # plan, provision and transfer ran in one step (no step IO), on one fleet, gone now.
    steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert "events_replication" in steps
    assert not any(
        "io_manager" in (e.message or "").lower() or e.event_type_value == "HANDLED_OUTPUT"
        for e in result.all_events
        if e.step_key == "events_replication"
    )
    assert len(spy.fleets) == 1 and spy.fleets[0].gateways
    assert spy.alive_at_start[0]  # the process probe sees the gateways while they run
    assert _wait_gone(spy.fleets[0].transfer_id) == []

    # Materialisation metadata: the figures the issue asks for, and small.
    (mat,) = result.asset_materializations_for_node("events_replication")
    meta = {k: v.value for k, v in mat.metadata.items()}
    for key in (
        "bytes",
        "objects",
        "seconds",
        "gbps",
        "predicted_gbps",
        "predicted_cost_usd",
        "actual_cost_usd",
        "route",
        "route_diagram",
        "plan_uri",
    ):
        assert key in meta, key
    assert meta["objects"] == 4
    assert meta["bytes"] == sum(len(b) for b in src.values())
    assert meta["verified"] is True
    # the transfer report of the partition, every object in it
    report = api.load_summary(meta["report_uri"])
    assert report["outcomes"]["copied"]["objects"] == 4 and report["status"] == "ok"
    route = mat.metadata["route"]
    assert isinstance(route, dg.TableMetadataValue)
    assert route.records and route.records[0].data["from"] == "aws:us-east-1"
    assert meta["route_diagram"].startswith("![route](data:image/svg+xml;base64,")
    assert "```mermaid" not in meta["route_diagram"]
    plan_path = meta["plan_uri"].removeprefix("file://")
    assert json.loads(Path(plan_path).read_text())["src"] == "aws:us-east-1"
    assert len(serialize_value(mat)) < 16_000
    assert all(len(str(v)) < 8_000 for v in meta.values())

    (check,) = _check_evaluations(result)
    assert check.passed and check.metadata["checksums_compared"].value == 4

    # No secret in the event log (messages, metadata, errors) nor in what the run printed.
    secret = spy.secrets[0]
    assert len(secret) >= 16
    assert secret not in _event_log_text(instance, result.run_id)
    out, err = capfd.readouterr()
    assert secret not in out and secret not in err


def test_check_fails_after_tampering_with_the_replica(example: ModuleType) -> None:
    folder = _folder(example, "eu-west-1", DAY)
    if not folder.exists():
        assert _run(example, partition_key=DAY).success
    victim = sorted(folder.iterdir())[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes: only a checksum can tell
    victim.write_bytes(bytes(data))

    ds = example.events_replicas
    result = dg.materialize(
        _everything(example),
        selection=dg.AssetSelection.checks_for_assets("events_eu"),
        resources={"skyplane": example.skyplane},
        tags={"dagster/partition": DAY},  # a check-only run scoped to one partition
        raise_on_error=False,
    )
    (check,) = _check_evaluations(result)
    assert not check.passed
    # Partition-aware: the failure belongs to this day, not to the whole replica.
    assert check.partition == DAY
    assert check.metadata["partitions_differing"].value == DAY
    assert ds.checks[0].partitions_def is ds.assets_def.partitions_def
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["checksum_count"].value == 1
    assert check.metadata["checksum_examples"].value == victim.name
    assert check.metadata["missing_count"].value == 0
    assert ds.checks[0].check_specs  # the check is the factory's own, blocking one
    assert all(spec.blocking for spec in ds.checks[0].check_specs)


def test_failed_check_blocks_the_downstream_asset(example: ModuleType, spy: FleetSpy) -> None:
    """A stale object already in the replica folder: the replica is written, the check sees the
    extra object, and the asset reading the replica does not run."""
    day = "2026-11-21"
    stale = _folder(example, "eu-west-1", day)
    stale.mkdir(parents=True)
    (stale / "part-9999.parquet").write_bytes(b"left over from an older layout")
    result = _run(example, partition_key=day)
    assert not result.success
    assert _materialized(result) == {"events", "events_eu"}
    (check,) = _check_evaluations(result)
    assert not check.passed and check.metadata["extra_count"].value == 1
    assert check.partition == day
    skipped = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert "events_eu_summary" in skipped or "events_eu_summary" not in {
        e.step_key for e in result.all_events if e.event_type_value == "STEP_START"
    }
    assert _wait_gone(spy.fleets[0].transfer_id) == []


def test_backfill_of_two_partitions_shares_one_fleet(example: ModuleType, spy: FleetSpy) -> None:
    days = ["2026-11-18", "2026-11-19"]
    result = _run(
        example,
        tags={
            "dagster/asset_partition_range_start": days[0],
            "dagster/asset_partition_range_end": days[1],
        },
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert len(spy.fleets) == 1  # one plan, one fleet, one transfer per partition
    for day in days:
        assert _files(_folder(example, "us-east-1", day)) == _files(
            _folder(example, "eu-west-1", day)
        )
    mats = result.asset_materializations_for_node("events_replication")
    assert sorted(m.partition for m in mats if m.partition) == days
    assert mats[0].metadata["partitions"].value == 2
    assert _wait_gone(spy.fleets[0].transfer_id) == []


def test_failing_transfer_still_tears_the_fleet_down(example: ModuleType, spy: FleetSpy) -> None:
    """The replica's partition folder is a regular file, so no object can be written there."""
    day = "2026-11-22"
    blocker = _folder(example, "eu-west-1", day)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"not a folder")
    instance = dg.DagsterInstance.ephemeral()
    result = _run(example, instance, partition_key=day)
    assert not result.success
    failed = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failed] == ["events_replication"]
    assert "events_eu" not in _materialized(result)
    (fleet,) = spy.fleets
    assert fleet.gateways and spy.alive_at_start[0]
    assert _wait_gone(fleet.transfer_id, timeout=5.0) == []
    logs = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any(f"deprovisioned {fleet.transfer_id}" in m for m in logs)


def test_an_up_to_date_partition_starts_no_gateway(example: ModuleType, spy: FleetSpy) -> None:
    """Re-materialising a replicated partition checks the replica in the replication step and
    starts nothing (on a cloud backend: no VM paid for nothing); the replica is left as is."""
    day = "2026-11-23"
    first = _run(example, partition_key=day)
    assert first.success, [e.message for e in first.all_events if e.is_failure]
    assert len(spy.fleets) == 1
    replica = _folder(example, "eu-west-1", day)
    before = {p.name: p.stat().st_mtime_ns for p in replica.iterdir()}
    # The replica alone this time (the example's upstream asset writes a new source each run).
    replicas = example.events_replicas.assets_def
    again = _run(example, partition_key=day, selection=list(replicas.keys))
    assert again.success, [e.message for e in again.all_events if e.is_failure]
    assert len(spy.fleets) == 1  # the second run started no fleet
    (mat,) = [m for m in again.asset_materializations_for_node("events_replication")]
    assert mat.metadata["gateways"].value == 0
    assert {p.name: p.stat().st_mtime_ns for p in replica.iterdir()} == before


def test_a_partition_with_no_source_data_is_not_retried(
    example: ModuleType, spy: FleetSpy, tmp_path: Path
) -> None:
    """Nothing under the partition's prefix: the step fails once, whatever its retry policy
    (a retry would find the same nothing), and starts no gateway."""
    from skyplane_ops.dagster import ReplicaDestination, ReplicaSource, replicated_dataset

    (tmp_path / "src").mkdir()
    daily = dg.DailyPartitionsDefinition(start_date="2026-11-01")
    replicas = replicated_dataset(
        "empty_replication",
        source=ReplicaSource(uri=f"file://{tmp_path}/src/", region="aws:us-east-1"),
        destinations=[ReplicaDestination(key="empty_eu", uri=f"file://{tmp_path}/dst/",
                                         region="aws:eu-west-1")],
        partitions_def=daily,
        retry_policy=dg.RetryPolicy(max_retries=2),
    )  # fmt: skip
    result = dg.materialize(
        [replicas.assets_def],
        resources={"skyplane": example.skyplane},
        instance=dg.DagsterInstance.ephemeral(),
        partition_key=DAY,
        raise_on_error=False,
    )
    assert not result.success and spy.fleets == []
    kinds = [e.event_type_value for e in result.all_events]
    assert kinds.count("STEP_FAILURE") == 1 and "STEP_UP_FOR_RETRY" not in kinds
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "nothing to replicate" in str(failure.event_specific_data), failure
