"""The Dagster face's definitions and parts: Dagster's own validation command on the example,
the replica comparison on real local stores, the leftover sweeper on a real local fleet, the
grid-refresh asset running the real profiler, and the resource's option and secret handling.
"""

import base64
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from gateway_agent.stores import open_store
from skyplane_ops.dagster import (
    ReplicaDestination,
    ReplicaSource,
    SkyplaneResource,
    build_grid_refresh,
    compare_stores,
    prefix_for,
    replicated_dataset,
    skyplane_definitions,
    transfer_id_for,
)
from skyplane_ops.dagster.render import paths_table, route_image_markdown, route_svg, route_table
from skyplane_ops.dagster.sensors import build_leftover_sweepers
from skyplane_ops.errors import PlanningError
from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.profiler import GridStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dagster_project"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.slow
def test_example_definitions_pass_dagster_validation(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path),
        "SKYPLANE_EXAMPLE_DATA": str(tmp_path / "data"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-m",
            "skyplane_example.definitions",
        ],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Validation successful" in proc.stdout + proc.stderr


def test_definitions_helper_with_two_datasets_and_two_replicas() -> None:
    """Two factories in one code location (shared step IO manager, unique op names) and a
    dataset with two destinations; the helper adds checks, sweepers and the resource."""
    upstream = dg.AssetSpec("raw")
    one = replicated_dataset(
        "raw_replication",
        ReplicaSource("s3://bucket-a/raw/", "aws:us-east-1", asset=upstream),
        [
            ReplicaDestination("raw_eu", "gs://bucket-b/raw/", "gcp:europe-west1"),
            ReplicaDestination(["replicas", "raw_ap"], "s3://bucket-c/raw/", "aws:ap-south-1"),
        ],
    )
    two = replicated_dataset(
        "logs_replication",
        ReplicaSource("file:///data/logs/", "aws:us-east-1"),
        ReplicaDestination("logs_west", "file:///data/logs-west/", "aws:us-west-2"),
    )
    defs = skyplane_definitions([one, two], skyplane=SkyplaneResource(), assets=[upstream])
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"raw", "raw_eu", "replicas/raw_ap", "logs_west"} <= keys
    assert len(list(repo.asset_graph.asset_check_keys)) == 3
    assert {s.name for s in repo.sensor_defs} == {
        "skyplane_leftover_sweeper_on_failure",
        "skyplane_leftover_sweeper_on_cancel",
    }
    raw_eu = repo.asset_graph.get(dg.AssetKey("raw_eu"))
    assert dg.AssetKey("raw") in raw_eu.parent_keys
    assert "skyplane" in raw_eu.kinds and "gcs" in raw_eu.kinds
    with pytest.raises(dg.DagsterInvalidDefinitionError):
        replicated_dataset("x", ReplicaSource("file:///a/", "aws:us-east-1"), [])


