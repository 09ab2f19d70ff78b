"""``plan_transfer``: the one call the CLI, operators and assets use to get a plan.

Users care about when the copy is done and what it costs, and provisioning is part of "done".
So plans are ranked by **completion time** ``t0 + 8 V / T`` (VMs start in parallel, so ``t0``
is paid once per plan; every VM is billed for ``t0`` plus the transfer), and among the plans
that finish within ``completion_tolerance`` (default 5%) of the fastest, the cheapest is
picked. That is the default with no bound, and it also refines a cost ceiling: the fastest
plan within the ceiling sets the completion time, then the cheapest plan that finishes
within the tolerance of it is taken (it never costs more than the fastest one). A 23 MB copy
(transfer time ~0.1 s behind ~60 s of provisioning) thus gets one VM per end, not the VM
limit. With an explicit throughput floor or deadline the user has said what is fast enough:
the cheapest plan at least that fast is returned as before. ``completion_tolerance=0``
keeps the fastest plan.
"""

from __future__ import annotations

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.baselines import direct_plan, ron_plan, summary
from skyplane_ops.planner.frontier import pareto_frontier
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import BITS_PER_BYTE, InvalidProblemError, Problem
from skyplane_ops.planner.solve import (
    max_throughput_gbps,
    solve_lp_plan,
    solve_plan,
    usable_paths,
)

#: Plans finishing within this fraction of the fastest completion time count as equally fast.
DEFAULT_COMPLETION_TOLERANCE = 0.05


def baseline_vms(problem: Problem) -> int:
    """VMs per end of the direct baseline: as many as both ends allow."""
    return min(problem.regions[u].max_vms for u in (problem.src, *problem.dsts))


def completion_seconds(problem: Problem, gbps: float) -> float:
    """Provisioning plus transfer time at ``gbps``."""
    return problem.transfer_seconds(gbps)


def tolerance_floor(problem: Problem, fastest_gbps: float, tolerance: float) -> float:
    """The slowest rate whose completion time is within ``tolerance`` of the fastest's."""
    budget = (1 + tolerance) * completion_seconds(problem, fastest_gbps)
    return BITS_PER_BYTE * problem.volume_gb / (budget - problem.provisioning_seconds)


def _fastest_then_cheapest(
    problem: Problem, fastest: TransferPlan, tolerance: float, lp: bool, solver: str | None
) -> TransferPlan:
    """The cheapest plan finishing within ``tolerance`` of ``fastest`` (or ``fastest``)."""
    floor = min(tolerance_floor(problem, fastest.predicted_gbps, tolerance), fastest.predicted_gbps)
    relaxed = problem.with_objective("min_cost", floor)
    try:
        cheaper = solve_lp_plan(relaxed, compare_milp=False) if lp else solve_plan(relaxed, solver)
    except InfeasibleError:
        return fastest
    if cheaper.total_cost_usd >= fastest.total_cost_usd:
        return fastest
    cheaper.mode = fastest.mode
    cheaper.details.update(objective=problem.objective, bound=problem.bound)
    cheaper.details["solver_seconds"] = cheaper.details.get("solver_seconds", 0.0) + float(
        fastest.details.get("solver_seconds", 0.0)
    )
    cheaper.solve_seconds += fastest.solve_seconds
    return cheaper


def plan_transfer(
    problem: Problem,
    *,
    lp: bool = False,
    frontier_points: int = 0,
    compare_milp: bool = True,
    solver: str | None = None,
    exact_floor: bool = False,
    completion_tolerance: float = DEFAULT_COMPLETION_TOLERANCE,
) -> TransferPlan:
    """Solve ``problem`` (MILP, or LP+rounding with ``lp``), attach baselines and a frontier.

    No bound: the cheapest plan within ``completion_tolerance`` of the fastest completion
    time (module docstring); a cost ceiling: the same, among plans within the ceiling.
    ``plan.baseline`` is the direct path with ``baseline_vms`` VMs per end;
    ``details["ron"]`` the RON route; ``details["frontier"]`` the sweep if asked for.
    A throughput floor is met at the cheapest rate ``>= floor`` unless ``exact_floor``.
    """
    if not 0 <= completion_tolerance < 10:
        raise InvalidProblemError(
            f"completion tolerance must be a fraction >= 0, not {completion_tolerance}"
        )
    default = problem.bound is None
    if default:
        problem = problem.with_objective("max_throughput", None)
    paths = usable_paths(problem)
    if problem.objective == "max_throughput":
        if problem.bound is None:
            fastest = solve_plan(problem, solver=solver)
        elif lp:
            fastest = solve_lp_plan(problem, compare_milp=compare_milp)
        else:
            fastest = solve_plan(problem, solver=solver)
        plan = fastest
        if completion_tolerance > 0:
            plan = _fastest_then_cheapest(problem, fastest, completion_tolerance, lp, solver)
        plan.details["completion_tolerance"] = completion_tolerance
        plan.details["fastest"] = {
            "predicted_gbps": fastest.predicted_gbps,
            "total_cost_usd": fastest.total_cost_usd,
            "egress_cost_usd": fastest.egress_cost_usd,
            "vm_cost_usd": fastest.vm_cost_usd,
            "completion_seconds": completion_seconds(problem, fastest.predicted_gbps),
            "vms": dict(fastest.vms),
        }
    elif lp:
        plan = solve_lp_plan(problem, compare_milp=compare_milp)
    else:
        plan = solve_plan(problem, solver=solver, exact_floor=exact_floor)
    plan.details["default_bound"] = default
    plan.details["completion_seconds"] = completion_seconds(problem, plan.predicted_gbps)
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
        tmax = max_throughput_gbps(problem, paths)
        points = pareto_frontier(problem, frontier_points, paths=paths, tmax=tmax)
        plan.details["frontier"] = [p.to_dict() for p in points]
    return plan
