"""``skyplane-ops plan`` end to end through ``cli.main`` on the shipped default profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyplane_ops.cli import main
from skyplane_ops.planner import TransferPlan
from skyplane_ops.profiles import load_default_profile

SRC, DST = "azure:canadacentral", "gcp:asia-northeast1"


def test_plan_json_round_trips_and_plot_is_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "frontier.png"
    argv = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100"]
    argv += ["--min-throughput-gbps", "12", "--max-vms", "1", "--json", "--plot", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    plan = TransferPlan.from_json(out)
    assert plan.src == SRC and plan.dsts == (DST,)
    assert plan.predicted_gbps == pytest.approx(12.0)
    assert plan.baseline is not None and plan.baseline["predicted_gbps"] < 12.0
    assert len(plan.paths) >= 2  # one VM per region: the direct path alone cannot do 12 Gbps
    assert json.loads(out)["total_cost_usd"] == pytest.approx(plan.total_cost_usd)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(plan.details["frontier"]) == 40


def test_plan_text_mermaid_and_default_bound(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--src", "canadacentral", "--dst", DST, "--volume-gb", "100", "--mermaid"]
    assert main([*argv, "--max-vms", "2"]) == 0
    out = capsys.readouterr().out
    assert "Objective: fastest completion (provisioning + transfer), then the cheapest" in out
    assert "within 5% of the fastest" in out
    assert "direct (2 VM/region)" in out
    # Every hop says where its figures came from (these pairs are in the published grid).
    assert "source" in out and "measured" in out and "published" in out and "2022-01-29" in out
    assert "```mermaid\ngraph LR" in out


def test_plan_lp_and_deadline_and_cost_modes(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "1000", "--max-vms", "2", "--json"]
    assert main([*base, "--deadline-seconds", "900", "--lp"]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert plan.solver_status == "LP_ROUNDED" and "gap_to_milp" in plan.details
    assert plan.details["transfer_seconds"] <= 900 + 1e-6
    assert main([*base, "--max-cost-usd", "120"]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert plan.mode == "max_throughput" and plan.total_cost_usd <= 120 + 1e-6


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dst", "gcp:asia-northeast9"], "unknown region 'gcp:asia-northeast9'; did you mean"),
        (["--dst", DST, "--min-throughput-gbps", "5000"], "most this problem allows is"),
        (["--dst", DST, "--max-cost-usd", "0.01"], "cheapest plan costs about $"),
        (["--dst", DST, "--max-vms", "0"], "--max-vms-per-region must be at least 1"),
        (["--dst", SRC], "also a destination"),
        (["--dst", DST, "--deadline-seconds", "10"], "deadline 10 s leaves no time"),
        (["--dst", DST, "--deadline-seconds", "61"], "deadline 61 s (a throughput floor of 800"),
    ],
)
def test_plan_errors_are_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--src", SRC, "--volume-gb", "100", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_plan_uses_measured_grid_and_price_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--max-vms", "1"]
    base += ["--min-throughput-gbps", "12", "--json"]
    # The model's direct path (6.2 Gbps per VM pair) needs relays for 12 Gbps ...
    assert main(base) == 0
    assert len(TransferPlan.from_json(capsys.readouterr().out).paths) >= 2
    # ... a measured 15 Gbps direct path makes the direct path enough on its own.
    grid = tmp_path / "grid.csv"
    grid.write_text(
        f"src,dst,gbps,connections,measured_at\n{SRC},{DST},15.0,64,2026-01-01T00:00:00Z\n"
    )
    assert main([*base, "--measured-grid", str(grid)]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert [p.regions for p in plan.paths] == [(SRC, DST)]
    # An overridden Azure VM price shows up in the VM cost: ($36/h + GCP's) * (800/T + 60) s.
    overrides = tmp_path / "prices.json"
    overrides.write_text(json.dumps({"vm_classes": {"azure": {"usd_per_hour": 36.0}}}))
    assert main([*base, "--measured-grid", str(grid), "--profile-overrides", str(overrides)]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    # The direct path's full 15 Gbps is cheaper than 12 (less VM time), so the plan takes it.
    assert plan.predicted_gbps == pytest.approx(15.0, rel=1e-6)
    gcp_per_s = load_default_profile().prices.vm("gcp").usd_per_hour / 3600
    assert plan.vm_cost_usd == pytest.approx((0.01 + gcp_per_s) * (800 / 15 + 60), rel=1e-6)


def test_plan_on_a_grid_store_uses_its_latest_published_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    from skyplane_ops import api
    from skyplane_ops.errors import PlanningError
    from skyplane_ops.profiler import GridStore, Measurement

    store_uri = str(tmp_path / "grid")
    base = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--max-vms", "1"]
    base += ["--min-throughput-gbps", "12", "--json", "--grid-store", store_uri]
    # An empty store: the model, which needs relays for 12 Gbps; the plan says so.
    assert main(base) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert len(plan.paths) >= 2 and plan.details["grid"] == {"store": store_uri, "version": None}
    # Journalled but unpublished rows are not used; a published 15 Gbps direct path is.
    store = GridStore(store_uri)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    store.append(Measurement(SRC, DST, 15.0, 15.0, 15.0, 20.0, 64, 5.0, when))
    assert main(base) == 0
    assert len(TransferPlan.from_json(capsys.readouterr().out).paths) >= 2
    version = store.publish()
    assert main(base) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert [p.regions for p in plan.paths] == [(SRC, DST)]
    assert plan.details["grid"] == {"store": store_uri, "version": version}
    # The API is what the CLI used: the same plan; a grid file and a store are exclusive.
    same = api.plan(
        SRC, DST, 100, min_throughput_gbps=12, max_vms_per_region=1, grid_store=store_uri
    )
    assert same.paths == plan.paths and same.predicted_gbps == plan.predicted_gbps
    with pytest.raises(PlanningError, match="not both"):
        api.plan(SRC, DST, 100, measured_grid="g.csv", grid_store=store_uri)
    assert main([*base, "--measured-grid", "g.csv"]) == 2
    assert "not both" in capsys.readouterr().err


def test_plan_controls_reach_the_planner(capsys: pytest.CaptureFixture[str]) -> None:
    """--relays/--no-relays-in, --provisioning-seconds, --backend, --mip-gap in the JSON plan."""
    base = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--max-vms", "1", "--json"]
    base += ["--min-throughput-gbps", "12"]
    assert main(base) == 0
    free = TransferPlan.from_json(capsys.readouterr().out)
    relays = {r for p in free.paths for r in p.regions[1:-1]}
    assert relays and free.details["provisioning_seconds"] == 60.0  # cloud fallback
    denied = sorted(relays)[0]
    argv = [*base, "--no-relays-in", denied, "--mip-gap", "0.01", "--provisioning-seconds", "7"]
    assert main(argv) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    assert denied not in {r for p in plan.paths for r in p.regions}
    assert plan.details["provisioning_seconds"] == 7.0
    assert plan.details["mip_gap_target"] == 0.01
    # Only AWS relays: 12 Gbps (feasible above through Azure/GCP relays) is out of reach.
    assert main([*base, "--relays", "aws:*"]) != 0
    assert "12 Gbps is infeasible" in capsys.readouterr().err
    assert main([*base[:-2], "--min-throughput-gbps", "6", "--relays", "aws:*,azure:eastus"]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    relays = {r for p in plan.paths for r in p.regions[1:-1]}
    assert all(r.startswith("aws:") or r == "azure:eastus" for r in relays)
    assert main([*base, "--backend", "ssh"]) == 0
    assert TransferPlan.from_json(capsys.readouterr().out).details["provisioning_seconds"] == 2.2
    # Measured-only: these regions are in the published grid, so every hop is a measurement;
    assert main([*base, "--measured-only"]) == 0
    out = capsys.readouterr().out
    assert '"source": "published"' in out and '"source": "model"' not in out
    # a region only the model covers has no measured edge, so nothing can be planned.
    argv = ["plan", "--src", "azure:swedencentral", *base[3:], "--measured-only"]
    assert main(argv) != 0
    assert "no path with measured throughput" in capsys.readouterr().err
