"""Solve a ``Problem``: the exact MILP (modes a and b), its LP relaxation with rounding, and
the feasibility limits that infeasible bounds are reported against."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.evaluate import build_plan
from skyplane_ops.planner.formulation import (
    DEFAULT_MILP_SOLVER,
    PathModel,
    Solution,
)
from skyplane_ops.planner.milp import (
    CHEAPEST_REL_TOL,
    MAX_DINKELBACH,
    MilpResult,
    _ceiling_infeasible,
    _floor_infeasible,
    _gap,
    lowest_feasible_cost,
    max_throughput_gbps,
    overflows,
    solve_milp,
    usable_paths,
)
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import InvalidProblemError, Problem
from skyplane_ops.planner.prune import prune_dominated_relays
from skyplane_ops.planner.repair import (
    REPAIR_TOL,
    _close,
    _whole_connections_on_fleet,
    round_connections,
)

# The MILP and the connection repair live in milp and repair; their names stay importable here.
__all__ = [
    "CHEAPEST_REL_TOL",
    "MAX_DINKELBACH",
    "REPAIR_TOL",
    "MilpResult",
    "lowest_feasible_cost",
    "max_throughput_gbps",
    "overflows",
    "round_connections",
    "solve_lp_plan",
    "solve_milp",
    "solve_plan",
    "usable_paths",
]


def solve_plan(
    problem: Problem, solver: str | None = None, *, exact_floor: bool = False
) -> TransferPlan:
    """The exact MILP plan for the problem's objective and bound (see ``solve_milp``).

    Connections are fractional in the first solve (fast, the paper's relaxation of ``M``);
    when rounding each hop up would exceed a region's ``max_conns_per_vm * VMs``, the plan is
    repaired on the same fleet (``_whole_connections_on_fleet``), else solved again with whole
    connections per hop (``formulation``'s ``integer_conns``); if no plan with whole
    connections meets the bound within the VM limits, ``InfeasibleError``.
    """
    start = time.perf_counter()
    full = usable_paths(problem)
    result = solve_milp(problem, full, solver=solver, exact_floor=exact_floor)
    plan = _milp_plan(problem, result, solver, exact_floor, start, len(full))
    if not overflows(plan, result.solution.vms):
        return plan
    candidates: list[TransferPlan] = []
    fixed = _whole_connections_on_fleet(problem, result)
    if fixed is not None:
        repaired = _milp_plan(problem, fixed, solver, exact_floor, start, len(full))
        if not overflows(repaired, fixed.solution.vms):
            repaired.details["whole_connections"] = "same fleet"
            fleet = {u: float(round(n)) for u, n in result.solution.vms.items()}
            if _close(problem, result, fixed.solution, fleet):
                return repaired
            candidates.append(repaired)
    try:
        whole = solve_milp(
            problem, full, solver=solver, exact_floor=exact_floor, integer_conns=True
        )
    except InfeasibleError:
        pass
    else:
        whole = MilpResult(
            whole.solution,
            whole.paths,
            whole.gap,
            whole.solver_seconds + result.solver_seconds,
            whole.iterations + result.iterations,
        )
        resolved = _milp_plan(problem, whole, solver, exact_floor, start, len(full))
        resolved.details["whole_connections"] = "re-solved"
        candidates.append(resolved)
    if candidates:
        if problem.objective == "max_throughput":
            return max(candidates, key=lambda c: (c.predicted_gbps, -c.total_cost_usd))
        return min(candidates, key=lambda c: c.total_cost_usd)
    over_ceiling = problem.objective == "max_throughput" and plan.total_cost_usd > (
        (problem.bound or math.inf) * (1 + 1e-9)
    )
    if over_ceiling or any(n > problem.regions[u].max_vms for u, n in plan.vms.items()):
        raise InfeasibleError(
            f"no plan reaches {plan.predicted_gbps:.4g} Gbps with whole TCP connections "
            f"(at most {problem.max_conns_per_vm} per VM) within the VM limits; "
            "lower the floor or raise --max-connections-per-vm / --max-vms-per-region"
        )
    plan.details["whole_connections"] = "extra VMs"  # rounding cost a VM
    return plan


def _milp_plan(
    problem: Problem,
    result: MilpResult,
    solver: str | None,
    exact_floor: bool,
    start: float,
    candidates: int,
) -> TransferPlan:
    solution = result.solution
    details: dict[str, object] = {
        "paths_before_pruning": candidates,
        "solver": solver or DEFAULT_MILP_SOLVER,
        "solver_seconds": result.solver_seconds,
        "mip_gap": result.gap,
        "mip_gap_target": problem.mip_gap,
        "solves": result.iterations,
    }
    if problem.objective == "min_cost":
        details["exact_floor"] = exact_floor
    return build_plan(
        problem,
        paths=result.paths,
        path_flows=solution.path_flows,
        gbps=solution.gbps,
        mode=problem.objective,
        status=solution.status,
        seconds=time.perf_counter() - start,
        details=details,
    )


def _objective_value(plan: TransferPlan) -> float:
    return plan.total_cost_usd if plan.mode == "min_cost" else plan.predicted_gbps


def _fixed_fleet_solve(
    problem: Problem,
    paths: Sequence[CandidatePath],
    fleet: Mapping[str, float],
    *,
    integer_conns: bool = False,
) -> Solution | None:
    """Flows for a fixed fleet at the problem's bound (an LP, or a small MILP with
    ``integer_conns``)."""
    assert problem.bound is not None
    fixed = PathModel(problem, paths, fixed_vms=fleet, integer_conns=integer_conns)
    if problem.objective == "min_cost":
        fixed.set_floor(problem.bound)
    else:
        fixed.set_ceiling(problem.bound)
    return fixed.solve()


def solve_lp_plan(problem: Problem, compare_milp: bool = True) -> TransferPlan:
    """LP relaxation (fractional VMs), rounded to whole VMs and re-solved for the flows.

    Mode (a) rounds VMs up (the flows of the relaxation stay feasible, so it always
    succeeds); mode (b) rounds down (cheaper, so the ceiling holds) and, if no throughput
    fits the ceiling with that fleet, up. ``details`` reports the gap to the relaxation's
    bound and, with ``compare_milp``, to the exact MILP.
    """
    start = time.perf_counter()
    paths = usable_paths(problem)
    if problem.bound is None:
        raise InvalidProblemError("the problem needs a bound (throughput floor or cost ceiling)")
    tmax = None if problem.objective == "min_cost" else max_throughput_gbps(problem, paths)
    full = paths
    paths = prune_dominated_relays(problem, paths, problem.bound if tmax is None else tmax)
    relaxed = PathModel(problem, paths, relax=True, tmax=tmax)
    if problem.objective == "min_cost":
        relaxed.set_floor(problem.bound)
    else:
        relaxed.set_ceiling(problem.bound)
    lp = relaxed.solve()
    if lp is None:
        if problem.objective == "min_cost":
            raise _floor_infeasible(problem, problem.bound, full)
        assert tmax is not None
        raise _ceiling_infeasible(problem, problem.bound, full, tmax)
    endpoints = {problem.src, *problem.dsts}
    roundings = ("up",) if problem.objective == "min_cost" else ("down", "up")
    best: Solution | None = None
    used = ""
    fleet: dict[str, float] = {}
    for how in roundings:
        fleet = {}
        for u, n in lp.vms.items():
            whole = math.ceil(n - 1e-6) if how == "up" else math.floor(n + 1e-6)
            lower = 1 if u in endpoints else 0
            fleet[u] = float(min(problem.regions[u].max_vms, max(lower, whole)))
        sol = _fixed_fleet_solve(problem, paths, fleet)
        if sol is not None and sol.gbps > 0:
            best, used = sol, how
            break
    if best is None:
        raise InfeasibleError(
            "rounding the LP relaxation found no fleet within the cost ceiling; "
            "use the exact MILP (without --lp)"
        )
    lp_cost = lp.objective / problem.bound if problem.objective == "min_cost" else None
    details: dict[str, object] = {
        "solver": "GLOP",
        "rounding": used,
        "lp_relaxation_vms": {u: n for u, n in lp.vms.items() if n > 1e-9},
        "lp_bound": lp_cost if lp_cost is not None else lp.gbps,
    }
    plan = build_plan(
        problem,
        paths,
        best.path_flows,
        best.gbps,
        mode=problem.objective,
        status="LP_ROUNDED",
        seconds=0.0,
        details=details,
    )
    if overflows(plan, fleet):
        repaired = _fixed_fleet_solve(problem, paths, fleet, integer_conns=True)
        if repaired is not None and repaired.gbps > 0:
            details["whole_connections"] = "re-solved"
            plan = build_plan(
                problem,
                paths,
                repaired.path_flows,
                repaired.gbps,
                mode=problem.objective,
                status="LP_ROUNDED",
                seconds=0.0,
                details=details,
            )
        else:
            plan.details["whole_connections"] = "extra VMs"
    value = _objective_value(plan)
    bound = float(details["lp_bound"])  # type: ignore[arg-type]
    plan.details["gap_to_lp_bound"] = _gap(problem, value, bound)
    plan.solve_seconds = time.perf_counter() - start
    if compare_milp:
        exact = solve_plan(problem)
        exact_value = _objective_value(exact)
        plan.details["milp_objective"] = exact_value
        if problem.objective == "min_cost":
            plan.details["gap_to_milp"] = (value - exact_value) / exact_value
        else:
            plan.details["gap_to_milp"] = (
                (exact_value - value) / exact_value if exact_value else 0.0
            )
        plan.details["milp_solve_seconds"] = exact.solve_seconds
    return plan
