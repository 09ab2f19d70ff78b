"""The plan of a run of both (the worker beside the overlay), the worker's pace on its one-region
route, and the paths that wait for gateways still coming up. Pure arithmetic on plans and
routes; the runs themselves are in ``tests/integration/test_worker_and_overlay.py``."""

from __future__ import annotations

import pytest

from skyplane_ops import api
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.sequence.worker import both_plan, worker_label, worker_plan
from skyplane_ops.transfer.dispatch import plan_routes
from skyplane_ops.transfer.dispatch.join import waiting_paths
from skyplane_ops.transfer.dispatch.spec import live_routes, local_rate

AWS, AWS2 = "aws:us-east-1", "aws:eu-west-1"


def test_a_large_copy_runs_the_worker_beside_the_overlay() -> None:
    plan = api.plan(AWS, AWS2, 500, backend="aws", server_side=False)
    sched = plan.details["schedule"]
    assert sched["start_vms"] and worker_plan(plan) is None
    both = both_plan(plan)
    assert both is not None
    label = worker_label(AWS)
    assert both.details["worker"] == label and both.vms[label] == 1
    (worker, *overlay) = plan_routes(both)
    assert worker[0] == [label] and all(route[0] == AWS for route, _ in overlay)
    # Each path's share is its predicted rate over the sum: the worker's R, the overlay's T.
    rate = sched["vmless"][0]["gbps"]
    assert worker[1] == pytest.approx(rate / (rate + plan.predicted_gbps))
    assert sum(s for _, s in plan_routes(both)) == pytest.approx(1.0)
    assert both.predicted_gbps == pytest.approx(rate + plan.predicted_gbps)
    assert both.details["completion_seconds"] == sched["with_vms"]["seconds"]


def test_no_run_of_both_without_vms_or_with_vms_only() -> None:
    small = api.plan(AWS, AWS2, 0.05, backend="aws", server_side=False)
    assert both_plan(small) is None and worker_plan(small) is not None
    only = api.plan(AWS, AWS2, 500, backend="aws", server_side=False, vms="only")
    assert both_plan(only) is None and worker_plan(only) is None


def test_the_worker_route_is_paced_to_its_cap_and_its_share() -> None:
    routes = [(["worker@a"], 0.25), (["a", "b"], 0.75)]
    assert local_rate(routes, "worker@a", None, None) is None
    assert local_rate(routes, "worker@a", 100.0, None) == 25.0  # its share of the cap
    assert local_rate(routes, "worker@a", 100.0, 10.0) == 10.0  # its own NIC
    assert local_rate(routes, "worker@a", None, 40.0) == 40.0
    assert local_rate(routes, "a", 100.0, 10.0) is None  # a hop's gateway: paced per hop


def test_while_the_overlay_boots_the_worker_route_has_the_whole_cap() -> None:
    routes = [(["worker@a"], 0.25), (["a", "b"], 0.75)]
    booting = live_routes(routes, {1})  # the overlay's path waits: share 0, index kept
    assert booting == [(["worker@a"], 1.0), (["a", "b"], 0.0)]
    assert local_rate(booting, "worker@a", 100.0, None) == 100.0
    assert local_rate(live_routes(routes, set()), "worker@a", 100.0, None) == 25.0  # joined


def test_paths_without_gateways_yet_wait() -> None:
    plan = TransferPlan(
        src=AWS, dsts=(AWS2,), volume_gb=1, mode="min_cost", paths=[], hops=[], vms={},
        predicted_gbps=1.0, egress_cost_usd=0, vm_cost_usd=0,
    )  # fmt: skip
    routes = [(["worker@x"], 0.5), *plan_routes(plan)]
    gw = Gateway("worker-x", "worker@x", "127.0.0.1", 1, 2, {})
    fleet = GatewayFleet("t-1", "worker", [gw], "", {})
    assert waiting_paths(routes, fleet) == {1}
    up = GatewayFleet("t-1", "local", [gw, *(Gateway(r, r, "h", 1, 2, {}) for r in (AWS, AWS2))],
                      "", {})  # fmt: skip
    assert waiting_paths(routes, up) == set()
