"""Solve a multicast ``Problem`` exactly (modes a and b, Dinkelbach for "at least the floor")
and turn the solution into a ``TransferPlan``.

The drive is the unicast one (``milp``) on ``MulticastModel``: mode (a) prices the cheapest
plan at exactly the floor, then Dinkelbach steps look for a cheaper faster one; mode (b) is
one solve under the ceiling. Whole connections: when rounding each hop up needs more VMs than
the solver's fleet, the model is solved again with integer connections per edge.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Sequence
from typing import Any, cast

from skyplane_ops.errors import InfeasibleError, PlanningError
from skyplane_ops.planner.evaluate import (
    FLOW_TOL,
    costs,
    needed_vms,
    plan_details,
    plan_hops,
)
from skyplane_ops.planner.milp import overflows, ratio_steps, usable_paths
from skyplane_ops.planner.multicast.model import MulticastModel, MulticastSolution
from skyplane_ops.planner.multicast.paths import multicast_paths
from skyplane_ops.planner.multicast.trees import Tree, excess, multicast_trees
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.plan import PlanPath, TransferPlan
from skyplane_ops.planner.problem import BITS_PER_BYTE, Edge, InvalidProblemError, Problem


def multicast_routes(problem: Problem) -> list[CandidatePath]:
    """Candidate routes, or ``InfeasibleError`` if some destination cannot be reached."""
    return usable_paths(problem, multicast_paths)


#: Throughput levels (fractions of Tmax) whose LP relaxations pick the relays (``select_routes``).
LP_LEVELS = (0.1, 0.25, 0.5, 0.75, 1.0)


def select_routes(
    problem: Problem, routes: Sequence[CandidatePath], tmax: float
) -> list[CandidatePath]:
    """The routes the MILP is given: every route through destinations only, and those whose
    relays carry flow in the LP relaxation at some throughput level (``LP_LEVELS`` of Tmax and
    the problem's floor). On the default grid this keeps ~5% of the routes and makes the
    Dinkelbach steps about 10x faster; a relay no relaxed optimum uses at any level is left
    out (a heuristic column choice: the tests compare it with the full route set).
    """
    levels = [tmax * f for f in LP_LEVELS]
    if problem.objective == "min_cost" and problem.bound is not None:
        levels.append(min(problem.bound, tmax))
    relays: set[str] = set()
    for level in levels:
        model = MulticastModel(problem.with_objective("min_cost", level), routes, relax=True)
        model.set_floor(level * (1 - 1e-6))
        solution = model.solve()
        if solution is None:
            continue
        for route, g in zip(routes, solution.route_flows, strict=True):
            if g > FLOW_TOL * level:
                relays.update(r for r in route.regions[1:-1] if r not in problem.dsts)
    return [r for r in routes if all(x in problem.dsts or x in relays for x in r.regions[1:-1])]


def max_multicast_gbps(
    problem: Problem, routes: Sequence[CandidatePath], groups: Sequence[int] | None = None
) -> float:
    """The most every destination can receive at once: all regions at their VM limits."""
    limits = {u: float(s.max_vms) for u, s in problem.regions.items()}
    model = MulticastModel(
        problem.with_objective("max_throughput", None), routes, groups, fixed_vms=limits
    )
    model.set_ceiling(None)
    solution = model.solve()
    return 0.0 if solution is None else solution.gbps


def run_cost(problem: Problem, solution: MulticastSolution) -> float:
    """``T * cost`` of a solution (the min-cost model's objective at its ``T``)."""
    volume, gbps = problem.volume_gb, solution.gbps
    egress = sum(
        volume * problem.price(*e) * f
        for e, f in zip(solution.edges, solution.path_flows, strict=True)
    )
    per_vm = BITS_PER_BYTE * volume + problem.provisioning_seconds * gbps
    return egress + sum(
        problem.regions[u].vm_usd_per_second * per_vm * n for u, n in solution.vms.items()
    )


def least_source(
    problem: Problem, routes: Sequence[CandidatePath], best: MulticastSolution, kw: dict[str, Any]
) -> MulticastSolution:
    """Among plans as fast as ``best`` and as cheap (within the MIP gap: the solver cannot tell
    them apart), the one whose source sends least (a second, lexicographic objective).

    Equal-price hops (AWS to AWS) make sending from the source and forwarding from a
    destination tie in cost; the first solve then picks either. Source egress is what a
    multicast is for (the source's NIC and price are paid once), so ties go to the tree.
    """
    if best.gbps <= 0:
        return best
    cap = run_cost(problem, best) * (1 + problem.mip_gap)
    model = MulticastModel(problem.with_objective("min_cost", best.gbps), routes, **kw)
    model.set_least_source(best.gbps, cap)
    try:
        found = model.solve()
    except PlanningError:  # out of time: the first answer stands
        return best
    if found is None:  # numerically infeasible at the cap: the first answer stands
        return best
    return dataclasses.replace(found, objective=run_cost(problem, found))


def _solve(
    problem: Problem,
    routes: Sequence[CandidatePath],
    *,
    solver: str | None,
    exact_floor: bool,
    integer_conns: bool,
    groups: Sequence[int] | None = None,
) -> tuple[MulticastSolution, int]:
    """(solution, solves) of the problem's mode; ``InfeasibleError`` for a bound too tight."""
    kw: dict[str, Any] = {"solver": solver, "integer_conns": integer_conns, "groups": groups}
    tmax = max_multicast_gbps(problem, routes, groups)
    if problem.objective == "max_throughput":
        model = MulticastModel(problem, routes, tmax=tmax, **kw)
        model.set_ceiling(problem.bound)
        solution = model.solve()
        if solution is None:
            raise InfeasibleError(
                f"cost ceiling ${problem.bound:.4g} is infeasible for this multicast"
            )
        return least_source(problem, routes, solution, kw), 2
    if problem.bound is None:
        raise InvalidProblemError("minimising cost needs a throughput floor")
    floor = problem.bound
    model = MulticastModel(problem, routes, **kw)
    model.set_floor(floor)
    best = model.solve()
    if best is None:
        raise InfeasibleError(
            f"throughput floor {floor:g} Gbps is infeasible; the most this multicast allows is "
            f"{tmax:.3g} Gbps to every destination"
        )
    lam = best.objective / floor
    if exact_floor or tmax <= floor * (1 + 1e-9) or lam <= 0:
        return least_source(problem, routes, best, kw), 2
    ratio = MulticastModel(problem.with_objective("max_throughput", None), routes, tmax=tmax, **kw)
    solves = 1
    for sol, cost, step_lam in ratio_steps(ratio, lam, floor, problem.mip_gap):
        solves += 1
        if cost < step_lam * (1 - 1e-9):
            best = cast(MulticastSolution, sol)
    return least_source(problem, routes, best, kw), solves + 1


def edge_loads(
    routes: Sequence[CandidatePath], flows: Sequence[float], groups: Sequence[int] | None = None
) -> dict[Edge, float]:
    """Each edge's load: the largest flow any one destination sends over it; with ``groups``
    (trees), the sum of the trees through it."""
    per: dict[tuple[int, Edge], float] = {}
    seen: set[tuple[int, Edge]] = set()
    for i, (route, g) in enumerate(zip(routes, flows, strict=True)):
        for e in itertools.pairwise(route.regions):
            if groups is not None:
                if (groups[i], e) in seen:
                    continue
                seen.add((groups[i], e))
            key = route.commodity if groups is None else -1
            per[(key, e)] = per.get((key, e), 0.0) + g
    out: dict[Edge, float] = {}
    for (_, e), g in per.items():
        out[e] = max(out.get(e, 0.0), g)
    return out


def build_multicast_plan(
    problem: Problem,
    routes: Sequence[CandidatePath],
    solution: MulticastSolution,
    *,
    seconds: float,
    groups: Sequence[int] | None = None,
    details: dict[str, Any] | None = None,
) -> TransferPlan:
    """The plan of a solution: routes per destination, one hop per edge at its (max) load."""
    gbps = solution.gbps
    index = list(range(len(routes))) if groups is None else list(groups)
    kept = [
        (r, solution.route_flows[k], k)
        for r, k in zip(routes, index, strict=True)
        if solution.route_flows[k] > FLOW_TOL * max(gbps, 1e-12)
    ]
    loads = edge_loads(
        [r for r, _, _ in kept],
        [g for _, g, _ in kept],
        None if groups is None else [k for _, _, k in kept],
    )
    fleet = needed_vms(problem, loads)
    usd_per_gb_sent = sum(problem.price(*e) * f for e, f in loads.items()) / gbps
    hops = plan_hops(problem, loads)
    merged: dict[tuple[str, ...], float] = {}
    for r, g, _ in kept:  # trees may share a route to a destination
        merged[r.regions] = merged.get(r.regions, 0.0) + g
    paths = [PlanPath(regions=r, share=g / gbps, gbps=g) for r, g in merged.items()]
    paths.sort(key=lambda p: (problem.dsts.index(p.regions[-1]), -p.gbps))
    egress_usd, vm_usd = costs(problem, gbps, usd_per_gb_sent, fleet)
    src_out = sum(f for (u, _), f in loads.items() if u == problem.src)
    info = plan_details(
        problem,
        gbps,
        len(routes),
        {
            "solver": "SCIP",
            "multicast": {"source_egress_gb": problem.volume_gb * src_out / gbps},
            **(details or {}),
        },
    )
    return TransferPlan(
        src=problem.src,
        dsts=problem.dsts,
        volume_gb=problem.volume_gb,
        mode=problem.objective,
        paths=paths,
        hops=hops,
        vms=dict(sorted(fleet.items())),
        predicted_gbps=gbps,
        egress_cost_usd=egress_usd,
        vm_cost_usd=vm_usd,
        solver_status=solution.status,
        solve_seconds=seconds,
        details=info,
    )


#: Trees overloading an edge by more than this (relative) are re-planned as trees.
TREE_TOL = 1e-6


def tree_routes(problem: Problem, trees: Sequence[Tree]) -> tuple[list[CandidatePath], list[int]]:
    """Each tree's route to each destination, and the tree (group) each route belongs to."""
    routes, groups = [], []
    for g, tree in enumerate(trees):
        parent = {v: u for u, vs in tree.next_hops.items() for v in vs}
        for k, dst in enumerate(problem.dsts):
            path = [dst]
            while path[-1] != problem.src:
                path.append(parent[path[-1]])
            regions = tuple(reversed(path))
            price = sum(problem.price(u, v) for u, v in itertools.pairwise(regions))
            routes.append(CandidatePath(k, regions, price))
            groups.append(g)
    return routes, groups


def _whole(
    problem: Problem,
    routes: Sequence[CandidatePath],
    groups: Sequence[int] | None,
    solver: str | None,
    exact_floor: bool,
    start: float,
    details: dict[str, Any],
) -> tuple[TransferPlan, MulticastSolution]:
    """The plan in whole connections: solved again with integer connections if rounding up
    needs more VMs than the solver's fleet."""
    for integer_conns in (False, True):
        solution, solves = _solve(
            problem,
            routes,
            solver=solver,
            exact_floor=exact_floor,
            integer_conns=integer_conns,
            groups=groups,
        )
        plan = build_multicast_plan(
            problem,
            routes,
            solution,
            seconds=time.perf_counter() - start,
            groups=groups,
            details={
                **details,
                "solves": solves,
                "whole_connections": "integer" if integer_conns else None,
            },
        )
        if not overflows(plan, solution.vms):
            return plan, solution
    raise InfeasibleError("no multicast plan in whole TCP connections meets the bound")


def solve_multicast(
    problem: Problem, solver: str | None = None, *, exact_floor: bool = False
) -> TransferPlan:
    """The exact multicast plan for the problem's objective and bound, in whole connections,
    with the trees the data plane sends it down (``trees``).

    When the trees of the per-destination plan would load some edge more than the plan does
    (a routing cannot always carry the model's "largest flow per edge"), the problem is solved
    again over those trees, where every edge carries the sum of its trees: the plan is then
    exactly what the trees carry. If no plan on the trees meets the bound, the first plan is
    kept and ``details["multicast"]["tree_excess"]`` says by how much its trees overload.
    """
    start = time.perf_counter()
    routes = multicast_routes(problem)
    info = {"routes_offered": len(routes)}
    routes = select_routes(problem, routes, max_multicast_gbps(problem, routes))
    plan, _ = _whole(problem, routes, None, solver, exact_floor, start, info)
    trees = multicast_trees(plan)
    over = excess(plan, trees)
    if over > TREE_TOL:
        shapes, groups = tree_routes(problem, trees)
        try:
            on_trees, solution = _whole(
                problem, shapes, groups, solver, exact_floor, start, {**info, "on_trees": True}
            )
        except InfeasibleError:
            pass
        else:
            gbps = on_trees.predicted_gbps
            trees = [
                Tree(x / gbps, t.next_hops, t.dsts)
                for t, x in zip(trees, solution.route_flows, strict=True)
                if x > FLOW_TOL * gbps
            ]
            plan, over = on_trees, excess(on_trees, trees)
    plan.details["multicast"].update(trees=[t.to_dict() for t in trees], tree_excess=over)
    return plan
