"""``plan --plot`` and ``plan --route``: what the pictures say (read back from their SVG text)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from skyplane_ops.cli import main
from skyplane_ops.planner import TransferPlan

SRC, DST = "azure:canadacentral", "gcp:asia-northeast1"


def _texts(svg: Path) -> str:
    root = ET.fromstring(svg.read_text())
    return " ".join("".join(el.itertext()) for el in root.iter() if el.tag.endswith("text"))


def test_frontier_shows_the_bound_the_points_and_the_vm_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svg, png = tmp_path / "frontier.svg", tmp_path / "frontier.png"
    argv = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--json"]
    argv += ["--min-throughput-gbps", "12", "--max-vms-per-region", "1"]
    assert main([*argv, "--plot", str(svg)]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    text = _texts(svg)
    assert "throughput floor 12 Gbit/s" in text
    assert f"chosen plan: {plan.predicted_gbps:.2f} Gbit/s, ${plan.total_cost_usd:.2f}" in text
    assert plan.baseline is not None
    direct = f"direct: {plan.baseline['predicted_gbps']:.2f} Gbit/s"
    assert direct in text and "RON:" in text
    assert "at most 1 VM(s) per region" in text
    # A cost ceiling is drawn as one too; PNG by extension.
    ceiling = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--max-cost-usd", "12"]
    assert main([*ceiling, "--plot", str(svg)]) == 0
    assert "cost ceiling $12" in _texts(svg) and "provider limit" in _texts(svg)
    assert main([*ceiling, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_route_picture_as_svg_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--src", SRC, "--dst", DST, "--volume-gb", "100", "--json"]
    argv += ["--min-throughput-gbps", "12", "--max-vms-per-region", "1"]
    svg, png = tmp_path / "route.svg", tmp_path / "route.png"
    assert main([*argv, "--route", str(svg)]) == 0
    plan = TransferPlan.from_json(capsys.readouterr().out)
    root = ET.fromstring(svg.read_text())
    lines = [el for el in root.iter() if el.tag.endswith("line")]
    assert len(lines) == len(plan.hops) >= 2
    # Edge widths follow Gbit/s: 1 px + 8 px x the hop's share of the busiest hop.
    top = max(h.gbps for h in plan.hops)
    want = sorted(round(1 + 8 * h.gbps / top, 1) for h in plan.hops)
    assert sorted(float(el.get("stroke-width", "0")) for el in lines) == want
    text = _texts(svg)
    assert all(region in text for region in plan.regions)
    assert f"{plan.predicted_gbps:.2f} Gbit/s predicted" in text
    assert main([*argv, "--route", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_airflow_stores_the_same_route_picture_next_to_the_plan(tmp_path: Path) -> None:
    """The Airflow route link opens the picture ``write_plan`` stored next to the plan JSON:
    the very SVG the CLI's ``plan --route`` and the Dagster metadata draw."""
    from skyplane_ops import api
    from skyplane_ops.airflow.hooks import SkyplaneHook
    from skyplane_ops.airflow.links import route_uri_for

    plan = api.plan(SRC, DST, 100, min_throughput_gbps=12, max_vms_per_region=1)
    stored = SkyplaneHook.write_plan(plan, str(tmp_path / "plans" / "t1.json"))
    route = Path(route_uri_for(stored))
    assert route == tmp_path / "plans" / "t1.route.svg"
    assert route.read_text() == api.route_svg(plan)
    ET.fromstring(route.read_text())


def test_the_commands_import_only_the_api() -> None:
    """One door: the CLI and its commands reach the core only through ``skyplane_ops.api``."""
    import ast

    root = Path(__file__).resolve().parents[2] / "skyplane_ops"
    allowed = ("skyplane_ops.api", "skyplane_ops.commands", "skyplane_ops.__version__")
    wrong = []
    for path in [root / "cli.py", *sorted((root / "commands").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
                if node.module == "skyplane_ops":  # ``from skyplane_ops import api``
                    names = [f"skyplane_ops.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("skyplane_ops") and not name.startswith(allowed):
                    wrong.append(f"{path.name}: {name}")
    assert wrong == []
