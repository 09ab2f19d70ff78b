"""Independent check of a multicast plan: every rule re-derived from its routes and hops.

As ``planner.check`` for unicast plans (whose ``capacity_violations`` it calls for the hops,
regions and costs), but an edge carries at least the *largest* flow any one destination sends
over it (data forwarded once per edge; a plan solved on trees carries the sum of its trees,
which may be more): an edge's flow is its hop's.
"""

from __future__ import annotations

from collections import defaultdict

from skyplane_ops.planner.check import capacity_violations
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import Edge, Problem


def multicast_violations(problem: Problem, plan: TransferPlan, rel_tol: float = 1e-5) -> list[str]:
    """Every broken rule, as text; an empty list means the plan is valid for the problem."""
    bad: list[str] = []
    t = plan.predicted_gbps
    slack = rel_tol * max(1.0, t)
    per_dst: dict[tuple[str, Edge], float] = defaultdict(float)
    for dst in problem.dsts:
        mine = [p for p in plan.paths if p.regions[-1] == dst]
        if abs(sum(p.gbps for p in mine) - t) > slack:
            bad.append(f"{dst} receives {sum(p.gbps for p in mine):.6g} Gbps, not {t:.6g}")
        for path in mine:
            if path.regions[0] != problem.src or len(set(path.regions)) != len(path.regions):
                bad.append(f"path {path.regions} does not start at the source or repeats")
            for e in zip(path.regions, path.regions[1:], strict=False):
                per_dst[(dst, e)] += path.gbps
    load: dict[Edge, float] = defaultdict(float)
    for (_, e), f in per_dst.items():
        load[e] = max(load[e], f)
    hops = {(h.src, h.dst): h for h in plan.hops}
    if set(hops) != set(load):
        bad.append("hops do not match the edges of the routes")
    for e, need in load.items():
        if e in hops and hops[e].gbps < need - slack:
            bad.append(f"hop {e[0]}->{e[1]} carries {hops[e].gbps:.6g}, routes need {need:.6g}")
    flows = {e: hops[e].gbps if e in hops else f for e, f in load.items()}
    return bad + capacity_violations(problem, plan, flows, rel_tol)
