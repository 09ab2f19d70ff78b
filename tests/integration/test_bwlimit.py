"""``bwlimit``: the transfer's rate stays within 10% of the cap on loopback, and follows a new
cap written while it runs (issue 39). Real gateway processes, real sockets; the rate is the
slope of the bytes the run reports done over time, away from its start and end."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from skyplane_ops import api
from skyplane_ops.errors import TransferError
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer.dispatch.ratewatch import hop_rates, tree_hop_rates
from skyplane_ops.transfer.progress import Progress

MiB = 1 << 20


def _slope(points: list[tuple[float, int]], lo: int, hi: int) -> float:
    """Bytes/s between the first reports at or past ``lo`` and ``hi`` bytes."""
    t0, b0 = next(p for p in points if p[1] >= lo)
    t1, b1 = next(p for p in points if p[1] >= hi)
    return (b1 - b0) / (t1 - t0)


def test_the_rate_holds_the_cap_and_follows_a_change_mid_run(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {f"f{i:02d}": 4 * MiB for i in range(24)})  # 1 MiB parts
    total = sum(map(len, data.values()))
    tid = f"bw-{uuid.uuid4().hex[:8]}"
    points: list[tuple[float, int]] = []
    changed = threading.Event()

    def seen(p: Progress) -> None:
        points.append((time.monotonic(), p.bytes_done))
        if p.bytes_done >= 0.35 * total and not changed.is_set():
            changed.set()
            points.append((time.monotonic(), -1))  # the change, in the record
            api.set_bwlimit(tid, "24MiB")

    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, fleet):
        result = copy_dirs(
            plan, fleet, (src, dst, tmp_path / "j"), part_size=MiB, bwlimit="8MiB",
            transfer_id=tid, progress=seen,
        )  # fmt: skip
    assert result.verified and read_tree(dst) == data
    cut = points.index(next(p for p in points if p[1] == -1))
    before, after = points[:cut], [p for p in points[cut + 1 :]]
    first = _slope(before, int(0.05 * total), int(0.33 * total))
    second = _slope(after, int(0.5 * total), int(0.97 * total))
    assert abs(first - 8 * MiB) <= 0.1 * 8 * MiB, first / MiB
    assert abs(second - 24 * MiB) <= 0.1 * 24 * MiB, second / MiB


def test_a_cap_is_split_over_paths_and_senders_by_share() -> None:
    plan = make_plan([SRC, "test:relay", DST], [SRC, DST], shares=[0.25, 0.75])
    fleet = api.GatewayFleet.from_dict(
        {
            "backend": "local",
            "transfer_id": "t",
            "secret_ref": "x",
            "gateways": [
                {"gateway_id": f"g{i}", "region": r, "host": "127.0.0.1", "control_port": 1,
                 "data_port": 2}
                for i, r in enumerate([SRC, SRC, "test:relay", DST])
            ],
        }
    )  # fmt: skip
    routes = [(list(p.regions), p.share) for p in plan.paths]
    assert hop_rates(routes, fleet, SRC, 100.0) == {
        f"{SRC}>test:relay": 12.5,  # 25 % of the cap over two source gateways
        f"{SRC}>{DST}": 37.5,
    }
    assert hop_rates(routes, fleet, "test:relay", 100.0) == {f"test:relay>{DST}": 25.0}
    assert hop_rates(routes, fleet, SRC, None) == {f"{SRC}>test:relay": None, f"{SRC}>{DST}": None}


@pytest.mark.parametrize("bad", ["200", "25Mb", "fast", "0MiB"])
def test_a_rate_without_its_unit_is_refused_before_any_work(bad: str) -> None:
    with pytest.raises(TransferError, match="bwlimit"):
        api.TransferRequest.build("s3://src-bucket/x", "s3://dst-bucket/y", bwlimit=bad)
    with pytest.raises(TransferError):
        api.set_bwlimit("t-1", bad)


def test_a_tree_hop_carries_the_share_of_the_trees_through_it() -> None:
    fleet = api.GatewayFleet.from_dict(
        {
            "backend": "local",
            "transfer_id": "t",
            "secret_ref": "x",
            "gateways": [
                {"gateway_id": f"g{i}", "region": r, "host": "127.0.0.1", "control_port": 1,
                 "data_port": 2}
                for i, r in enumerate([SRC, "test:relay", "test:relay", DST, "test:d2"])
            ],
        }
    )  # fmt: skip
    via_relay = {"next": {SRC: ["test:relay"], "test:relay": [DST, "test:d2"]}}
    direct = {"next": {SRC: [DST], DST: ["test:d2"]}}
    trees = [(3.0, via_relay), (1.0, direct)]  # shares need not add up to 1
    assert tree_hop_rates(trees, fleet, SRC, 100.0) == {
        f"{SRC}>test:relay": 75.0,
        f"{SRC}>{DST}": 25.0,
    }
    assert tree_hop_rates(trees, fleet, "test:relay", 100.0) == {
        f"test:relay>{DST}": 37.5,  # 75 % over two relay gateways, to each destination
        "test:relay>test:d2": 37.5,
    }
    assert tree_hop_rates(trees, fleet, DST, 100.0) == {f"{DST}>test:d2": 25.0}
    assert tree_hop_rates(trees, fleet, DST, None) == {f"{DST}>test:d2": None}


def test_a_multicast_tree_job_holds_the_cap(tmp_path: Path) -> None:
    """Real gateways run a tree (the source sends every chunk to both destinations); the
    capped job takes at least the time its bytes need at the cap, and no more than 10% over."""
    from skyplane_ops.testing.multicast import folder_chunks, run_trees

    d2 = "test:d2"
    data = write_dataset(tmp_path / "src", {f"f{i:02d}": MiB for i in range(24)})
    total = sum(map(len, data.values()))
    tree = {"next": {SRC: [DST, d2]}, "sinks": [DST, d2]}
    cap = 8 * MiB
    with local_fleet(make_plan([SRC, DST], [SRC, d2])) as (_, fleet):
        run = run_trees(
            fleet, [(1.0, tree)], f"file://{tmp_path / 'src'}/",
            {DST: f"file://{tmp_path / 'x'}/", d2: f"file://{tmp_path / 'y'}/"},
            folder_chunks(tmp_path / "src"), bwlimit=cap, timeout=120,
        )  # fmt: skip
    assert read_tree(tmp_path / "x") == data and read_tree(tmp_path / "y") == data
    # A burst of BURST_S at the start is allowed; every byte past it waits for the cap.
    least = (total - 0.25 * cap) / cap
    assert least <= run.seconds <= 1.1 * total / cap, run.seconds
