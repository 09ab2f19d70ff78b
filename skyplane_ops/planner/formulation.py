"""The MILP of the Skyplane paper (§5), made link-aware, over candidate paths, built once and
re-solved cheaply.

Variables: ``f_p >= 0`` Gbps on each candidate path (see ``paths``), ``N_u`` integer VMs in
each region a path touches (``1 <= N`` at the source and destinations), and the throughput
``T`` that every destination receives (``sum_{p to d} f_p = T`` for each destination ``d``:
multi-destination transfers replicate the whole volume to each destination, no multicast).

**Link model.** Each edge ``e = (u, v)`` has a per-connection rate ``r_e`` (where connections
are the bottleneck), a saturation ``s_e`` (the most one VM pair carries with any number of
connections) and optionally a region-pair cap ``R_e`` (links that do not grow with VMs, as on
own networks). Carrying ``F_e`` Gbps takes ``F_e / r_e`` connections, and
``F_e <= s_e * min(N_u, N_v)``, ``F_e <= R_e``. So a VM spends connections only where they
are the bottleneck: a link full with a few connections leaves the rest of the VM's budget to
other links, and no plan predicts more on a link than it was measured to carry however large
``M`` is. With only the figure ``g_e`` at ``c`` connections, ``r_e = g_e / c`` and
``s_e = g_e``: the connection rows below then imply ``F_e <= s_e N`` whenever ``M <= c``, the
saturation rows are left out (``Problem.sat_binds``), and the model is exactly the paper's.

Per region ``u`` with VM caps ``E_u`` (egress), ``I_u`` (ingress), connection limit ``M`` per
VM::

    sum_{p leaving u}  f_p                       <= E_u * N_u
    sum_{p entering u} f_p                       <= I_u * N_u
    sum_{p leaving u}  f_p / r[u, next]          <= M * N_u     (connections out)
    sum_{p entering u} f_p / r[prev, u]          <= M * N_u     (connections in)
    N_u <= max_vms_u

and per edge where saturation binds (``s_e < M r_e``) or a region cap is given::

    F_e <= s_e * N_u,   F_e <= s_e * N_v,   F_e <= R_e          (F_e = sum_{p through e} f_p)

**Whole connections.** Connections are counts. Rounding each hop's ``F_e / r_e`` up can
exceed ``M * N_u`` by up to one per hop, so ``integer_conns`` adds the paper's integer
``C_e >= F_e / r_e`` per edge with ``sum_out C_e <= M N_u`` and ``sum_in C_e <= M N_v`` in
place of the two connection rows, and ``fixed_conns`` caps each edge at connections chosen
beforehand; ``solve`` uses them only when rounding overflows (see ``solve.solve_plan``).

Conservation at relays holds by construction of path flows. Cost for volume ``V`` (GB) at
``T`` Gbps with VM price ``k_u`` ($/s) and provisioning time ``t0``::

    cost(T) = V * sum_p (f_p / T) * price_p  +  sum_u k_u N_u (8 V / T + t0)

**Mode (a), min cost s.t. throughput = floor.** ``T`` is a constant, so ``T * cost`` is
linear: minimise ``V sum_p price_p f_p + sum_u k_u (8V + t0 T) N_u``; the cost is that / T.
``T >= floor`` is then solved by Dinkelbach steps on the ratio ``(T * cost) / T`` with
``set_ratio`` (see ``solve.solve_milp``): a faster plan can be cheaper, as VM time shrinks.

**Mode (b), max throughput s.t. cost <= C, one exact solve.** ``T`` is a variable; multiply
the cost constraint by ``T > 0``::

    V sum_p price_p f_p + 8 V sum_u k_u N_u + t0 * T * sum_u k_u N_u  <=  C * T

Everything is linear except ``t0 * T * K`` with ``K = sum_u k_u N_u`` (the fleet's $/s). VM
prices come in a few distinct values ``k_g`` (one per provider), so ``K = sum_g k_g n_g``
with integer ``n_g = sum_{u in g} N_u``. Write ``n_g = sum_j 2^j b_gj`` with binaries
``b_gj``; then ``T n_g = sum_j 2^j z_gj`` with ``z_gj = b_gj * T``, which is exact with the
linear constraints ``z_gj >= T - Tmax (1 - b_gj)``, ``z_gj >= 0`` (the upper McCormick
bounds are not needed: ``z`` only appears on the ``<=`` side, so the solver keeps it at its
lower bound, ``b_gj * T``). ``Tmax`` is the largest throughput at all VM limits (an LP). With
``t0 = 0`` the product vanishes and no binaries are added. ``T = 0`` is infeasible because
the source and destination hold at least one VM each, so dividing back by ``T`` is valid.
A tiny tie-break (relative weight ``EPS``) prefers the cheaper plan among equally fast ones.

In the LP relaxation the integrality of ``N`` and ``b`` is dropped; ``solve.py`` rounds.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from skyplane_ops.errors import PlanningError
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import BITS_PER_BYTE, DEFAULT_MIP_GAP, Problem

EPS = 1e-5
#: Relative optimality gap at which a MILP counts as solved (the target is 0.1%); the default
#: of ``Problem.mip_gap``.
MIP_GAP = DEFAULT_MIP_GAP
DEFAULT_MILP_SOLVER = "SCIP"
#: SCIP settings picked by measurement (benchmarks/planner.py): fewer root cut rounds; the
#: root LP of these models is already within ~1% and extra rounds cost more than branching.
#: SCIP must not catch Ctrl-C: it would swallow the user's SIGINT (it stops the solve and
#: returns its best plan), and the run would go on as if never interrupted.
SCIP_PARAMS = "separating/maxroundsroot = 3\nmisc/catchctrlc = FALSE"
DEFAULT_LP_SOLVER = "GLOP"


@dataclass(frozen=True)
class Solution:
    """A solved model: throughput, flow per candidate path, VMs per region (maybe fractional)."""

    status: str
    gbps: float
    path_flows: tuple[float, ...]
    vms: Mapping[str, float]
    objective: float
    best_bound: float
    seconds: float


@dataclass
class _Loads:
    """Per-region rows of (path index, coefficient) for the four capacity constraints."""

    egress: list[tuple[int, float]]
    ingress: list[tuple[int, float]]
    conn_out: list[tuple[int, float]]
    conn_in: list[tuple[int, float]]


def region_loads(problem: Problem, paths: Sequence[CandidatePath]) -> dict[str, _Loads]:
    loads: dict[str, _Loads] = {}
    for i, path in enumerate(paths):
        regions = path.regions
        for pos, u in enumerate(regions):
            rows = loads.setdefault(u, _Loads([], [], [], []))
            if pos + 1 < len(regions):
                rows.egress.append((i, 1.0))
                rows.conn_out.append((i, problem.conns_per_gbps(u, regions[pos + 1])))
            if pos > 0:
                rows.ingress.append((i, 1.0))
                rows.conn_in.append((i, problem.conns_per_gbps(regions[pos - 1], u)))
    return loads


def edge_paths(paths: Sequence[CandidatePath]) -> dict[tuple[str, str], list[int]]:
    """The candidate paths through each edge."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, path in enumerate(paths):
        for u, v in zip(path.regions, path.regions[1:], strict=False):
            out[(u, v)].append(i)
    return out


