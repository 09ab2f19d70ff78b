"""Skyplane's 160 cases: the planner on Skyplane's published grid (2022-01-29), compared with
the plans the planner made before the link-aware model (``data/planner_paper_reference.json``,
made by commit 6f59295 with these same functions).

With only the 64-connection figure per edge the link-aware model is the paper's (see
``skyplane_ops/planner/formulation.py``), so the plans must stay as they were; what may move
them is the whole-connection repair (the paper's integer ``M``), which re-solves a plan whose
hops, rounded up to whole connections, would exceed a region's connections per VM.

The grid file is Skyplane's ``throughput.csv`` (``SKYPLANE_GRID_CSV``, default the shared copy
in ``/work/shared/data/skyplane-grid-2022-01-29``); ``benchmarks/planner.py`` runs the cases.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PUBLISHED = Path(
    os.environ.get("SKYPLANE_GRID_CSV", "/work/shared/data/skyplane-grid-2022-01-29/throughput.csv")
)
REFERENCE = Path(__file__).parent / "data" / "planner_paper_reference.json"
CASE_PAIRS: list[tuple[str, str]] = [
    ("aws:us-east-1", "aws:us-west-2"),
    ("aws:us-east-1", "gcp:europe-west1"),
    ("aws:eu-west-1", "azure:koreacentral"),
    ("aws:sa-east-1", "aws:ap-southeast-2"),
    ("aws:af-south-1", "gcp:us-central1"),
    ("aws:ap-south-1", "azure:westeurope"),
    ("azure:eastus", "aws:ap-northeast-1"),
    ("azure:westus2", "azure:japaneast"),
    ("azure:westus3", "gcp:europe-west4"),
    ("azure:australiaeast", "aws:eu-central-1"),
    ("azure:uksouth", "gcp:us-east4"),
    ("azure:canadacentral", "gcp:asia-northeast1"),
    ("gcp:us-central1", "gcp:asia-southeast1"),
    ("gcp:europe-west1", "aws:us-west-1"),
    ("gcp:asia-east1", "azure:eastus2"),
    ("gcp:southamerica-east1", "aws:ap-northeast-2"),
    ("gcp:australia-southeast1", "azure:northeurope"),
    ("aws:ca-central-1", "gcp:asia-south1"),
    ("aws:me-south-1", "azure:westus"),
    ("gcp:us-west1", "aws:eu-west-2"),
]


def _region(zone_or_region: str) -> str:
    """GCP ends are zones (``gcp:us-east1-b``): the region drops the last ``-x``."""
    return zone_or_region.rsplit("-", 1)[0] if zone_or_region.startswith("gcp:") else zone_or_region


def published_grid(path: Path = PUBLISHED) -> dict[tuple[str, str], float]:
    """Premium-tier Gbps sent per region pair (the figure Skyplane planned with), averaged."""
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row["src_tier"] != "PREMIUM" or row["dst_tier"] != "PREMIUM":
                continue
            src, dst = _region(row["src"]), _region(row["dst"])
            if src != dst:
                samples[(src, dst)].append(float(row["gbit_s_sent"]))
    return {pair: statistics.fmean(v) for pair, v in samples.items()}


@dataclasses.dataclass(frozen=True)
class PublishedLink:
    """What the ``profiles`` helper's ``LinkEstimate`` holds for a published 64-connection row."""

    gbps: float
    connections: int = 64
    per_conn_gbps: float | None = None
    sat_gbps: float | None = None
    region_cap_gbps: float | None = None
    source: str = "published"
    measured_at: str | None = "2022-01-29T00:00:00Z"


class PublishedThroughput:
    """A throughput grid over the published pairs, with ``links()`` as the contract describes."""

    connections = 64

    def __init__(self, values: Mapping[tuple[str, str], float]) -> None:
        self._values = dict(values)

    def as_dict(self) -> dict[tuple[str, str], float]:
        return dict(self._values)

    def links(self) -> dict[tuple[str, str], PublishedLink]:
        return {pair: PublishedLink(gbps) for pair, gbps in self._values.items()}


def published_profile() -> tuple[Any, list[str]]:
    """The default profile with the published grid, and the 63 regions it covers."""
    from skyplane_ops.profiles import load_default_profile

    grid = published_grid()
    profile = dataclasses.replace(load_default_profile(), throughput=PublishedThroughput(grid))
    regions = sorted({u for pair in grid for u in pair})
    return profile, regions


