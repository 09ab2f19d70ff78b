"""Independent check of a multicast plan: every rule re-derived from its routes and hops.

As ``planner.check`` for unicast plans, but an edge carries at least the *largest* flow any
one destination sends over it (data forwarded once per edge; a plan solved on trees carries
the sum of its trees, which may be more), and the caps and costs are those of the hops.
"""

from __future__ import annotations

from collections import defaultdict

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import BITS_PER_BYTE, Edge, Problem


def multicast_violations(problem: Problem, plan: TransferPlan, rel_tol: float = 1e-5) -> list[str]:
    """Every broken rule, as text; an empty list means the plan is valid for the problem."""
    bad: list[str] = []
    t = plan.predicted_gbps
    slack = rel_tol * max(1.0, t)

    def over(value: float, limit: float, what: str) -> None:
        if value > limit + rel_tol * max(1.0, abs(limit)):
            bad.append(f"{what}: {value:.6g} > {limit:.6g}")

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
    egress: dict[str, float] = defaultdict(float)
    ingress: dict[str, float] = defaultdict(float)
    conn_out: dict[str, int] = defaultdict(int)
    conn_in: dict[str, int] = defaultdict(int)
    for (u, v), need in load.items():
        rates, hop = problem.rates(u, v), hops.get((u, v))
        f = need if hop is None else hop.gbps
        if hop is not None:
            if hop.gbps < need - slack:
                bad.append(f"hop {u}->{v} carries {hop.gbps:.6g}, routes need {need:.6g}")
            over(f, hop.connections / rates.conns_per_gbps, f"hop {u}->{v} flow vs its conns")
            conn_out[u] += hop.connections
            conn_in[v] += hop.connections
        pairs = min(plan.vms.get(u, 0), plan.vms.get(v, 0))
        over(f, rates.sat_gbps * pairs, f"hop {u}->{v} flow vs saturation of {pairs} VM pairs")
        over(f, rates.region_cap_gbps, f"hop {u}->{v} flow vs the region pair's cap")
        egress[u] += f
        ingress[v] += f
    m = problem.max_conns_per_vm
    for u in {*egress, *ingress, problem.src, *problem.dsts}:
        spec, n = problem.regions[u], plan.vms.get(u, 0)
        if (u == problem.src or u in problem.dsts) and n < 1:
            bad.append(f"{u} needs a VM")
        over(n, spec.max_vms, f"VMs in {u}")
        over(egress[u], spec.egress_cap_gbps * n, f"egress of {u}")
        over(ingress[u], spec.ingress_cap_gbps * n, f"ingress of {u}")
        if conn_out[u] > m * n or conn_in[u] > m * n:
            bad.append(f"connections of {u}: {conn_out[u]}/{conn_in[u]} > {m * n}")
    if t > 0:
        sent = {e: hops[e].gbps if e in hops else f for e, f in load.items()}
        egress_usd = problem.volume_gb * sum(problem.price(*e) * f / t for e, f in sent.items())
        seconds = BITS_PER_BYTE * problem.volume_gb / t + problem.provisioning_seconds
        vm_usd = sum(problem.regions[u].vm_usd_per_second * n for u, n in plan.vms.items())
        if abs(egress_usd - plan.egress_cost_usd) > 1e-6 * max(1.0, egress_usd):
            bad.append(f"egress cost {plan.egress_cost_usd:.6g} != {egress_usd:.6g}")
        if abs(vm_usd * seconds - plan.vm_cost_usd) > 1e-6 * max(1.0, vm_usd * seconds):
            bad.append(f"VM cost {plan.vm_cost_usd:.6g} != {vm_usd * seconds:.6g}")
    return bad
