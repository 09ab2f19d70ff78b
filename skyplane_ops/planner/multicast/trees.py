"""A multicast plan as the data plane runs it: the data split into partitions, each sent down
one distribution tree (every region forwards a chunk of the partition to its next hops).

The planner's model gives each destination its own route flows and bills an edge for the
largest of them (``model``). To route without coding, every chunk must take one tree: lay each
destination's routes side by side on ``[0, 1)`` of the data (routes with the same first hops
next to each other, so destinations that share an edge share it over the same slice), cut
``[0, 1)`` at every route boundary, and in each slice join the routes the destinations take
there into a tree (a region already reached keeps its first parent, so nothing arrives twice,
and a branch that then leads to no destination is cut).
``excess`` tells how far the trees' edge loads exceed the plan's (0 when they fit, as for
chains and shared relays); the data plane sends each chunk down the tree of its slice.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.planner.plan import TransferPlan

#: Slices thinner than this share of the data are merged into their neighbour.
MIN_SHARE = 1e-6


@dataclass(frozen=True)
class Tree:
    """One partition: its share of the data and, per region, the regions it forwards to."""

    share: float
    next_hops: Mapping[str, tuple[str, ...]]
    dsts: tuple[str, ...] = field(default=())

    def edges(self) -> list[tuple[str, str]]:
        return [(u, v) for u, vs in self.next_hops.items() for v in vs]

    def to_dict(self) -> dict[str, Any]:
        return {"share": self.share, "next_hops": {u: list(v) for u, v in self.next_hops.items()}}

    def job_tree(self) -> dict[str, Any]:
        """The tree as a gateway job spec names it (``gateway_agent.job.tree``)."""
        return {"next": {u: list(v) for u, v in self.next_hops.items()}, "sinks": list(self.dsts)}


def _lanes(plan: TransferPlan, dst: str) -> list[tuple[float, float, tuple[str, ...]]]:
    """(start, end, route) of the destination's routes laid on [0, 1) in a canonical order."""
    routes = sorted((p.regions, p.share) for p in plan.paths if p.regions[-1] == dst)
    total = sum(share for _, share in routes) or 1.0
    out, at = [], 0.0
    for regions, share in routes:
        out.append((at, at + share / total, regions))
        at += share / total
    return out


def multicast_trees(plan: TransferPlan) -> list[Tree]:
    """The partitions and their trees (module docstring); shares add up to 1."""
    lanes = {d: _lanes(plan, d) for d in plan.dsts}
    cuts = sorted({0.0, 1.0, *(x for ls in lanes.values() for a, b, _ in ls for x in (a, b))})
    trees: list[Tree] = []
    for lo, hi in itertools.pairwise(cuts):
        if hi - lo < MIN_SHARE:
            continue
        mid = (lo + hi) / 2
        parent: dict[str, str] = {}
        for dst in plan.dsts:
            route = next((r for a, b, r in lanes[dst] if a <= mid < b), lanes[dst][-1][2])
            for u, v in itertools.pairwise(route):
                if v not in parent and v != plan.src:
                    parent[v] = u
        needed: set[str] = set()  # regions on the way to some destination (no dead ends)
        for dst in plan.dsts:
            v = dst
            while v in parent and v not in needed:
                needed.add(v)
                v = parent[v]
        nxt: dict[str, list[str]] = {}
        for v, u in parent.items():
            if v in needed:
                nxt.setdefault(u, []).append(v)
        hops: dict[str, tuple[str, ...]] = {}
        order = [plan.src]  # from the source down, as the data goes
        for u in order:
            if u in nxt:
                hops[u] = tuple(sorted(nxt[u]))
                order.extend(hops[u])
        if trees and trees[-1].next_hops == hops:
            last = trees.pop()
            trees.append(Tree(last.share + hi - lo, hops, plan.dsts))
        else:
            trees.append(Tree(hi - lo, hops, plan.dsts))
    return trees


def tree_loads(plan: TransferPlan, trees: list[Tree]) -> dict[tuple[str, str], float]:
    """Gbps each edge carries when the trees carry the plan's throughput."""
    out: dict[tuple[str, str], float] = {}
    for tree in trees:
        for e in tree.edges():
            out[e] = out.get(e, 0.0) + tree.share * plan.predicted_gbps
    return out


def excess(plan: TransferPlan, trees: list[Tree]) -> float:
    """The largest relative overload of an edge by the trees against the plan's hops."""
    planned = {(h.src, h.dst): h.gbps for h in plan.hops}
    worst = 0.0
    for e, load in tree_loads(plan, trees).items():
        cap = planned.get(e, 0.0)
        worst = max(worst, (load - cap) / cap if cap > 0 else float("inf"))
    return worst
