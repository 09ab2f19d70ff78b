"""Multicast on the netns WAN: the planner's trees run on real gateways in network namespaces
joined by tc-shaped veth links (a source, a relay and three destinations), and every
destination ends up byte-identical while the source sends the data once. Needs root."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from skyplane_ops.planner.multicast.api import plan_multicast
from skyplane_ops.provision import get_provisioner
from skyplane_ops.provision.netns import NetnsProvisioner
from skyplane_ops.provision.netns.host import list_namespaces
from skyplane_ops.testing.multicast import (
    WAN_DSTS,
    WAN_RELAY,
    WAN_SCALE,
    WAN_SRC,
    folder_chunks,
    job_trees,
    run_trees,
    wan_grid,
    wan_problem,
)
from skyplane_ops.testing.transfer import read_tree, write_dataset

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces, veth and tc need root (CI runs as root)"
    ),
]

MiB = 1024 * 1024


def test_the_planners_trees_replicate_byte_identical_paying_the_source_once(
    tmp_path: Path,
) -> None:
    data = write_dataset(tmp_path / "src", {f"part{i:02d}.bin": 2 * MiB for i in range(12)})
    total = sum(len(b) for b in data.values())
    plan = plan_multicast(wan_problem(total / 1e9, 3.0), compare=False)
    assert plan.details["multicast"]["tree_excess"] <= 1e-6
    assert WAN_RELAY in {r for p in plan.paths for r in p.regions[1:-1]}  # a relay is used
    prov = get_provisioner("netns", grid=wan_grid(), scale=WAN_SCALE, idle_timeout=120)
    assert isinstance(prov, NetnsProvisioner)
    tid = f"mc-{uuid.uuid4().hex[:8]}"
    fleet = prov.provision({r: 1 for r in (WAN_SRC, WAN_RELAY, *WAN_DSTS)}, transfer_id=tid)
    try:
        dsts = {d: tmp_path / d.split(":")[1] for d in WAN_DSTS}
        run = run_trees(
            fleet,
            job_trees(plan),
            f"file://{tmp_path / 'src'}/",
            {d: f"file://{p}/" for d, p in dsts.items()},
            folder_chunks(tmp_path / "src"),
            timeout=240,
        )
    finally:
        prov.deprovision(fleet)
    assert not [ns for ns in list_namespaces() if f".{tid}." in ns]
    for region, folder in dsts.items():
        assert read_tree(folder) == data, region
    sent = run.counters[WAN_SRC]
    assert sent["bytes_read"] == total
    assert sent["bytes_sent"] == total  # the source sends each byte once, not once per replica
    for region in WAN_DSTS:
        assert run.counters[region]["bytes_written"] == total
    mbit = 8 * total / run.seconds / 1e6
    print(f"multicast on the netns WAN: {run.seconds:.2f} s, {mbit:.0f} Mbit/s per destination")