def test_compare_stores_counts_bytes_and_checksums(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    for root in (src, dst):
        (root / "d").mkdir(parents=True)
        for i in range(3):
            (root / "d" / f"f{i}").write_bytes(bytes([i]) * (1000 + i))
    a, b = open_store(f"file://{src}"), open_store(f"file://{dst}")
    ok = compare_stores(a, b)
    assert ok.passed and ok.checksummed == 3 and ok.dst_bytes == 3003
    (dst / "d" / "f1").write_bytes(b"\x09" * 1001)  # same size, other bytes
    assert compare_stores(a, b, checksums="off").passed  # sizes alone cannot tell
    bad = compare_stores(a, b)
    assert not bad.passed and bad.counts == {"checksum": 1} and bad.checksum_mismatch == ["d/f1"]
    (dst / "d" / "f2").unlink()
    (dst / "extra").write_bytes(b"x")
    worse = compare_stores(a, b)
    meta = worse.metadata()
    assert (meta["missing_count"], meta["extra_count"], meta["checksum_count"]) == (1, 1, 1)
    assert "replica differs" in meta["summary"]


def test_compare_listings_holds_neither_listing_in_memory() -> None:
    """100k objects per side, streamed from generators: the comparison still finds each kind
    of difference, and Python's memory peak stays far below what the two listings as
    ``ObjectInfo`` dicts would take (~95 MiB here). Nothing is read back: both sides list a
    CRC32C, so no store is touched."""
    import tracemalloc

    from gateway_agent.stores.base import ObjectInfo
    from skyplane_ops.dagster.compare import compare_listings

    n = 100_000

    def side(replica: bool) -> Any:
        for i in range(n):
            if replica and i == 7:
                continue  # missing
            size = 11 if replica and i == 9 else 10
            crc = "bad" if replica and i == 11 else f"c{i}"
            yield ObjectInfo(f"p{i // 1000:03d}/o{i:07d}", size, checksums={"crc32c": crc})
        if replica:
            yield ObjectInfo("zz-extra", 1, checksums={"crc32c": "x"})

    tracemalloc.start()
    try:
        cmp = compare_listings(None, None, side(False), side(True), checksums="native")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert cmp.counts == {"missing": 1, "extra": 1, "size": 1, "checksum": 1}
    assert cmp.missing == ["p000/o0000007"] and cmp.extra == ["zz-extra"]
    assert cmp.size_mismatch == ["p000/o0000009"]
    assert cmp.checksum_mismatch == ["p000/o0000011"]
    assert cmp.checksummed == n - 2 and (cmp.src_objects, cmp.dst_objects) == (n, n)
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_partition_prefixes() -> None:
    assert prefix_for("2026-11-20", "{partition_key}/") == "2026-11-20/"
    assert prefix_for("2026-11-20", "dt={partition_key}") == "dt=2026-11-20/"
    assert prefix_for("2026-11-20", lambda k: k.replace("-", "/")) == "2026/11/20/"
    with pytest.raises(ValueError):
        prefix_for("..", "{partition_key}/")


def test_route_renders_as_a_table_and_an_image() -> None:
    plan = TransferPlan(
        src="aws:us-east-1",
        dsts=("gcp:europe-west1",),
        volume_gb=10.0,
        mode="max_throughput",
        paths=[
            PlanPath(("aws:us-east-1", "gcp:europe-west1"), 0.6, 6.0),
            PlanPath(("aws:us-east-1", "aws:eu-west-1", "gcp:europe-west1"), 0.4, 4.0),
        ],
        hops=[
            Hop("aws:us-east-1", "gcp:europe-west1", 6.0, 32),
            Hop("aws:us-east-1", "aws:eu-west-1", 4.0, 16),
            Hop("aws:eu-west-1", "gcp:europe-west1", 4.0, 16),
        ],
        vms={"aws:us-east-1": 2, "aws:eu-west-1": 1, "gcp:europe-west1": 2},
        predicted_gbps=10.0,
        egress_cost_usd=0.9,
        vm_cost_usd=0.05,
    )
    table = route_table(plan)
    assert isinstance(table, dg.TableMetadataValue)
    assert [(r.data["from"], r.data["to"]) for r in table.records] == [
        (h.src, h.dst) for h in plan.hops
    ]
    assert table.records[0].data["connections"] == 32
    assert [r.data["share"] for r in paths_table(plan).records] == [0.6, 0.4]
    svg = route_svg(plan)
    ET.fromstring(svg)  # well-formed XML
    assert svg.count("<line") == 3 and svg.count("<rect") == 3 and "relay" in svg
    image = route_image_markdown(plan)
    assert image.startswith("![route](data:image/svg+xml;base64,")
    assert base64.b64decode(image.split(",", 1)[1].rstrip(")")).decode() == svg


def test_resource_options_bounds_and_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYPLANE_TEST_TOKEN", "tok-3f9a1c7d2b")
    resource = SkyplaneResource(
        store_options={
            "s3": {"region": "us-east-1"},
            "s3://special/": {"endpoint_url": "http://x"},
        },
        backend_secrets={"token": dg.EnvVar("SKYPLANE_TEST_TOKEN")},
    )

    @dg.asset
    def probe(context: dg.AssetExecutionContext, skyplane: SkyplaneResource) -> None:
        assert skyplane.store_options_for("s3://plain/a/") == {"region": "us-east-1"}
        assert skyplane.store_options_for("s3://special/a/") == {
            "region": "us-east-1",
            "endpoint_url": "http://x",
        }
        assert skyplane.redact("auth tok-3f9a1c7d2b failed") == "auth *** failed"

    assert dg.materialize([probe], resources={"skyplane": resource}).success
    with pytest.raises(PlanningError):
        SkyplaneResource(max_cost_usd=1.0, min_throughput_gbps=2.0).plan(
            "aws:us-east-1", "aws:eu-west-1", 1.0
        )


def test_sweeper_deprovisions_a_fleet_left_by_a_dead_run(home: Path) -> None:
    """A replica run died after its provision step (here: the fleet is started by hand under
    the run's transfer id, as the step would have): the failure sensor finds the fleet by that
    deterministic id and stops its real gateway processes."""
    dataset = replicated_dataset(
        "orphan_replication",
        ReplicaSource(f"file://{home}/missing-source/", "aws:us-east-1"),
        ReplicaDestination("orphan_copy", f"file://{home}/dst/", "aws:eu-west-1"),
    )
    skyplane = SkyplaneResource()
    instance = dg.DagsterInstance.ephemeral()
    failed = dg.materialize(
        [dataset.assets_def],
        instance=instance,
        resources={"skyplane": skyplane},
        raise_on_error=False,
    )
    assert not failed.success
    tid = transfer_id_for(failed.run_id, dataset.spec.name)
    fleet = skyplane.provision({"aws:us-east-1": 1}, transfer_id=tid)
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    assert pids and all(Path(f"/proc/{p}").exists() for p in pids)

    run = instance.get_run_by_id(failed.run_id)
    assert run is not None
    failure_event = next(e for e in failed.all_events if e.is_run_failure)
    on_failure, _ = build_leftover_sweepers([dataset.spec])
    context = dg.build_run_status_sensor_context(
        sensor_name=on_failure.name,
        dagster_event=failure_event,
        dagster_instance=instance,
        dagster_run=run,
        resources={"skyplane": skyplane},
    ).for_run_failure()
    try:
        on_failure(context)
        deadline = time.monotonic() + 10
        while any(_is_agent(p, tid) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_is_agent(p, tid) for p in pids)
    finally:
        skyplane.deprovision(fleet)  # idempotent; only does work if the sensor did not


def _is_agent(pid: int, marker: str) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() and (
            "\nState:\tZ" not in status
        )
    except OSError:
        return False


def test_grid_refresh_asset_runs_the_profiler_and_publishes_a_version(home: Path) -> None:
    grid_uri = f"file://{home}/grid/"
    regions = ["aws:us-east-1", "aws:eu-west-1"]
    skyplane = SkyplaneResource(grid_store=grid_uri)
    # Nothing published yet: plans use the model (and say which store they looked at).
    before = skyplane.plan("aws:us-east-1", "aws:eu-west-1", 1.0)
    assert before.details["grid"] == {"store": grid_uri, "version": None}
    # As shipped, on the local backend: loopback figures never reach the planning grid.
    safe = build_grid_refresh(regions, duration_s=0.3, budget_usd=1.0)
    scratch = dg.materialize([safe.asset], resources={"skyplane": skyplane})
    assert scratch.success
    # Scratch figures are observed, never a materialization of the planning grid.
    assert scratch.asset_materializations_for_node("throughput_grid") == []
    (seen,) = [
        e.asset_observation_data.asset_observation
        for e in scratch.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert seen.metadata["scratch"].value is True
    assert "scratch store" in str(seen.metadata["publish_reason"].value)
    assert skyplane.plan("aws:us-east-1", "aws:eu-west-1", 1.0).details["grid"]["version"] is None
    # A testbed that wants its figures planned with says so.
    grid = build_grid_refresh(regions, duration_s=0.5, budget_usd=1.0, publish_emulated=True)
    result = dg.materialize([grid.asset], resources={"skyplane": skyplane})
    assert result.success
    (mat,) = result.asset_materializations_for_node("throughput_grid")
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["measured"] >= 2 and meta["failed"] == 0 and meta["version"]
    assert meta["gbps_median"] > 0
    assert grid.schedule.cron_schedule == "0 3 */3 * *"
    assert grid.schedule.job_name == grid.job.name
    spec = grid.asset.specs_by_key[dg.AssetKey("throughput_grid")]
    assert spec.freshness_policy is not None
    # The published version is what the resource's plans are made on: the same plan as one
    # made on that version exported to a grid file.
    plan = skyplane.plan("aws:us-east-1", "aws:eu-west-1", 1.0)
    assert plan.details["grid"] == {"store": grid_uri, "version": meta["version"]}
    exported = home / "exported.parquet"
    assert GridStore(grid_uri).export(str(exported)) >= 2
    on_file = SkyplaneResource(measured_grid=str(exported)).plan(
        "aws:us-east-1", "aws:eu-west-1", 1.0
    )
    assert [p.regions for p in plan.paths] == [p.regions for p in on_file.paths]
    assert plan.predicted_gbps == pytest.approx(on_file.predicted_gbps, rel=1e-9)


def test_one_source_two_replicas_share_one_fleet(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two destinations in two other clouds' regions: both planned, one fleet, both verified."""
    from skyplane_ops import api

    fleets = []
    real = api.provision

    def spy(*args: object, **kwargs: object) -> object:
        fleet = real(*args, **kwargs)  # type: ignore[arg-type]
        fleets.append(fleet)
        return fleet

    monkeypatch.setattr(api, "provision", spy)
    src = home / "src"

    @dg.asset
    def blobs() -> None:
        (src / "nested").mkdir(parents=True)
        (src / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
        for i in range(5):
            (src / "nested" / f"small-{i}.bin").write_bytes(os.urandom(1000 * i))

    dataset = replicated_dataset(
        "blobs_replication",
        ReplicaSource(f"file://{src}/", "aws:us-east-1", asset=blobs),
        [
            ReplicaDestination("blobs_gcp", f"file://{home}/gcp/", "gcp:europe-west1"),
            ReplicaDestination("blobs_azure", f"file://{home}/azure/", "azure:westeurope"),
        ],
    )
    try:
        result = dg.materialize(
            [blobs, dataset.assets_def, *dataset.checks],
            resources={"skyplane": SkyplaneResource(max_vms_per_region=1)},
            raise_on_error=False,
        )
    finally:
        for fleet in fleets:
            api.deprovision(fleet)  # idempotent: a no-op after the transfer step's own teardown
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert len(fleets) == 1
    mats = result.asset_materializations_for_node("blobs_replication")
    assert {m.asset_key.to_user_string() for m in mats} == {"blobs_gcp", "blobs_azure"}
    for mat in mats:
        assert mat.metadata["objects"].value == 6
    checks = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert len(checks) == 2 and all(c.event_specific_data.passed for c in checks)
    for name in ("gcp", "azure"):
        assert (home / name / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
