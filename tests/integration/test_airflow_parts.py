"""The Airflow face's parts that need no gateway: connection parsing, provider metadata,
XCom summaries and the deferral trigger (against a real, idle driver process)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.airflow.settings import (
    SkyplaneConnectionError,
    backend_options_with_secret,
    make_transfer_id,
    parse_extra,
)
from skyplane_ops.airflow.summaries import (
    XCOM_LIMIT_BYTES,
    asset_metadata,
    bounded,
    plan_summary,
    progress_counters,
    transfer_summary,
)
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.result import TransferResult

PLAN_DICT: dict[str, Any] = {
    "src": "aws:us-east-1",
    "dsts": ["gcp:europe-west4"],
    "volume_gb": 120.0,
    "mode": "min_cost",
    "paths": [
        {"regions": ["aws:us-east-1", "gcp:europe-west4"], "share": 0.6, "gbps": 3.0},
        {
            "regions": ["aws:us-east-1", "aws:eu-west-1", "gcp:europe-west4"],
            "share": 0.4,
            "gbps": 2,
        },
    ],
    "hops": [
        {"src": "aws:us-east-1", "dst": "gcp:europe-west4", "gbps": 3.0, "connections": 64},
        {"src": "aws:us-east-1", "dst": "aws:eu-west-1", "gbps": 2.0, "connections": 32},
        {"src": "aws:eu-west-1", "dst": "gcp:europe-west4", "gbps": 2.0, "connections": 32},
    ],
    "vms": {"aws:us-east-1": 2, "aws:eu-west-1": 1, "gcp:europe-west4": 2},
    "predicted_gbps": 5.0,
    "egress_cost_usd": 10.8,
    "vm_cost_usd": 0.2,
    "baseline": {"gbps": 3.0, "total_cost_usd": 10.9},
}


def _json_size(value: Any) -> int:
    return len(json.dumps(value))


# -- connection settings ---------------------------------------------------------------------


def test_parse_extra_accepts_plain_and_form_prefixed_keys() -> None:
    settings = parse_extra(
        {
            "backend": "ssh",
            "extra__skyplane__max_vms_per_region": "2",
            "backend_options": '{"hosts": ["127.0.0.1"]}',
            "tags": {"team": "data"},
            "max_cost_usd": 12.5,
            "grid_store": "s3://grids/prod",
        }
    )
    assert settings.backend == "ssh"
    assert settings.max_vms_per_region == 2
    assert settings.backend_options == {"hosts": ["127.0.0.1"]}
    assert settings.tags == {"team": "data"}
    assert settings.max_cost_usd == 12.5
    assert settings.grid_store == "s3://grids/prod"


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"bakend": "local"}, "unknown key"),
        ({"max_vms_per_region": "many"}, "must be a int"),
        ({"max_cost_usd": -1}, "must be positive"),
        ({"backend_options": "[1, 2"}, "JSON object"),
        ("not json", "JSON object"),
    ],
)
def test_parse_extra_rejects_bad_settings(extra: Any, message: str) -> None:
    with pytest.raises(SkyplaneConnectionError, match=message):
        parse_extra(extra)


def test_secret_goes_only_to_the_named_backend_option() -> None:
    settings = parse_extra({"secret_option": "key_passphrase", "backend_options": {"a": 1}})
    options = backend_options_with_secret(settings, "s3cr3t-value")
    assert options == {"a": 1, "key_passphrase": "s3cr3t-value"}
    assert "s3cr3t-value" not in json.dumps(settings.to_dict())
    assert "s3cr3t-value" not in repr(settings)
    # Without a named option the password is not passed at all.
    assert backend_options_with_secret(parse_extra({}), "s3cr3t-value") == {}


def test_transfer_id_is_deterministic_and_tag_safe() -> None:
    raw = "etl_dag-manual__2026-11-22T01:02:52.568621+00:00-replicate"
    tid = make_transfer_id(raw)
    assert tid == make_transfer_id(raw)
    assert set(tid) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert len(tid) <= 48
    assert tid != make_transfer_id(raw + "2")


def test_hook_reads_the_connection_and_masks_nothing_into_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from skyplane_ops.airflow.hooks import SkyplaneHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_SKY_PARTS",
        json.dumps(
            {
                "conn_type": "skyplane",
                "password": "pw-not-in-settings",
                "extra": {"backend": "local", "max_vms_per_region": 1, "secret_option": "tok"},
            }
        ),
    )
    hook = SkyplaneHook("sky_parts")
    assert hook.settings.max_vms_per_region == 1
    assert hook.backend_options() == {"tok": "pw-not-in-settings"}
    assert "pw-not-in-settings" not in json.dumps(hook.settings.to_dict())
    assert hook.test_connection()[0]
    # No skyplane_default connection: local backend with defaults, no error.
    assert SkyplaneHook().settings.backend == "local"


def test_store_access_from_usual_cloud_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyplane_ops.airflow.hooks import SkyplaneHook, StoreAccess, exported_env, merge_env

    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_AWS",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAEXAMPLE",
                "password": "aws-secret-value",
                "extra": {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:9"},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_MY_WASB",
        json.dumps(
            {
                "conn_type": "wasb",
                "login": "devstoreaccount1",
                "password": "azure-key-value",
                "extra": {"account_url": "http://127.0.0.1:10000/devstoreaccount1"},
            }
        ),
    )
    aws = SkyplaneHook.store_access("my_aws")
    # Only options the S3 store accepts; the keys go to the SDK's environment chain.
    assert aws.options == {"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1"}
    assert aws.env == {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    }
    azure = SkyplaneHook.store_access("my_wasb")
    assert "AccountKey=azure-key-value" in azure.env["AZURE_STORAGE_CONNECTION_STRING"]
    assert SkyplaneHook.store_access(None) == StoreAccess()
    env = merge_env(aws, azure)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with exported_env(env):
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == "aws-secret-value"
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ
    clash = StoreAccess(env={"AWS_ACCESS_KEY_ID": "OTHER"})
    with pytest.raises(ValueError, match="both set AWS_ACCESS_KEY_ID"):
        merge_env(aws, clash)


# -- provider metadata -----------------------------------------------------------------------


def test_provider_info_matches_airflows_schema() -> None:
    import airflow
    import jsonschema

    from skyplane_ops.airflow.provider_info import get_provider_info

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    info = get_provider_info()
    jsonschema.validate(info, json.loads(schema_path.read_text()))
    conn = info["connection-types"][0]
    assert conn["connection-type"] == "skyplane"
    # Every name the metadata points at exists.
    from importlib import import_module

    module, _, cls = conn["hook-class-name"].rpartition(".")
    assert getattr(import_module(module), cls).conn_type == "skyplane"
    for section in ("operators", "hooks", "triggers"):
        for entry in info[section]:
            for name in entry["python-modules"]:
                import_module(name)


@pytest.mark.slow
def test_connection_form_has_a_widget_for_every_extra_key() -> None:
    from skyplane_ops.airflow.provider_info import BACKENDS, CONN_FIELDS
    from skyplane_ops.airflow.settings import KNOWN_EXTRA
    from skyplane_ops.provision import BACKENDS as CORE_BACKENDS

    assert set(CONN_FIELDS) == set(KNOWN_EXTRA)
    assert CONN_FIELDS["backend"]["schema"]["enum"] == list(BACKENDS)
    assert set(BACKENDS) == set(CORE_BACKENDS)
    for name in ("backend_options", "tags", "state_store_options"):
        assert "object" in CONN_FIELDS[name]["schema"]["type"], name
    # What the JSON widget stores (a JSON object, not text) is what the extra accepts.
    from skyplane_ops.airflow.settings import parse_extra

    settings = parse_extra({"extra__skyplane__tags": {"team": "data"}, "backend": "ssh"})
    assert settings.tags == {"team": "data"} and settings.backend == "ssh"


def test_lineage_datasets_follow_the_openlineage_naming_spec() -> None:
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    from skyplane_ops.airflow.lineage import dataset_name, operator_lineage

    assert dataset_name("s3://bkt/a/b/") == ("s3://bkt", "a/b")
    assert dataset_name("gs://bkt/x.parquet") == ("gs://bkt", "x.parquet")
    assert dataset_name("az://acct/cont/p/q/") == ("abfss://cont@acct.dfs.core.windows.net", "p/q")
    assert dataset_name("file:///data/in/") == ("file", "/data/in")
    # a local replica is one node in the lineage graph: the name Airflow gives its own Asset
    for uri in ("file:///data/in/", "file:///data/in", "file://host/data/x/"):
        airflow = translate_airflow_asset(Asset(uri=uri), None)
        assert dataset_name(uri) == (airflow.namespace, airflow.name), uri
    assert dataset_name("s3://bkt/") == ("s3://bkt", "/")
    lineage = operator_lineage("s3://a/in/", "gs://b/out/")
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("s3://a", "in")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("gs://b", "out")]


def test_lineage_shows_the_replicas_storage_class_and_encryption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Write options in the connection's extra (the store options' names, docs/metadata.md)
    reach the store options, and the replica's output facet shows them (no secret in it)."""
    from openlineage.client.serde import Serde

    from skyplane_ops.airflow.hooks import SkyplaneHook
    from skyplane_ops.airflow.lineage import operator_lineage, replica_facet

    key = "arn:aws:kms:us-east-1:111122223333:key/replicas"
    extra = {"region_name": "us-east-1", "storage_class": "standard_ia", "kms_key_id": key}
    monkeypatch.setenv(
        "AIRFLOW_CONN_DST_AWS",
        json.dumps({"conn_type": "aws", "login": "AKIA", "password": "s3cr3t", "extra": extra}),
    )
    access = SkyplaneHook.store_access("dst_aws")
    assert access.options == {
        "region": "us-east-1",
        "storage_class": "standard_ia",
        "kms_key_id": key,
    }
    lineage = operator_lineage(
        "gs://a/in/", "s3://b/out/", replica=replica_facet("s3://b/out/", access.options)
    )
    facet = json.loads(Serde.to_json(lineage.outputs[0]))["facets"]["skyplane_replica"]
    assert (facet["storageClass"], facet["encryption"], facet["kmsKey"]) == (
        "STANDARD_IA",
        "aws:kms",
        key,
    )
    assert "s3cr3t" not in Serde.to_json(lineage.outputs[0])
    assert (
        operator_lineage("s3://a/", "file:///x/", replica=replica_facet("file:///x/", {}))
        .outputs[0]
        .facets
        == {}
    )


