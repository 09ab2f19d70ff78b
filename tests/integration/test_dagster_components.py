"""The Dagster conventions: a YAML ``dg`` component, ``@skyplane_assets`` with a translator.

Both are materialised for real (local gateway processes, real bytes between two folders that
stand for two regions' buckets), partitioned, with the partitioned "replica matches source"
check, and timed: the one-step materialisation of a small copy takes seconds.
"""

import os
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster.components.testing.utils import component_defs

from skyplane_ops.dagster import (
    ReplicaDestination,
    ReplicaSource,
    SkyplaneReplicationComponent,
    SkyplaneResource,
    SkyplaneTranslator,
    skyplane_assets,
)
from skyplane_ops.dagster.spec import ReplicationSpec

DAY = "2026-11-20"
YAML = """
type: skyplane_ops.dagster.SkyplaneReplicationComponent
attributes:
  skyplane:
    backend: local
    max_vms_per_region: 1
    metadata_set: {{reviewed: "yes"}}
  replications:
    - name: logs_replication
      source: {{uri: "file://{root}/us/logs/", region: "aws:us-east-1"}}
      destinations:
        - {{key: "replicas/logs_eu", uri: "file://{root}/eu/logs/", region: "aws:eu-west-1"}}
      daily_partitions_start: "2026-11-01"
      group_name: replicas
      freshness_hours: 26
      retries: 2
"""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    day = tmp_path / "us" / "logs" / DAY
    day.mkdir(parents=True)
    for i in range(3):
        (day / f"part-{i}.bin").write_bytes(os.urandom((1 << 20) + i))
    return tmp_path


def _checks(result: dg.ExecuteInProcessResult) -> list[Any]:
    return [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]


def test_yaml_component_materialises_a_partitioned_replica_with_its_check(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "defs.yaml").write_text(YAML.format(root=root))
    # Dagster's test load context scans the working directory as a defs folder.
    (root / "empty").mkdir()
    monkeypatch.chdir(root / "empty")
    doc = yaml.safe_load((root / "defs.yaml").read_text())
    assert doc["type"] == "skyplane_ops.dagster.SkyplaneReplicationComponent"
    component = SkyplaneReplicationComponent.from_attributes_dict(attributes=doc["attributes"])
    defs = component_defs(component=component)
    key = dg.AssetKey(["replicas", "logs_eu"])
    assets_def = defs.resolve_assets_def(key)
    spec = assets_def.specs_by_key[key]
    assert spec.group_name == "replicas" and "skyplane" in spec.kinds
    assert spec.freshness_policy is not None
    assert assets_def.partitions_def is not None
    assert assets_def.op.retry_policy is not None and assets_def.op.retry_policy.max_retries == 2
    checks = list(defs.asset_checks or [])
    assert len(checks) == 1
    started = time.monotonic()
    # As `dagster dev` would run it: the definitions' own job, with the component's resource.
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(partition_key=DAY, raise_on_error=False)
    elapsed = time.monotonic() - started
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    for i in range(3):
        name = f"{DAY}/part-{i}.bin"
        assert (root / "eu" / "logs" / name).read_bytes() == (
            root / "us" / "logs" / name
        ).read_bytes()
    (check,) = _checks(result)
    assert check.passed and check.partition == DAY
    # The resource's metadata policy reached the replica (docs/metadata.md): its time kept,
    # ``metadata_set`` as a user xattr where the file system has them.
    src_file, dst_file = (root / side / "logs" / DAY / "part-0.bin" for side in ("us", "eu"))
    assert dst_file.stat().st_mtime_ns == src_file.stat().st_mtime_ns
    if _xattrs_supported(dst_file.parent):
        assert os.getxattr(dst_file, "user.reviewed") == b"yes"
    # One step, no step outputs through an IO manager.
    steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
    assert "logs_replication" in steps
    print(f"component materialisation of 3 MiB: {elapsed:.2f} s")


