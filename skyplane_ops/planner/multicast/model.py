"""The multicast MILP: per-destination flows on routes, and each edge paid once.

The standard multicast relaxation (as in Cloudcast, NSDI '24): route flows ``g_p`` per
destination (``sum_{p to d} g_p = T`` for every destination ``d``), and an edge variable
``F_e >= sum_{p to d through e} g_p`` for every destination ``d``, so an edge shared by
several destinations carries (and is billed for) the data once: the largest of their flows,
not the sum. Every capacity, connection, saturation and price row of the unicast model
(``formulation``) is written on ``F_e`` instead of a sum of path flows.

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
    ``route_flows`` the per-destination flows of the routes."""

    edges: tuple[Edge, ...] = ()
    route_flows: tuple[float, ...] = ()


def route_edges(routes: Sequence[CandidatePath]) -> list[Edge]:
    """Every edge some route uses, sorted."""
    return sorted({e for r in routes for e in itertools.pairwise(r.regions)})


class MulticastModel(PathModel):
    """``PathModel`` over edges, plus route flows per destination (module docstring)."""

    def __init__(self, problem: Problem, routes: Sequence[CandidatePath], **kw: Any) -> None:
        self.routes = list(routes)
        self.edges = route_edges(self.routes)
        pseudo = [CandidatePath(-1, e, problem.price(*e)) for e in self.edges]
        super().__init__(problem, pseudo, **kw)

    def _build(self, fixed_vms: Mapping[str, float] | None) -> None:
        super()._build(fixed_vms)  # rows on F_e; the demand rows are still empty
        s, inf = self.solver, math.inf
        self.route_vars = [s.NumVar(0.0, inf, f"g{i}") for i in range(len(self.routes))]
        index = {e: i for i, e in enumerate(self.edges)}
        members: dict[tuple[int, Edge], list[int]] = defaultdict(list)
        for i, route in enumerate(self.routes):
            self.demand[route.commodity].SetCoefficient(self.route_vars[i], 1.0)
            for e in itertools.pairwise(route.regions):
                members[(route.commodity, e)].append(i)
        for (_, e), rows in members.items():  # F_e >= this destination's flow on e
            row = s.Constraint(-inf, 0.0)
            for i in rows:
                row.SetCoefficient(self.route_vars[i], 1.0)
            row.SetCoefficient(self.flows[index[e]], -1.0)

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
