"""Several destinations on the netns WAN (``FanoutRun``): real gateways in network namespaces
joined by tc-shaped veth links, a source, a relay and three destinations. The planner's
multicast plan makes every destination byte-identical; a destination's gateway killed mid-run
leaves the others committed, and the re-run completes it. Needs root."""

from __future__ import annotations

import dataclasses
import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.planner.multicast.api import plan_multicast
from skyplane_ops.provision.netns.host import list_namespaces
from skyplane_ops.sequence.copy_run import Gateways
from skyplane_ops.sequence.events import RunEvents
from skyplane_ops.sequence.fanout import FanoutError, FanoutRun
from skyplane_ops.testing.multicast import (
    WAN_DSTS,
    WAN_RELAY,
    WAN_SCALE,
    WAN_SRC,
    wan_grid,
    wan_problem,
)
from skyplane_ops.testing.transfer import make_plan, read_tree, write_dataset
from skyplane_ops.transfer import DispatchOptions
from skyplane_ops.transfer.progress import Progress
from skyplane_ops.transfer.request import TransferRequest
from tests.fixtures.fanout import fanout_request

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces, veth and tc need root (CI runs as root)"
    ),
]

MiB = 1024 * 1024


def _gateways(tid: str, plan: object) -> Gateways:
    options = {"grid": wan_grid(), "scale": WAN_SCALE, "idle_timeout": 120}
    return Gateways(backend="netns", backend_options=options, plan=plan)  # type: ignore[arg-type]


def _request(tmp_path: Path, tid: str, **kw: Any) -> tuple[TransferRequest, dict[str, Path]]:
    return fanout_request(tmp_path, WAN_SRC, WAN_DSTS, transfer_id=tid, **kw)


def _no_namespaces_left(tid: str) -> bool:
    return not [ns for ns in list_namespaces() if f".{tid}." in ns]


def test_the_planners_plan_replicates_byte_identical(tmp_path: Path) -> None:
    data = write_dataset(
        tmp_path / "src", {"big.bin": 6 * MiB + 7, **{f"s/{i}": 3000 for i in range(9)}}
    )
    plan = plan_multicast(wan_problem(sum(map(len, data.values())) / 1e9, 3.0), compare=False)
    assert WAN_RELAY in {r for p in plan.paths for r in p.regions[1:-1]}  # a relay is used
    tid = f"fo-{uuid.uuid4().hex[:8]}"
    request, dsts = _request(tmp_path, tid)
    run = FanoutRun(request, _gateways(tid, plan))
    result = run.run()
    assert _no_namespaces_left(tid)
    assert result.status == "ok"
    # The tree pass: the source read and sent each byte once (the relay forwards it).
    total = sum(map(len, data.values()))
    assert run.tree is not None and len(run.tree.served) == 3
    assert run.tree.source_bytes_read == total
    assert run.tree.source_bytes_sent <= 1.1 * total
    assert all(one.chunks == 0 for one in result.results.values())  # nothing sent again
    for region, folder in dsts.items():
        assert read_tree(folder) == data, region
        one = result.results[f"file://{folder}"]
        assert one.verification["status"] == "passed" and WAN_RELAY in " ".join(one.route)


class _KillGateway(RunEvents):
    """SIGKILLs ``region``'s gateway (in its namespace) during the tree pass, once 9 of the
    3 x 9 chunks landed: the three equal links deliver about 3 to each destination."""

    wants_progress = True

    def __init__(self, region: str) -> None:
        self.region = region
        self.fleet: object = None
        self.current = ""
        self.killed = False

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        self.current = name
        yield {}

    def provisioned(self, fleet: object) -> None:
        self.fleet = fleet

    def progress(self, update: Progress) -> None:
        if self.killed or self.current != "multicast" or update.chunks_done < 9:
            return
        gateway = self.fleet.in_region(self.region)[0]  # type: ignore[attr-defined]
        os.kill(int(gateway.resources["pid"]), signal.SIGKILL)
        self.killed = True


def test_a_killed_destination_leaves_the_others_committed_and_the_rerun_completes_it(
    tmp_path: Path,
) -> None:
    data = write_dataset(tmp_path / "src", {"big.bin": 8 * MiB, "a": 1000})
    # Straight from the source (its slow links: ~3 MB/s), so the kill comes mid-object.
    star = dataclasses.replace(
        make_plan(*[[WAN_SRC, d] for d in WAN_DSTS], shares=[1.0] * 3), dsts=WAN_DSTS
    )
    victim = WAN_DSTS[1]
    tid = f"fo-{uuid.uuid4().hex[:8]}"
    request, dsts = _request(tmp_path, tid)
    events = _KillGateway(victim)
    run = FanoutRun(request, _gateways(tid, star), events, tuning=DispatchOptions(hop_timeout=5.0))
    with pytest.raises(FanoutError) as err:
        run.run()
    assert events.killed and _no_namespaces_left(tid)
    assert run.tree is not None and len(run.tree.served) == 3  # killed in the tree pass
    got = err.value.result
    for region in (WAN_DSTS[0], WAN_DSTS[2]):  # the others had it all from the tree pass
        assert got.results[f"file://{dsts[region]}"].chunks == 0
    assert list(got.errors) == [f"file://{dsts[victim]}"]
    for region in (WAN_DSTS[0], WAN_DSTS[2]):
        assert read_tree(dsts[region]) == data, region
    assert "big.bin" not in read_tree(dsts[victim])  # nothing half-written is visible

    tid2 = f"fo-{uuid.uuid4().hex[:8]}"
    again, _ = _request(tmp_path, tid2)  # the same copy: the destinations reached are synced
    result = FanoutRun(again, _gateways(tid2, star)).run()
    assert _no_namespaces_left(tid2)
    assert all(read_tree(p) == data for p in dsts.values())
    resumed = result.results[f"file://{dsts[victim]}"]
    # Only what the victim lacked: big.bin's parts not journaled before the kill (and "a"
    # if it had not landed yet), never the whole dataset again.
    assert resumed.objects in (1, 2) and resumed.chunks_resumed >= 1
    assert resumed.chunks + resumed.chunks_resumed == 8 + (resumed.objects - 1)
    assert result.results[f"file://{dsts[WAN_DSTS[0]]}"].objects == 0
