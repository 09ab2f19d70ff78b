"""``TransferRequest``: one frozen value, validated once when built, JSON round trip for XCom,
the state store, Dagster config and the Airflow driver's pipe (issue 34, item 1)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from skyplane_ops.errors import TransferError
from skyplane_ops.transfer import DispatchOptions, PlanOptions, StoreLocation, TransferRequest
from skyplane_ops.transfer.request import as_request, request_from

MiB = 1024 * 1024
REPO = Path(__file__).resolve().parents[2]


def _full(tmp_path: Path) -> TransferRequest:
    return TransferRequest.build(
        str(tmp_path / "src"),  # a plain path: file://
        "s3://bucket/replica/",
        dst_options={"endpoint_url": "http://127.0.0.1:9", "max_attempts": 3},
        src_region="aws:us-east-1",
        dst_region="aws:eu-west-1",
        include=["*.parquet"],
        exclude="tmp/*",
        delete=True,
        max_delete=10,
        verify="read-back",
        part_size=8 * MiB,
        connections_per_hop=16,
        encrypt="cross-cloud",
        compress_level=3,
        journal_dir=tmp_path / "journal",
        transfer_id="t-1",
        wait_lock=True,
        plan_options={"max_cost_usd": 5.0, "relays_deny": ["gcp:*"], "max_vms_per_region": 2},
    )


def test_a_request_round_trips_through_json_unchanged(tmp_path: Path) -> None:
    request = _full(tmp_path)
    assert request.src.uri == (tmp_path / "src").as_uri()
    assert request.sync  # delete implies sync
    assert request.include == ("*.parquet",) and request.exclude == ("tmp/*",)
    assert request.planning.relays_deny == ("gcp:*",)
    text = request.to_json()
    assert json.loads(text)["dst"] == {
        "uri": "s3://bucket/replica/",
        "options": {"endpoint_url": "http://127.0.0.1:9", "max_attempts": 3},
    }
    again = TransferRequest.from_json(text)
    assert again == request and as_request(text) == request and as_request(again) is again
    assert as_request(json.loads(text)) == request
    assert again.key == request.key  # the same transfer: the same journal and lock


def test_a_request_is_frozen_and_replace_validates_again(tmp_path: Path) -> None:
    request = _full(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.sync = False  # type: ignore[misc]
    assert request.replace(verify="size").verify == "size"
    with pytest.raises(TransferError, match="verify"):
        request.replace(verify="maybe")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"part_size": 0}, "part size"),
        ({"part_size": 6 * 1024**3}, "part size"),
        ({"part_size": 1.5}, "part_size"),
        ({"verify": "maybe"}, "verify"),
        ({"connections_per_hop": 0}, "connections"),
        ({"compress_level": 99}, "compress_level"),
        ({"encrypt": "sometimes"}, "encrypt"),
        ({"max_delete": 3}, "only applies with"),
        ({"delete": True, "max_delete": -1}, "max_delete"),
        ({"plan_options": {"max_cost_usd": 1, "min_throughput_gbps": 2}}, "at most one bound"),
        ({"plan_options": {"max_cost_usd": float("nan")}}, "max_cost_usd"),
        ({"plan_options": {"deadline_seconds": 0}}, "deadline_seconds"),
        ({"plan_options": {"max_vms_per_region": 0}}, "max_vms_per_region"),
        ({"plan_options": {"max_vm": 2}}, "unknown plan option"),
        ({"src_options": {"endpoint_url": object()}}, "plain JSON"),
        ({"dispatch": DispatchOptions(connections=0)}, "connections"),
    ],
)
def test_bad_fields_are_one_line_errors_when_built(
    tmp_path: Path, fields: dict[str, object], named: str
) -> None:
    with pytest.raises(TransferError) as err:
        TransferRequest.build(f"file://{tmp_path}/a", f"file://{tmp_path}/b", **fields)  # type: ignore[arg-type]
    assert named in str(err.value) and "\n" not in str(err.value)


def test_overlap_and_unknown_fields_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TransferError, match="same place"):
        TransferRequest.build(f"file://{tmp_path}/a", str(tmp_path / "a"))
    with pytest.raises(TransferError, match="inside the source"):
        TransferRequest.build(f"file://{tmp_path}/a", f"file://{tmp_path}/a/b")
    data = _full(tmp_path).to_dict()
    with pytest.raises(TransferError, match=r"unknown transfer request field.*'sink'"):
        TransferRequest.from_dict({**data, "sink": "x"})
    with pytest.raises(TransferError, match="must be JSON"):
        TransferRequest.from_json("{not json")
    with pytest.raises(TransferError, match="bad source"):
        TransferRequest.build("s3://", f"file://{tmp_path}/b")


def test_loose_arguments_build_the_same_request(tmp_path: Path) -> None:
    src, dst = f"file://{tmp_path}/a", f"file://{tmp_path}/b"
    built = request_from(src, dst, include=["x"], dispatch=DispatchOptions(connections=4))
    assert built == TransferRequest(
        StoreLocation(src), StoreLocation(dst), include=("x",), connections_per_hop=4
    )
    assert request_from(built) is built
    with pytest.raises(TransferError, match="not both"):
        request_from(built, include=["y"])
    # The data-path fields reach the engine's knobs; the tuning keeps the rest.
    knobs = built.dispatch_options(DispatchOptions(max_attempts=7, connections=99))
    assert (knobs.connections, knobs.max_attempts) == (4, 7)


def test_plan_options_are_the_planners_keyword_arguments() -> None:
    """Every planning field is an ``api.plan`` keyword (a field the planner does not take
    would be dropped on the way)."""
    from skyplane_ops.sequence.planning import plan

    plan_params = set(plan.__code__.co_varnames[: plan.__code__.co_argcount + 30])
    assert set(PlanOptions().kwargs()) <= plan_params


def test_no_face_writes_the_run_sequence_again() -> None:
    """The engine's entry point is called by the sequence alone: the CLI, ``api.copy``, the
    Airflow operators and driver and Dagster go through ``CopyRun`` (or its steps)."""
    callers = []
    for path in sorted((REPO / "skyplane_ops").rglob("*.py")):
        if path.parent.name == "testing":  # helpers that drive the engine on purpose
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = getattr(func, "attr", None) or getattr(func, "id", None)
                on_api = isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "api"
                if name in ("run_transfer", "sync_check", "list_request") or (
                    on_api and name == "transfer"
                ):
                    callers.append(str(path.relative_to(REPO)))
    allowed = {
        "skyplane_ops/sequence/copy_run.py",  # the sequence itself
        "skyplane_ops/transfer/preview.py",  # the dry run lists as the run would
        "skyplane_ops/transfer/uptodate.py",  # the sync check lists when the walk is unsure
        "skyplane_ops/transfer/tree_pass.py",  # several destinations' pass lists as a run would
    }
    assert set(callers) <= allowed, sorted(set(callers) - allowed)
