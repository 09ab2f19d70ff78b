"""Baselines the planner is compared against, priced with the same model as the plans.

- ``direct``: the source sends straight to each destination with ``vms`` VMs at each end.
- ``ron``: RON's heuristic (Andersen et al.): per destination, the single path (direct or one
  relay) with the best bottleneck throughput ``min(grid[s, r], grid[r, d])``, ignoring
  price, with ``vms`` VMs in every region on it.

Both run as fast as their fixed route and fleet allow (an LP over the fixed paths).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner.evaluate import build_plan
from skyplane_ops.planner.formulation import PathModel
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import InvalidProblemError, Problem


def _fixed_route_plan(
    problem: Problem, paths: list[CandidatePath], vms: int, mode: str
) -> TransferPlan:
    if vms < 1:
        raise InvalidProblemError(f"a baseline needs at least 1 VM per region, not {vms}")
    start = time.perf_counter()
    fleet: dict[str, float] = {}
    for path in paths:
        for u in path.regions:
            fleet[u] = float(min(vms, problem.regions[u].max_vms))
    plan = None
    for integer_conns in (False, True):  # whole connections only if rounding overflows
        model = PathModel(
            problem.with_objective("max_throughput", None),
            paths,
            fixed_vms=fleet,
            integer_conns=integer_conns,
        )
        model.set_ceiling(None)
        solution = model.solve()
        if solution is None or solution.gbps <= 0:
            if plan is not None:
                return plan
            raise InfeasibleError(f"the {mode} route carries no throughput")
        plan = build_plan(
            problem,
            paths,
            solution.path_flows,
            solution.gbps,
            mode=mode,
            status=solution.status,
            seconds=time.perf_counter() - start,
            details={"baseline_vms": vms},
        )
        if not any(n > round(fleet.get(u, 0.0)) for u, n in plan.vms.items()):
            break
    assert plan is not None
    return plan


def direct_plan(problem: Problem, vms: int = 1) -> TransferPlan:
    """The direct path with ``vms`` VMs at the source and at each destination."""
    problem.validate()
    paths = []
    for k, dst in enumerate(problem.dsts):
        if problem.gbps(problem.src, dst) <= 0:
            raise InfeasibleError(
                f"no measured throughput on the direct path {problem.src} -> {dst}"
            )
        paths.append(CandidatePath(k, (problem.src, dst), problem.price(problem.src, dst)))
    return _fixed_route_plan(problem, paths, vms, "direct")


def ron_plan(problem: Problem, vms: int = 1) -> TransferPlan:
    """RON's best single-relay (or direct) route by bottleneck throughput, price ignored."""
    problem.validate()
    src = problem.src
    paths = []
    for k, dst in enumerate(problem.dsts):
        best: tuple[float, tuple[str, ...]] = (problem.gbps(src, dst), (src, dst))
        for r, spec in problem.regions.items():
            if r in (src, dst) or spec.max_vms < 1:
                continue
            bottleneck = min(problem.gbps(src, r), problem.gbps(r, dst))
            if bottleneck > best[0]:
                best = (bottleneck, (src, r, dst))
        if best[0] <= 0:
            raise InfeasibleError(f"no route with measured throughput from {src} to {dst}")
        regions = best[1]
        price = sum(problem.price(u, v) for u, v in itertools.pairwise(regions))
        paths.append(CandidatePath(k, regions, price))
    return _fixed_route_plan(problem, paths, vms, "ron")


def summary(plan: TransferPlan) -> dict[str, Any]:
    """The small dict stored as ``TransferPlan.baseline``."""
    return {
        "mode": plan.mode,
        "paths": [list(p.regions) for p in plan.paths],
        "vms": dict(plan.vms),
        "predicted_gbps": plan.predicted_gbps,
        "egress_cost_usd": plan.egress_cost_usd,
        "vm_cost_usd": plan.vm_cost_usd,
        "total_cost_usd": plan.total_cost_usd,
    }
