"""What a multicast plan is compared with: N separate unicasts, the same unicasts in one job,
and a direct star.

Each row is cost, completion time (provisioning + transfer, at the slowest destination) and
the bytes the source sends (its egress: price and NIC), the numbers a user weighs multicast
by (a row the unicast planner cannot make, infeasible or out of solver time, is None). The
separate unicasts are N independent plans of the same settings (a cost ceiling is
split evenly among them), each with the whole VM limit of every region (so together up to N
times the VMs a region allows); the unicasts in one job share the limits (the planner's
unicast model on all destinations: every byte sent once per destination); the star sends
straight from the source to every destination with the direct baseline's VMs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from skyplane_ops.errors import InfeasibleError, PlanningError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import Problem


def source_egress_gb(plan: TransferPlan) -> float:
    """GB the source sends for the whole plan (the sum of its hops' shares of the volume)."""
    if plan.predicted_gbps <= 0:
        return 0.0
    out = sum(h.gbps for h in plan.hops if h.src == plan.src)
    return plan.volume_gb * out / plan.predicted_gbps


def row(plan: TransferPlan, problem: Problem) -> dict[str, Any]:
    """The comparison figures of one plan."""
    return {
        "predicted_gbps": plan.predicted_gbps,
        "completion_seconds": problem.transfer_seconds(plan.predicted_gbps),
        "egress_cost_usd": plan.egress_cost_usd,
        "vm_cost_usd": plan.vm_cost_usd,
        "total_cost_usd": plan.total_cost_usd,
        "source_egress_gb": source_egress_gb(plan),
        "vms": sum(plan.vms.values()),
    }


def unicasts_row(
    problem: Problem, plan_one: Callable[[Problem], TransferPlan]
) -> dict[str, Any] | None:
    """N separate unicast plans of the same settings, added up (time: the slowest one)."""
    bound = problem.bound
    if problem.objective == "max_throughput" and bound is not None:
        bound = bound / len(problem.dsts)
    rows = []
    for dst in problem.dsts:
        one = dataclasses.replace(problem, dsts=(dst,), bound=bound)
        try:
            rows.append(row(plan_one(one), one))
        except (InfeasibleError, PlanningError):  # infeasible, or the solver gave up
            return None
    slowest = min(rows, key=lambda r: r["predicted_gbps"])
    return {
        "predicted_gbps": slowest["predicted_gbps"],
        "completion_seconds": max(r["completion_seconds"] for r in rows),
        **{
            key: sum(r[key] for r in rows)
            for key in ("egress_cost_usd", "vm_cost_usd", "total_cost_usd", "source_egress_gb")
        },
        "vms": sum(r["vms"] for r in rows),
        "slowest_single_seconds": max(r["completion_seconds"] for r in rows),
    }


def star_row(problem: Problem, star: Callable[[Problem], TransferPlan]) -> dict[str, Any] | None:
    """The direct star (source straight to every destination), or None without direct links."""
    try:
        return row(star(problem), problem)
    except (InfeasibleError, PlanningError):  # infeasible, or the solver gave up
        return None


def joint_row(
    problem: Problem, plan_all: Callable[[Problem], TransferPlan]
) -> dict[str, Any] | None:
    """The unicast model on every destination at once (shared VM limits), or None."""
    try:
        return row(plan_all(problem), problem)
    except (InfeasibleError, PlanningError):  # infeasible, or the solver gave up
        return None
