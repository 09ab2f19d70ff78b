"""Throughput model: calibration points, caps, symmetry, provenance and load time."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from importlib.resources import files
from typing import Any

import pytest

from skyplane_ops.profiles import Profile, load_default_profile, load_profile, model_params
from skyplane_ops.profiles.model import great_circle_km, rtt_ms


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_default_profile()


def model_doc() -> dict[str, Any]:
    path = files("skyplane_ops") / "default_profiles" / "throughput_model.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_calibration_points_within_stated_tolerance(profile: Profile) -> None:
    points = [p for p in model_doc()["calibration"] if p["tolerance"] is not None]
    assert len(points) >= 3
    for point in points:
        model = profile.throughput.gbps(point["src"], point["dst"])
        rel = abs(model - point["paper_gbps"]) / point["paper_gbps"]
        assert rel <= point["tolerance"], (point, model)


def test_paper_direct_examples(profile: Profile) -> None:
    grid = profile.throughput
    assert grid.gbps("azure:canadacentral", "gcp:asia-northeast1") == pytest.approx(6.2, rel=0.1)
    assert grid.gbps("azure:eastus", "aws:ap-northeast-1") == pytest.approx(1.71, rel=0.1)
    # The relays of the paper's example beat the direct path in the model too.
    via_japaneast = min(
        grid.gbps("azure:canadacentral", "azure:japaneast"),
        grid.gbps("azure:japaneast", "gcp:asia-northeast1"),
    )
    via_westus2 = min(
        grid.gbps("azure:canadacentral", "azure:westus2"),
        grid.gbps("azure:westus2", "gcp:asia-northeast1"),
    )
    direct = grid.gbps("azure:canadacentral", "gcp:asia-northeast1")
    assert via_japaneast > via_westus2 > direct


def test_plateaus_per_provider(profile: Profile) -> None:
    table = profile.throughput.as_dict()

    def intra(provider: str) -> list[float]:
        return [
            v for (s, d), v in table.items() if s.startswith(provider) and d.startswith(provider)
        ]

    assert max(intra("aws")) == 5.0 and statistics.median(intra("aws")) == 5.0
    assert max(intra("gcp")) == 7.0 and statistics.median(intra("gcp")) == 7.0
    assert max(intra("azure")) == 16.0 and statistics.median(intra("azure")) == 16.0
    inter = [v for (s, d), v in table.items() if s.split(":")[0] != d.split(":")[0]]
    assert statistics.median(inter) < statistics.median(intra("azure"))


def test_no_pair_exceeds_caps(profile: Profile) -> None:
    prices = profile.prices
    for (src, dst), value in profile.throughput.as_dict().items():
        cap = min(
            prices.vm(src.split(":")[0]).egress_cap_gbps,
            prices.vm(dst.split(":")[0]).ingress_cap_gbps,
        )
        assert 0 < value <= cap + 1e-12, (src, dst, value)


def test_intra_cloud_is_symmetric_and_monotone_in_distance(profile: Profile) -> None:
    grid, catalog = profile.throughput, profile.catalog
    for provider in ("aws", "azure", "gcp"):
        regions = catalog.by_provider(provider)
        for a in regions:
            for b in regions:
                assert grid.gbps(a.id, b.id) == grid.gbps(b.id, a.id)
        src = regions[0]
        by_distance = sorted(regions[1:], key=lambda r: great_circle_km(src, r))
        values = [grid.gbps(src.id, r.id) for r in by_distance]
        assert values == sorted(values, reverse=True)


def test_rtt_tracks_distance_in_published_range(profile: Profile) -> None:
    params = model_params()
    regions = list(profile.catalog)
    rtts = [rtt_ms(params, great_circle_km(a, b)) for a in regions for b in regions if a != b]
    assert 100 <= statistics.median(rtts) <= 200  # paper: median ~150 ms
    assert max(rtts) <= 490  # paper: up to ~490 ms


def test_grid_shape_and_provenance(profile: Profile) -> None:
    grid = profile.throughput
    n = len(profile.catalog)
    table = grid.as_dict()
    assert len(table) == n * (n - 1)
    assert all(s != d for s, d in table)
    assert grid.connections == 64
    for key in ("method", "date", "connections", "vm_class", "parameters", "sources"):
        assert key in grid.provenance
    assert grid.provenance["vm_class"]["aws"] == "m5.8xlarge"
    assert grid.source("aws:us-east-1", "gcp:us-central1") == "modelled"
    assert grid.measured_at("aws:us-east-1", "gcp:us-central1") is None
    table[("aws:us-east-1", "aws:us-east-2")] = -1.0  # as_dict returns a copy
    assert grid.gbps("aws:us-east-1", "aws:us-east-2") == 5.0


def test_model_is_deterministic() -> None:
    a = load_default_profile().throughput.as_dict()
    code = (
        "import json; from skyplane_ops.profiles import load_default_profile as l; "
        "print(json.dumps(sorted((s, d, v) for (s, d), v in l().throughput.as_dict().items())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    b = {(s, d): v for s, d, v in json.loads(out.stdout)}
    assert a == b


def test_vm_cap_override_recaps_the_grid() -> None:
    profile = load_profile(vm_classes={"aws": {"egress_cap_gbps": 2.5}})
    assert profile.throughput.gbps("aws:us-east-1", "aws:us-east-2") == 2.5
    assert profile.throughput.provenance["caps_gbps"]["aws"]["egress"] == 2.5
    assert load_default_profile().throughput.gbps("aws:us-east-1", "aws:us-east-2") == 5.0


def test_default_profile_load_time_sanity() -> None:
    """Cold load in a fresh interpreter (import + build); a loose bound, the target is 300 ms."""
    code = (
        "import time; t = time.perf_counter(); "
        "from skyplane_ops.profiles import load_default_profile; "
        "p = load_default_profile(); p.throughput.as_dict(); p.prices.as_dict(); "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 2.0
