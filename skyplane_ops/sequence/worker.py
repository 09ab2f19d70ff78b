"""The run on the worker: when the plan's schedule starts no VM, the machine running the job
copies by itself (``provision.worker``: an in-process gateway whose one-region route reads the
source and writes the destination, no relay and no data connection).

The worker plan is the planned one with its overlay replaced by that one route; the overlay
stays in ``details["schedule"]`` for the report. Server-side copy is known to the planner but
not yet run by the engine, so a schedule whose only VM-less path is server-side keeps its VMs.
"""

from __future__ import annotations

import dataclasses

from skyplane_ops.planner.plan import PlanPath, TransferPlan


def worker_plan(plan: TransferPlan) -> TransferPlan | None:
    """``plan`` run on the worker, or None when its schedule starts VMs (or has no worker)."""
    sched = plan.details.get("schedule")
    if not sched or sched["start_vms"] or len(plan.dsts) != 1:
        return None
    worker = next((p for p in sched["vmless"] if p["kind"] == "worker"), None)
    if worker is None:
        return None
    at, gbps = str(worker["regions"][1]), float(worker["gbps"])
    return dataclasses.replace(
        plan,
        paths=[PlanPath(regions=(at,), share=1.0, gbps=gbps)],
        hops=[],
        vms={at: 1},
        predicted_gbps=gbps,
        egress_cost_usd=plan.volume_gb * float(worker["egress_usd_per_gb"]),
        vm_cost_usd=0.0,
        details={
            **plan.details,
            "worker": at,
            "completion_seconds": sched["without_vms"]["seconds"],
        },
    )
