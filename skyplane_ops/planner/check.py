"""Independent check of a plan against its problem: every rule of the model, re-derived from
the plan's paths and hops (not from the solver), so tests and callers can trust a plan.

``capacity_violations`` holds the rules on edges, regions and costs given each edge's flow;
the unicast check (``plan_violations``) and the multicast one (``multicast.check``) differ
only in how the paths make those flows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.problem import BITS_PER_BYTE, Edge, Problem


def plan_violations(problem: Problem, plan: TransferPlan, rel_tol: float = 1e-5) -> list[str]:
    """Every broken rule, as text; an empty list means the plan is valid for the problem."""
    bad: list[str] = []
    t = plan.predicted_gbps
    slack = rel_tol * max(1.0, t)
    # Paths: each destination receives exactly T, shares add up to 1.
    edge_flow: dict[Edge, float] = defaultdict(float)
    for dst in problem.dsts:
        mine = [p for p in plan.paths if p.regions[-1] == dst]
        total = sum(p.gbps for p in mine)
        if abs(total - t) > slack:
            bad.append(f"{dst} receives {total:.6g} Gbps, not {t:.6g}")
        if abs(sum(p.share for p in mine) - 1.0) > rel_tol * 10:
            bad.append(f"shares to {dst} add up to {sum(p.share for p in mine):.6g}")
    for path in plan.paths:
        if path.regions[0] != problem.src or len(set(path.regions)) != len(path.regions):
            bad.append(f"path {path.regions} does not start at the source or repeats a region")
        if len(path.regions) - 2 > problem.max_relays:
            bad.append(f"path {path.regions} has more than {problem.max_relays} relays")
        for u, v in zip(path.regions, path.regions[1:], strict=False):
            edge_flow[(u, v)] += path.gbps
    hops = {(h.src, h.dst): h for h in plan.hops}
    if set(hops) != set(edge_flow):
        bad.append("hops do not match the edges of the paths")
    for (u, v), f in edge_flow.items():
        hop = hops.get((u, v))
        if hop is not None and abs(hop.gbps - f) > slack:
            bad.append(f"hop {u}->{v} carries {hop.gbps:.6g}, paths say {f:.6g}")
    # Conservation.
    net: dict[str, float] = defaultdict(float)
    for (u, v), f in edge_flow.items():
        net[u] += f
        net[v] -= f
    for u in set(net) | {problem.src, *problem.dsts}:
        want = len(problem.dsts) * t if u == problem.src else -t if u in problem.dsts else 0.0
        if abs(net[u] - want) > slack * len(problem.dsts):
            bad.append(f"flow not conserved at {u}: out - in = {net[u]:.6g}, expected {want:.6g}")
    return bad + capacity_violations(problem, plan, edge_flow, rel_tol)


def capacity_violations(
    problem: Problem, plan: TransferPlan, flows: Mapping[Edge, float], rel_tol: float = 1e-5
) -> list[str]:
    """The rules on hops (whole connections, saturation, region-pair caps), on regions (VMs,
    egress/ingress caps, connections per VM) and the plan's costs, given each edge's flow."""
    bad: list[str] = []
    t = plan.predicted_gbps

    def over(value: float, limit: float, what: str) -> None:
        if value > limit + rel_tol * max(1.0, abs(limit)):
            bad.append(f"{what}: {value:.6g} > {limit:.6g}")

    hops = {(h.src, h.dst): h for h in plan.hops}
    egress: dict[str, float] = defaultdict(float)
    ingress: dict[str, float] = defaultdict(float)
    conn_out: dict[str, float] = defaultdict(float)
    conn_in: dict[str, float] = defaultdict(float)
    for (u, v), f in flows.items():
        hop = hops.get((u, v))
        rates = problem.rates(u, v)
        if hop is not None:
            if hop.connections != int(hop.connections) or hop.connections < 1:
                bad.append(f"hop {u}->{v} has {hop.connections} connections")
            over(f, hop.connections / rates.conns_per_gbps, f"hop {u}->{v} flow vs its conns")
        pairs = min(plan.vms.get(u, 0), plan.vms.get(v, 0))
        over(f, rates.sat_gbps * pairs, f"hop {u}->{v} flow vs saturation of {pairs} VM pairs")
        over(f, rates.region_cap_gbps, f"hop {u}->{v} flow vs the region pair's cap")
        egress[u] += f
        ingress[v] += f
        whole = hop.connections if hop is not None else f * problem.conns_per_gbps(u, v)
        conn_out[u] += whole
        conn_in[v] += whole
    m = float(problem.max_conns_per_vm)
    for u in set(egress) | set(ingress) | {problem.src, *problem.dsts}:
        spec, n = problem.regions[u], plan.vms.get(u, 0)
        if (u == problem.src or u in problem.dsts) and n < 1:
            bad.append(f"{u} needs a VM")
        over(n, spec.max_vms, f"VMs in {u}")
        over(egress[u], spec.egress_cap_gbps * n, f"egress of {u}")
        over(ingress[u], spec.ingress_cap_gbps * n, f"ingress of {u}")
        if conn_out[u] > m * n:  # whole connections: no tolerance
            bad.append(f"connections out of {u}: {conn_out[u]:g} > {m * n:g}")
        if conn_in[u] > m * n:
            bad.append(f"connections into {u}: {conn_in[u]:g} > {m * n:g}")
    if t > 0:  # cost accounting
        per_gb = sum(problem.price(u, v) * f / t for (u, v), f in flows.items())
        egress_usd = problem.volume_gb * per_gb
        seconds = BITS_PER_BYTE * problem.volume_gb / t + problem.provisioning_seconds
        vm_usd = (
            sum(problem.regions[u].vm_usd_per_second * n for u, n in plan.vms.items()) * seconds
        )
        if abs(egress_usd - plan.egress_cost_usd) > 1e-6 * max(1.0, egress_usd):
            bad.append(f"egress cost {plan.egress_cost_usd:.6g} != {egress_usd:.6g}")
        if abs(vm_usd - plan.vm_cost_usd) > 1e-6 * max(1.0, vm_usd):
            bad.append(f"VM cost {plan.vm_cost_usd:.6g} != {vm_usd:.6g}")
    return bad
