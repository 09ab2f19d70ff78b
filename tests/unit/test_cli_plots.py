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
