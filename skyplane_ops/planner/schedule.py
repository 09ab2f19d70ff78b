"""A plan is a schedule: VM-less paths from t = 0, the overlay's paths once its VMs are up.

With ``R`` Gbit/s on the VM-less paths (``vmless``), the overlay's ``T`` Gbit/s after ``t0``
and ``8 V`` Gbit to move:

- no VM: done at ``8 V / R``;
- with VMs: if the VM-less paths alone finish before ``t0`` (``8 V <= R t0``) the VMs never move
  a byte and are cancelled; else done at ``t = t0 + (8 V - R t0) / (R + T)``, the VMs billed
  for all of ``t`` (asked for at 0) and every path paying its egress on what it carried.

The VM-less schedule is taken when it finishes no later, or within ``tolerance`` of the
VM schedule and no dearer (the planner's rule for every plan: the cheapest within a few
percent of the fastest). The **break-even volume** is where the two finish together (within
the tolerance): ``8 V* = (1 + tol) t0 T R / (T - tol R)`` (``R t0`` at no tolerance; none when
``T <= tol R``: VMs never pay). ``force`` = ``"none"`` (``--no-vms``) or ``"overlay"``
(``--vms-only``) skips the choice. Pure arithmetic on a solved plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from skyplane_ops.errors import PlanningError
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.planner.vmless import VmlessPath, WorkerSpec, vmless_paths

Force = Literal["none", "overlay"] | None
BITS_PER_BYTE = 8.0


def _vmless_rate_price(paths: Sequence[VmlessPath]) -> tuple[float, float]:
    """Their total Gbit/s and the $/GB of a byte on them (chunks go where they drain first:
    each path carries bytes in proportion to its rate)."""
    rate = sum(p.gbps for p in paths)
    price = sum(p.gbps * p.egress_usd_per_gb for p in paths) / rate if rate > 0 else 0.0
    return rate, price


def break_even_gb(rate: float, overlay_gbps: float, t0: float, tolerance: float) -> float:
    """The volume above which starting the overlay's VMs finishes the job sooner (by more
    than ``tolerance``); ``inf`` when it never does, 0 with no VM-less path."""
    if rate <= 0:
        return 0.0
    if overlay_gbps <= tolerance * rate:
        return math.inf
    bits = (1 + tolerance) * t0 * overlay_gbps * rate / (overlay_gbps - tolerance * rate)
    return bits / BITS_PER_BYTE


def schedule(
    plan: TransferPlan,
    paths: Sequence[VmlessPath],
    *,
    tolerance: float,
    force: Force = None,
) -> dict[str, Any]:
    """The schedule for ``plan`` (its overlay) with ``paths``: both options and the choice.

    Returns a JSON-ready dict for ``plan.details["schedule"]``: ``vmless`` (the paths),
    ``t0``, ``without_vms`` / ``with_vms`` (seconds, egress $, VM $, total $, GB on the
    VM-less paths, VMs), ``start_vms`` (the choice), ``cancel_vms`` (VMs would finish no
    work before they boot) and ``break_even_gb``."""
    volume = plan.volume_gb
    bits = BITS_PER_BYTE * volume
    t0 = float(plan.details.get("provisioning_seconds", 0.0))
    T = plan.predicted_gbps
    overlay_price = plan.egress_cost_usd / volume if volume > 0 else 0.0
    overlay_seconds = t0 + bits / T if T > 0 else math.inf
    vm_usd_per_s = plan.vm_cost_usd / overlay_seconds if math.isfinite(overlay_seconds) else 0.0
    vms = sum(plan.vms.values())
    overlay = _option(overlay_seconds, plan.egress_cost_usd, plan.vm_cost_usd, 0.0, vms)
    usable = [] if force == "overlay" else list(paths)
    R, price = _vmless_rate_price(usable)
    none = _option(bits / R, volume * price, 0.0, volume, 0) if R > 0 else None
    if force == "none" and none is None:
        raise PlanningError(
            f"no VM-less path from {plan.src} to {', '.join(plan.dsts)}: no server-side copy "
            "between these stores and no worker path"
        )
    cancel = R > 0 and bits <= R * t0  # the VM-less paths are done before any VM is up
    both: dict[str, Any] | None
    if R <= 0:
        both = overlay
    elif force == "none" or cancel:
        both = none
    else:
        seconds = t0 + (bits - R * t0) / (R + T)
        on_vmless = R * seconds / BITS_PER_BYTE
        egress = on_vmless * price + (volume - on_vmless) * overlay_price
        both = _option(seconds, egress, vm_usd_per_s * seconds, on_vmless, vms)
    if none is None:
        start = True
    elif force == "none" or cancel:
        start = False
    elif force == "overlay":
        start = True
    else:
        assert both is not None
        sooner = none["seconds"] <= both["seconds"]
        close = none["seconds"] <= (1 + tolerance) * both["seconds"]
        start = not (sooner or (close and none["total_usd"] <= both["total_usd"]))
    chosen = both if start else none
    assert chosen is not None
    return {
        "vmless": [p.to_dict() for p in paths],
        "t0": t0,
        "force": force,
        "without_vms": none,
        "with_vms": both,
        "overlay_only": overlay,
        "start_vms": start,
        "cancel_vms": bool(cancel and force != "none"),
        "completion_seconds": chosen["seconds"],
        "total_usd": chosen["total_usd"],
        "break_even_gb": break_even_gb(R, T, t0, tolerance),
        "tolerance": tolerance,
    }


def _option(seconds: float, egress: float, vm: float, vmless_gb: float, vms: int) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "egress_usd": egress,
        "vm_usd": vm,
        "total_usd": egress + vm,
        "vmless_gb": vmless_gb,
        "vms": vms,
    }


def attach_schedule(
    plan: TransferPlan,
    problem: Any,
    *,
    tolerance: float,
    force: Force = None,
    worker: WorkerSpec | None = WorkerSpec(),
    server_side: bool = True,
) -> TransferPlan:
    """``plan`` with ``details["schedule"]`` for its one destination (a plan to several
    destinations keeps its overlay: its schedule is the multicast planner's)."""
    if len(plan.dsts) != 1:
        return plan
    paths = vmless_paths(
        problem.src,
        plan.dsts[0],
        problem.throughput,
        problem.egress_usd_per_gb,
        worker=worker,
        server_side=server_side,
    )
    plan.details["schedule"] = schedule(plan, paths, tolerance=tolerance, force=force)
    return plan
