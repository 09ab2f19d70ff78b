"""The run on the worker: when the plan's schedule starts no VM, the machine running the job
copies by itself (``provision.worker``: an in-process gateway whose one-region route reads the
source and writes the destination, no relay and no data connection).

The worker plan is the planned one with its overlay replaced by that one route; the overlay
stays in ``details["schedule"]`` for the report. Where the schedule has a server-side path
(the run planned with it: ``server_side_ends``), the route is a server-side one: the same
in-process gateway, in the destination's region, has the stores copy each chunk themselves
(``gateway_agent.job.serverside``) and reads no byte; the job spec names it in
``server_side_paths`` (``details["server_side_paths"]``: path indices).

When the schedule wants both (the worker from t = 0, the overlay once its VMs are up), the
plan is ``both_plan``: the worker's route first (server-side, as in ``worker_plan``, where the
schedule counts on the stores' copy), then the overlay's paths, each with its share of the
predicted rate. The worker's gateway is labelled ``worker@REGION``, a region of
its own: the overlay's source gateways are in the worker's region too, and a path must know
which gateways are its own (the worker sends to no one, and no one sends to it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gateway_agent.stores.uri import parse_uri
from skyplane_ops.planner.plan import PlanPath, TransferPlan

# What a destination copies from by itself: (source scheme, destination scheme) pairs. S3 and
# GCS copy within their own service; Azure copies from a presigned S3 or signed GCS URL (an
# Azure source would need a SAS of its own: not made here, so Azure -> Azure moves bytes).
SERVER_SIDE_PAIRS = frozenset({("s3", "s3"), ("gs", "gs"), ("s3", "az"), ("gs", "az")})


def server_side_ends(
    src_uri: str, dst_uri: str, src_options: Mapping[str, Any], dst_options: Mapping[str, Any]
) -> bool:
    """Whether these two stores can copy server-side: a pair the destination copies from, on
    one service (same ``endpoint_url``) where it copies within its own."""
    try:
        pair = (parse_uri(src_uri).scheme, parse_uri(dst_uri).scheme)
    except ValueError:  # a bad URI is refused where it is opened, with its reason
        return False
    if pair not in SERVER_SIDE_PAIRS:
        return False
    same = pair[0] == pair[1]
    return not same or src_options.get("endpoint_url") == dst_options.get("endpoint_url")


def worker_plan(plan: TransferPlan) -> TransferPlan | None:
    """``plan`` run on the worker, or None when its schedule starts VMs (or has no worker)."""
    sched = plan.details.get("schedule")
    if not sched or sched["start_vms"] or len(plan.dsts) != 1:
        return None
    paths = {p["kind"]: p for p in sched["vmless"]}
    server_side = paths.get("server_side")
    worker = server_side or paths.get("worker")
    if worker is None:
        return None
    at = str(worker["regions"][-1] if server_side else worker["regions"][1])
    gbps = float(worker["gbps"])
    more = {"server_side_paths": [0]} if server_side else {}
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
            **more,
        },
    )


WORKER_PREFIX = "worker@"


def worker_label(region: str) -> str:
    """The worker's gateway region in a plan that also has an overlay (see the docstring)."""
    return WORKER_PREFIX + region


def both_plan(plan: TransferPlan) -> TransferPlan | None:
    """``plan`` with the worker's route beside its overlay, or None when its schedule does
    not run both (no VM, ``--vms-only``, or no worker path)."""
    sched = plan.details.get("schedule")
    if not sched or not sched["start_vms"] or len(plan.dsts) != 1 or sched["force"]:
        return None
    kinds = {p["kind"]: p for p in sched["vmless"]}
    server_side = kinds.get("server_side")  # as in ``worker_plan``: the stores copy, from 0
    worker = server_side or kinds.get("worker")
    both = sched.get("with_vms") or {}
    if worker is None or float(both.get("vmless_gb", 0.0)) <= 0:
        return None
    rate, overlay = float(worker["gbps"]), plan.predicted_gbps
    total = rate + overlay
    label = worker_label(str(worker["regions"][-1] if server_side else worker["regions"][1]))
    own = plan.paths or [PlanPath((plan.src, plan.dsts[0]), 1.0, overlay)]  # none: direct
    shares = sum(p.share for p in own) or 1.0
    paths = [PlanPath(regions=(label,), share=rate / total, gbps=rate)] + [
        dataclasses.replace(p, share=p.share / shares * overlay / total) for p in own
    ]
    return dataclasses.replace(
        plan,
        paths=paths,
        vms={**plan.vms, label: 1},
        predicted_gbps=total,
        egress_cost_usd=float(both["egress_usd"]),
        vm_cost_usd=float(both["vm_usd"]),
        details={
            **plan.details,
            "worker": label,
            "completion_seconds": both["seconds"],
            **({"server_side_paths": [0]} if server_side else {}),
        },
    )
