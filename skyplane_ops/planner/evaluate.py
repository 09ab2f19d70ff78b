"""Turn a solver ``Solution`` into a ``TransferPlan``: trim VMs, price it, round connections.

Kept apart from the model so baselines, the LP rounding and the MILP share one cost formula.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.planner.problem import Problem

#: Flows below this fraction of the throughput are solver noise and are dropped.
FLOW_TOL = 1e-7


def hop_connections(problem: Problem, u: str, v: str, gbps: float) -> int:
    """Whole connections that carry ``gbps`` on the edge (at least one)."""
    return max(1, math.ceil(gbps * problem.conns_per_gbps(u, v) - 1e-6))


def needed_vms(
    problem: Problem, edge_flow: Mapping[tuple[str, str], float], tol: float = 1e-6
) -> dict[str, int]:
    """The fewest VMs per region that carry ``edge_flow`` within every per-VM cap, with each
    hop's connections rounded up to whole connections."""
    out: dict[str, float] = {}
    conn_out: dict[str, float] = {}
    egress: dict[str, float] = {}
    conn_in: dict[str, float] = {}
    ingress: dict[str, float] = {}
    pair: dict[str, float] = {}
    for (u, v), f in edge_flow.items():
        conns = float(hop_connections(problem, u, v, f))
        egress[u] = egress.get(u, 0.0) + f
        conn_out[u] = conn_out.get(u, 0.0) + conns
        ingress[v] = ingress.get(v, 0.0) + f
        conn_in[v] = conn_in.get(v, 0.0) + conns
        sat = f / problem.rates(u, v).sat_gbps
        pair[u] = max(pair.get(u, 0.0), sat)
        pair[v] = max(pair.get(v, 0.0), sat)
    m = float(problem.max_conns_per_vm)
    for u in {*egress, *ingress, problem.src, *problem.dsts}:
        spec = problem.regions[u]
        ratios = [1.0 if u == problem.src or u in problem.dsts else 0.0, pair.get(u, 0.0)]
        for load, cap in (
            (egress.get(u, 0.0), spec.egress_cap_gbps),
            (ingress.get(u, 0.0), spec.ingress_cap_gbps),
            (conn_out.get(u, 0.0), m),
            (conn_in.get(u, 0.0), m),
        ):
            if load > 0:
                ratios.append(load / cap if cap > 0 else math.inf)
        out[u] = max(ratios)
    return {u: max(0, math.ceil(r - tol)) for u, r in out.items() if r > tol}


def costs(
    problem: Problem, gbps: float, usd_per_gb_sent: float, vms: Mapping[str, int]
) -> tuple[float, float]:
    """(egress $, VM $) of moving the volume at ``gbps``; ``usd_per_gb_sent`` = sum share*price."""
    egress = problem.volume_gb * usd_per_gb_sent
    seconds = problem.transfer_seconds(gbps)
    vm = sum(problem.regions[u].vm_usd_per_second * n for u, n in vms.items()) * seconds
    return egress, vm


def plan_hops(problem: Problem, flows: Mapping[tuple[str, str], float]) -> list[Hop]:
    """One hop per edge at its flow, in whole connections, with its rates' provenance."""
    hops = []
    for (u, v), f in sorted(flows.items()):
        source, when = problem.link_source(u, v)
        conns = hop_connections(problem, u, v, f)
        hops.append(Hop(src=u, dst=v, gbps=f, connections=conns, source=source, measured_at=when))
    return hops


def plan_details(
    problem: Problem, gbps: float, candidates: int, details: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A plan's ``details``: the problem's settings, then its own details, then ``details``."""
    info: dict[str, Any] = {
        "objective": problem.objective,
        "bound": problem.bound,
        "volume_gb": problem.volume_gb,
        "transfer_seconds": problem.transfer_seconds(gbps) if gbps > 0 else math.inf,
        "max_relays": problem.max_relays,
        "provisioning_seconds": problem.provisioning_seconds,
        "candidate_paths": candidates,
    }
    info.update(problem.details)
    info.update(details or {})
    return info


def build_plan(
    problem: Problem,
    paths: Sequence[CandidatePath],
    path_flows: Sequence[float],
    gbps: float,
    *,
    mode: str,
    status: str,
    seconds: float,
    details: Mapping[str, Any] | None = None,
) -> TransferPlan:
    """Assemble the plan with the fewest VMs that carry the flows (never more than solved)."""
    plan_paths: list[PlanPath] = []
    edge_flow: dict[tuple[str, str], float] = {}
    usd_per_gb_sent = 0.0
    for path, f in zip(paths, path_flows, strict=True):
        if f <= FLOW_TOL * max(gbps, 1e-12):
            continue
        plan_paths.append(PlanPath(regions=path.regions, share=f / gbps, gbps=f))
        usd_per_gb_sent += f / gbps * path.usd_per_gb
        for u, v in zip(path.regions, path.regions[1:], strict=False):
            edge_flow[(u, v)] = edge_flow.get((u, v), 0.0) + f
    fleet = needed_vms(problem, edge_flow)
    hops = plan_hops(problem, edge_flow)
    egress_usd, vm_usd = costs(problem, gbps, usd_per_gb_sent, fleet)
    info = plan_details(problem, gbps, len(paths), details)
    plan_paths.sort(key=lambda p: (problem.dsts.index(p.regions[-1]), -p.gbps))
    return TransferPlan(
        src=problem.src,
        dsts=problem.dsts,
        volume_gb=problem.volume_gb,
        mode=mode,
        paths=plan_paths,
        hops=hops,
        vms=dict(sorted(fleet.items())),
        predicted_gbps=gbps,
        egress_cost_usd=egress_usd,
        vm_cost_usd=vm_usd,
        solver_status=status,
        solve_seconds=seconds,
        details=info,
    )