class PathModel:
    """One OR-Tools model of a problem; the bound (floor or ceiling) can change between solves."""

    def __init__(
        self,
        problem: Problem,
        paths: Sequence[CandidatePath],
        *,
        relax: bool = False,
        fixed_vms: Mapping[str, float] | None = None,
        tmax: float | None = None,
        solver: str | None = None,
        time_limit_s: float = 30.0,
        integer_conns: bool = False,
        fixed_conns: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.problem = problem
        self.paths = list(paths)
        self.mode = problem.objective
        self.continuous = relax or fixed_vms is not None
        self.integer_conns = integer_conns and not relax
        #: Whole connections per edge chosen beforehand (``solve.round_connections``): each
        #: edge carries at most ``C_e * r_e`` and the per-region connection rows go.
        self.fixed_conns = fixed_conns
        self.integral = not self.continuous or self.integer_conns
        name = solver or (DEFAULT_MILP_SOLVER if self.integral else DEFAULT_LP_SOLVER)
        created = pywraplp.Solver.CreateSolver(name)
        if created is None:
            raise PlanningError(f"OR-Tools solver {name!r} is not available")
        self.solver: pywraplp.Solver = created
        self.solver.SetTimeLimit(int(time_limit_s * 1000))
        self.solver_name = name
        if name == "SCIP" and self.integral:
            self.solver.SetSolverSpecificParametersAsString(SCIP_PARAMS)
        self.tmax = tmax
        self._abs_gap: float | None = None
        self._build(fixed_vms)

    def _build(self, fixed_vms: Mapping[str, float] | None) -> None:
        p, s, inf = self.problem, self.solver, math.inf
        volume = p.volume_gb
        loads = region_loads(p, self.paths)
        self.flows = [s.NumVar(0.0, inf, f"f{i}") for i in range(len(self.paths))]
        self.vms: dict[str, pywraplp.Variable] = {}
        endpoints = {p.src, *p.dsts}
        for u in loads:
            spec = p.regions[u]
            lower = 1.0 if u in endpoints else 0.0
            if fixed_vms is not None:
                value = float(fixed_vms.get(u, 0.0))
                self.vms[u] = s.NumVar(value, value, f"N[{u}]")
            elif self.continuous:
                self.vms[u] = s.NumVar(lower, float(spec.max_vms), f"N[{u}]")
            else:
                self.vms[u] = s.IntVar(lower, float(spec.max_vms), f"N[{u}]")
        m = float(p.max_conns_per_vm)
        for u, rows in loads.items():
            spec, n = p.regions[u], self.vms[u]
            groups = [(rows.egress, spec.egress_cap_gbps), (rows.ingress, spec.ingress_cap_gbps)]
            if not self.integer_conns and self.fixed_conns is None:
                groups += [(rows.conn_out, m), (rows.conn_in, m)]
            for terms, cap in groups:
                if not terms or math.isinf(cap):
                    continue
                row = s.Constraint(-inf, 0.0)
                for i, coef in terms:
                    row.SetCoefficient(self.flows[i], coef)
                row.SetCoefficient(n, -cap)
        self._build_links(m)
        # Throughput: one demand row per destination.
        self.demand = []
        for k in range(len(p.dsts)):
            row = s.Constraint(0.0, 0.0)
            for i, path in enumerate(self.paths):
                if path.commodity == k:
                    row.SetCoefficient(self.flows[i], 1.0)
            self.demand.append(row)
            if p.max_gbps is not None:  # the bandwidth cap: a row of its own, kept by set_floor
                cap = s.Constraint(0.0, p.max_gbps)
                for i, path in enumerate(self.paths):
                    if path.commodity == k:
                        cap.SetCoefficient(self.flows[i], 1.0)
        objective = s.Objective()
        if self.mode == "min_cost":
            for i, path in enumerate(self.paths):
                objective.SetCoefficient(self.flows[i], volume * path.usd_per_gb)
            objective.SetMinimization()
            self.floor: float | None = None
        else:
            self.t = s.NumVar(0.0, inf if self.tmax is None else self.tmax, "T")
            for row in self.demand:
                row.SetCoefficient(self.t, -1.0)
            objective.SetCoefficient(self.t, 1.0)
            objective.SetMaximization()
            self.budget: pywraplp.Constraint | None = None
            self._budget_terms: list[tuple[pywraplp.Variable, float]] = []
            self.ceiling: float | None = None

    def _build_links(self, m: float) -> None:
        """Per-edge rows: saturation and region caps where they bind, whole connections."""
        p, s, inf = self.problem, self.solver, math.inf
        conn_out: dict[str, pywraplp.Constraint] = {}
        conn_in: dict[str, pywraplp.Constraint] = {}
        for (u, v), members in edge_paths(self.paths).items():
            rates = p.rates(u, v)
            if p.sat_binds(u, v):
                for end in (u, v):
                    row = s.Constraint(-inf, 0.0)
                    for i in members:
                        row.SetCoefficient(self.flows[i], 1.0)
                    row.SetCoefficient(self.vms[end], -rates.sat_gbps)
            if math.isfinite(rates.region_cap_gbps):
                row = s.Constraint(-inf, rates.region_cap_gbps)
                for i in members:
                    row.SetCoefficient(self.flows[i], 1.0)
            if self.fixed_conns is not None:
                row = s.Constraint(-inf, float(self.fixed_conns.get((u, v), 0)))
                for i in members:
                    row.SetCoefficient(self.flows[i], rates.conns_per_gbps)
                continue
            if not self.integer_conns:
                continue
            top = m * max(p.regions[u].max_vms, p.regions[v].max_vms)
            conns = s.IntVar(0.0, top, f"C[{u},{v}]")
            row = s.Constraint(-inf, 0.0)  # F_e / r_e <= C_e
            for i in members:
                row.SetCoefficient(self.flows[i], rates.conns_per_gbps)
            row.SetCoefficient(conns, -1.0)
            for region, table in ((u, conn_out), (v, conn_in)):
                if region not in table:
                    table[region] = s.Constraint(-inf, 0.0)
                    table[region].SetCoefficient(self.vms[region], -m)
                table[region].SetCoefficient(conns, 1.0)

    def _build_budget(self) -> None:
        """The cost ceiling row, multiplied through by T (see the module docstring)."""
        p, s = self.problem, self.solver
        volume, t0 = p.volume_gb, p.provisioning_seconds
        terms: list[tuple[pywraplp.Variable, float]] = []
        for i, path in enumerate(self.paths):
            if path.usd_per_gb:
                terms.append((self.flows[i], volume * path.usd_per_gb))
        groups: dict[float, list[str]] = defaultdict(list)
        for u, n in self.vms.items():
            k = p.regions[u].vm_usd_per_second
            terms.append((n, BITS_PER_BYTE * volume * k))
            if k > 0 and t0 > 0:
                groups[k].append(u)
        if groups:
            for k, members in groups.items():
                if all(self.vms[u].lb() == self.vms[u].ub() for u in members):
                    # Fixed fleet (LP repair): T * n_g is linear.
                    fixed = sum(self.vms[u].lb() for u in members)
                    terms.append((self.t, t0 * k * fixed))
                    continue
                if self.tmax is None:
                    raise PlanningError("internal: a max-throughput MILP needs Tmax")
                total = int(sum(self.vms[u].ub() for u in members))
                bits = max(1, math.ceil(math.log2(total + 1)))
                link = s.Constraint(0.0, 0.0)
                for u in members:
                    link.SetCoefficient(self.vms[u], 1.0)
                for j in range(bits):
                    if self.continuous:
                        b = s.NumVar(0.0, 1.0, f"b{k}_{j}")
                    else:
                        b = s.BoolVar(f"b{k}_{j}")
                    z = s.NumVar(0.0, self.tmax, f"z{k}_{j}")
                    link.SetCoefficient(b, -(2.0**j))
                    mc = s.Constraint(-self.tmax, math.inf)  # z - T - Tmax b >= -Tmax
                    mc.SetCoefficient(z, 1.0)
                    mc.SetCoefficient(self.t, -1.0)
                    mc.SetCoefficient(b, -self.tmax)
                    terms.append((z, t0 * k * 2.0**j))
        budget = s.Constraint(-math.inf, 0.0)
        merged: dict[int, tuple[pywraplp.Variable, float]] = {}
        for var, coef in terms:
            old = merged.get(var.index())
            merged[var.index()] = (var, coef + (old[1] if old else 0.0))
        for var, coef in merged.values():
            budget.SetCoefficient(var, coef)
        self._budget_terms = list(merged.values())
        self.budget = budget

    def set_floor(self, gbps: float) -> None:
        """Mode (a): deliver exactly ``gbps`` to every destination at least cost."""
        p = self.problem
        for row in self.demand:
            row.SetBounds(gbps, gbps)
        objective = self.solver.Objective()
        per_vm = BITS_PER_BYTE * p.volume_gb + p.provisioning_seconds * gbps
        for u, n in self.vms.items():
            objective.SetCoefficient(n, p.regions[u].vm_usd_per_second * per_vm)
        self.floor = gbps

    def set_ceiling(self, usd: float | None) -> None:
        """Mode (b): maximise throughput with total cost at most ``usd`` (None: no ceiling)."""
        objective = self.solver.Objective()
        objective.SetMaximization()
        self.t.SetLb(0.0)
        self._abs_gap = None
        if usd is None:
            if self.budget is not None:
                self.budget.SetBounds(-math.inf, math.inf)
            for var, _ in self._budget_terms:
                objective.SetCoefficient(var, 0.0)
            objective.SetCoefficient(self.t, 1.0)
            self.ceiling = None
            return
        if self.budget is None:
            self._build_budget()
        assert self.budget is not None
        self.budget.SetBounds(-math.inf, 0.0)
        t_coef = 0.0
        for var, coef in self._budget_terms:
            if var.index() == self.t.index():
                t_coef = coef
            else:
                objective.SetCoefficient(var, -EPS * coef / usd)
        self.budget.SetCoefficient(self.t, t_coef - usd)
        objective.SetCoefficient(self.t, 1.0 - EPS * t_coef / usd)
        self.ceiling = usd

    def set_ratio(self, usd_per_run: float, floor: float, abs_gap: float) -> None:
        """Dinkelbach step of mode (a) with ``T >= floor``: minimise ``T*cost - lambda*T``.

        ``T * cost`` is the left side of the cost row of mode (b) (linear, see the module
        docstring); its minimum is < 0 exactly when some plan at least as fast as ``floor``
        costs less than ``lambda`` = ``usd_per_run``. ``abs_gap`` is the absolute gap wanted.
        """
        if self.budget is None:
            self._build_budget()
        assert self.budget is not None
        self.budget.SetBounds(-math.inf, math.inf)  # the cost row only supplies the terms
        objective = self.solver.Objective()
        objective.SetMinimization()
        t_coef = 0.0
        for var, coef in self._budget_terms:
            if var.index() == self.t.index():
                t_coef = coef
            else:
                objective.SetCoefficient(var, coef)
        objective.SetCoefficient(self.t, t_coef - usd_per_run)
        self.t.SetLb(floor)
        self._abs_gap = abs_gap

    def solve(self) -> Solution | None:
        """Solve; ``None`` if infeasible. Raises ``PlanningError`` if no answer in time."""
        params = pywraplp.MPSolverParameters()
        if self.integral:
            params.SetDoubleParam(params.RELATIVE_MIP_GAP, self.problem.mip_gap)
            if self._abs_gap is not None:  # the Dinkelbach objective ends near 0
                params.SetDoubleParam(params.RELATIVE_MIP_GAP, 1e-9)
                if self.solver_name == "SCIP":
                    self.solver.SetSolverSpecificParametersAsString(
                        f"{SCIP_PARAMS}\nlimits/absgap = {self._abs_gap:.12g}"
                    )
        start = time.perf_counter()
        status = self.solver.Solve(params)
        seconds = time.perf_counter() - start
        if status == pywraplp.Solver.INFEASIBLE:
            return None
        if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
            raise PlanningError(f"solver {self.solver_name} gave up (status {status})")
        if self.mode == "min_cost":
            assert self.floor is not None
            gbps = self.floor
        else:
            gbps = self.t.solution_value()
        objective = self.solver.Objective()
        best = objective.BestBound() if self.integral else objective.Value()
        return Solution(
            status="OPTIMAL" if status == pywraplp.Solver.OPTIMAL else "FEASIBLE",
            gbps=gbps,
            path_flows=tuple(max(0.0, f.solution_value()) for f in self.flows),
            vms={u: n.solution_value() for u, n in self.vms.items()},
            objective=objective.Value(),
            best_bound=best,
            seconds=seconds,
        )
