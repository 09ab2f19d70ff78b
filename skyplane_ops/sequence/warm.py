"""Warm fleets: park a run's fleet for ``keep_warm`` instead of deleting it, and claim a parked
one instead of booting (``docs/vmless.md``, "Warm fleets").

Parking re-keys every gateway to a fresh secret (the agent drops the finished transfer's jobs
and their store credentials; the transfer's own secret opens nothing any more), sets each
lease to ``keep_warm`` (the agents, and on a cloud VM its root deadline, stop at its end unless
a claimant renews it) and records the fleet in the state store's pool (``provision.warm``).
Claiming takes the record create-only (one claimant wins), re-keys the gateways to a secret of
its own and hands the fleet to the run. Anything wrong with a warm fleet makes the run boot as
usual: a claim never fails a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway_agent.client import GatewayClient
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.cloudvm.common import TAG_EXPIRES
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.lease import LINGER_S
from skyplane_ops.provision.records import save_fleet
from skyplane_ops.provision.secrets import private_dir, secret_bytes, write_private
from skyplane_ops.provision.warm import (
    TAG_WARM,
    TAG_WARM_GENERATION,
    TAG_WARM_POOL,
    WarmPool,
    WarmRecord,
)

log = logging.getLogger(__name__)


# A claim re-keys and renews the lease of running gateways: about a second, not a boot.
CLAIM_T0_S = 1.0
# Options that shape only how a gateway starts, not the running gateway a claimant gets.
START_ONLY_OPTIONS = frozenset({"boot_delay", "start_timeout", "initial_lease_s"})


def options_key(backend: str, options: Mapping[str, Any]) -> str:
    """A short digest of a backend and its options: a parked fleet serves only the same
    (bar those that only shape a gateway's start)."""
    kept = {k: v for k, v in options.items() if k not in START_ONLY_OPTIONS}
    text = json.dumps({"backend": backend, "options": kept}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _serves(record: WarmRecord, backend: str, key: str, needed: Mapping[str, int]) -> bool:
    """Whether a parking can serve a run: same backend and options, the gateways it needs,
    and, for loopback gateways, this host."""
    same = record.backend == backend and record.options_key == key and record.fits(needed)
    return same and (backend != "local" or record.host == socket.gethostname())


def vm_usd_per_hour(plan: TransferPlan, fleet: GatewayFleet) -> float:
    """The fleet's $/h at the plan's VM price (the plan's VM $ over its billed seconds)."""
    prov_s = float(plan.details.get("provisioning_seconds", 60.0))
    plan_s = plan.volume_gb * 8 / plan.predicted_gbps if plan.predicted_gbps > 0 else 0.0
    vms = sum(int(n) for n in plan.vms.values()) or len(fleet.gateways)
    if plan_s + prov_s <= 0 or vms <= 0:
        return 0.0
    per_vm = plan.vm_cost_usd / (plan_s + prov_s) * 3600 / vms
    return round(per_vm * len(fleet.gateways), 6)


def _each(fleet: GatewayFleet, act: Any) -> None:
    """``act(gateway)`` on every gateway at once; the first error is raised."""
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(fleet.gateways)))) as pool:
        list(pool.map(act, fleet.gateways))


# A parked gateway's idle watchdog waits this much past its lease: the lease ends it first.
IDLE_PAST_LEASE_S = 60.0


