"""Which runs copy server-side: both ends must be stores the destination copies from (S3 and
GCS within one service, Azure from an S3 or GCS URL), and the schedule must start no VM; the
worker plan's one route is then server-side, named so in the report. Pure planner and
sequence code on the default profile."""

from __future__ import annotations

from skyplane_ops import api
from skyplane_ops.sequence.worker import server_side_ends, worker_plan
from skyplane_ops.transfer.run_state import route_names

MOTO = {"endpoint_url": "http://127.0.0.1:5000"}


def test_the_stores_at_both_ends_decide() -> None:
    assert server_side_ends("s3://src1/x/", "s3://dst1/y/", {}, {})
    assert server_side_ends("s3://src1/", "s3://dst1/", MOTO, MOTO)
    assert server_side_ends("gs://src1/", "gs://dst1/", {}, {})
    assert server_side_ends("s3://src1/", "az://acct/cont1/", {}, {})
    assert server_side_ends("gs://src1/", "az://acct/cont1/", {}, {})
    # Another service (an S3-compatible endpoint against AWS) copies nothing from this one.
    assert not server_side_ends("s3://src1/", "s3://dst1/", MOTO, {})
    assert not server_side_ends("s3://src1/", "gs://dst1/", {}, {})
    assert not server_side_ends("az://acct/cont1/", "s3://dst1/", {}, {})
    assert not server_side_ends("file:///tmp/a", "file:///tmp/b", {}, {})
    # Azure signs no URL for another Azure account here (no SAS of the source): bytes.
    assert not server_side_ends("az://acct/cont1/", "az://acct/cont2/", {}, {})


def test_a_daily_partition_between_s3_regions_runs_server_side() -> None:
    plan = api.plan("aws:us-east-1", "aws:us-west-2", 0.05, backend="aws", vms="auto")
    kinds = [p["kind"] for p in plan.details["schedule"]["vmless"]]
    assert kinds == ["server_side", "worker"] and not plan.details["schedule"]["start_vms"]
    run = worker_plan(plan)
    assert run is not None and run.details["server_side_paths"] == [0]
    assert [p.regions for p in run.paths] == [("aws:us-west-2",)] and run.vm_cost_usd == 0
    assert route_names(run) == ["server-side"]


def test_without_a_server_side_path_the_worker_copies() -> None:
    plan = api.plan(
        "aws:us-east-1", "aws:us-west-2", 0.05, backend="aws", vms="auto", server_side=False
    )
    run = worker_plan(plan)
    assert run is not None and "server_side_paths" not in run.details
    assert [p.regions for p in run.paths] == [("aws:us-east-1",)]
    assert route_names(run) == ["aws:us-east-1"]
