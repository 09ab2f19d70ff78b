"""A 4-site WAN on the netns testbed, through the public CLI only: ``profile`` then ``cp``.

The same shape as ``benchmarks/wan.py`` with little data: source and destination joined by
the slowest link, two relays with links of their own (independent of each other), tbf links
that fill with a connection or two. The profiler measures every pair at two connection
counts; ``cp`` plans on that grid with the testbed's sites as the universe, copies, verifies
and reports predicted vs achieved per path. With the link-aware connection model the plan
uses every useful path: the direct link and both relays.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from skyplane_ops.cli import main
from skyplane_ops.profiler import GridStore, planner_grid
from skyplane_ops.profiler.universe import FleetUniverse
from skyplane_ops.profiles import load_default_profile
from skyplane_ops.provision.netns.host import list_namespaces
from skyplane_ops.provision.netns.testbed import wan_grid

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces, veth and tc need root (CI runs as root)"
    ),
    pytest.mark.skipif(shutil.which("tc") is None, reason="tc (iproute2) is not installed"),
]

SRC, DST, R1, R2 = "site:src", "site:dst", "site:relay-1", "site:relay-2"
SITES = [SRC, DST, R1, R2]
GRID = wan_grid(SITES, direct_mbit=40, relay_mbit=80, cross_mbit=10)
USEFUL = {(SRC, DST), (SRC, R1, DST), (SRC, R2, DST)}


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("wan")
    store = str(work / "grid")
    backend = ["--backend", "netns", "--backend-options", json.dumps({"grid": GRID, "scale": 1})]
    profile = ["profile", *backend, "--store", store, "--connections", "2,16", "--duration", "2"]
    assert main(profile) == 0
    src = work / "src"
    src.mkdir()
    data = {f"f{i}.bin": os.urandom(2 << 20) for i in range(12)}
    for name, blob in data.items():
        (src / name).write_bytes(blob)
    out = work / "cp.json"
    cp = ["cp", f"file://{src}", f"file://{work / 'dst'}", "--src-region", SRC]
    cp += ["--dst-region", DST, *backend, "--grid-store", store, "--chunk-mib", "1", "--json"]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*cp, "--no-progress"]) == 0
    out.write_text(buf.getvalue())
    return {"store": store, "result": json.loads(buf.getvalue()), "data": data, "dst": work / "dst"}


def test_every_pair_is_profiled_at_both_counts_close_to_its_shaped_rate(copied) -> None:
    rows = [m for m in GridStore(copied["store"]).measurements() if m.source == "profile"]
    assert {m.pair for m in rows} == {(a, b) for a in SITES for b in SITES if a != b}
    assert {m.connections for m in rows} == {2, 16}
    for m in rows:
        shaped = GRID[f"{m.src}->{m.dst}"]
        if shaped < 0.04:
            assert m.gbps > 0  # a short probe of a 10 Mbit/s link is mostly its ramp
            continue
        # Never above what the link carries; not far below it even on a loaded 2-core machine
        # (the accuracy itself, ~5%, is measured by benchmarks/profiler.py, not asserted here).
        assert 0.5 * shaped < m.gbps < 1.05 * shaped, (m.pair, m.connections, m.gbps, shaped)
    # Full with two connections: per-connection rate x 16 is far above saturation.
    base = FleetUniverse.from_backend("netns", {"grid": GRID}).profile(  # type: ignore[union-attr]
        load_default_profile(), None
    )
    links = planner_grid(copied["store"], base.throughput).links()
    link = links[(SRC, R1)]
    assert link.per_conn_gbps * 16 > 1.5 * link.sat_gbps


def test_the_copy_is_whole_and_reports_every_path(copied) -> None:
    result, dst = copied["result"], copied["dst"]
    assert result["verification"]["status"] == "passed"
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == copied["data"]
    plan_paths = {tuple(p["regions"]) for p in result["plan_summary"]["paths"]}
    assert plan_paths <= USEFUL and all(n <= 1 for n in result["plan_summary"]["vms"].values())
    assert {tuple(p["regions"]) for p in result["paths"]} == plan_paths
    assert all(p["achieved_gbps"] > 0 and p["predicted_gbps"] > 0 for p in result["paths"])
    # This copy's namespaces are gone (others may belong to a concurrent run on the machine).
    assert not [ns for ns in list_namespaces() if f".{result['transfer_id']}." in ns]


def test_the_plan_uses_every_useful_path(copied) -> None:
    used = {tuple(p["regions"]) for p in copied["result"]["plan_summary"]["paths"] if p["share"]}
    assert used == USEFUL
