"""``RunState``: one run's identity and clock, which every step of the engine reads."""

from __future__ import annotations

import time
import uuid
from typing import Any

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.transfer.dispatch import plan_routes
from skyplane_ops.transfer.dispatch.join import Arrivals
from skyplane_ops.transfer.report import ReportRun
from skyplane_ops.transfer.request import TransferRequest
from skyplane_ops.transfer.result import TransferResult


class RunState:
    """What a run is (plan, fleet, request, job id) and how long each step took."""

    def __init__(
        self,
        plan: TransferPlan,
        fleet: GatewayFleet,
        request: TransferRequest,
        arrivals: Arrivals | None = None,
    ) -> None:
        self.plan, self.fleet, self.request = plan, fleet, request
        self.arrivals = arrivals  # gateways that join the job as they come up
        self.src_uri, self.dst_uri = request.src_uri, request.dst_uri
        self.t0 = time.monotonic()
        # Seconds per step (list, prepare, move, check_source, commit, verify, record), so a
        # slow run says where its time went; see ``step``.
        self.steps: dict[str, float] = {}
        self._mark = self.t0
        self.job_id = f"job-{uuid.uuid4().hex[:12]}"
        shares = [s for _, s in plan_routes(plan)]
        self.route = [f"{n} ({s:.0%})" for n, s in zip(route_names(plan), shares, strict=True)]

    def report_run(self, **fields: Any) -> ReportRun:
        """The ``ReportRun`` of this run (its identity, start and paths) for the report."""
        return ReportRun(
            transfer_id=self.fleet.transfer_id,
            job_id=self.job_id,
            src_uri=self.src_uri,
            dst_uri=self.dst_uri,
            started=time.time() - self.elapsed(),
            routes=route_names(self.plan),
            **fields,
        )

    def step(self, name: str) -> None:
        """Close step ``name``: the time since the previous step ended is booked to it."""
        now = time.monotonic()
        self.steps[name] = round(self.steps.get(name, 0.0) + now - self._mark, 3)
        self._mark = now

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.t0

    def result(self, **fields: Any) -> TransferResult:
        """The run's result: its identity and steps, plus ``fields``."""
        return TransferResult(
            steps=self.steps,
            transfer_id=self.fleet.transfer_id,
            job_id=self.job_id,
            src_uri=self.src_uri,
            dst_uri=self.dst_uri,
            route=self.route,
            **fields,
        )


def route_names(plan: TransferPlan) -> list[str]:
    """The report's name of each path: its regions, or ``server-side`` where the stores copy
    themselves (``details["server_side_paths"]``)."""
    copied = set(plan.details.get("server_side_paths", []))
    return [
        "server-side" if i in copied else " -> ".join(r)
        for i, (r, _) in enumerate(plan_routes(plan))
    ]
