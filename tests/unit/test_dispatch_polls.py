"""Status polls: the next poll to a gateway leaves as soon as its answer is read, but never
sooner than ``poll_interval / POLL_GAPS`` after the previous one, so a gateway that answers at
once every time (an agent without long polls, a stopped job) is not asked in a tight loop.

The gateway here is a stub client that answers at once: only the control plane's pacing is
under test (the long poll itself is tested on a real ``Job`` in ``test_job_long_poll.py``)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.dispatch import POLL_GAPS, Dispatcher, DispatchOptions
from skyplane_ops.transfer.liveness import HopWatch

SRC, DST = "aws:us-east-1", "aws:us-west-2"


class _AtOnce:
    """A gateway's status that answers immediately, counting the asks."""

    def __init__(self) -> None:
        self.asks = 0
        self._lock = threading.Lock()

    def status(self, job_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        with self._lock:
            self.asks += 1
        return {"counters": {}, "events": [], "cursor": cursor}


def test_a_gateway_that_answers_at_once_is_asked_once_per_gap() -> None:
    plan = TransferPlan(
        src=SRC, dsts=(DST,), volume_gb=1, mode="min_cost", paths=[PlanPath((SRC, DST), 1, 1)],
        hops=[Hop(SRC, DST, 1, 8)], vms={SRC: 1, DST: 1}, predicted_gbps=1, egress_cost_usd=0,
        vm_cost_usd=0,
    )  # fmt: skip
    gateways = [Gateway("g0", SRC, "127.0.0.1", 1, 2), Gateway("g1", DST, "127.0.0.1", 3, 4)]
    fleet = GatewayFleet("t", "local", gateways, "x")
    options = DispatchOptions(poll_interval=0.2)
    d = Dispatcher(plan, fleet, b"s" * 32, src_uri="mem://a/", dst_uri="mem://b/", options=options)
    stub = _AtOnce()
    d._quick = {"g1": stub}  # type: ignore[dict-item]
    watch = HopWatch([[SRC, DST]], {SRC: ["g0"], DST: ["g1"]}, 30.0, time.monotonic())
    polls: dict[str, Future[dict[str, Any]]] = {}
    cursors = {"g1": 0}
    answers = 0
    with ThreadPoolExecutor(2) as pollers:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:  # as the dispatcher's loop would, but flat out
            answers += d._poll("g1", polls, cursors, watch, pollers) is not None
        elapsed = time.monotonic() - t0
    gap = options.poll_interval / POLL_GAPS
    assert answers >= 2  # polls did go out and come back
    assert stub.asks <= elapsed / gap + 2  # without the gap: thousands
