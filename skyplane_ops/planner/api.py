"""``plan_transfer``: the one call the CLI, operators and assets use to get a plan.

With no bound, the default is the **fastest plan that costs no more than the direct path**
with the same VM limit (``max_vms`` at the source and each destination): it is never slower
and never dearer than direct, so it is a safe default; it finds relays only where they pay.
"""

from __future__ import annotations

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.baselines import direct_plan, ron_plan, summary
from skyplane_ops.planner.frontier import pareto_frontier
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import Problem
from skyplane_ops.planner.solve import solve_lp_plan, solve_plan, usable_paths


def baseline_vms(problem: Problem) -> int:
    """VMs per end of the direct baseline: as many as both ends allow."""
    return min(problem.regions[u].max_vms for u in (problem.src, *problem.dsts))


def default_bound(problem: Problem) -> Problem:
    """Fill in the default mode/bound described in the module docstring."""
    try:
        direct = direct_plan(problem, baseline_vms(problem))
    except InfeasibleError:
        return problem.with_objective("max_throughput", None)
    if direct.total_cost_usd <= 0:  # own hosts: nothing costs money, so the fastest plan
        return problem.with_objective("max_throughput", None)
    return problem.with_objective("max_throughput", direct.total_cost_usd * (1 + 1e-9))


def plan_transfer(
    problem: Problem,
    *,
    lp: bool = False,
    frontier_points: int = 0,
    compare_milp: bool = True,
    solver: str | None = None,
    exact_floor: bool = False,
) -> TransferPlan:
    """Solve ``problem`` (MILP, or LP+rounding with ``lp``), attach baselines and a frontier.

    ``plan.baseline`` is the direct path with ``baseline_vms`` VMs per end;
    ``details["ron"]`` the RON route; ``details["frontier"]`` the sweep if asked for.
    A throughput floor is met at the cheapest rate ``>= floor`` unless ``exact_floor``.
    """
    if problem.bound is None:
        problem = default_bound(problem)  # no direct path: maximise throughput outright
        default = True
    else:
        default = False
    paths = usable_paths(problem)
    if lp:
        plan = solve_lp_plan(problem, compare_milp=compare_milp)
    else:
        plan = solve_plan(problem, solver=solver, exact_floor=exact_floor)
    plan.details["default_bound"] = default
    vms = baseline_vms(problem)
    try:
        plan.baseline = summary(direct_plan(problem, vms))
    except InfeasibleError:
        plan.baseline = None
    try:
        plan.details["ron"] = summary(ron_plan(problem, vms))
    except InfeasibleError:
        pass
    if frontier_points:
        points = pareto_frontier(problem, frontier_points, paths=paths)
        plan.details["frontier"] = [p.to_dict() for p in points]
    return plan