def test_airflow_providers_list_shows_the_installed_provider() -> None:
    airflow_bin = Path(sys.executable).with_name("airflow")
    out = subprocess.run(
        [str(airflow_bin), "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = json.loads(out[out.index("[") :])
    assert any(row["package_name"] == "skyplane-ops" for row in rows), rows


# -- XCom summaries ----------------------------------------------------------------------------


def test_plan_summary_is_small_and_points_at_the_full_plan() -> None:
    plan = TransferPlan.from_dict(PLAN_DICT)
    summary = plan_summary(plan, plan_uri="file:///tmp/p.json", transfer_id="t-1")
    assert summary["plan_uri"] == "file:///tmp/p.json"
    assert summary["route"][0] == "aws:us-east-1 -> gcp:europe-west4 (60%)"
    assert summary["total_cost_usd"] == pytest.approx(11.0)
    assert _json_size(summary) < 1024


def test_xcom_of_a_10000_object_transfer_stays_under_a_few_kb() -> None:
    plan = TransferPlan.from_dict(PLAN_DICT)
    result = TransferResult(
        transfer_id="t-1",
        job_id="j-1",
        src_uri="s3://src/events/",
        dst_uri="gs://dst/events/",
        objects=10_000,
        bytes=10_000 * 4096,
        seconds=12.5,
        gbps=0.026,
        chunks=400,
        route=[" -> ".join(p["regions"]) for p in PLAN_DICT["paths"]],
        verification={"status": "passed", "objects": 10_000, "method": "crc32c"},
        uris={"journal": "file:///tmp/j", "log": "file:///tmp/l"},
    )
    summary = transfer_summary(
        result,
        transfer_id="t-1",
        plan=plan,
        plan_uri="file:///tmp/p.json",
        src=result.src_uri,
        dst=result.dst_uri,
        journal_dir="/tmp/j",
    )
    assert summary["objects"] == 10_000
    assert _json_size(summary) < 2048
    meta = asset_metadata(summary)
    assert meta["bytes"] == 10_000 * 4096 and meta["objects"] == 10_000
    assert meta["gbps"] == 0.026 and meta["route"] and meta["cost_usd"] is not None
    assert meta["verified"] is True  # a bool, as in the Dagster face, not the check's dict


def test_bounded_replaces_key_lists_with_counts() -> None:
    keys = [f"events/part-{i:06d}.parquet" for i in range(10_000)]
    summary = bounded({"transfer_id": "t", "objects": 10_000, "keys": keys, "blob": "x" * 9000})
    assert summary["keys_count"] == 10_000 and "keys" not in summary
    assert "blob" not in summary and set(summary["dropped"]) == {"keys", "blob"}
    assert _json_size(summary) <= XCOM_LIMIT_BYTES


def test_fleet_reference_round_trips_and_holds_no_secret() -> None:
    fleet = GatewayFleet(
        transfer_id="t-1",
        backend="local",
        gateways=[Gateway("gw-1", "aws:us-east-1", "127.0.0.1", 1, 2, {"pid": 3})],
        secret_ref="/run/skyplane/t-1.secret",
        tags={"skyplane-ops:transfer-id": "t-1"},
    )
    ref = fleet.to_dict()
    assert GatewayFleet.from_dict(json.loads(json.dumps(ref))) == fleet
    assert _json_size(ref) < 1024


def test_progress_counters_keep_scalars_only() -> None:
    from skyplane_ops.transfer.progress import Progress

    sample = Progress(
        bytes_done=1, bytes_total=2, chunks_done=1, chunks_total=2, elapsed_s=1.0, gbps=0.1
    )
    assert progress_counters(sample)["bytes_done"] == 1
    assert progress_counters({"done": 3, "keys": ["a", "b"]}) == {"done": 3}


# -- the deferral trigger, against a real driver process -----------------------------------------


@pytest.fixture
def idle_driver(tmp_path: Path) -> Any:
    """A real ``python -m skyplane_ops.airflow.driver`` that waits on its stdin (no transfer)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "skyplane_ops.airflow.driver"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from skyplane_ops.airflow.driver import is_alive

    deadline = time.monotonic() + 10
    while not is_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    proc.wait(timeout=10)


def _state(tmp_path: Path) -> Any:
    from skyplane_ops.api import TransferState

    return TransferState((tmp_path / "state").as_uri(), "t-trig")


def _status(tmp_path: Path, state: str, **fields: Any) -> None:
    _state(tmp_path).write_status(state, **fields)


def _trigger(tmp_path: Path, pid: int, **kwargs: Any) -> Any:
    import socket

    from skyplane_ops.airflow.triggers import SkyplaneTransferTrigger

    return SkyplaneTransferTrigger(
        transfer_id="t-trig",
        state_uri=(tmp_path / "state").as_uri(),
        driver_pid=pid,
        driver_host=kwargs.pop("driver_host", socket.gethostname()),
        poll_interval=0.05,
        **kwargs,
    )


def _first_event(trigger: Any, timeout: float = 20.0) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(go(), timeout))


def test_trigger_serialize_round_trip(tmp_path: Path) -> None:
    from airflow.sdk.module_loading import import_string

    trigger = _trigger(tmp_path, 1234, deadline=1.5e9, fleet={"transfer_id": "t-trig"})
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # stored in the metadata DB: must be plain JSON
    clone = import_string(classpath)(**kwargs)
    assert clone.serialize() == (classpath, kwargs)


def test_trigger_fires_success_with_the_result(tmp_path: Path, idle_driver: Any) -> None:
    result = {"objects": 3, "bytes": 9}
    _status(tmp_path, "success", pid=idle_driver.pid, result=result)
    event = _first_event(_trigger(tmp_path, idle_driver.pid))
    assert event == {"status": "success", "transfer_id": "t-trig", "result": result}


def test_trigger_fires_error_with_the_core_error(tmp_path: Path, idle_driver: Any) -> None:
    error = {"type": "TransferError", "message": "relay gone"}
    _status(tmp_path, "failed", error=error)
    event = _first_event(_trigger(tmp_path, idle_driver.pid))
    assert event["status"] == "error" and event["error"] == error


def test_trigger_enforces_the_deadline_and_stops_the_driver(
    tmp_path: Path, idle_driver: Any
) -> None:
    from skyplane_ops.airflow.driver import is_alive

    _status(tmp_path, "running", progress={"a": 1})
    started = time.monotonic()
    event = _first_event(_trigger(tmp_path, idle_driver.pid, deadline=time.time() + 0.5))
    assert event["status"] == "timeout" and event["progress"] == {"a": 1}
    assert 0.4 < time.monotonic() - started < 15
    assert not is_alive(idle_driver.pid)
    assert _state(tmp_path).cancel_requested() == "the task's timeout passed"


def test_trigger_reports_a_driver_that_died_without_status(
    tmp_path: Path, idle_driver: Any
) -> None:
    _status(tmp_path, "running")
    os.killpg(idle_driver.pid, 9)
    idle_driver.wait(timeout=10)
    event = _first_event(_trigger(tmp_path, idle_driver.pid))
    assert event["status"] == "error" and event["error"]["type"] == "DriverLost"


def test_trigger_on_kill_stops_the_driver(tmp_path: Path, idle_driver: Any) -> None:
    from skyplane_ops.airflow.driver import is_alive

    asyncio.run(_trigger(tmp_path, idle_driver.pid).on_kill())
    assert not is_alive(idle_driver.pid)
    assert _state(tmp_path).cancel_requested() == "the task was killed"


def test_trigger_on_another_host_goes_by_the_heartbeat(tmp_path: Path) -> None:
    """A triggerer on another host cannot see the driver's pid: a stale heartbeat is what
    tells it the driver is lost, a fresh one keeps it waiting."""
    _status(tmp_path, "running", progress={"bytes_done": 1, "bytes_total": 4})
    trigger = _trigger(tmp_path, 1, driver_host="elsewhere", lost_after=0.5)

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    started = time.monotonic()
    event = asyncio.run(asyncio.wait_for(first(), 20))
    assert event["status"] == "error" and event["error"]["type"] == "DriverLost"
    assert "no heartbeat" in event["error"]["message"]
    assert time.monotonic() - started >= 0.4


def test_progress_lines_are_human() -> None:
    from skyplane_ops.api import ProgressLine

    line = ProgressLine("transfer t", [("a -> b", 0.75), ("a -> c -> b", 0.25)])
    sample = {"bytes_done": 512 * 1024 * 1024, "bytes_total": 1024 * 1024 * 1024}
    text = line.update(
        {**sample, "elapsed_s": 2.0, "gbps": 2.0, "chunks_done": 8, "chunks_total": 16}
    )
    assert text is not None
    assert text.splitlines()[0] == (
        "transfer t: 50.0% 512.0/1024.0 MiB at 2.00 Gbit/s, ETA 2.1 s, 8/16 chunks"
    )
    assert text.splitlines()[1] == "  a -> b (75% by plan): 384.0 MiB"
    assert line.update({**sample, "chunks_done": 8}) is None  # nothing moved: no line


def test_trigger_progress_has_a_line_per_path() -> None:
    """The trigger knows no plan: the per-path lines come from the driver's status sample,
    which keeps each path's measured Gbit/s (and nothing like a key list)."""
    from skyplane_ops.airflow.summaries import progress_counters
    from skyplane_ops.api import Progress, ProgressLine

    sample = Progress(
        bytes_done=300 * 1024 * 1024,
        bytes_total=1024 * 1024 * 1024,
        chunks_done=3,
        chunks_total=10,
        elapsed_s=2.0,
        gbps=1.26,
        path_gbps={"a -> b": 0.9, "a -> c -> b": 0.36},
    )
    status = json.loads(json.dumps(progress_counters(sample)))  # as the state store holds it
    text = ProgressLine("transfer t").update(status)
    assert text is not None
    assert text.splitlines()[1:] == [
        "  a -> b: 0.90 Gbit/s measured",
        "  a -> c -> b: 0.36 Gbit/s measured",
    ]


def test_grid_publish_policy_keeps_emulated_figures_out_of_the_planning_grid() -> None:
    from skyplane_ops.api import publish_target

    def target(backend: str, options: dict[str, Any], **kw: Any) -> Any:
        return publish_target(backend, options, grid_store="G", scratch_store="S", **kw)

    assert target("aws", {}).store_uri == "G"
    assert target("ssh", {"regions": {"r": [{"address": "10.0.0.5"}]}}).store_uri == "G"
    loop = target("ssh", {"regions": {"r": [{"address": "127.0.0.1"}, {"address": "::1"}]}})
    assert loop.scratch and loop.store_uri == "S" and "loopback" in loop.reason
    assert target("local", {}).scratch and target("netns", {}).scratch
    assert target("mixed", {"regions": {"a": {"backend": "local"}}}).scratch
    forced = target("local", {}, allow_emulated=True)
    assert forced.store_uri == "G" and not forced.scratch


def test_leftovers_are_cleaned_by_age_and_live_journals_kept(tmp_path: Path) -> None:
    from skyplane_ops.api import clean_leftovers

    old = time.time() - 10 * 86400
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "runs" / "old" / "driver.log").write_text("x")
    (tmp_path / "runs" / "new").mkdir()
    (tmp_path / "journals" / "empty-old").mkdir(parents=True)
    (tmp_path / "journals" / "full-old").mkdir()
    (tmp_path / "journals" / "full-old" / "k.jsonl").write_text("{}\n")
    for path in [
        tmp_path / "runs" / "old" / "driver.log",
        tmp_path / "runs" / "old",
        tmp_path / "journals" / "empty-old",
        tmp_path / "journals" / "full-old",
    ]:
        os.utime(path, (old, old))
    removed = clean_leftovers(tmp_path, 7 * 86400)
    assert removed == ["journals/empty-old", "runs/old"]
    assert (tmp_path / "runs" / "new").exists()
    assert (tmp_path / "journals" / "full-old" / "k.jsonl").exists()
