"""The provision and deprovision steps of a run: how many gateways a plan needs per region,
starting them on a backend (cleaning up its own partial state on error), starting the local
backend's first gateways early, and deleting a fleet (or sweeping by tag)."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet

# Gateways per region the local backend starts at most: one machine gains nothing from more
# processes per "region" than it has cores, and the plan's VM counts are cloud VM counts.
LOCAL_MAX_GATEWAYS_PER_REGION = 1
WORKER_BACKEND = "worker"


def new_transfer_id(prefix: str = "sk") -> str:
    """A short unique id that tags every resource of one transfer."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def vms_for(
    plan_or_vms: TransferPlan | Mapping[str, int], *, max_per_region: int | None = None
) -> dict[str, int]:
    """Gateways to start per region: every region on a path of the plan, at least one each."""
    if isinstance(plan_or_vms, TransferPlan):
        used = {r for p in plan_or_vms.paths for r in p.regions}
        if not used or plan_or_vms.details.get("worker") is None:  # a worker plan: its region
            used |= {plan_or_vms.src, *plan_or_vms.dsts}
        vms = {r: max(1, int(plan_or_vms.vms.get(r, 1))) for r in used}
    else:
        vms = {r: int(n) for r, n in plan_or_vms.items()}
    if max_per_region is not None:
        vms = {r: min(n, max_per_region) for r, n in vms.items()}
    return vms


def provision(
    plan_or_vms: TransferPlan | Mapping[str, int],
    *,
    backend: str = "local",
    backend_options: Mapping[str, Any] | None = None,
    transfer_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    max_per_region: int | None = None,
    early: Any = None,
    cancel: Any = None,
) -> GatewayFleet:
    """Start gateways for every region of the plan; cleans up its own partial state on error.

    The local backend starts at most ``LOCAL_MAX_GATEWAYS_PER_REGION`` per region unless
    ``max_per_region`` says otherwise, adopts the agents of ``early`` (``start_early``) and
    gives up, removing what it started, once ``cancel`` (a ``threading.Event``) is set. So do
    the other backends whose ``provision`` takes ``cancel`` (netns, ssh, the clouds, mixed: see
    ``provision.cancel``); one that does not finishes first (the caller then deprovisions).
    """
    if max_per_region is None and backend == "local":
        max_per_region = LOCAL_MAX_GATEWAYS_PER_REGION
    provisioner = _provisioner(backend, backend_options)
    extra: dict[str, Any] = {}
    if backend == "local" and early is not None:
        extra["early"] = early
    if cancel is not None and "cancel" in inspect.signature(provisioner.provision).parameters:
        extra["cancel"] = cancel
    return provisioner.provision(
        vms_for(plan_or_vms, max_per_region=max_per_region),
        transfer_id=transfer_id or new_transfer_id(),
        tags=dict(tags or {}),
        **extra,
    )


def start_early(
    regions: Sequence[str], *, transfer_id: str, backend_options: Mapping[str, Any] | None = None
) -> Any:
    """Local backend: start the agents of ``regions`` now (a plan's source and destination,
    which every plan uses) so they boot while the source is listed; hand the result to
    ``provision(..., early=...)`` with the same ``transfer_id``, and ``cancel()`` it after."""
    from skyplane_ops.provision import get_provisioner

    provisioner: Any = get_provisioner("local", **dict(backend_options or {}))
    return provisioner.start_early(regions, transfer_id=transfer_id)


def deprovision(
    fleet: GatewayFleet | None = None,
    *,
    backend: str | None = None,
    backend_options: Mapping[str, Any] | None = None,
    transfer_id: str | None = None,
    regions: Sequence[str] = (),
) -> list[str]:
    """Delete a fleet, or (with no fleet) every leftover of ``transfer_id``: the fleets
    recorded for it (a pending record too: provisioning writes one before its first create),
    then the backend's sweep by tag in ``regions`` and the recorded regions (a per-region
    backend, aws, needs them).

    Idempotent: deleting what is already gone is not an error. Returns what was deleted when
    sweeping by tag (an empty list after deleting a known fleet).
    """
    from skyplane_ops.errors import ProvisionError
    from skyplane_ops.provision import records
    from skyplane_ops.provision.sweeper import record_regions, with_sweep_regions

    name = backend or (fleet.backend if fleet is not None else None)
    if name is None:
        raise ProvisionError("deprovision needs a fleet or a backend name")
    provisioner = _provisioner(name, backend_options)
    if fleet is not None:
        provisioner.deprovision(fleet)
        return []
    if transfer_id is None:
        raise ProvisionError("deprovision needs a fleet or a transfer_id to sweep by tag")
    recorded = records.load_fleets(transfer_id=transfer_id, backend=name)
    deleted: list[str] = []
    for one in recorded:
        gone = provisioner.deprovision(one)
        deleted += (gone if isinstance(gone, list) else []) or [
            f"{name}:{one.transfer_id}:{g.gateway_id}" for g in one.gateways
        ]
    names = [r.rpartition(":")[2] if name == "aws" else r for r in regions]
    with_sweep_regions(provisioner, sorted({*names, *record_regions(recorded)}))
    return deleted + list(provisioner.sweep(transfer_id=transfer_id))


def _provisioner(backend: str, options: Mapping[str, Any] | None) -> Any:
    """The backend's provisioner; ``worker`` (the run's own process, chosen by the plan's
    schedule, never by the user) is not a backend one names, so it takes no options."""
    if backend == WORKER_BACKEND:
        from skyplane_ops.provision.worker import WorkerProvisioner

        return WorkerProvisioner()
    from skyplane_ops.provision import get_provisioner

    return get_provisioner(backend, **dict(options or {}))


def setup_backend(
    backend: str, backend_options: Mapping[str, Any] | None = None, *, apply: bool = False
) -> dict[str, Any]:
    """What a backend needs created once per account, by an administrator (and, with
    ``apply``, create it). Only ``azure`` needs anything: the gateways' self-delete role."""
    from skyplane_ops.provision import get_provisioner

    provisioner: Any = get_provisioner(backend, **dict(backend_options or {}))
    if not hasattr(provisioner, "self_release_role_definition"):
        return {"backend": backend, "needs": [], "applied": False}
    role, body = provisioner.self_release_role_definition()
    if apply:
        provisioner.define_self_release_role()
    return {
        "backend": backend,
        "needs": [{"kind": "role definition", "id": role, "definition": body}],
        "applied": apply,
    }
