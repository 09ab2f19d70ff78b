"""The link-aware connection model, whole connections, provenance and the completion-time
default, on hand-built problems and on the shipped profile (through ``api.plan`` and the CLI)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.cli import build_parser
from skyplane_ops.commands.cp import make_run
from skyplane_ops.planner import (
    Problem,
    RegionSpec,
    TransferPlan,
    build_problem,
    max_throughput_gbps,
    plan_transfer,
    solve_plan,
)
from skyplane_ops.planner.check import plan_violations
from skyplane_ops.planner.problem import LinkSpec
from skyplane_ops.profiles import load_default_profile, load_profile

MBIT = 1e-3  # Gbps


def wan(**links_kw: object) -> Problem:
    """The issue's 4-site WAN shape: one host per site, own network (no prices), the direct
    link the slowest, two relays with independent links; every link measured full with 4
    connections (so a connection carries a quarter of it) and at 64."""
    sites = ("site:a", "site:b", "site:r1", "site:r2")
    regions = {s: RegionSpec(s, "own", 0.0, 10.0, 10.0, 1) for s in sites}
    rates = {
        ("site:a", "site:b"): 60 * MBIT,
        ("site:a", "site:r1"): 100 * MBIT,
        ("site:r1", "site:b"): 100 * MBIT,
        ("site:a", "site:r2"): 80 * MBIT,
        ("site:r2", "site:b"): 80 * MBIT,
    }
    links = {
        e: LinkSpec(
            per_conn_gbps=g / 4,
            sat_gbps=g,
            connections=64,
            source="profile",
            measured_at="2026-11-24T05:00:00+00:00",
            **links_kw,  # type: ignore[arg-type]
        )
        for e, g in rates.items()
    }
    return Problem(
        "site:a",
        ("site:b",),
        1.0,
        regions,
        rates,
        dict.fromkeys(rates, 0.0),
        provisioning_seconds=2.2,
        links=links,
    )


MAX_FLOW = (60 + 100 + 80) * MBIT


def test_wan_plan_spreads_over_every_path_up_to_the_max_flow() -> None:
    problem = wan()
    plan = plan_transfer(problem)
    assert {p.regions for p in plan.paths} == {
        ("site:a", "site:b"),
        ("site:a", "site:r1", "site:b"),
        ("site:a", "site:r2", "site:b"),
    }
    assert MAX_FLOW * 0.99 <= plan.predicted_gbps <= MAX_FLOW * (1 + 1e-9)
    assert plan.vms == dict.fromkeys(problem.regions, 1)
    # Each link takes the 4 connections that fill it; the rest of the budget stays free.
    assert {(h.src, h.dst): h.connections for h in plan.hops}[("site:a", "site:r1")] == 4
    assert all(h.source == "profile" and h.measured_at for h in plan.hops)
    assert plan_violations(problem, plan) == []


def test_wan_with_only_the_64_connection_figure_is_the_papers_model() -> None:
    """Without per-connection rates the paper's budget puts everything on the best relay,
    and raising --max-conns does not predict more than the links were measured to carry."""
    problem = dataclasses.replace(wan(), links={})
    plan = plan_transfer(problem)
    assert [p.regions for p in plan.paths] == [("site:a", "site:r1", "site:b")]
    assert plan.predicted_gbps == pytest.approx(100 * MBIT)
    wide = dataclasses.replace(problem, max_conns_per_vm=1024)
    plan = plan_transfer(wide)
    assert plan.predicted_gbps <= MAX_FLOW * (1 + 1e-9)
    assert all(p.gbps <= 100 * MBIT * (1 + 1e-9) for p in plan.paths)
    assert plan_violations(wide, plan) == []


def test_region_cap_limits_a_link_whatever_the_vm_count() -> None:
    base = wan()
    regions = {u: dataclasses.replace(s, max_vms=4) for u, s in base.regions.items()}
    links = dict(base.links)
    links[("site:a", "site:r1")] = dataclasses.replace(
        links[("site:a", "site:r1")], region_cap_gbps=100 * MBIT
    )
    problem = dataclasses.replace(base, regions=regions, links=links)
    plan = solve_plan(problem.with_objective("max_throughput", None))
    flows = {(h.src, h.dst): h.gbps for h in plan.hops}
    assert flows[("site:a", "site:r1")] <= 100 * MBIT * (1 + 1e-9)
    # The other links grow with VM pairs: 4 x (60 + 80) + 100 Mbit/s.
    assert plan.predicted_gbps == pytest.approx((4 * 140 + 100) * MBIT, rel=1e-6)
    assert plan_violations(problem, plan) == []


def test_64_connection_figures_reduce_to_the_papers_model() -> None:
    """Links with only the 64-connection figure (no per-connection rate or saturation) give
    exactly the plan of the paper's model (no LinkSpecs at all), in both modes."""
    profile = load_default_profile()
    for src, dst in [("aws:us-east-1", "gcp:europe-west1"), ("azure:eastus", "aws:ap-northeast-1")]:
        for vms in (1, 4):
            base = build_problem(profile, src, dst, 100.0, max_vms=vms)
            assert base.links and all(s.per_conn_gbps is None for s in base.links.values())
            tmax = max_throughput_gbps(base)
            for problem in (
                base.with_objective("min_cost", 0.6 * tmax),
                base.with_objective("max_throughput", None),
            ):
                a = solve_plan(problem)
                b = solve_plan(dataclasses.replace(problem, links={}))
                assert a.paths == b.paths and a.vms == b.vms
                assert a.total_cost_usd == b.total_cost_usd


