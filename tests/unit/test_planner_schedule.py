"""The plan as a schedule: VM-less paths (server-side copy, the worker) from t = 0, the overlay
once its VMs are up; no VM when they do not pay; the break-even volume; ``--no-vms`` and
``--vms-only``; the worker's and the server-side copy's egress in the cost. Pure planner
arithmetic on the default profile (no cloud is involved in planning)."""

from __future__ import annotations

import math

import pytest

from skyplane_ops import api
from skyplane_ops.cli import main
from skyplane_ops.errors import PlanningError, UnknownRegionError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.schedule import break_even_gb, schedule
from skyplane_ops.planner.vmless import VmlessPath, WorkerSpec, server_side_how, vmless_paths

AWS, AWS2, GCP, GCP2, AZ = (
    "aws:us-east-1",
    "aws:eu-west-1",
    "gcp:europe-west4",
    "gcp:us-central1",
    "azure:westeurope",
)


def _overlay(volume_gb: float, gbps: float = 20.0, t0: float = 60.0) -> TransferPlan:
    """A solved overlay plan's figures (2 VMs at $0.0005/s, $0.02/GB) for the arithmetic."""
    seconds = t0 + 8 * volume_gb / gbps
    return TransferPlan(
        src=AWS, dsts=(AWS2,), volume_gb=volume_gb, mode="min_cost", paths=[], hops=[],
        vms={AWS: 1, AWS2: 1}, predicted_gbps=gbps, egress_cost_usd=0.02 * volume_gb,
        vm_cost_usd=2 * 0.0005 * seconds, details={"provisioning_seconds": t0},
    )  # fmt: skip


WORKER = VmlessPath("worker", (AWS, AWS2), 4.0, 0.02, "grid and NIC", "worker")


def test_server_side_copy_is_known_only_where_the_stores_do_it() -> None:
    assert server_side_how(AWS, AWS2) == "CopyObject/UploadPartCopy"
    assert server_side_how(GCP, GCP2) == "GCS rewrite"
    assert "From URL" in str(server_side_how(AWS, AZ)) and "From URL" in str(
        server_side_how(GCP, AZ)
    )
    assert server_side_how(AWS, GCP) is None and server_side_how(AZ, AWS) is None


def test_a_daily_partition_starts_no_vm_and_is_done_before_one_would_be_up() -> None:
    plan = api.plan(AWS, GCP, 0.05, backend="aws")
    sched = plan.details["schedule"]
    assert sched["t0"] == 60.0 and not sched["start_vms"] and sched["cancel_vms"]
    assert sched["completion_seconds"] < 1.0 < sched["overlay_only"]["seconds"]
    assert sched["without_vms"]["vms"] == 0 and sched["without_vms"]["vm_usd"] == 0
    # The worker's egress is the cost: aws -> gcp at the profile's price, on all 50 MB.
    (worker,) = sched["vmless"]
    assert worker["kind"] == "worker"
    assert sched["total_usd"] == pytest.approx(0.05 * worker["egress_usd_per_gb"])


def test_a_large_copy_starts_vms_and_finishes_sooner_than_either_alone() -> None:
    plan = api.plan(AWS, AWS2, 500, backend="aws")
    sched = plan.details["schedule"]
    assert sched["start_vms"] and not sched["cancel_vms"]
    both, none, only = sched["with_vms"], sched["without_vms"], sched["overlay_only"]
    assert both["seconds"] < only["seconds"] and both["seconds"] < none["seconds"]
    # Bytes moved on VM-less paths during t0 (and after) are counted, at their own price.
    rate = sum(p["gbps"] for p in sched["vmless"])
    assert both["vmless_gb"] == pytest.approx(rate * both["seconds"] / 8)
    assert both["vmless_gb"] > rate * sched["t0"] / 8
    assert sched["break_even_gb"] < 500


def test_the_break_even_volume_is_where_the_choice_flips() -> None:
    tol = 0.05
    even = break_even_gb(4.0, 20.0, 60.0, tol)
    assert even == pytest.approx((1 + tol) * 60 * 20 * 4 / (20 - tol * 4) / 8)
    below = schedule(_overlay(0.98 * even), [WORKER], tolerance=tol)
    above = schedule(_overlay(1.02 * even), [WORKER], tolerance=tol)
    assert not below["start_vms"] and above["start_vms"]
    # At no tolerance: exactly the volume the VM-less paths move during t0.
    assert break_even_gb(4.0, 20.0, 60.0, 0.0) == pytest.approx(4.0 * 60 / 8)
    assert schedule(_overlay(29.0), [WORKER], tolerance=0.0)["cancel_vms"]
    # An overlay no faster than the tolerance allows never pays; no VM-less path: always does.
    assert math.isinf(break_even_gb(4.0, 0.1, 60.0, tol)) and break_even_gb(0, 20, 60, tol) == 0


def test_no_vms_and_vms_only_force_the_choice() -> None:
    forced = schedule(_overlay(500), [WORKER], tolerance=0.05, force="none")
    assert not forced["start_vms"] and forced["completion_seconds"] == pytest.approx(8 * 500 / 4)
    only = schedule(_overlay(0.05), [WORKER], tolerance=0.05, force="overlay")
    assert only["start_vms"] and only["completion_seconds"] == pytest.approx(60 + 0.4 / 20)
    with pytest.raises(PlanningError, match="no VM-less path"):
        schedule(_overlay(1), [], tolerance=0.05, force="none")


def test_the_worker_pays_egress_on_both_legs_and_is_held_to_its_nic() -> None:
    prices = {(AWS, "aws:us-west-2"): 0.02, ("aws:us-west-2", GCP): 0.09, (AWS, GCP): 0.09}
    rates = {(AWS, "aws:us-west-2"): 9.0, ("aws:us-west-2", GCP): 3.0, (AWS, GCP): 4.0}
    (far,) = vmless_paths(AWS, GCP, rates, prices, worker=WorkerSpec("aws:us-west-2", 5.0))
    assert far.regions == (AWS, "aws:us-west-2", GCP)
    assert far.gbps == 3.0 and far.egress_usd_per_gb == pytest.approx(0.11)
    (near,) = vmless_paths(AWS, GCP, rates, prices, worker=WorkerSpec(None, 1.0))
    assert near.gbps == 1.0 and near.egress_usd_per_gb == 0.09
    with pytest.raises(PlanningError, match="worker_gbps"):
        WorkerSpec(None, 0.0)
    with pytest.raises(UnknownRegionError):
        api.plan(AWS, GCP, 1, worker_region="aws:nowhere-9")


def test_plan_shows_the_vmless_rows_and_the_break_even(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--src", AWS, "--dst", GCP, "--volume-gb", "0.05", "--backend", "aws"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Done in: 0.1 s (no VM" in out and "60 s provisioning" not in out
    assert "without VMs" in out and "overlay only" in out and "VMs pay above" in out
    assert "Gateway VMs (the overlay's; not started)" in out
    assert main([*argv, "--vms-only"]) == 0
    assert "Done in: 60.1 s (60 s provisioning + transfer)" in capsys.readouterr().out
    assert main([*argv[:-4], "--volume-gb", "500", "--no-vms", "--json"]) == 0
    sched = TransferPlan.from_json(capsys.readouterr().out).details["schedule"]
    assert sched["force"] == "none" and not sched["start_vms"]
    assert main([*argv, "--worker-region", "aws:us-west-2", "--worker-gbps", "2"]) == 0
    assert "worker in aws:us-west-2 (configured)" in capsys.readouterr().out
