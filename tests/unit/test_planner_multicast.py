"""The multicast planner on graphs whose optimum can be worked out by hand, on random graphs
against the unicast model, and through ``skyplane-ops plan --dst A --dst B``."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from gateway_agent.job.tree import parse_trees
from skyplane_ops.cli import main
from skyplane_ops.errors import InfeasibleError
from skyplane_ops.planner import Problem, RegionSpec, TransferPlan, solve_plan
from skyplane_ops.planner.check import plan_violations
from skyplane_ops.planner.multicast.api import plan_multicast
from skyplane_ops.planner.multicast.check import multicast_violations
from skyplane_ops.planner.multicast.compare import source_egress_gb
from skyplane_ops.planner.multicast.solve import solve_multicast

#: $3.60/hour = $0.001/s keeps the hand arithmetic simple.
VM_PER_HOUR = 3.6


def region(name: str, max_vms: int = 1) -> RegionSpec:
    return RegionSpec(name, "aws", VM_PER_HOUR, 10.0, 10.0, max_vms)


def diamond(**kw: object) -> Problem:
    """s -> d1, d2 directly, through relay r, or d1 -> d2; leaving s costs $0.09/GB, the
    other hops $0.01/GB; every link 5 Gbps per VM pair; one VM per region."""
    regions = {r: region(r) for r in ("s", "d1", "d2", "r")}
    grid = {e: 5.0 for e in [("s", "d1"), ("s", "d2"), ("s", "r"), ("r", "d1"), ("r", "d2")]}
    grid[("d1", "d2")] = 5.0
    prices = {e: 0.09 if e[0] == "s" else 0.01 for e in grid}
    args: dict[str, object] = {
        "src": "s",
        "dsts": ("d1", "d2"),
        "volume_gb": 100.0,
        "regions": regions,
        "throughput": grid,
        "egress_usd_per_gb": prices,
        "objective": "min_cost",
        "bound": 2.0,
    }
    args.update(kw)
    return Problem(**args)  # type: ignore[arg-type]


def test_a_chain_through_a_destination_pays_the_source_egress_once() -> None:
    # Per GB: star 0.18, s -> r -> {d1, d2} 0.09 + 0.02, chain s -> d1 -> d2 0.09 + 0.01. The
    # chain at its fastest (5 Gbps: one VM pair's 64 connections) also spends least VM time.
    problem = diamond()
    plan = plan_multicast(problem)
    assert multicast_violations(problem, plan) == []
    assert {p.regions for p in plan.paths} == {("s", "d1"), ("s", "d1", "d2")}
    assert plan.predicted_gbps == pytest.approx(5.0)
    assert plan.egress_cost_usd == pytest.approx(100 * 0.10)
    assert plan.vm_cost_usd == pytest.approx(3 * 0.001 * 800 / 5)  # s, d1, d2 for 160 s
    assert plan.vms == {"d1": 1, "d2": 1, "s": 1}
    assert source_egress_gb(plan) == pytest.approx(100.0)
    rows = plan.details["multicast"]
    assert rows["this"]["source_egress_gb"] == pytest.approx(100.0)
    assert rows["unicasts"]["source_egress_gb"] == pytest.approx(200.0)
    assert rows["star"]["source_egress_gb"] == pytest.approx(200.0)
    assert rows["unicasts"]["total_cost_usd"] > plan.total_cost_usd
    # The unicast model of the same problem sends every byte from s once per destination.
    unicast = solve_plan(problem)
    assert plan_violations(problem, unicast) == []
    assert unicast.egress_cost_usd >= 100 * 0.18 - 1e-6
    text = plan.to_text()
    assert "separate unicasts" in text and "direct star" in text and "saves" in text


def test_a_shared_relay_edge_carries_the_data_once() -> None:
    # Only s -> r leaves the source: with unicast semantics it would carry 2 T.
    problem = diamond(bound=4.0)
    grid = {
        e: g for e, g in problem.throughput.items() if e in {("s", "r"), ("r", "d1"), ("r", "d2")}
    }
    regions = {**problem.regions, "r": region("r", max_vms=2)}  # r forwards 2 x 4 Gbps
    problem = dataclasses.replace(
        problem, regions=regions, throughput=grid, egress_usd_per_gb={e: 0.02 for e in grid}
    )
    plan = solve_multicast(problem, exact_floor=True)
    assert multicast_violations(problem, plan) == []
    hops = {(h.src, h.dst): h.gbps for h in plan.hops}
    assert hops == pytest.approx({("s", "r"): 4.0, ("r", "d1"): 4.0, ("r", "d2"): 4.0})
    assert plan.egress_cost_usd == pytest.approx(100 * 0.02 * 3)
    assert plan.vms == {"d1": 1, "d2": 1, "r": 2, "s": 1}
    # The unicast model cannot reach 4 Gbps at all: s -> r would carry 8 Gbps, and one VM's
    # 64 connections carry 5 Gbps on that link.
    with pytest.raises(InfeasibleError):
        solve_plan(problem, exact_floor=True)


def equal_prices(d1_to_d2: float = 0.02, **kw: object) -> Problem:
    """The diamond without its relay, every hop $0.02/GB (as between AWS regions): the star
    and the chain through a destination cost the same."""
    problem = diamond(**kw)
    grid = {e: g for e, g in problem.throughput.items() if "r" not in e}
    grid[("d2", "d1")] = 5.0
    prices = {e: 0.02 for e in grid}
    prices[("d1", "d2")] = prices[("d2", "d1")] = d1_to_d2
    regions = {k: v for k, v in problem.regions.items() if k != "r"}
    return dataclasses.replace(problem, regions=regions, throughput=grid, egress_usd_per_gb=prices)


@pytest.mark.parametrize("bound", [1.0, 2.0, 4.0])
def test_a_tie_in_cost_goes_to_the_plan_whose_source_sends_least(bound: float) -> None:
    # At exactly the floor, star and chain tie in cost (same hops' price, same VMs, same
    # time): the source sends the data once (the solver alone picked the star).
    problem = equal_prices(bound=bound)
    plan = solve_multicast(problem, exact_floor=True)
    assert multicast_violations(problem, plan) == []
    assert plan.predicted_gbps == pytest.approx(bound)
    assert source_egress_gb(plan) == pytest.approx(100.0)
    assert plan.egress_cost_usd == pytest.approx(100 * 0.04)


def test_the_tie_break_never_buys_less_source_egress_with_money() -> None:
    # Forwarding between destinations costs 5% more per GB than the star: the star stays,
    # but for what the MIP gap (0.1% of the cost) buys of the chain.
    problem = equal_prices(d1_to_d2=0.021, bound=2.0)
    plan = solve_multicast(problem, exact_floor=True)
    star_usd = 100 * 0.04 + 3 * 0.001 * 800 / 2  # s, d1, d2 for 400 s
    assert star_usd <= plan.total_cost_usd <= star_usd * (1 + problem.mip_gap) + 1e-9
    assert source_egress_gb(plan) > 190.0


def test_cost_ceiling_gives_the_fastest_plan_within_it() -> None:
    problem = diamond()
    cheap = plan_multicast(problem)
    ceiling = cheap.total_cost_usd * 1.5
    plan = plan_multicast(problem.with_objective("max_throughput", ceiling))
    assert multicast_violations(problem, plan) == []
    assert plan.total_cost_usd <= ceiling * (1 + 1e-6)
    assert plan.predicted_gbps >= cheap.predicted_gbps * (1 - 1e-6)


def test_an_infeasible_floor_is_one_clear_line() -> None:
    with pytest.raises(InfeasibleError, match=r"floor 50 Gbps is infeasible.*every destination"):
        solve_multicast(diamond(bound=50.0))


def random_problem(rng: random.Random, n_dsts: int) -> Problem:
    names = ["s", *(f"d{i}" for i in range(n_dsts)), "r0", "r1", "r2"]
    regions = {
        u: RegionSpec(u, rng.choice(["aws", "gcp"]), rng.choice([1.8, 3.6]), 8.0, 8.0, 2)
        for u in names
    }
    grid, prices = {}, {}
    for u in names:
        for v in names:
            if u != v and v != "s" and rng.random() < 0.7:
                grid[(u, v)] = rng.uniform(0.5, 6.0)
                prices[(u, v)] = rng.choice([0.0, 0.01, 0.02, 0.05, 0.09])
    for i in range(n_dsts):  # every destination reachable
        grid.setdefault(("s", f"d{i}"), 1.0)
        prices.setdefault(("s", f"d{i}"), 0.05)
    return Problem(
        "s",
        tuple(f"d{i}" for i in range(n_dsts)),
        rng.choice([10.0, 100.0]),
        regions,
        grid,
        prices,
        provisioning_seconds=rng.choice([0.0, 60.0]),
    )


@pytest.mark.parametrize("seed", range(12))
def test_multicast_is_valid_and_never_dearer_than_unicasts(seed: int) -> None:
    rng = random.Random(seed)
    base = random_problem(rng, rng.choice([2, 3]))
    unicast_fast = solve_plan(base.with_objective("max_throughput", None))
    floor = unicast_fast.predicted_gbps * rng.uniform(0.2, 0.9)
    problem = base.with_objective("min_cost", floor)
    multi = solve_multicast(problem, exact_floor=True)
    uni = solve_plan(problem, exact_floor=True)
    assert multicast_violations(problem, multi) == []
    assert multi.predicted_gbps == pytest.approx(floor)
    # Unicast routes are multicast routes, and an edge's load (a max) is at most the sum.
    assert multi.total_cost_usd <= uni.total_cost_usd * (1 + 2e-3)
    assert source_egress_gb(multi) <= source_egress_gb(uni) * (1 + 1e-6)
    fastest = plan_multicast(base, completion_tolerance=0.0, compare=False)
    assert multicast_violations(base, fastest) == []
    assert fastest.predicted_gbps >= unicast_fast.predicted_gbps * (1 - 2e-3)


def test_cli_plans_a_multicast_beside_unicasts_and_the_star(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--src", "aws:us-east-1", "--dst", "aws:eu-west-1"]
    argv += ["--dst", "aws:eu-central-1", "--volume-gb", "100", "--max-vms", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "One copy per shared edge (multicast), compared with:" in out
    assert "separate unicasts" in out and "direct star" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    plan = TransferPlan.from_dict(data)
    rows = plan.details["multicast"]
    assert rows["this"]["source_egress_gb"] <= 1.1 * 100
    assert rows["unicasts"]["source_egress_gb"] == pytest.approx(200.0)
    assert main([*argv, "--lp"]) == 2  # one clear line, before any solve
    assert "plan one destination" in capsys.readouterr().err
    # One destination: today's unicast plan, without multicast rows.
    assert (
        main(
            [
                "plan",
                "--src",
                "aws:us-east-1",
                "--dst",
                "aws:eu-west-1",
                "--volume-gb",
                "100",
                "--json",
            ]
        )
        == 0
    )
    single = json.loads(capsys.readouterr().out)
    assert "multicast" not in single["details"]


def test_trees_send_each_slice_down_one_tree_within_the_plan() -> None:
    from skyplane_ops.planner.multicast.trees import excess, multicast_trees

    problem = diamond()
    plan = plan_multicast(problem)
    trees = multicast_trees(plan)
    assert [t.next_hops for t in trees] == [{"d1": ("d2",), "s": ("d1",)}]
    assert trees[0].share == pytest.approx(1.0)
    assert excess(plan, trees) <= 1e-9
    for seed in range(6):
        rng = random.Random(seed)
        base = random_problem(rng, 3)
        plan = plan_multicast(base, compare=False)
        trees = multicast_trees(plan)
        assert sum(t.share for t in trees) == pytest.approx(1.0)
        for tree in trees:  # every destination reached from the source, once
            reached = {"s"}
            frontier = ["s"]
            while frontier:
                u = frontier.pop()
                for v in tree.next_hops.get(u, ()):
                    assert v not in reached
                    reached.add(v)
                    frontier.append(v)
            assert set(base.dsts) <= reached
        # What a gateway job is started with: the gateway reads every tree back.
        parsed = parse_trees({"trees": {str(i): t.job_tree() for i, t in enumerate(trees)}})
        assert [set(p.edges()) for p in parsed.values()] == [set(t.edges()) for t in trees]
        assert all(p.root == "s" and p.sinks == set(base.dsts) for p in parsed.values())


def test_a_plan_its_trees_cannot_carry_is_solved_again_on_the_trees() -> None:
    """Whatever the routes, the plan's trees carry exactly its hops (no edge over the plan)."""
    on_trees = 0
    for seed in range(40):
        problem = random_problem(random.Random(seed), 3)
        try:
            plan = solve_multicast(problem.with_objective("max_throughput", None))
        except InfeasibleError:
            continue
        rows = plan.details["multicast"]
        assert rows["tree_excess"] <= 1e-6, seed
        assert multicast_violations(problem, plan) == [], seed
        assert sum(t["share"] for t in rows["trees"]) == pytest.approx(1.0)
        on_trees += bool(plan.details.get("on_trees"))
    assert on_trees >= 1  # the re-solve happened on some of these graphs
