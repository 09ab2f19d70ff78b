"""Solve a ``Problem``: the exact MILP (modes a and b), its LP relaxation with rounding, and
the feasibility limits that infeasible bounds are reported against."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.evaluate import build_plan
from skyplane_ops.planner.formulation import (
    DEFAULT_MILP_SOLVER,
    PathModel,
    Solution,
)
from skyplane_ops.planner.paths import CandidatePath, candidate_paths
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import InvalidProblemError, Problem
from skyplane_ops.planner.prune import prune_dominated_relays

#: Most Dinkelbach iterations for mode (a) with faster-is-fine (2-3 are typical).
MAX_DINKELBACH = 8
#: Relative precision of the lowest feasible cost reported when a ceiling is infeasible.
CHEAPEST_REL_TOL = 0.002


def overflows(plan: TransferPlan, fleet: Mapping[str, float]) -> bool:
    """True when whole connections needed more VMs than the solver's fleet (see
    ``formulation``: the fractional connection rows can be short by one per hop)."""
    return any(n > round(fleet.get(u, 0.0)) for u, n in plan.vms.items())


def usable_paths(problem: Problem) -> list[CandidatePath]:
    """Candidate paths, or ``InfeasibleError`` if some destination cannot be reached at all."""
    problem.validate()
    paths = candidate_paths(problem)
    reached = {p.commodity for p in paths}
    for k, dst in enumerate(problem.dsts):
        if k not in reached:
            raise InfeasibleError(
                f"no path with measured throughput leads from {problem.src} to {dst}"
            )
    return paths


def max_throughput_gbps(problem: Problem, paths: Sequence[CandidatePath] | None = None) -> float:
    """The largest throughput the model allows: every region at its VM limit, price ignored."""
    paths = usable_paths(problem) if paths is None else paths
    limits = {u: float(s.max_vms) for u, s in problem.regions.items()}
    model = PathModel(problem.with_objective("max_throughput", None), paths, fixed_vms=limits)
    model.set_ceiling(None)
    solution = model.solve()
    return 0.0 if solution is None else solution.gbps


def _floor_infeasible(
    problem: Problem, floor: float, paths: Sequence[CandidatePath]
) -> InfeasibleError:
    tmax = max_throughput_gbps(problem, paths)
    deadline = problem.details.get("deadline_seconds")
    if deadline is not None and tmax > 0:
        return InfeasibleError(
            f"deadline {deadline:g} s (a throughput floor of {floor:.4g} Gbps) is infeasible; "
            f"the most this problem allows is {tmax:.3g} Gbps, which takes "
            f"{problem.transfer_seconds(tmax):.4g} s"
        )
    return InfeasibleError(
        f"throughput floor {floor:g} Gbps is infeasible; the most this problem allows is "
        f"{tmax:.3g} Gbps"
    )


def lowest_feasible_cost(
    problem: Problem, paths: Sequence[CandidatePath], tmax: float, below: float
) -> tuple[float, float]:
    """(cost, Gbps) of (nearly: ``CHEAPEST_REL_TOL``) the cheapest plan of any throughput.

    Found by bisection on the ceiling with mode (b), which is monotone; ``below`` is a ceiling
    known to be infeasible. Only used to explain an infeasible ceiling.
    """
    floor_model = PathModel(problem.with_objective("min_cost", None), paths)
    hi, hi_gbps = math.inf, tmax
    for i in range(1, 9):  # a feasible start: min-cost plans on a coarse throughput grid
        gbps = tmax * i / 8
        floor_model.set_floor(gbps)
        sol = floor_model.solve()
        if sol is not None and sol.objective / gbps < hi:
            hi, hi_gbps = sol.objective / gbps, gbps
    lo = below
    model = PathModel(problem.with_objective("max_throughput", None), paths, tmax=tmax)
    while hi - lo > CHEAPEST_REL_TOL * hi:
        mid = (lo + hi) / 2
        model.set_ceiling(mid)
        sol = model.solve()
        if sol is None:
            lo = mid
        else:
            hi, hi_gbps = mid, sol.gbps
    return hi, hi_gbps


def _ceiling_infeasible(
    problem: Problem, ceiling: float, paths: Sequence[CandidatePath], tmax: float
) -> InfeasibleError:
    cost, gbps = lowest_feasible_cost(problem, paths, tmax, ceiling)
    return InfeasibleError(
        f"cost ceiling ${ceiling:.4g} is infeasible; the cheapest plan costs about ${cost:.4g} "
        f"(at {gbps:.3g} Gbps)"
    )


@dataclass(frozen=True)
class MilpResult:
    """An exact solve: the solution, the (pruned) paths its flows index, and its proven gap."""

    solution: Solution
    paths: Sequence[CandidatePath]
    gap: float
    solver_seconds: float
    iterations: int = 1


def solve_milp(
    problem: Problem,
    paths: Sequence[CandidatePath] | None = None,
    solver: str | None = None,
    *,
    exact_floor: bool = False,
    integer_conns: bool = False,
) -> MilpResult:
    """Exact solve of mode (a) or (b).

    Mode (a) first prices the cheapest plan at exactly the floor; unless ``exact_floor``, it
    then runs Dinkelbach's method for ``min cost(x)`` over plans with ``T >= floor``:
    ``cost = N(x) / T`` where ``N(x) = T * cost`` is linear (mode (b)'s cost row), so with
    ``lambda`` the best cost so far, ``min N(x) - lambda T`` < 0 finds a cheaper plan, and a
    lower bound >= ``-0.001 * lambda * floor`` proves ``lambda`` within 0.1% of the optimum
    (any plan then costs >= ``lambda - 0.001 lambda floor / T >= 0.999 lambda``). Faster
    plans can be cheaper because VM time shrinks as ``T`` grows.
    """
    paths = usable_paths(problem) if paths is None else paths
    if problem.objective == "min_cost":
        if problem.bound is None:
            raise InvalidProblemError("minimising cost needs a throughput floor")
        floor = problem.bound
        kept = prune_dominated_relays(problem, paths, floor)
        model = PathModel(problem, kept, solver=solver, integer_conns=integer_conns)
        model.set_floor(floor)
        first = model.solve()
        if first is None:
            raise _floor_infeasible(problem, floor, paths)
        result = MilpResult(
            first, kept, _gap(problem, first.objective, first.best_bound), first.seconds
        )
        if exact_floor:
            return result
        return _cheapest_at_least(problem, paths, result, floor, solver, integer_conns)
    tmax = max_throughput_gbps(problem, paths)
    full, paths = paths, prune_dominated_relays(problem, paths, tmax)
    model = PathModel(problem, paths, tmax=tmax, solver=solver, integer_conns=integer_conns)
    model.set_ceiling(problem.bound)
    solution = model.solve()
    if solution is None:
        assert problem.bound is not None  # without a ceiling, Tmax is always feasible
        raise _ceiling_infeasible(problem, problem.bound, full, tmax)
    gap = _gap(problem, solution.objective, solution.best_bound)
    return MilpResult(solution, paths, gap, solution.seconds)


def _cheapest_at_least(
    problem: Problem,
    full: Sequence[CandidatePath],
    first: MilpResult,
    floor: float,
    solver: str | None,
    integer_conns: bool = False,
) -> MilpResult:
    """Dinkelbach iterations from the exact-floor plan (see ``solve_milp``)."""
    lam = first.solution.objective / floor  # its cost with the solver's (untrimmed) fleet
    tmax = max_throughput_gbps(problem, full)
    seconds = first.solver_seconds
    if tmax <= floor * (1 + 1e-9) or lam <= 0:
        return first  # nothing faster, or nothing cheaper than free
    paths = prune_dominated_relays(problem, full, tmax)
    model = PathModel(
        problem.with_objective("max_throughput", None),
        paths,
        tmax=tmax,
        solver=solver,
        integer_conns=integer_conns,
    )
    best: MilpResult = first
    for iteration in range(1, MAX_DINKELBACH + 1):
        tolerance = max(problem.mip_gap, 1e-9) * lam * floor
        model.set_ratio(lam, floor, tolerance)
        sol = model.solve()
        if sol is None:  # cannot happen: the exact-floor plan is feasible here too
            break
        seconds += sol.seconds
        cost = (sol.objective + lam * sol.gbps) / sol.gbps
        gap = max(0.0, -sol.best_bound / (lam * floor))
        if cost < lam * (1 - 1e-9):
            lam = cost
            best = MilpResult(sol, paths, gap, seconds, iteration + 1)
        else:
            best = MilpResult(best.solution, best.paths, gap, seconds, iteration + 1)
        if sol.best_bound >= -tolerance:
            break
    return best


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
            "lower the floor or raise --max-conns / --max-vms"
        )
    plan.details["whole_connections"] = "extra VMs"  # rounding cost a VM
    return plan


def round_connections(
    problem: Problem,
    paths: Sequence[CandidatePath],
    path_flows: Sequence[float],
    fleet: Mapping[str, float],
) -> dict[tuple[str, str], int]:
    """Whole connections per edge within every region's ``M * N`` (out and in): each edge
    gets its fractional need rounded down, then the spare connections go one at a time to the
    edges with the largest remainders whose two ends both have one to spare."""
    need: dict[tuple[str, str], float] = {}
    for path, f in zip(paths, path_flows, strict=True):
        for u, v in zip(path.regions, path.regions[1:], strict=False):
            need[(u, v)] = need.get((u, v), 0.0) + f * problem.conns_per_gbps(u, v)
    m = problem.max_conns_per_vm
    spare_out = {u: m * round(n) for u, n in fleet.items()}
    spare_in = dict(spare_out)
    conns: dict[tuple[str, str], int] = {}
    for (u, v), x in need.items():
        whole = math.floor(x + 1e-9)
        conns[(u, v)] = whole
        spare_out[u] -= whole
        spare_in[v] -= whole
    for (u, v), x in sorted(need.items(), key=lambda kv: conns[kv[0]] - kv[1]):
        if x - conns[(u, v)] > 1e-9 and spare_out[u] >= 1 and spare_in[v] >= 1:
            conns[(u, v)] += 1
            spare_out[u] -= 1
            spare_in[v] -= 1
    return conns


def _whole_connections_on_fleet(problem: Problem, result: MilpResult) -> MilpResult | None:
    """Whole connections per hop on the solver's own fleet: first ``round_connections`` and an
    LP for the flows; if that is not within ``REPAIR_TOL`` of the fractional optimum, also a
    small MILP with integer connections (VMs fixed, so no products with ``T``). Mode (b): the
    fastest within the ceiling; mode (a): the cheapest at the solver's throughput or at the
    floor. None if the fleet cannot do it."""
    fleet = {u: float(round(n)) for u, n in result.solution.vms.items()}
    conns = round_connections(problem, result.paths, result.solution.path_flows, fleet)
    options: list[Solution] = []
    for target in _targets(problem, result):
        sol = _on_fleet(problem, result.paths, fleet, target, fixed_conns=conns)
        if sol is not None:
            options.append(sol)
    if not any(_close(problem, result, o, fleet) for o in options):
        for target in _targets(problem, result):
            sol = _on_fleet(problem, result.paths, fleet, target, integer=True)
            if sol is not None:
                options.append(sol)
    if not options:
        return None
    if problem.objective == "max_throughput":
        best = max(options, key=lambda o: o.gbps)
    else:
        best = min(options, key=lambda o: _usd(problem, result.paths, o, fleet))
    seconds = result.solver_seconds + sum(o.seconds for o in options)
    return MilpResult(best, result.paths, result.gap, seconds, result.iterations + 1)


#: A rounded repair within this of the fractional optimum (throughput in mode (b), cost in
#: mode (a)) is kept; otherwise the integer-connection MILP on the same fleet is tried too.
REPAIR_TOL = 0.002


def _usd(
    problem: Problem, paths: Sequence[CandidatePath], sol: Solution, fleet: Mapping[str, float]
) -> float:
    """The plan cost of ``sol`` on ``fleet`` (egress + VM time, provisioning included)."""
    t = sol.gbps
    egress = sum(f * p.usd_per_gb for p, f in zip(paths, sol.path_flows, strict=True)) / t
    rate = sum(problem.regions[u].vm_usd_per_second * n for u, n in fleet.items())
    return problem.volume_gb * egress + rate * problem.transfer_seconds(t)


def _close(problem: Problem, result: MilpResult, sol: Solution, fleet: Mapping[str, float]) -> bool:
    frac = result.solution
    if problem.objective == "max_throughput":
        return sol.gbps >= frac.gbps * (1 - REPAIR_TOL)
    ideal = _usd(problem, result.paths, frac, fleet)
    return _usd(problem, result.paths, sol, fleet) <= ideal * (1 + REPAIR_TOL)


def _on_fleet(
    problem: Problem,
    paths: Sequence[CandidatePath],
    fleet: Mapping[str, float],
    target: float | None,
    *,
    fixed_conns: Mapping[tuple[str, str], int] | None = None,
    integer: bool = False,
) -> Solution | None:
    """Flows on a fixed fleet with whole connections (given, or integer variables): at
    exactly ``target`` Gbps at least cost, or (None) as fast as the ceiling allows and then
    as cheaply as that speed allows (the ceiling's tie-break is below a MIP gap)."""
    model = PathModel(
        problem, paths, fixed_vms=fleet, fixed_conns=fixed_conns, integer_conns=integer
    )
    if target is not None:
        model.set_floor(target)
        return model.solve()
    model.set_ceiling(problem.bound)
    fast = model.solve()
    if fast is None or fast.gbps <= 0:
        return None
    cheap = PathModel(
        problem.with_objective("min_cost", fast.gbps),
        paths,
        fixed_vms=fleet,
        fixed_conns=fixed_conns,
        integer_conns=integer,
    )
    cheap.set_floor(fast.gbps)
    again = cheap.solve()
    if again is None:
        return fast
    return dataclasses.replace(again, gbps=fast.gbps, seconds=fast.seconds + again.seconds)


def _targets(problem: Problem, result: MilpResult) -> list[float | None]:
    """What a repair must still meet: mode (b) the ceiling (None), mode (a) the solver's
    throughput, else the floor."""
    if problem.objective == "max_throughput":
        return [None]
    assert problem.bound is not None
    return list(dict.fromkeys((result.solution.gbps, problem.bound)))


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


def _gap(problem: Problem, value: float, bound: float) -> float:
    """Relative optimality gap between a solution's objective and a bound on it."""
    if problem.objective == "min_cost":
        return max(0.0, (value - bound) / value) if value > 0 else 0.0
    return max(0.0, (bound - value) / bound) if bound > 0 else 0.0


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
