"""Default throughput grid: published measurements where they exist, the calibrated model
elsewhere; caps, monotonicity, provenance, determinism and load time."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles import Profile, load_default_profile, load_profile, model_params
from skyplane_ops.profiles.loader import modelled_grid
from skyplane_ops.profiles.model import fit_model, great_circle_km
from skyplane_ops.profiles.published import published_document, published_rates

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def profile() -> Profile:
    return load_default_profile()


def model_doc() -> dict[str, Any]:
    path = files("skyplane_ops") / "default_profiles" / "throughput_model.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_paper_anchors_come_from_the_published_grid(profile: Profile) -> None:
    received = published_rates()
    points = model_doc()["calibration"]
    assert len(points) >= 4
    for point in points:
        pair = (point["src"], point["dst"])
        link = profile.throughput.link(*pair)
        assert link.source == "published" and link.connections == 64
        assert link.measured_at == "2022-01-29T00:00:00+00:00"
        assert profile.throughput.gbps(*pair) == received[pair]
    # The published figures of the paper's example (received column).
    grid = profile.throughput
    assert grid.gbps("azure:canadacentral", "gcp:asia-northeast1") == 4.178
    assert published_rates(column="sent")[("azure:canadacentral", "gcp:asia-northeast1")] == 6.625


def test_paper_relays_beat_the_direct_path(profile: Profile) -> None:
    grid = profile.throughput
    direct = grid.gbps("azure:canadacentral", "gcp:asia-northeast1")
    for relay in ("azure:japaneast", "azure:westus2"):
        via = min(grid.gbps("azure:canadacentral", relay), grid.gbps(relay, "gcp:asia-northeast1"))
        assert via > 2 * direct, relay


def test_published_pairs_and_model_pairs_split_the_grid(profile: Profile) -> None:
    links = profile.throughput.links()
    published = {p for p, link in links.items() if link.source == "published"}
    covered = set(published_document()["regions"])
    assert len(covered) == 63 and len(published) == 63 * 62
    for (src, dst), link in links.items():
        if src in covered and dst in covered:
            assert link.source == "published"
        else:
            assert link.source == "model" and link.measured_at is None
    assert profile.throughput.source("aws:us-east-1", "gcp:us-central1") == "measured"
    assert profile.throughput.source("aws:ca-west-1", "gcp:us-central1") == "modelled"


def test_model_pairs_never_exceed_caps(profile: Profile) -> None:
    prices = profile.prices
    for (src, dst), link in profile.throughput.links().items():
        if link.source != "model":
            continue  # measurements are what they are; the planner caps VMs separately
        cap = min(
            prices.vm(src.split(":")[0]).egress_cap_gbps,
            prices.vm(dst.split(":")[0]).ingress_cap_gbps,
        )
        assert 0 < link.gbps <= cap + 1e-12, (src, dst, link.gbps)


def test_model_is_symmetric_within_a_cloud_and_falls_with_distance(profile: Profile) -> None:
    grid, catalog = modelled_grid(profile.prices), profile.catalog
    for provider in ("aws", "azure", "gcp"):
        regions = catalog.by_provider(provider)
        for a in regions:
            for b in regions:
                assert grid.gbps(a.id, b.id) == grid.gbps(b.id, a.id)
        src = regions[0]
        by_distance = sorted(regions[1:], key=lambda r: great_circle_km(src, r))
        values = [grid.gbps(src.id, r.id) for r in by_distance]
        assert values == sorted(values, reverse=True)


def test_fitted_parameters_are_what_the_script_writes() -> None:
    params = model_params()
    assert set(params.by_pair) == {
        f"{s}->{d}" for s in ("aws", "azure", "gcp") for d in ("aws", "azure", "gcp")
    }
    assert all(fit.slope_per_1000km <= 0 and fit.pairs > 100 for fit in params.by_pair.values())
    source = ROOT.parent / "shared" / "data" / "skyplane-grid-2022-01-29" / "throughput.csv"
    source = source if source.exists() else ROOT.parents[1] / source.relative_to(ROOT.parent)
    if not source.exists():
        pytest.skip("the published CSV is not next to this checkout")
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "calibrate_throughput.py"),
            "--check",
            "--source",
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_grid_shape_and_provenance(profile: Profile) -> None:
    grid = profile.throughput
    n = len(profile.catalog)
    table = grid.as_dict()
    assert len(table) == n * (n - 1)
    assert all(s != d for s, d in table)
    assert grid.connections == 64
    for key in ("method", "date", "connections", "vm_class", "parameters", "sources"):
        assert key in grid.provenance
    published = grid.provenance["merged"][0]
    assert published["measured_at"] == "2022-01-29T00:00:00+00:00"
    assert published["column"] == "received"
    assert grid.measured_at("aws:ca-west-1", "gcp:us-central1") is None
    pair = ("aws:us-east-1", "aws:ca-west-1")
    table[pair] = -1.0  # as_dict returns a copy
    assert grid.gbps(*pair) > 0


def test_published_column_choice() -> None:
    sent = load_profile(published="sent").throughput
    none = load_profile(published="none").throughput
    pair = ("azure:canadacentral", "gcp:asia-northeast1")
    assert sent.gbps(*pair) == 6.625
    assert none.link(*pair).source == "model"
    with pytest.raises(ProfileError, match="published"):
        load_profile(published="median")


def test_model_is_deterministic() -> None:
    a = load_default_profile().throughput.as_dict()
    code = (
        "import json; from skyplane_ops.profiles import load_default_profile as l; "
        "print(json.dumps(sorted((s, d, v) for (s, d), v in l().throughput.as_dict().items())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    b = {(s, d): v for s, d, v in json.loads(out.stdout)}
    assert a == b


def test_vm_cap_override_recaps_model_pairs_only() -> None:
    model_pair = ("aws:us-east-1", "aws:ca-west-1")
    published_pair = ("aws:us-east-1", "aws:us-east-2")
    profile = load_profile(vm_classes={"aws": {"egress_cap_gbps": 2.5}})
    assert profile.throughput.gbps(*model_pair) == 2.5
    assert profile.throughput.provenance["caps_gbps"]["aws"]["egress"] == 2.5
    default = load_default_profile().throughput
    assert default.gbps(*model_pair) > 2.5
    assert profile.throughput.gbps(*published_pair) == default.gbps(*published_pair) == 4.734


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


def test_fit_model_recovers_a_known_line_and_clamps_rising_slopes(profile: Profile) -> None:
    regions = list(profile.catalog)[::3]
    samples = []
    for src in regions:
        for dst in regions:
            if src == dst:
                continue
            km = great_circle_km(src, dst)
            slope = 0.05 if (src.provider, dst.provider) == ("aws", "gcp") else -0.07
            samples.append((src, dst, math.exp(1.5 + slope * km / 1000)))
    params = fit_model(samples)
    fit = params.by_pair["azure->gcp"]
    assert fit.intercept == pytest.approx(1.5) and fit.slope_per_1000km == pytest.approx(-0.07)
    assert params.by_pair["aws->gcp"].slope_per_1000km == 0.0  # faster with distance: noise
    with pytest.raises(ProfileError, match="no samples"):
        fit_model([s for s in samples if s[0].provider != "azure"])
    assert fit.rmse_ln == pytest.approx(0.0, abs=1e-9)