def rekey(
    fleet: GatewayFleet, old: bytes, new: bytes, lease_s: float, idle_s: float | None = None
) -> int | None:
    """Every gateway forgets its jobs, answers to ``new`` only and holds ``lease_s`` (and an
    idle timeout of at least ``idle_s``); returns the smallest byte budget among them in MiB
    (the fleet's capacity), None if none said."""
    budgets: list[int] = []

    def one(g: Gateway) -> None:
        client = GatewayClient(g.host, g.control_port, old, timeout=10, gateway_id=g.gateway_id)
        client.rekey(new)
        client.renew_lease(lease_s, idle_timeout=idle_s)
        capacity = (client.health().get("buffer") or {}).get("capacity")
        if isinstance(capacity, int):
            budgets.append(capacity // 2**20)

    _each(fleet, one)
    return min(budgets) if budgets else None


def _keep_secret(fleet: GatewayFleet, secret: bytes) -> GatewayFleet:
    """The fleet with ``secret`` in this host's 0600 file of it, and its record saved."""
    path = private_dir("secrets") / f"{fleet.transfer_id}.secret"
    write_private(path, secret.hex().encode("ascii"))
    fleet.secret_ref = str(path)
    save_fleet(fleet)
    return fleet


def park(
    fleet: GatewayFleet,
    *,
    usd_per_hour: float,
    keep_warm_s: float,
    pool: WarmPool,
    backend_options: Mapping[str, Any],
) -> dict[str, Any]:
    """Park ``fleet`` (which costs ``usd_per_hour``) for ``keep_warm_s`` (raises if a gateway
    does not take it: delete the fleet then, as without ``keep_warm``); returns what the
    run's result says about it."""
    new = secrets.token_bytes(32)
    # No control request comes while parked: the idle watchdog must outwait keep_warm.
    idle_s = keep_warm_s + IDLE_PAST_LEASE_S
    buffer_mib = rekey(fleet, secret_bytes(fleet.secret_ref), new, keep_warm_s, idle_s)
    now = time.time()
    expires = now + keep_warm_s
    generation = pool.next_generation(fleet.transfer_id)
    fleet.tags = {
        **fleet.tags,
        TAG_WARM: "parked",
        TAG_EXPIRES: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(expires)),
        TAG_WARM_POOL: pool.state_uri,  # where this host's sweep asks whether it was claimed
        TAG_WARM_GENERATION: str(generation),
    }
    _keep_secret(fleet, new)
    gateways: dict[str, int] = {}
    for g in fleet.gateways:
        gateways[g.region] = gateways.get(g.region, 0) + 1
    rate = usd_per_hour
    record = WarmRecord(
        fleet_id=fleet.transfer_id,
        generation=generation,
        backend=fleet.backend,
        gateways=gateways,
        options_key=options_key(fleet.backend, backend_options),
        parked_at=now,
        expires_at=expires,
        vm_usd_per_hour=rate,
        host=socket.gethostname(),
        fleet=fleet.to_dict(),
        buffer_mib=buffer_mib,
    )
    pool.park(record, new)
    return {
        "parked": fleet.transfer_id,
        "keep_warm_s": keep_warm_s,
        "expires_at": expires,
        "vm_usd_per_hour": rate,
        "idle_usd_if_unclaimed": round(rate * keep_warm_s / 3600, 6),
    }


def claim(
    needed: Mapping[str, int],
    *,
    backend: str,
    backend_options: Mapping[str, Any],
    pool: WarmPool,
    claimant: str,
) -> tuple[GatewayFleet, dict[str, Any]] | None:
    """A parked fleet with ``needed`` gateways per region, taken and re-keyed for this run,
    with what its idle time cost; None when there is none (or none that works: a fleet that
    fails its re-key is deleted, and the run boots its own)."""
    key = options_key(backend, backend_options)
    for record in pool.available():
        if not _serves(record, backend, key, needed):
            continue
        if not pool.claim(record, claimant):
            continue  # another run took it first
        fleet = record.gateway_fleet()
        try:
            old = pool.secret(record)
            new = secrets.token_bytes(32)
            rekey(fleet, old, new, LINGER_S)  # the run's lease keeper renews from here on
        except Exception as exc:
            log.warning("warm fleet %s did not take its new run: %s", record.fleet_id, exc)
            _drop(fleet, backend_options)
            pool.forget(record.fleet_id)
            continue
        fleet.tags = {k: v for k, v in fleet.tags.items() if k != TAG_EXPIRES}
        fleet.tags[TAG_WARM] = "claimed"
        _keep_secret(fleet, new)
        pool.taken(record)
        idle_s = max(0.0, time.time() - record.parked_at)
        return fleet, {
            "claimed": record.fleet_id,
            "idle_s": round(idle_s, 3),
            "idle_usd": round(record.vm_usd_per_hour * idle_s / 3600, 6),
        }
    return None


