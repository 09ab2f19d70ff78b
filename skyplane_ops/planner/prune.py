"""Exact pruning of dominated relays (one destination, at most one relay per path).

With one destination ``d`` and paths ``s -> r -> d``, relay ``r`` only appears on its own path
and is described per Gbps of its flow by: egress price ``pi_r = p(s,r) + p(r,d)``, source
connections ``a_r = c / grid[s,r]``, destination connections ``b_r = c / grid[r,d]`` (plus
one unit of source egress and destination ingress, the same for every relay), and by its VMs:
Gbps per VM ``kappa_r = min(I_r, E_r, M grid[s,r] / c, M grid[r,d] / c)``, price ``k_r`` and
limit ``L_r``. Say ``r'`` *dominates* ``r`` when ``pi' <= pi, a' <= a, b' <= b,
kappa' >= kappa, k' <= k`` (ties broken by a fixed order so the relation is a strict order).

Exchange argument. Moving ``j`` VMs and up to ``j * kappa_r`` Gbps from ``r`` to a dominator
``r'`` with ``j`` free VM slots keeps every constraint (it uses no more source/destination
connections, needs no more VMs) and costs no more, so it never makes a plan worse. Take an
optimal plan with no wasted VMs (``N_r = ceil(f_r / kappa_r)``) in which no such move is
possible. If it used ``r``, every dominator ``r'`` would be full, ``N_r' = L_r'``, hence carry
``f_r' > (L_r' - 1) kappa_r'``. All relay flow is at most ``T``, so if
``sum_{r' dominates r} (L_r' - 1) kappa_r' >= T_upper`` (an upper bound on ``T``), ``r`` is
unused: dropping it keeps an optimal plan, for the MILP and (a fortiori) the LP relaxation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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
    c, m = float(problem.conns_measured), float(problem.max_conns_per_vm)
    rows = []
    for path in relay_paths:
        r = path.regions[1]
        spec = problem.regions[r]
        g_in, g_out = problem.gbps(src, r), problem.gbps(r, dst)
        kappa = min(spec.ingress_cap_gbps, spec.egress_cap_gbps, m * g_in / c, m * g_out / c)
        rows.append((path.usd_per_gb, c / g_in, c / g_out, -kappa, spec.vm_usd_per_hour))
    worse = np.asarray(rows)  # every column: smaller is better
    slack = np.asarray(
        [
            (problem.regions[p.regions[1]].max_vms - 1) * -row[3]
            for p, row in zip(relay_paths, rows, strict=True)
        ]
    )
    n = len(relay_paths)
    # dominates[i, j]: relay i dominates relay j (no worse everywhere; ties -> lower index).
    no_worse = np.all(worse[:, None, :] <= worse[None, :, :], axis=2)
    equal = np.all(worse[:, None, :] == worse[None, :, :], axis=2)
    order = np.arange(n)
    dominates = no_worse & (~equal | (order[:, None] < order[None, :]))
    np.fill_diagonal(dominates, False)
    covered = slack @ dominates  # for each j: sum of (L-1) kappa over its dominators
    keep = covered < t_upper * (1 + 1e-9) + 1e-9
    kept = {p.regions for p, k in zip(relay_paths, keep, strict=True) if k}
    return [p for p in paths if len(p.regions) != 3 or p.regions in kept]
