"""``plan_multicast``: one source, several destinations, shared edges carrying the data once.

Ranked as ``planner.api.plan_transfer`` ranks unicast plans: no bound is the cheapest plan
finishing within ``completion_tolerance`` of the fastest; a cost ceiling is the fastest plan
within it (refined the same way); a throughput floor (per destination) the cheapest plan at
least that fast. The plan's ``details["multicast"]`` holds the comparison rows (this plan,
N separate unicasts, the direct star) that ``render_text`` shows.
"""

from __future__ import annotations

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.api import (
    DEFAULT_COMPLETION_TOLERANCE,
    baseline_vms,
    completion_seconds,
    plan_transfer,
    tolerance_floor,
)
from skyplane_ops.planner.baselines import direct_plan, summary
from skyplane_ops.planner.multicast.compare import joint_row, row, star_row, unicasts_row
from skyplane_ops.planner.multicast.solve import solve_multicast
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import InvalidProblemError, Problem


def _fastest_then_cheapest(
    problem: Problem, fastest: TransferPlan, tolerance: float, solver: str | None
) -> TransferPlan:
    floor = min(tolerance_floor(problem, fastest.predicted_gbps, tolerance), fastest.predicted_gbps)
    try:
        cheaper = solve_multicast(problem.with_objective("min_cost", floor), solver)
    except InfeasibleError:
        return fastest
    if cheaper.total_cost_usd >= fastest.total_cost_usd:
        return fastest
    cheaper.mode = fastest.mode
    cheaper.details.update(objective=problem.objective, bound=problem.bound)
    cheaper.solve_seconds += fastest.solve_seconds
    return cheaper


def plan_multicast(
    problem: Problem,
    *,
    solver: str | None = None,
    exact_floor: bool = False,
    completion_tolerance: float = DEFAULT_COMPLETION_TOLERANCE,
    compare: bool = True,
) -> TransferPlan:
    """The multicast plan of ``problem`` (see the module docstring), with its comparisons."""
    if not 0 <= completion_tolerance < 10:
        raise InvalidProblemError(
            f"completion tolerance must be a fraction >= 0, not {completion_tolerance}"
        )
    default = problem.bound is None
    if default:
        problem = problem.with_objective("max_throughput", None)
    if problem.objective == "max_throughput":
        fastest = solve_multicast(problem, solver)
        plan = fastest
        if completion_tolerance > 0:
            plan = _fastest_then_cheapest(problem, fastest, completion_tolerance, solver)
        plan.details["completion_tolerance"] = completion_tolerance
    else:
        plan = solve_multicast(problem, solver, exact_floor=exact_floor)
    plan.details["default_bound"] = default
    plan.details["completion_seconds"] = completion_seconds(problem, plan.predicted_gbps)
    vms = baseline_vms(problem)

    def star(p: Problem) -> TransferPlan:
        return direct_plan(p, vms)

    star_figures = star_row(problem, star)
    plan.baseline = None
    if star_figures is not None:
        plan.baseline = summary(direct_plan(problem, vms))
    if compare:

        def one(p: Problem) -> TransferPlan:
            return plan_transfer(
                p, solver=solver, exact_floor=exact_floor, completion_tolerance=completion_tolerance
            )

        plan.details["multicast"].update(
            this=row(plan, problem),
            unicasts=unicasts_row(problem, one),
            joint=joint_row(problem, one),
            star=star_figures,
        )
    return plan