def test_component_takes_the_clis_metrics_settings(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``metrics_port`` and ``metrics_textfile`` (the CLI's names) in the component's
    ``skyplane`` block: the step serves its metrics while it runs (then stops) and leaves the
    final figures in the textfile, one per transfer id."""
    attrs = yaml.safe_load(YAML.format(root=root))["attributes"]
    prom = root / "prom"
    attrs["skyplane"].update(
        metrics_port=0, metrics_textfile=str(prom / "skyplane-{transfer_id}.prom")
    )
    (root / "empty").mkdir()
    monkeypatch.chdir(root / "empty")
    component = SkyplaneReplicationComponent.from_attributes_dict(attributes=attrs)
    job = component_defs(component=component).resolve_implicit_global_asset_job_def()
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(partition_key=DAY, raise_on_error=False, instance=instance)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    (written,) = prom.glob("skyplane-*.prom")
    text = written.read_text()
    assert 'skyplane_objects{outcome="copied",transfer="' in text
    copied = [
        line for line in text.splitlines() if line.startswith('skyplane_objects{outcome="copied"')
    ]
    assert [float(line.split()[-1]) for line in copied] == [3.0]
    served = [
        m.split("metrics on ", 1)[1]
        for m in (e.user_message for e in instance.all_logs(result.run_id))
        if "metrics on http://127.0.0.1:" in m
    ]
    assert len(served) == 1
    with pytest.raises(OSError):  # served while the step ran, not after
        urllib.request.urlopen(served[0], timeout=5)


def _xattrs_supported(folder: Path) -> bool:
    probe = folder / ".xattr-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, "user.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def test_replica_metadata_shows_storage_class_and_encryption() -> None:
    """The materialisation metadata names the replica's storage class and encryption (its
    destination's store options), never a secret."""
    from skyplane_ops import api
    from skyplane_ops.dagster.metadata import transfer_metadata
    from skyplane_ops.testing.transfer import DST, SRC, make_plan

    options = {"storage_class": "nearline", "kms_key_name": "projects/p/keyRings/r/cryptoKeys/k"}
    replica = api.replica_properties("gs://b/x/", options)
    meta = transfer_metadata(
        [{"objects": 1, "bytes": 10, "seconds": 1.0}],
        make_plan([SRC, DST]),
        "file:///tmp/plan.json",
        transfer_id="t",
        replica_uri="gs://b/x/",
        partitions=1,
        replica=replica,
    )
    assert meta["storage_class"].value == "NEARLINE"
    assert meta["kms_key"].value == options["kms_key_name"]
    assert "encryption" not in meta  # GCS: the key names it; S3 says aws:kms / AES256


class TeamTranslator(SkyplaneTranslator):
    """Keys under the team's prefix, a group per destination region, an owner tag."""

    def get_asset_key(self, spec: ReplicationSpec, dest: ReplicaDestination) -> dg.AssetKey:
        return dg.AssetKey(["team_a", *dest.asset_key.path])

    def get_group_name(self, spec: ReplicationSpec, dest: ReplicaDestination) -> str | None:
        return dest.region.replace(":", "_").replace("-", "_")

    def get_kinds(self, spec: ReplicationSpec, dest: ReplicaDestination) -> set[str]:
        return {"skyplane", "parquet"}

    def get_metadata(self, spec: ReplicationSpec, dest: ReplicaDestination) -> dict[str, Any]:
        return {**super().get_metadata(spec, dest), "owner": "team-a"}

    def get_freshness_policy(
        self, spec: ReplicationSpec, dest: ReplicaDestination
    ) -> dg.FreshnessPolicy | None:
        return dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=30))


def test_decorator_with_a_translator_builds_and_runs_standard_assets(root: Path) -> None:
    parts = dg.DailyPartitionsDefinition(start_date="2026-11-01")

    @skyplane_assets(
        source=ReplicaSource(uri=f"file://{root}/us/logs/", region="aws:us-east-1"),
        destinations=[
            ReplicaDestination(
                key="logs_eu", uri=f"file://{root}/eu2/logs/", region="aws:eu-west-1"
            )
        ],
        translator=TeamTranslator(),
        partitions_def=parts,
    )
    def logs_replicas(context: dg.AssetExecutionContext, skyplane: SkyplaneResource) -> Any:
        context.log.info("before the copy")
        yield from skyplane.replicate(context)

    assert isinstance(logs_replicas, dg.AssetsDefinition)
    key = dg.AssetKey(["team_a", "logs_eu"])
    spec = logs_replicas.specs_by_key[key]
    assert spec.group_name == "aws_eu_west_1"
    assert spec.kinds == {"skyplane", "parquet"}
    assert spec.metadata["owner"] == "team-a" and spec.freshness_policy is not None
    result = dg.materialize(
        [logs_replicas],
        resources={"skyplane": SkyplaneResource(max_vms_per_region=1)},
        partition_key=DAY,
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("logs_replicas")
    assert mat.asset_key == key and mat.partition == DAY
    assert isinstance(mat.metadata["route"], dg.TableMetadataValue)
    assert (root / "eu2" / "logs" / DAY / "part-2.bin").stat().st_size == (1 << 20) + 2


def test_dg_from_the_dagster_extra_lists_the_component(tmp_path: Path) -> None:
    """`dg` is installed by the `dagster` extra (the docs use it) and finds the component
    through the package's registry entry point."""
    import subprocess
    import sys

    dg_bin = Path(sys.executable).with_name("dg")
    assert dg_bin.exists(), "dagster-dg-cli is part of the dagster extra"
    out = subprocess.run(
        [str(dg_bin), "list", "components", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "skyplane_ops.dagster.SkyplaneReplicationComponent" in out.stdout