@pytest.mark.parametrize(
    ("src", "dst"),
    [("aws:us-east-1", "aws:us-west-2"), ("azure:canadacentral", "gcp:asia-northeast1")],
)
def test_small_copies_get_one_vm_per_end(src: str, dst: str) -> None:
    """23 MB: ~0.05 s of transfer behind 60 s of provisioning; more VMs only cost money."""
    plan = api.plan(src, dst, 0.023)
    assert plan.vms == {src: 1, dst: 1}
    fastest = plan.details["fastest"]
    assert plan.details["completion_seconds"] <= 1.05 * fastest["completion_seconds"]


def test_cp_cost_ceiling_does_not_buy_a_second_with_26_vms() -> None:
    """``cp --max-cost-usd 1`` on 0.3 GB: the fastest plan under $1 has ~27 VMs and finishes
    0.4 s sooner after 60 s of provisioning; the cheapest within 5% of it is chosen."""
    args = build_parser().parse_args(
        [
            "cp",
            "file:///nonexistent/src",
            "file:///nonexistent/dst",
            "--src-region",
            "azure:canadacentral",
            "--dst-region",
            "gcp:asia-northeast1",
            "--max-cost-usd",
            "1",
            "--backend",
            "aws",
            "--vms-only",  # the overlay's plan (0.3 GB alone would go to the worker)
        ]
    )
    plan = make_run(args, sync=False, volume_gb=0.3).make_plan()  # as the command plans
    fastest = plan.details["fastest"]
    assert sum(fastest["vms"].values()) > 20  # what the old planner shipped
    assert sum(plan.vms.values()) <= 3
    assert plan.details["completion_seconds"] <= 1.05 * fastest["completion_seconds"]
    assert plan.total_cost_usd < fastest["total_cost_usd"] / 5
    hop = TransferPlan.from_json(plan.to_json()).hops[0]  # provenance survives the JSON
    assert hop.source in ("published", "model")
    assert (hop.measured_at is not None) == (hop.source == "published")


def test_completion_tolerance_zero_keeps_the_fastest() -> None:
    plan = api.plan("aws:us-east-1", "aws:us-west-2", 0.3, completion_tolerance=0.0)
    assert sum(plan.vms.values()) > 2


def test_whole_connections_stay_within_the_limit_after_rounding() -> None:
    """a -> c direct (1 Gbps at 64 conns) or via b (3 Gbps), one VM each, 2.1 Gbps: the
    fractional optimum needs 28.8 + 35.2 = 64 connections at a, which round up to 65."""
    regions = {r: RegionSpec(r, "aws", 3.6, 10.0, 10.0, 1) for r in "abc"}
    grid = {("a", "c"): 1.0, ("a", "b"): 3.0, ("b", "c"): 3.0}
    prices = {("a", "c"): 0.02, ("a", "b"): 0.02, ("b", "c"): 0.02}
    problem = Problem("a", ("c",), 100.0, regions, grid, prices, "min_cost", 2.1)
    plan = solve_plan(problem, exact_floor=True)
    conns = {(h.src, h.dst): h.connections for h in plan.hops}
    assert conns[("a", "c")] + conns[("a", "b")] <= 64
    assert plan.predicted_gbps == pytest.approx(2.1)
    assert plan.details["whole_connections"] == "same fleet"
    assert plan_violations(problem, plan) == []


def test_own_sites_through_the_profile_contract(tmp_path: Path) -> None:
    """Custom regions (``Profile.with_regions``) and a measured grid at two connection counts
    (``load_profile(measured_grid=...)``): the planner reads both through ``links()`` and
    ``vm_for_region``, relays only through sites, and spreads over every path."""
    grid = tmp_path / "grid.csv"
    rows = ["src,dst,gbps,connections,measured_at"]
    when = "2026-11-24T05:00:00+00:00"
    for (u, v), mbit in {
        ("site:a", "site:b"): 60,
        ("site:a", "site:r1"): 100,
        ("site:r1", "site:b"): 100,
        ("site:a", "site:r2"): 80,
        ("site:r2", "site:b"): 80,
    }.items():
        rows += [f"{u},{v},{mbit / 1000},4,{when}", f"{u},{v},{mbit / 1000},64,{when}"]
    grid.write_text("\n".join(rows) + "\n")
    sites = [{"id": s, "hosts": 1} for s in ("site:a", "site:b", "site:r1", "site:r2")]
    profile = load_profile(custom_regions=sites, measured_grid=str(grid))
    problem = build_problem(
        profile,
        "site:a",
        "site:b",
        1.0,
        relays_allow=["site:*"],
        measured_only=True,
        provisioning_seconds=2.2,
    )
    assert {s.max_vms for s in problem.regions.values()} == {1}
    assert {s.vm_usd_per_hour for s in problem.regions.values()} == {0.0}
    plan = plan_transfer(problem)
    assert len(plan.paths) == 3
    assert MAX_FLOW * 0.99 <= plan.predicted_gbps <= MAX_FLOW * (1 + 1e-9)
    assert {h.source for h in plan.hops} == {"profile"}
    assert all(h.measured_at and h.measured_at.startswith("2026-11-24") for h in plan.hops)
    assert plan_violations(problem, plan) == []
