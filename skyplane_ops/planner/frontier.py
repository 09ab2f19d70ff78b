"""The Pareto frontier of price vs throughput: a sweep of mode (a) over one reused model.

Mode (a) prices the cheapest plan at each exact throughput ``T_i = Tmax * i / n``. That curve
need not be monotone (VM time falls as ``T`` rises, so a faster plan can be cheaper); points
some faster-and-no-dearer point beats are kept but marked ``pareto=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from skyplane_ops.planner.evaluate import build_plan
from skyplane_ops.planner.formulation import PathModel
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import Problem
from skyplane_ops.planner.prune import prune_dominated_relays
from skyplane_ops.planner.solve import max_throughput_gbps, usable_paths

#: Relative cost difference under which two frontier points count as equally cheap.
COST_TOL = 1e-6


@dataclass(frozen=True)
class FrontierPoint:
    """The cheapest plan at one throughput."""

    gbps: float
    cost_usd: float
    egress_cost_usd: float
    vm_cost_usd: float
    vms: int
    relays: tuple[str, ...]
    pareto: bool = True

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["relays"] = list(self.relays)
        return data


def pareto_frontier(
    problem: Problem,
    points: int = 100,
    *,
    paths: Sequence[CandidatePath] | None = None,
    tmax: float | None = None,
) -> list[FrontierPoint]:
    """``points`` evenly spaced throughputs up to the maximum, each with its cheapest plan."""
    if points < 1:
        raise ValueError("a frontier needs at least one point")
    paths = usable_paths(problem) if paths is None else paths
    tmax = max_throughput_gbps(problem, paths) if tmax is None else tmax
    paths = prune_dominated_relays(problem, paths, tmax)
    model = PathModel(problem.with_objective("min_cost", None), paths)
    raw: list[FrontierPoint] = []
    endpoints = {problem.src, *problem.dsts}
    for i in range(1, points + 1):
        gbps = tmax * i / points
        model.set_floor(gbps)
        solution = model.solve()
        if solution is None:  # only numerically possible at Tmax itself
            continue
        plan = build_plan(
            problem, paths, solution.path_flows, gbps, mode="min_cost", status="", seconds=0.0
        )
        relays = tuple(u for u in plan.vms if u not in endpoints)
        raw.append(
            FrontierPoint(
                gbps=gbps,
                cost_usd=plan.total_cost_usd,
                egress_cost_usd=plan.egress_cost_usd,
                vm_cost_usd=plan.vm_cost_usd,
                vms=sum(plan.vms.values()),
                relays=relays,
            )
        )
    return mark_pareto(raw)


def mark_pareto(points: Sequence[FrontierPoint]) -> list[FrontierPoint]:
    """Flag points that a faster point matches or beats on cost."""
    out: list[FrontierPoint] = []
    cheapest_faster = float("inf")
    for point in sorted(points, key=lambda p: -p.gbps):
        dominated = point.cost_usd >= cheapest_faster * (1 - COST_TOL)
        out.append(replace(point, pareto=not dominated))
        cheapest_faster = min(cheapest_faster, point.cost_usd)
    out.reverse()
    return out
