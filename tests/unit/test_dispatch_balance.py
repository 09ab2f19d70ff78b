"""Chunks go to the path that drains its outstanding work first (at rates in proportion to the
plan's shares): submitted all at once they split by the shares; submitted later, a path that
delivered faster than predicted gets more, so a slow path does not become the tail."""

from __future__ import annotations

from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.dispatch import Dispatcher

SRC, R1, R2, DST = "site:src", "site:r1", "site:r2", "site:dst"
CHUNK = 8 << 20


def _dispatcher() -> Dispatcher:
    paths = [PlanPath((SRC, R1, DST), 0.5, 0.1), PlanPath((SRC, R2, DST), 0.25, 0.05),
             PlanPath((SRC, DST), 0.25, 0.05)]  # fmt: skip
    hops = [Hop(a, b, 1, 4) for a, b in ((SRC, R1), (R1, DST), (SRC, R2), (R2, DST), (SRC, DST))]
    plan = TransferPlan(
        src=SRC, dsts=(DST,), volume_gb=1, mode="min_cost", paths=paths, hops=hops,
        vms=dict.fromkeys((SRC, R1, R2, DST), 1), predicted_gbps=0.2, egress_cost_usd=0,
        vm_cost_usd=0,
    )  # fmt: skip
    gateways = [Gateway(f"g{i}", r, "127.0.0.1", 1, 2) for i, r in enumerate((SRC, R1, R2, DST))]
    fleet = GatewayFleet("t", "local", gateways, "x")
    return Dispatcher(plan, fleet, b"s" * 32, src_uri="mem://a/", dst_uri="mem://b/")


def test_chunks_submitted_at_once_split_by_the_shares() -> None:
    d = _dispatcher()
    picks = [d._pick_path(CHUNK) for _ in range(40)]
    shares = {i: picks.count(i) / len(picks) for i in range(3)}
    assert shares == {0: 0.5, 1: 0.25, 2: 0.25}


def test_later_chunks_go_where_work_drained() -> None:
    d = _dispatcher()
    for _ in range(8):
        d._pick_path(CHUNK)  # 4 on path 0, 2 each on paths 1 and 2
    d._outstanding[2] -= 2 * CHUNK  # path 2 delivered everything; paths 0 and 1 nothing yet
    assert [d._pick_path(CHUNK) for _ in range(2)] == [2, 2]
    d._alive[2] = False  # a dead path gets nothing
    assert d._pick_path(CHUNK) in (0, 1)