def skyplane_cases() -> list[dict[str, Any]]:
    """160 cases: 20 pairs x VM limit {1, 4} x {floor 0.3/0.7 Tmax, ceiling 1x/2x direct cost}.

    100 GB, t0 = 60 s, at most one relay; bounds come from LPs that do not depend on how
    connections are rounded, so the same cases can be re-planned by any version of the planner.
    """
    from skyplane_ops.planner import build_problem, direct_plan, max_throughput_gbps

    profile, regions = published_profile()
    cases = []
    for src, dst in CASE_PAIRS:
        for vms in (1, 4):
            base = build_problem(
                profile, src, dst, 100.0, max_vms=vms, regions=regions, provisioning_seconds=60.0
            )
            tmax = max_throughput_gbps(base)
            direct = direct_plan(base, 1).total_cost_usd
            for kind, bound in (
                ("a", 0.3 * tmax),
                ("a", 0.7 * tmax),
                ("b", 1.0 * direct),
                ("b", 2.0 * direct),
            ):
                cases.append({"src": src, "dst": dst, "max_vms": vms, "mode": kind, "bound": bound})
    return cases


def solve_case(
    case: Mapping[str, Any], profile: Any, regions: list[str], *, strip_links: bool = False
) -> dict[str, Any]:
    """The exact plan of one case (``strip_links``: without per-edge link figures)."""
    from skyplane_ops.planner import build_problem, solve_plan

    objective = "min_cost" if case["mode"] == "a" else "max_throughput"
    problem = build_problem(
        profile,
        case["src"],
        case["dst"],
        100.0,
        objective=objective,
        bound=case["bound"],
        max_vms=case["max_vms"],
        regions=regions,
        provisioning_seconds=60.0,
    )
    if strip_links:
        problem = dataclasses.replace(problem, links={})
    plan = solve_plan(problem)
    return {
        "gbps": plan.predicted_gbps,
        "cost_usd": plan.total_cost_usd,
        "vms": dict(plan.vms),
        "paths": sorted("/".join(p.regions) for p in plan.paths),
    }


def compare_with_reference(reference: Path = REFERENCE, limit: int | None = None) -> dict[str, Any]:
    """Re-plan the reference's cases; count identical plans and the cost/throughput moves."""
    from skyplane_ops.planner import build_problem, solve_plan

    rows = json.loads(reference.read_text())["rows"][:limit]
    profile, regions = published_profile()
    out = []
    for ref in rows:
        objective = "min_cost" if ref["mode"] == "a" else "max_throughput"
        problem = build_problem(
            profile,
            ref["src"],
            ref["dst"],
            100.0,
            objective=objective,
            bound=ref["bound"],
            max_vms=ref["max_vms"],
            regions=regions,
            provisioning_seconds=60.0,
        )
        start, cpu = time.perf_counter(), time.process_time()
        plan = solve_plan(problem)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        paths = sorted("/".join(p.regions) for p in plan.paths)
        out.append(
            {
                "src": ref["src"],
                "dst": ref["dst"],
                "max_vms": ref["max_vms"],
                "mode": ref["mode"],
                "seconds": seconds,
                "cpu_seconds": cpu,
                "same_plan": paths == ref["paths"] and dict(plan.vms) == ref["vms"],
                "cost_change": plan.total_cost_usd / ref["cost_usd"] - 1,
                "gbps_change": plan.predicted_gbps / ref["gbps"] - 1,
                "whole_connections": plan.details.get("whole_connections", "-"),
            }
        )

    def changes(mode: str, key: str) -> list[float]:
        return [r[key] for r in out if r["mode"] == mode]

    return {
        "cases": len(out),
        "same_plan": sum(r["same_plan"] for r in out),
        "same_cost_and_gbps": sum(
            abs(r["cost_change"]) < 1e-6 and abs(r["gbps_change"]) < 1e-6 for r in out
        ),
        "resolved_for_whole_connections": sum(r["whole_connections"] != "-" for r in out),
        "a_cost_change_max": max(changes("a", "cost_change")),
        "a_cost_change_median": statistics.median(changes("a", "cost_change")),
        "b_gbps_change_min": min(changes("b", "gbps_change")),
        "b_cost_change_max": max(changes("b", "cost_change")),
        "b_gbps_change_median": statistics.median(changes("b", "gbps_change")),
        "median_ms": 1e3 * statistics.median(r["seconds"] for r in out),
        "median_cpu_ms": 1e3 * statistics.median(r["cpu_seconds"] for r in out),
        "unchanged_when_not_resolved": all(
            r["same_plan"] and abs(r["cost_change"]) < 1e-6 and abs(r["gbps_change"]) < 1e-6
            for r in out
            if r["whole_connections"] == "-"
        ),
        "rows": out,
    }
