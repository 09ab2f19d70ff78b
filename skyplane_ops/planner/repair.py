"""Whole connections per hop on the solver's fleet: round the fractional connections,
re-solve the flows on that fleet, and fall back to a small integer MILP when rounding costs
more than ``REPAIR_TOL``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from skyplane_ops.planner.formulation import (
    PathModel,
    Solution,
)
from skyplane_ops.planner.milp import (
    MilpResult,
)
from skyplane_ops.planner.paths import CandidatePath
from skyplane_ops.planner.problem import Problem


def round_connections(
    problem: Problem,
    paths: Sequence[CandidatePath],
    path_flows: Sequence[float],
    fleet: Mapping[str, float],
) -> dict[tuple[str, str], int]:
    """Whole connections per edge within every region's ``M * N`` (out and in): each edge
    gets its fractional need rounded down, then the spare connections go one at a time to the
    edges with the largest remainders whose two ends both have one to spare."""
    need: dict[tuple[str, str], float] = {}
    for path, f in zip(paths, path_flows, strict=True):
        for u, v in zip(path.regions, path.regions[1:], strict=False):
            need[(u, v)] = need.get((u, v), 0.0) + f * problem.conns_per_gbps(u, v)
    m = problem.max_conns_per_vm
    spare_out = {u: m * round(n) for u, n in fleet.items()}
    spare_in = dict(spare_out)
    conns: dict[tuple[str, str], int] = {}
    for (u, v), x in need.items():
        whole = math.floor(x + 1e-9)
        conns[(u, v)] = whole
        spare_out[u] -= whole
        spare_in[v] -= whole
    for (u, v), x in sorted(need.items(), key=lambda kv: conns[kv[0]] - kv[1]):
        if x - conns[(u, v)] > 1e-9 and spare_out[u] >= 1 and spare_in[v] >= 1:
            conns[(u, v)] += 1
            spare_out[u] -= 1
            spare_in[v] -= 1
    return conns


def _whole_connections_on_fleet(problem: Problem, result: MilpResult) -> MilpResult | None:
    """Whole connections per hop on the solver's own fleet: first ``round_connections`` and an
    LP for the flows; if that is not within ``REPAIR_TOL`` of the fractional optimum, also a
    small MILP with integer connections (VMs fixed, so no products with ``T``). Mode (b): the
    fastest within the ceiling; mode (a): the cheapest at the solver's throughput or at the
    floor. None if the fleet cannot do it."""
    fleet = {u: float(round(n)) for u, n in result.solution.vms.items()}
    conns = round_connections(problem, result.paths, result.solution.path_flows, fleet)
    options: list[Solution] = []
    for target in _targets(problem, result):
        sol = _on_fleet(problem, result.paths, fleet, target, fixed_conns=conns)
        if sol is not None:
            options.append(sol)
    if not any(_close(problem, result, o, fleet) for o in options):
        for target in _targets(problem, result):
            sol = _on_fleet(problem, result.paths, fleet, target, integer=True)
            if sol is not None:
                options.append(sol)
    if not options:
        return None
    if problem.objective == "max_throughput":
        best = max(options, key=lambda o: o.gbps)
    else:
        best = min(options, key=lambda o: _usd(problem, result.paths, o, fleet))
    seconds = result.solver_seconds + sum(o.seconds for o in options)
    return MilpResult(best, result.paths, result.gap, seconds, result.iterations + 1)


#: A rounded repair within this of the fractional optimum (throughput in mode (b), cost in
#: mode (a)) is kept; otherwise the integer-connection MILP on the same fleet is tried too.
REPAIR_TOL = 0.002


def _usd(
    problem: Problem, paths: Sequence[CandidatePath], sol: Solution, fleet: Mapping[str, float]
) -> float:
    """The plan cost of ``sol`` on ``fleet`` (egress + VM time, provisioning included)."""
    t = sol.gbps
    egress = sum(f * p.usd_per_gb for p, f in zip(paths, sol.path_flows, strict=True)) / t
    rate = sum(problem.regions[u].vm_usd_per_second * n for u, n in fleet.items())
    return problem.volume_gb * egress + rate * problem.transfer_seconds(t)


def _close(problem: Problem, result: MilpResult, sol: Solution, fleet: Mapping[str, float]) -> bool:
    frac = result.solution
    if problem.objective == "max_throughput":
        return sol.gbps >= frac.gbps * (1 - REPAIR_TOL)
    ideal = _usd(problem, result.paths, frac, fleet)
    return _usd(problem, result.paths, sol, fleet) <= ideal * (1 + REPAIR_TOL)


def _on_fleet(
    problem: Problem,
    paths: Sequence[CandidatePath],
    fleet: Mapping[str, float],
    target: float | None,
    *,
    fixed_conns: Mapping[tuple[str, str], int] | None = None,
    integer: bool = False,
) -> Solution | None:
    """Flows on a fixed fleet with whole connections (given, or integer variables): at
    exactly ``target`` Gbps at least cost, or (None) as fast as the ceiling allows and then
    as cheaply as that speed allows (the ceiling's tie-break is below a MIP gap)."""
    model = PathModel(
        problem, paths, fixed_vms=fleet, fixed_conns=fixed_conns, integer_conns=integer
    )
    if target is not None:
        model.set_floor(target)
        return model.solve()
    model.set_ceiling(problem.bound)
    fast = model.solve()
    if fast is None or fast.gbps <= 0:
        return None
    cheap = PathModel(
        problem.with_objective("min_cost", fast.gbps),
        paths,
        fixed_vms=fleet,
        fixed_conns=fixed_conns,
        integer_conns=integer,
    )
    cheap.set_floor(fast.gbps)
    again = cheap.solve()
    if again is None:
        return fast
    return dataclasses.replace(again, gbps=fast.gbps, seconds=fast.seconds + again.seconds)


def _targets(problem: Problem, result: MilpResult) -> list[float | None]:
    """What a repair must still meet: mode (b) the ceiling (None), mode (a) the solver's
    throughput, else the floor."""
    if problem.objective == "max_throughput":
        return [None]
    assert problem.bound is not None
    return list(dict.fromkeys((result.solution.gbps, problem.bound)))