def _drop(fleet: GatewayFleet, backend_options: Mapping[str, Any]) -> None:
    """Delete a warm fleet that failed its claim (best effort: its leases end it anyway)."""
    from skyplane_ops.sequence.fleet import deprovision

    try:
        deprovision(fleet, backend_options=backend_options)
    except Exception as exc:
        log.warning("deleting warm fleet %s failed (its lease ends it): %s", fleet.transfer_id, exc)


# -- what a run (CopyRun, a Dagster step) calls: never raises -------------------------------


def warm_pool(state_uri: str | None = None, state_options: Mapping[str, Any] | None = None) -> Any:
    """The pool in ``state_uri`` (default ``$SKYPLANE_OPS_HOME/state``)."""
    from skyplane_ops.provision.warm import default_state_uri

    return WarmPool(state_uri or default_state_uri(), state_options)


def claim_warm(
    plan_or_vms: TransferPlan | Mapping[str, int],
    *,
    backend: str,
    backend_options: Mapping[str, Any],
    claimant: str,
    max_per_region: int | None = None,
    state_uri: str | None = None,
    state_options: Mapping[str, Any] | None = None,
) -> tuple[GatewayFleet, dict[str, Any]] | None:
    """``claim`` a fleet with the gateways ``provision`` would start for ``plan_or_vms``
    from the state store's pool; any error is logged and means "boot"."""
    from skyplane_ops.sequence.fleet import LOCAL_MAX_GATEWAYS_PER_REGION, vms_for

    if max_per_region is None and backend == "local":
        max_per_region = LOCAL_MAX_GATEWAYS_PER_REGION
    try:
        pool = warm_pool(state_uri, state_options)
    except Exception as exc:  # a state store that cannot hold a pool (gs://, az://)
        log.debug("no warm fleets here: %s", exc)
        return None
    try:
        return claim(
            vms_for(plan_or_vms, max_per_region=max_per_region),
            backend=backend,
            backend_options=backend_options,
            pool=pool,
            claimant=claimant,
        )
    except Exception as exc:
        log.warning("no warm fleet claimed: %s", exc)
        return None


def warm_t0(
    regions: list[str],
    *,
    backend: str,
    backend_options: Mapping[str, Any],
    state_uri: str | None = None,
    state_options: Mapping[str, Any] | None = None,
) -> float | None:
    """The start-up to plan with when a parked fleet could serve a run through ``regions``
    (its source and destination: every path has them): a claim's second instead of a boot,
    so the schedule weighs a warm fleet against the worker as it is. None: none parked."""
    try:
        parked = warm_pool(state_uri, state_options).available()
    except Exception:
        return None
    key = options_key(backend, backend_options)
    needed = dict.fromkeys(regions, 1)
    return CLAIM_T0_S if any(_serves(r, backend, key, needed) for r in parked) else None


def park_warm(
    fleet: GatewayFleet,
    *,
    keep_warm_s: float,
    backend_options: Mapping[str, Any],
    usd_per_hour: float = 0.0,
    state_uri: str | None = None,
    state_options: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """``park`` in the state store's pool; None (logged) when the fleet must be deleted."""
    if fleet.backend == "worker":
        return None
    try:
        return park(
            fleet,
            usd_per_hour=usd_per_hour,
            keep_warm_s=keep_warm_s,
            pool=warm_pool(state_uri, state_options),
            backend_options=backend_options,
        )
    except Exception as exc:
        log.warning("fleet %s not parked, deleted: %s", fleet.transfer_id, exc)
        return None


def forget_warm(
    fleet: GatewayFleet,
    state_uri: str | None = None,
    state_options: Mapping[str, Any] | None = None,
) -> None:
    """A claimed fleet was deleted: its records in the pool go too (best effort)."""
    if fleet.tags.get(TAG_WARM):
        try:
            warm_pool(state_uri, state_options).forget(fleet.transfer_id)
        except Exception as exc:
            log.debug("forgetting warm fleet %s: %s", fleet.transfer_id, exc)
