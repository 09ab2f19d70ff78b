"""The profiler on the netns testbed: real agents in namespaces, tbf-shaped links.

Three regions with links of different rates; the measured grid must match the shaped rates
within 10%, and the planner fed with it must take the relay where the relay is faster and the
direct path where it is not.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from skyplane_ops.planner import build_problem, plan_transfer
from skyplane_ops.profiler import GridStore, planner_grid, refresh_grid
from skyplane_ops.profiles import load_default_profile

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces, veth and tc need root (CI runs as root)"
    ),
    pytest.mark.skipif(shutil.which("tc") is None, reason="tc (iproute2) is not installed"),
]

A, B, C = "aws:us-east-1", "aws:us-west-2", "gcp:us-central1"
SCALE = 0.1  # grid Gbps -> Mbit/s on the testbed: 1 Gbps becomes 100 Mbit/s
# A->B is slow but A->C->B is fast (take the relay); B->A is fast and B->C slow (go direct).
SHAPED_GBPS = {
    (A, B): 0.4,
    (B, A): 2.0,
    (A, C): 1.6,
    (C, A): 1.2,
    (C, B): 2.4,
    (B, C): 0.4,
}


def _options() -> dict:
    return {"grid": {f"{a}->{b}": g for (a, b), g in SHAPED_GBPS.items()}, "scale": SCALE}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
    store = str(tmp_path_factory.mktemp("netns-grid") / "grid")
    result = refresh_grid(
        [A, B, C],
        backend="netns",
        backend_options=_options(),
        connections=8,
        duration_s=3.0,
        store_uri=store,
    )
    return store, result


def test_measured_grid_matches_the_shaped_rates(profiled) -> None:
    store, result = profiled
    assert result.measured == 6 and not result.failed
    latest = GridStore(store).latest()
    errors = {}
    for pair, gbps in SHAPED_GBPS.items():
        shaped_mbit = gbps * 1000 * SCALE
        measured_mbit = latest[pair].gbps * 1000
        errors[pair] = (measured_mbit - shaped_mbit) / shaped_mbit
    worst = max(errors.items(), key=lambda kv: abs(kv[1]))
    assert abs(worst[1]) <= 0.10, f"measured vs shaped errors: {errors}"
    assert all(latest[p].rtt_ms > 0 and latest[p].backend == "netns" for p in SHAPED_GBPS)


def _route(store: str, src: str, dst: str) -> tuple[str, ...]:
    profile = load_default_profile()
    measured = planner_grid(store, profile.throughput)
    problem = build_problem(
        dataclasses.replace(profile, throughput=measured),
        src,
        dst,
        volume_gb=1.0,
        objective="max_throughput",
        bound=1e6,
        max_vms=1,
        regions=[A, B, C],
    )
    plan = plan_transfer(problem)
    main = max(plan.paths, key=lambda p: p.share)
    return main.regions


def test_planner_takes_the_relay_where_it_is_faster(profiled) -> None:
    store, _ = profiled
    assert _route(store, A, B) == (A, C, B)


def test_planner_goes_direct_where_the_relay_is_slower(profiled) -> None:
    store, _ = profiled
    assert _route(store, B, A) == (B, A)


def test_the_netns_testbed_is_gone_after_the_run(profiled) -> None:
    _, result = profiled
    from skyplane_ops.provision.netns.host import list_namespaces

    assert not [ns for ns in list_namespaces() if result.run_id in ns]


def test_profile_cli_on_netns(tmp_path: Path) -> None:
    """The CLI end to end on two shaped regions, then grid show and diff."""
    import json

    from skyplane_ops.cli import main

    store = str(tmp_path / "grid")
    opts = json.dumps({"grid": {f"{A}->{B}": 1.0, f"{B}->{A}": 0.5}, "scale": SCALE})
    common = ["--regions", f"{A},{B}", "--backend", "netns", "--backend-options", opts]
    assert (
        main(["profile", *common, "--connections", "4", "--duration", "2", "--store", store]) == 0
    )
    grid = GridStore(store)
    v1 = grid.latest_version()
    assert (
        main(["profile", *common, "--connections", "4", "--duration", "1", "--store", store]) == 0
    )
    v2 = grid.latest_version()
    assert v1 and v2 and v1 != v2
    assert main(["grid", "show", "--store", store, "--stale-after", "1h"]) == 0
    assert main(["grid", "diff", "--store", store, v1, v2, "--threshold", "10"]) == 0
