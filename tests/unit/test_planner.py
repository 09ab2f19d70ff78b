"""The planner on small graphs whose optimum can be worked out by hand."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from skyplane_ops.errors import InfeasibleError, UnknownRegionError
from skyplane_ops.planner import (
    InvalidProblemError,
    Problem,
    RegionSpec,
    TransferPlan,
    direct_plan,
    max_throughput_gbps,
    pareto_frontier,
    plan_transfer,
    render_mermaid,
    render_text,
    ron_plan,
    solve_lp_plan,
    solve_plan,
)
from skyplane_ops.planner.check import plan_violations
from skyplane_ops.planner.problem import deadline_to_floor

#: $3.60/hour = $0.001/s keeps the hand arithmetic simple.
VM_PER_HOUR = 3.6


def region(name: str, max_vms: int = 1, egress: float = 10.0, ingress: float = 10.0) -> RegionSpec:
    return RegionSpec(name, "aws", VM_PER_HOUR, egress, ingress, max_vms)


def triangle(direct_gbps: float, relay_gbps: float, **kw: object) -> Problem:
    """a -> c directly, or a -> b -> c; every hop costs $0.02/GB; 1 VM per region."""
    regions = {r: region(r) for r in "abc"}
    grid = {("a", "c"): direct_gbps, ("a", "b"): relay_gbps, ("b", "c"): relay_gbps}
    prices = dict.fromkeys(grid, 0.02)
    args: dict[str, object] = {
        "src": "a",
        "dsts": ("c",),
        "volume_gb": 100.0,
        "regions": regions,
        "throughput": grid,
        "egress_usd_per_gb": prices,
        "provisioning_seconds": 60.0,
        "objective": "min_cost",
        "bound": 3.0,
    }
    args.update(kw)
    return Problem(**args)  # type: ignore[arg-type]


def test_relay_must_win_and_costs_add_up_by_hand() -> None:
    # Direct: 1 Gbps per VM pair. Source conns: 64 f_d / 1 + 64 f_r / 5 <= 64, f_d + f_r = 3
    # => f_d <= 0.5; the cheapest mix sends as much as possible direct: 0.5 direct, 2.5 relay.
    problem = triangle(1.0, 5.0)
    plan = solve_plan(problem)
    assert plan.solver_status == "OPTIMAL"
    flows = {p.regions: p.gbps for p in plan.paths}
    assert flows[("a", "c")] == pytest.approx(0.5, abs=1e-6)
    assert flows[("a", "b", "c")] == pytest.approx(2.5, abs=1e-6)
    assert plan.vms == {"a": 1, "b": 1, "c": 1}
    assert plan.predicted_gbps == pytest.approx(3.0)
    # Egress: 100 GB * (0.5/3 * 0.02 + 2.5/3 * 0.04); VMs: 3 * $0.001/s * (800/3 + 60) s.
    assert plan.egress_cost_usd == pytest.approx(100 * (0.5 * 0.02 + 2.5 * 0.04) / 3)
    assert plan.vm_cost_usd == pytest.approx(3 * 0.001 * (800 / 3 + 60))
    hops = {(h.src, h.dst): h.connections for h in plan.hops}
    assert hops == {("a", "c"): 32, ("a", "b"): 32, ("b", "c"): 32}
    assert plan_violations(problem, plan) == []


def test_relay_must_not_win_when_direct_is_as_fast() -> None:
    problem = triangle(5.0, 5.0)
    plan = solve_plan(problem)
    assert [p.regions for p in plan.paths] == [("a", "c")]
    assert plan.vms == {"a": 1, "c": 1}
    # Max throughput at a generous budget still avoids the relay: direct alone saturates the
    # source's 64 connections at 5 Gbps, and a relay path cannot add to that.
    fast = solve_plan(problem.with_objective("max_throughput", 100.0))
    assert fast.predicted_gbps == pytest.approx(5.0, rel=1e-3)
    assert "b" not in fast.vms


def test_max_throughput_reaches_the_relay_and_respects_the_ceiling() -> None:
    problem = triangle(1.0, 5.0)
    # All through b: 5 Gbps, 100 GB * 0.04 + 3 VMs * 0.001 * (160 + 60) = 4.66.
    plan = solve_plan(problem.with_objective("max_throughput", 4.66 + 1e-9))
    assert plan.predicted_gbps == pytest.approx(5.0, rel=1e-3)
    assert plan.total_cost_usd <= 4.66 + 1e-6
    assert plan_violations(problem, plan) == []
    # A ceiling just below the cheapest 5 Gbps plan must give less throughput.
    slower = solve_plan(problem.with_objective("max_throughput", 4.2))
    assert slower.predicted_gbps < 5.0 - 1e-3
    assert slower.total_cost_usd <= 4.2 + 1e-6


def test_min_cost_takes_a_faster_plan_when_it_is_cheaper() -> None:
    # Direct only, 1 VM each end: cost(T) = 100 * 0.02 + 2 * 0.001 * (800 / T + 60), which
    # falls with T, so a 0.1 Gbps floor is best met at the path's full 1 Gbps: $3.72.
    problem = triangle(1.0, 5.0, bound=0.1, throughput={("a", "c"): 1.0})
    at_floor = solve_plan(problem, exact_floor=True)
    assert at_floor.predicted_gbps == pytest.approx(0.1)
    assert at_floor.total_cost_usd == pytest.approx(2 + 0.002 * (8000 + 60))
    plan = solve_plan(problem)
    assert plan.predicted_gbps == pytest.approx(1.0, rel=1e-6)
    assert plan.total_cost_usd == pytest.approx(2 + 0.002 * (800 + 60), rel=1e-3)
    assert plan_violations(problem, plan) == []


def test_mode_b_at_mode_a_cost_is_at_least_as_fast() -> None:
    problem = triangle(1.0, 5.0)
    a = solve_plan(problem)
    b = solve_plan(problem.with_objective("max_throughput", a.total_cost_usd))
    assert b.predicted_gbps >= a.predicted_gbps * (1 - 1e-3)


def test_both_modes_agree_with_the_frontier() -> None:
    problem = triangle(1.0, 5.0, bound=None)
    frontier = pareto_frontier(problem, 10)
    assert len(frontier) == 10
    assert frontier[-1].gbps == pytest.approx(max_throughput_gbps(problem))
    for i, point in enumerate(frontier):
        # Each frontier point is mode (a) at exactly that throughput ...
        exact = solve_plan(problem.with_objective("min_cost", point.gbps), exact_floor=True)
        assert exact.total_cost_usd == pytest.approx(point.cost_usd, rel=1e-6)
        # ... mode (a) proper (T >= floor) is no dearer than any faster frontier point ...
        a = solve_plan(problem.with_objective("min_cost", point.gbps))
        assert a.predicted_gbps >= point.gbps * (1 - 1e-9)
        cheapest_faster = min(p.cost_usd for p in frontier[i:])
        assert a.total_cost_usd <= cheapest_faster * (1 + 1e-3)
        # ... and mode (b) at a point's cost is at least as fast as the point.
        b = solve_plan(problem.with_objective("max_throughput", point.cost_usd * (1 + 1e-9)))
        assert b.predicted_gbps >= point.gbps * (1 - 1e-3)
    pareto = [p for p in frontier if p.pareto]
    assert pareto and all(x.cost_usd < y.cost_usd for x, y in itertools.pairwise(pareto))


def test_baselines_direct_and_ron() -> None:
    problem = triangle(1.0, 5.0)
    direct = direct_plan(problem, vms=1)
    assert direct.predicted_gbps == pytest.approx(1.0)
    assert direct.total_cost_usd == pytest.approx(100 * 0.02 + 2 * 0.001 * (800 + 60))
    ron = ron_plan(problem, vms=1)
    assert [p.regions for p in ron.paths] == [("a", "b", "c")]
    assert ron.predicted_gbps == pytest.approx(5.0)
    assert ron.total_cost_usd == pytest.approx(100 * 0.04 + 3 * 0.001 * (160 + 60))
    # More VMs per region: direct scales with the connections (64 per VM).
    many = triangle(1.0, 5.0, regions={r: region(r, max_vms=4) for r in "abc"})
    assert direct_plan(many, vms=3).predicted_gbps == pytest.approx(3.0)
    # RON ignores price: it takes the fastest relay even when it is the dearest.
    assert ron_plan(many, vms=1).paths[0].regions == ("a", "b", "c")


def test_plan_transfer_attaches_baselines_and_default_bound() -> None:
    problem = triangle(1.0, 5.0, bound=None)
    plan = plan_transfer(problem, frontier_points=5)
    assert plan.details["default_bound"] is True
    assert plan.mode == "max_throughput"
    assert plan.baseline is not None
    # Default: the fastest completion is the relay at 5 Gbps (60 + 160 s); the plan is the
    # cheapest within 5% of it: at least 800 / (1.05 * 220 - 60) Gbps, no dearer than fastest.
    fastest = plan.details["fastest"]
    assert fastest["predicted_gbps"] == pytest.approx(5.0)
    # (whole connections: 59 via b and 5 direct give 4.6875 Gbps, just above that floor)
    assert 800 / (1.05 * 220 - 60) * (1 - 1e-6) <= plan.predicted_gbps < 5.0
    assert plan.details["completion_seconds"] <= 1.05 * 220 * (1 + 1e-6)
    assert plan.total_cost_usd < fastest["total_cost_usd"]
    assert plan_violations(problem.with_objective("min_cost", plan.predicted_gbps), plan) == []
    assert plan.details["ron"]["paths"] == [["a", "b", "c"]]
    assert len(plan.details["frontier"]) == 5


def test_default_without_a_direct_path_maximises_throughput() -> None:
    problem = triangle(1.0, 5.0, bound=None, throughput={("a", "b"): 5.0, ("b", "c"): 5.0})
    plan = plan_transfer(problem)
    assert plan.baseline is None
    assert [p.regions for p in plan.paths] == [("a", "b", "c")]
    assert plan.predicted_gbps == pytest.approx(5.0)


def _two_relays() -> Problem:
    """Source caps force fractional VMs in the LP: the LP spreads over two relays."""
    regions = {
        "s": region("s", max_vms=4, egress=4.0),
        "r1": region("r1", max_vms=4, egress=3.0, ingress=3.0),
        "r2": region("r2", max_vms=4, egress=3.0, ingress=3.0),
        "d": region("d", max_vms=4),
    }
    grid = {("s", "d"): 0.5, ("s", "r1"): 10.0, ("r1", "d"): 10.0, ("s", "r2"): 9.0}
    grid[("r2", "d")] = 9.0
    prices = {("s", "d"): 0.02, ("s", "r1"): 0.02, ("r1", "d"): 0.02}
    prices.update({("s", "r2"): 0.01, ("r2", "d"): 0.02})
    return Problem("s", ("d",), 1000.0, regions, grid, prices, "min_cost", 7.0, 64, 64, 60.0)


def test_lp_mode_reports_its_gap_to_the_milp() -> None:
    problem = _two_relays()
    lp = solve_lp_plan(problem)
    exact = solve_plan(problem)
    assert lp.solver_status == "LP_ROUNDED"
    assert plan_violations(problem, lp) == []
    assert lp.total_cost_usd >= exact.total_cost_usd * (1 - 1e-9)
    assert lp.details["milp_objective"] == pytest.approx(exact.total_cost_usd)
    gap = (lp.total_cost_usd - exact.total_cost_usd) / exact.total_cost_usd
    assert lp.details["gap_to_milp"] == pytest.approx(gap, abs=1e-9)
    assert lp.details["gap_to_lp_bound"] >= lp.details["gap_to_milp"] - 1e-9
    assert lp.details["lp_bound"] <= exact.total_cost_usd + 1e-9
    # Mode (b) through LP rounding stays within the ceiling and below the MILP.
    ceiling = exact.total_cost_usd * 1.05
    lp_b = solve_lp_plan(problem.with_objective("max_throughput", ceiling))
    exact_b = solve_plan(problem.with_objective("max_throughput", ceiling))
    assert lp_b.total_cost_usd <= ceiling * (1 + 1e-6)
    assert lp_b.predicted_gbps <= exact_b.predicted_gbps * (1 + 1e-3)
    assert lp_b.details["gap_to_milp"] >= -1e-3


def test_multiple_destinations_replicate_to_each() -> None:
    regions = {r: region(r, max_vms=2) for r in ("s", "d1", "d2", "r")}
    grid = {("s", "d1"): 4.0, ("s", "d2"): 1.0, ("s", "r"): 4.0, ("r", "d2"): 4.0}
    grid[("d1", "d2")] = 4.0
    prices = dict.fromkeys(grid, 0.02)
    problem = Problem("s", ("d1", "d2"), 50.0, regions, grid, prices, "min_cost", 3.0)
    plan = solve_plan(problem)
    assert plan_violations(problem, plan) == []
    assert plan.predicted_gbps >= 3.0
    for dst in ("d1", "d2"):
        got = sum(p.gbps for p in plan.paths if p.regions[-1] == dst)
        assert got == pytest.approx(plan.predicted_gbps)
    assert direct_plan(problem, 2).predicted_gbps > 0


def test_two_relay_model_is_exact_on_a_chain() -> None:
    regions = {r: region(r) for r in ("s", "x", "y", "d")}
    grid = {("s", "x"): 5.0, ("x", "y"): 5.0, ("y", "d"): 5.0, ("s", "d"): 1.0}
    prices = dict.fromkeys(grid, 0.01)
    problem = Problem("s", ("d",), 10.0, regions, grid, prices, "min_cost", 2.0, max_relays=2)
    plan = solve_plan(problem)
    assert ("s", "x", "y", "d") in [p.regions for p in plan.paths]
    assert plan_violations(problem, plan) == []
    with pytest.raises(InfeasibleError):
        solve_plan(dataclasses.replace(problem, max_relays=1))


# --- errors -------------------------------------------------------------------------------


def test_unknown_region_suggests_close_names() -> None:
    problem = triangle(1.0, 5.0)
    bad = Problem("a", ("cc",), 1.0, problem.regions, problem.throughput, {}, "min_cost", 1.0)
    with pytest.raises(UnknownRegionError) as info:
        solve_plan(bad)
    assert info.value.suggestions == ["c"]
    assert "did you mean c?" in str(info.value)


def test_infeasible_floor_says_what_is_feasible() -> None:
    with pytest.raises(InfeasibleError, match=r"floor 50 Gbps is infeasible; .* allows is 5 Gbps"):
        solve_plan(triangle(1.0, 5.0, bound=50.0))


def test_infeasible_ceiling_says_the_cheapest_cost() -> None:
    problem = triangle(1.0, 5.0, objective="max_throughput", bound=0.5)
    with pytest.raises(InfeasibleError, match=r"ceiling \$0.5 is infeasible; the cheapest") as info:
        solve_plan(problem)
    cheapest = float(str(info.value).split("$")[2].split(" ")[0])
    # That cost IS feasible, and a little less is not.
    assert solve_plan(problem.with_objective("max_throughput", cheapest)).predicted_gbps > 0
    with pytest.raises(InfeasibleError):
        solve_plan(problem.with_objective("max_throughput", cheapest * 0.99))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"volume_gb": 0.0}, "volume"),
        ({"volume_gb": math.nan}, "volume"),
        ({"dsts": ("a",)}, "also a destination"),
        ({"dsts": ("c", "c")}, "repeat"),
        ({"dsts": ()}, "at least one destination"),
        ({"bound": -1.0}, "bound"),
        ({"objective": "fastest"}, "objective"),
        ({"max_relays": 3}, "max_relays"),
        ({"provisioning_seconds": -5.0}, "provisioning"),
        ({"max_conns_per_vm": 0}, "connection"),
        ({"throughput": {("a", "c"): -1.0}}, "throughput a -> c"),
        ({"regions": {r: region(r, max_vms=0) for r in "abc"}}, "allows no VMs"),
    ],
)
def test_bad_arguments_are_typed_errors(change: dict[str, object], message: str) -> None:
    problem = triangle(1.0, 5.0)
    bad = dataclasses.replace(problem, **change)  # type: ignore[arg-type]
    with pytest.raises(InvalidProblemError, match=message):
        solve_plan(bad)


def test_unreachable_destination_and_short_deadline() -> None:
    problem = triangle(1.0, 5.0, throughput={("a", "b"): 5.0})
    with pytest.raises(InfeasibleError, match="no path"):
        solve_plan(problem)
    with pytest.raises(InvalidProblemError, match="deadline"):
        deadline_to_floor(100.0, 30.0, 60.0)
    assert deadline_to_floor(100.0, 860.0, 60.0) == pytest.approx(1.0)


# --- plan object and renderers -------------------------------------------------------------


def test_json_round_trip_and_renderers() -> None:
    plan = plan_transfer(triangle(1.0, 5.0), frontier_points=4)
    again = TransferPlan.from_json(plan.to_json())
    assert again == plan
    assert again.regions == ["a", "b", "c"]
    text = render_text(plan)
    assert "a -> b -> c" in text and "direct" in text and "RON (b)" in text
    assert "Pareto frontier" in text
    mermaid = render_mermaid(plan)
    assert mermaid.startswith("graph LR")
    assert mermaid.count("-->") == len(plan.hops) == 3
    assert 'r_b["b<br/>relay, 1 VM"]' in mermaid
