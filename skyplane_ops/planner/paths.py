"""Candidate overlay paths: the exact reduction that keeps the MILP small.

The paper's arc formulation has a flow and a connection variable per ordered region pair
(~12k on the default catalog). Any optimal arc flow decomposes into source-to-destination
paths, so a *path* formulation is exact when it offers every path the model allows. Our
model allows paths with at most ``Problem.max_relays`` relay regions (default 1: direct plus
one relay, which is what the paper's example plans use; 2 is available and exact too, just
larger). For one relay this is ``1 + n`` paths per destination instead of ``n^2`` arcs, and
the connection variables disappear: the smallest connection count that carries flow ``f``
on an edge is ``conns_measured * f / grid[u, v]`` (edge flow <= grid * conns / measured), so
substituting it into the per-region connection limit is exact.

A region never repeats on a path (a repeated region is a cycle, and removing a cycle frees
capacity and saves egress, so it never helps).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from skyplane_ops.planner.problem import Problem


@dataclass(frozen=True)
class CandidatePath:
    """One allowed path to destination ``dsts[commodity]``, with its egress $/GB."""

    commodity: int
    regions: tuple[str, ...]
    usd_per_gb: float


def _usable_relay(problem: Problem, region: str) -> bool:
    spec = problem.regions[region]
    return spec.max_vms > 0 and spec.egress_cap_gbps > 0 and spec.ingress_cap_gbps > 0


def candidate_paths(problem: Problem) -> list[CandidatePath]:
    """Every path with at most ``max_relays`` relays whose edges all have throughput."""
    src = problem.src
    relays = [r for r in problem.regions if r != src and _usable_relay(problem, r)]
    out: list[CandidatePath] = []

    def add(k: int, regions: tuple[str, ...]) -> None:
        edges = list(itertools.pairwise(regions))
        if all(problem.gbps(u, v) > 0 for u, v in edges):
            price = sum(problem.price(u, v) for u, v in edges)
            out.append(CandidatePath(k, regions, price))

    for k, dst in enumerate(problem.dsts):
        add(k, (src, dst))
        if problem.max_relays >= 1:
            first = [r for r in relays if r != dst and problem.gbps(src, r) > 0]
            for r in first:
                add(k, (src, r, dst))
            if problem.max_relays >= 2:
                second = [r for r in relays if r != dst and problem.gbps(r, dst) > 0]
                for r1 in first:
                    for r2 in second:
                        if r1 != r2:
                            add(k, (src, r1, r2, dst))
    return out
