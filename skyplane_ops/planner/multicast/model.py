"""The multicast MILP: per-destination flows on routes, and each edge paid once.

The standard multicast relaxation (as in Cloudcast, NSDI '24): route flows ``g_p`` per
destination (``sum_{p to d} g_p = T`` for every destination ``d``), and an edge variable
``F_e >= sum_{p to d through e} g_p`` for every destination ``d``, so an edge shared by
several destinations carries (and is billed for) the data once: the largest of their flows,
not the sum. Every capacity, connection, saturation and price row of the unicast model
(``formulation``) is written on ``F_e`` instead of a sum of path flows.

With ``groups`` the model runs on *trees* instead: routes of one group (a tree's route to
each destination) share one flow variable, and an edge carries the sum of the trees through
it, which any chunk routing can carry exactly (``solve`` re-solves on the plan's trees when
their loads would exceed the per-destination model's).

It is built by handing ``PathModel`` one single-edge pseudo path per edge (so its flows
*are* the ``F_e``: region loads, links, the cost rows, the bounds and the Dinkelbach steps are
reused as they are) and adding the route flows, the demand and the ``max`` rows on top.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyplane_ops.planner.formulation import PathModel, Solution
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import Edge, Problem


@dataclass(frozen=True)
class MulticastSolution(Solution):
    """A solved multicast model: ``path_flows`` are the edge loads ``F_e`` (per ``edges``),
    ``route_flows`` the flows of the routes (of the groups, with ``groups``)."""

    edges: tuple[Edge, ...] = ()
    route_flows: tuple[float, ...] = ()


def route_edges(routes: Sequence[CandidatePath]) -> list[Edge]:
    """Every edge some route uses, sorted."""
    return sorted({e for r in routes for e in itertools.pairwise(r.regions)})


class MulticastModel(PathModel):
    """``PathModel`` over edges, plus route flows per destination (module docstring)."""

    def __init__(
        self,
        problem: Problem,
        routes: Sequence[CandidatePath],
        groups: Sequence[int] | None = None,
        **kw: Any,
    ) -> None:
        self.routes = list(routes)
        self.per_destination = groups is None
        self.groups = list(range(len(self.routes)) if groups is None else groups)
        self.edges = route_edges(self.routes)
        pseudo = [CandidatePath(-1, e, problem.price(*e)) for e in self.edges]
        super().__init__(problem, pseudo, **kw)

    def _build(self, fixed_vms: Mapping[str, float] | None) -> None:
        super()._build(fixed_vms)  # rows on F_e; the demand rows are still empty
        s, inf = self.solver, math.inf
        count = max(self.groups, default=-1) + 1
        self.route_vars = [s.NumVar(0.0, inf, f"g{i}") for i in range(count)]
        index = {e: i for i, e in enumerate(self.edges)}
        members: dict[tuple[int, Edge], set[int]] = defaultdict(set)
        for route, g in zip(self.routes, self.groups, strict=True):
            self.demand[route.commodity].SetCoefficient(self.route_vars[g], 1.0)
            key = route.commodity if self.per_destination else -1  # max per destination, or sum
            for e in itertools.pairwise(route.regions):
                members[(key, e)].add(g)
        for (_, e), rows in members.items():  # F_e >= this destination's flow on e
            row = s.Constraint(-inf, 0.0)
            for i in rows:
                row.SetCoefficient(self.route_vars[i], 1.0)
            row.SetCoefficient(self.flows[index[e]], -1.0)

    def set_least_source(self, gbps: float, usd_times_gbps: float) -> None:
        """The tie-break stage (``solve.least_source``): deliver exactly ``gbps`` at a cost of at
        most ``usd_times_gbps / gbps`` per run and minimise what the source sends.

        Built on a min-cost model: ``set_floor``'s objective (``T * cost``, linear at a fixed
        ``T``) becomes a row, and the objective the source's edge loads.
        """
        self.set_floor(gbps)
        objective = self.solver.Objective()
        row = self.solver.Constraint(-math.inf, usd_times_gbps)
        for var in self.solver.variables():
            coef = objective.GetCoefficient(var)
            if coef:
                row.SetCoefficient(var, coef)
                objective.SetCoefficient(var, 0.0)
        for var, (u, _) in zip(self.flows, self.edges, strict=True):
            if u == self.problem.src:
                objective.SetCoefficient(var, 1.0)
        objective.SetMinimization()

    def solve(self) -> MulticastSolution | None:
        base = super().solve()
        if base is None:
            return None
        return MulticastSolution(
            status=base.status,
            gbps=base.gbps,
            path_flows=base.path_flows,
            vms=base.vms,
            objective=base.objective,
            best_bound=base.best_bound,
            seconds=base.seconds,
            edges=tuple(self.edges),
            route_flows=tuple(max(0.0, g.solution_value()) for g in self.route_vars),
        )
