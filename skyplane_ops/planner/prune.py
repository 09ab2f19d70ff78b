"""Exact pruning of dominated relays (one destination, at most one relay per path).

With one destination ``d`` and paths ``s -> r -> d``, relay ``r`` only appears on its own path
and is described per Gbps of its flow by: egress price ``pi_r = p(s,r) + p(r,d)``, source
connections ``a_r = c / grid[s,r]``, destination connections ``b_r = c / grid[r,d]`` (plus
one unit of source egress and destination ingress, the same for every relay), and by its VMs:
Gbps per VM ``kappa_r = min(I_r, E_r, M grid[s,r] / c, M grid[r,d] / c)``, price ``k_r`` and
limit ``L_r``. (Connection figures are per edge: ``a_r = 1 / r[s, r]``, and a VM pair's rate
is capped by saturation, see ``formulation``.) Say ``r'`` *dominates* ``r`` when
``pi' <= pi, a' <= a, b' <= b, kappa' >= kappa, k' <= k`` (ties broken by a fixed order so
the relation is a strict order).

Exchange argument. Moving ``j`` VMs and up to ``j * kappa_r`` Gbps from ``r`` to a dominator
``r'`` with ``j`` free VM slots keeps every constraint (it uses no more source/destination
connections, needs no more VMs) and costs no more, so it never makes a plan worse. Take an
optimal plan with no wasted VMs (``N_r = ceil(f_r / kappa_r)``) in which no such move is
possible. If it used ``r``, every dominator ``r'`` would be full, ``N_r' = L_r'``, hence carry
``f_r' > (L_r' - 1) kappa_r'``. All relay flow is at most ``T``, so if
``sum_{r' dominates r} (L_r' - 1) kappa_r' >= T_upper`` (an upper bound on ``T``), ``r`` is
unused: dropping it keeps an optimal plan, for the MILP and (a fortiori) the LP relaxation.

Moving flow onto ``r'`` must not break rows that involve other regions' VMs: a relay whose
edges have a binding saturation row (``F <= s * N_src``) or a region-pair cap never counts
as a dominator (it may still be dominated: moving flow off it only relaxes its rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import Problem


def prune_dominated_relays(
    problem: Problem, paths: Sequence[CandidatePath], t_upper: float
) -> list[CandidatePath]:
    """``paths`` without the relays the module docstring proves unnecessary."""
    if len(problem.dsts) != 1 or problem.max_relays != 1:
        return list(paths)
    src, dst = problem.src, problem.dsts[0]
    relay_paths = [p for p in paths if len(p.regions) == 3]
    if len(relay_paths) < 2:
        return list(paths)
    rows = []
    can_dominate = []
    for path in relay_paths:
        r = path.regions[1]
        spec = problem.regions[r]
        a, b = problem.conns_per_gbps(src, r), problem.conns_per_gbps(r, dst)
        kappa = min(
            spec.ingress_cap_gbps,
            spec.egress_cap_gbps,
            problem.vm_pair_gbps(src, r),
            problem.vm_pair_gbps(r, dst),
        )
        rows.append((path.usd_per_gb, a, b, -kappa, spec.vm_usd_per_hour))
        plain = all(
            not problem.sat_binds(*e) and not math.isfinite(problem.rates(*e).region_cap_gbps)
            for e in ((src, r), (r, dst))
        )
        can_dominate.append(plain)
    # Plain Python, not numpy: even at 120 relays this is a few ms, and importing numpy only
    # for it cost every plan (every ``cp``) 0.1-0.3 s.
    slack = [
        (problem.regions[p.regions[1]].max_vms - 1) * -row[3] if ok else 0.0
        for p, row, ok in zip(relay_paths, rows, can_dominate, strict=True)
    ]
    n = len(relay_paths)
    # covered[j]: sum of (L-1) kappa over the relays dominating j (no worse in every column,
    # smaller is better; identical rows: the lower index dominates).
    covered = [0.0] * n
    for i in range(n):
        si = slack[i]
        if not si:
            continue
        row_i = rows[i]
        p0, a0, b0, k0, v0 = row_i
        # Unrolled column tests (this pair loop is most of a two-region plan's time).
        for j, row_j in enumerate(rows):
            p1, a1, b1, k1, v1 = row_j
            if (
                p0 <= p1
                and a0 <= a1
                and b0 <= b1
                and k0 <= k1
                and v0 <= v1
                and i != j
                and (i < j or row_i != row_j)
            ):
                covered[j] += si
    keep = [c < t_upper * (1 + 1e-9) + 1e-9 for c in covered]
    kept = {p.regions for p, k in zip(relay_paths, keep, strict=True) if k}
    return [p for p in paths if len(p.regions) != 3 or p.regions in kept]
