"""The Dagster factory with replicas in several regions: one multi-asset step, one transfer
(``FanoutRun``: each byte read once at the source, down the multicast plan's trees) for all
replicas, one materialisation per replica with its own metadata, and a replica that cannot be
written reported on its own while the others are materialised.

Real local gateway processes and folders; ``api.FanoutRun`` is wrapped by a spy that only
counts the runs (the real one runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from skyplane_ops import api
from skyplane_ops.dagster import (
    ReplicaDestination,
    ReplicaSource,
    SkyplaneResource,
    replicated_dataset,
)

SRC = "aws:us-east-1"
REPLICAS = {"rep_eu": "aws:eu-west-1", "rep_de": "aws:eu-central-1", "rep_jp": "aws:ap-northeast-1"}


class RunSpy:
    """Counts the ``FanoutRun``s made (and keeps them, for their tree pass)."""

    def __init__(self) -> None:
        self.runs: list[Any] = []
        self._real = api.FanoutRun

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run = self._real(*args, **kwargs)
        self.runs.append(run)
        return run


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> RunSpy:
    recorder = RunSpy()
    monkeypatch.setattr(api, "FanoutRun", recorder)
    return recorder


def dataset(root: Path) -> tuple[Any, dict[str, bytes]]:
    src = root / "src"
    src.mkdir()
    files = {f"part-{i}.bin": bytes([i]) * (300_000 + i) for i in range(4)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    replicas = replicated_dataset(
        "fan_replication",
        source=ReplicaSource(uri=f"file://{src}/", region=SRC),
        destinations=[
            ReplicaDestination(key=key, uri=f"file://{root / key}/", region=region)
            for key, region in REPLICAS.items()
        ],
    )
    return replicas, files


def materialize(replicas: Any, root: Path) -> dg.ExecuteInProcessResult:
    resource = SkyplaneResource(max_vms_per_region=1, journal_root=str(root / "journals"))
    return dg.materialize(
        [replicas.assets_def],
        resources={"skyplane": resource},
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def read(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_one_transfer_materialises_every_replica(tmp_path: Path, spy: RunSpy) -> None:
    replicas, files = dataset(tmp_path)
    result = materialize(replicas, tmp_path)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    (run,) = spy.runs  # one transfer for the three replicas
    assert run.tree is not None and len(run.tree.served) == 3
    assert run.tree.source_bytes_read == sum(len(b) for b in files.values())
    mats = {m.asset_key.to_user_string(): m for m in result.asset_materializations_for_node(
        "fan_replication")}  # fmt: skip
    assert set(mats) == set(REPLICAS)
    for key in REPLICAS:
        assert read(tmp_path / key) == files
        assert mats[key].metadata["replica_uri"].value == f"file://{tmp_path / key}/"


def test_a_replica_that_cannot_be_written_fails_alone(tmp_path: Path, spy: RunSpy) -> None:
    replicas, files = dataset(tmp_path)
    (tmp_path / "rep_de").write_bytes(b"a file where the replica's folder goes")
    result = materialize(replicas, tmp_path)
    assert not result.success
    mats = {m.asset_key.to_user_string() for m in result.asset_materializations_for_node(
        "fan_replication")}  # fmt: skip
    assert mats == {"rep_eu", "rep_jp"}
    assert read(tmp_path / "rep_eu") == files and read(tmp_path / "rep_jp") == files
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "1 of 3 replicas not copied (rep_de" in str(failure.event_specific_data)
    # Fixed, a re-run copies what is missing: every replica is then materialised.
    (tmp_path / "rep_de").unlink()
    again = materialize(replicas, tmp_path)
    assert again.success, [e.message for e in again.all_events if e.is_failure]
    assert read(tmp_path / "rep_de") == files
