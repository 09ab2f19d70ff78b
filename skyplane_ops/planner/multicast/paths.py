"""Candidate routes of a multicast plan: the unicast paths plus branches through destinations.

A destination that already holds the data is a free relay for the others (it has gateways
anyway), so a route to ``d`` may pass through other destinations, in any order, and through
one other relay region (with ``max_relays >= 1``). Only routes whose every edge has throughput
are kept; ``build_problem`` keeps the edges into destinations, so chains such as
``src -> r -> d1 -> d2`` are offered.
"""

from __future__ import annotations

import itertools

from skyplane_ops.planner.paths import CandidatePath, candidate_paths
from skyplane_ops.planner.problem import Problem


def _orders(others: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every ordered selection of the other destinations (the empty one included)."""
    out: list[tuple[str, ...]] = []
    for n in range(len(others) + 1):
        out.extend(itertools.permutations(others, n))
    return out


def multicast_paths(problem: Problem) -> list[CandidatePath]:
    """The unicast candidates, and routes that pass through other destinations on the way."""
    seen = {(p.commodity, p.regions) for p in candidate_paths(problem)}
    out = list(candidate_paths(problem))
    src, dsts = problem.src, problem.dsts
    relays = [
        r
        for r, spec in problem.regions.items()
        if r != src and r not in dsts and spec.max_vms > 0 and spec.egress_cap_gbps > 0
    ]

    def add(k: int, regions: tuple[str, ...]) -> None:
        if (k, regions) in seen:
            return
        edges = list(itertools.pairwise(regions))
        if all(problem.gbps(u, v) > 0 for u, v in edges):
            seen.add((k, regions))
            price = sum(problem.price(u, v) for u, v in edges)
            out.append(CandidatePath(k, regions, price))

    for k, dst in enumerate(dsts):
        others = tuple(d for d in dsts if d != dst)
        for order in _orders(others):
            if not order:
                continue  # the unicast candidates already cover these
            chain = (src, *order, dst)
            add(k, chain)
            if problem.max_relays < 1:
                continue
            for pos in range(1, len(chain)):  # one relay on any hop of the chain
                for r in relays:
                    add(k, (*chain[:pos], r, *chain[pos:]))
    return out
