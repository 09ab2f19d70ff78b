"""The exact MILP of a ``Problem`` (modes a and b, with Dinkelbach iterations for the
cheapest plan that is at least as fast as a floor) and the feasibility limits that an
infeasible bound is reported against."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.formulation import (
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


def usable_paths(
    problem: Problem, generate: Callable[[Problem], list[CandidatePath]] = candidate_paths
) -> list[CandidatePath]:
    """Candidate paths (``generate``'s: the unicast ones, or the multicast routes), or
    ``InfeasibleError`` if some destination cannot be reached at all."""
    problem.validate()
    paths = generate(problem)
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
    steps = ratio_steps(model, lam, floor, problem.mip_gap)
    for iteration, (sol, cost, lam) in enumerate(steps, start=1):
        seconds += sol.seconds
        gap = max(0.0, -sol.best_bound / (lam * floor))
        if cost < lam * (1 - 1e-9):
            best = MilpResult(sol, paths, gap, seconds, iteration + 1)
        else:
            best = MilpResult(best.solution, best.paths, gap, seconds, iteration + 1)
    return best


def ratio_steps(
    model: PathModel, lam: float, floor: float, mip_gap: float
) -> Iterator[tuple[Solution, float, float]]:
    """Dinkelbach's steps for the cheapest plan at least as fast as ``floor``, from the cost
    ``lam`` of a plan at the floor (``solve_milp``): each step's solution, its cost and the
    ``lambda`` it was solved with (a step is better when its cost is below that); at most
    ``MAX_DINKELBACH`` steps, ending when one proves ``lambda`` within ``mip_gap``. The
    multicast model (a ``PathModel``) takes the same steps."""
    for _ in range(MAX_DINKELBACH):
        tolerance = max(mip_gap, 1e-9) * lam * floor
        model.set_ratio(lam, floor, tolerance)
        sol = model.solve()
        if sol is None:  # cannot happen: the plan at the floor is feasible here too
            return
        cost = (sol.objective + lam * sol.gbps) / sol.gbps
        yield sol, cost, lam
        if cost < lam * (1 - 1e-9):
            lam = cost
        if sol.best_bound >= -tolerance:
            return


def _gap(problem: Problem, value: float, bound: float) -> float:
    """Relative optimality gap between a solution's objective and a bound on it."""
    if problem.objective == "min_cost":
        return max(0.0, (value - bound) / value) if value > 0 else 0.0
    return max(0.0, (bound - value) / bound) if bound > 0 else 0.0
