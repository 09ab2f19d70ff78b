"""The body of a replica materialisation: plan, provision, transfer, in one step.

One step, not three: the phases hand each other a plan and a fleet in memory, so nothing goes
through an IO manager or a filesystem shared by steps, and a one-second copy takes seconds,
not the start-up of three step processes. Dagster's own retry policy re-runs the step (the
journal makes the transfer resume) and run termination interrupts it: the fleet is deleted in
``finally`` either way; a run whose process dies is cleaned up by the leftover sweeper sensor
(:mod:`.sensors`). The phases still log as phases and their figures land in the metadata.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg

from skyplane_ops import api
from skyplane_ops.api import GatewayFleet, TransferError, TransferPlan
from skyplane_ops.dagster.locations import join_uri, prefix_for
from skyplane_ops.dagster.metadata import fleet_metadata, transfer_metadata
from skyplane_ops.dagster.spec import ReplicationSpec, run_partition_keys, transfer_id_for

# The resource is passed in, never imported: it imports this module (``replicate``).
SkyplaneResource = Any

GB = 1e9
PROGRESS_EVERY_S = 5.0


def _fail(skyplane: SkyplaneResource, context: Any, what: str, exc: BaseException) -> dg.Failure:
    """A Dagster Failure whose text (and the logged traceback) has every secret redacted."""
    context.log.error(skyplane.redact("".join(traceback.format_exception(exc)))[-4000:])
    return dg.Failure(description=skyplane.redact(f"{what}: {type(exc).__name__}: {exc}"))


def replicate(context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec) -> Iterator[Any]:
    """Plan, provision and transfer every replica of ``spec`` for the run's partitions."""
    started = time.monotonic()
    planned = plan_units(context, skyplane, spec)
    context.log.info(f"planned in {time.monotonic() - started:.2f} s")
    fleet = provision_fleet(context, skyplane, spec, planned)
    yield from transfer_step(context, skyplane, spec, planned, fleet.to_dict())


def plan_units(context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec) -> dict[str, Any]:
    """List the source (per partition), plan one route per destination, store the plans."""
    run_id: str = context.run_id
    tid = transfer_id_for(run_id, spec.name)
    units: list[dict[str, Any]] = []
    for key in run_partition_keys(context, spec.partitions_def):
        prefix = prefix_for(key, spec.partition_prefix) if key is not None else ""
        src_uri = join_uri(spec.source.uri, prefix)
        try:  # counted as the listing streams: nothing kept per object
            objects, nbytes = api.source_totals(
                src_uri, skyplane.store_options_for(src_uri), allow_empty=True
            )
        except Exception as exc:
            raise _fail(skyplane, context, f"cannot list {src_uri}", exc) from None
        units.append(
            {
                "partition": key,
                "prefix": prefix,
                "src_uri": src_uri,
                "objects": objects,
                "bytes": nbytes,
            }
        )
    total_bytes = sum(u["bytes"] for u in units)
    total_objects = sum(u["objects"] for u in units)
    if total_objects == 0:
        raise dg.Failure(
            description=f"nothing to replicate: no objects under {spec.source.uri} "
            f"for partitions {[u['partition'] for u in units]}"
        )
    plans: dict[str, dict[str, Any]] = {}
    vms: dict[str, int] = {}
    for dest in spec.destinations:
        try:
            plan = skyplane.plan(spec.source.region, dest.region, max(total_bytes / GB, 1e-9))
            plan_uri = skyplane.write_artifact(
                f"plans/{tid}-{dest.output_name}.json", plan.to_json()
            )
        except Exception as exc:
            raise _fail(skyplane, context, f"planning {dest.region} failed", exc) from None
        plans[dest.output_name] = {"plan": plan.to_dict(), "plan_uri": plan_uri}
        for region, count in api.vms_for(plan).items():
            vms[region] = max(vms.get(region, 0), count)
        context.log.info(
            f"planned {spec.source.region} -> {dest.region} for {total_objects} objects, "
            f"{total_bytes} bytes (plan at {plan_uri}):\n{plan.to_text()}"
        )
    return {"transfer_id": tid, "units": units, "plans": plans, "vms": vms}


def provision_fleet(
    context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec, planned: Mapping[str, Any]
) -> GatewayFleet:
    """Start the gateways every destination's plan needs: one fleet shared by the whole run."""
    tid = planned["transfer_id"]
    tags = {
        "orchestrator": "dagster",
        "dagster_run_id": context.run_id,
        "dataset": spec.name[:63],
    }
    try:
        fleet = skyplane.provision(dict(planned["vms"]), transfer_id=tid, tags=tags)
    except Exception as exc:  # provision() cleans up its own partial state before raising
        raise _fail(skyplane, context, "provisioning failed", exc) from None
    context.log.info(
        f"provisioned {len(fleet.gateways)} gateway(s) in {', '.join(fleet.regions)} "
        f"on backend {fleet.backend} (transfer {tid})"
    )
    return fleet


class _LogEvents(api.RunEvents):
    """The run's phases in the Dagster log, and a human progress line (%, MiB, Gbit/s, ETA,
    per path) at most every few seconds."""

    wants_progress = True

    def __init__(self, context: Any, label: str) -> None:
        self.context = context
        self.label = label
        self.line: api.ProgressLine | None = None
        self.last = 0.0

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        note: dict[str, str] = {}
        yield note
        if "done" in note:
            self.context.log.info(f"{self.label}: {name}: {note['done']}")

    def planned(self, plan: TransferPlan) -> None:
        self.line = api.ProgressLine(f"transfer {self.label}", api.plan_paths(plan))

    def progress(self, update: Any) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S or self.line is None:
            return
        self.last = now
        text = self.line.update(update)
        if text:
            self.context.log.info(text)


def transfer_step(
    context: Any,
    skyplane: SkyplaneResource,
    spec: ReplicationSpec,
    planned: Mapping[str, Any],
    fleet_dict: Mapping[str, Any],
) -> Iterator[Any]:
    """Copy every partition to every destination on the shared fleet, then always deprovision."""
    fleet = GatewayFleet.from_dict(dict(fleet_dict))
    root_run = getattr(context.run, "root_run_id", None) or context.run_id
    outcomes: dict[str, list[dict[str, Any]]] = {d.output_name: [] for d in spec.destinations}
    failure: dg.Failure | None = None
    try:
        for dest in spec.destinations:
            plan = TransferPlan.from_dict(planned["plans"][dest.output_name]["plan"])
            for unit in planned["units"]:
                dst_uri = join_uri(dest.uri, unit["prefix"])
                label = f"{dest.output_name}" + (
                    f"[{unit['partition']}]" if unit["partition"] else ""
                )
                journal = skyplane.journal_dir(
                    root_run.replace("-", ""),
                    spec.name,
                    dest.output_name,
                    unit["partition"] or "all",
                )
                context.log.info(
                    f"transfer {label}: {unit['objects']} objects, {unit['bytes']} bytes"
                )
                # The run sequence on the shared fleet and this destination's plan.
                request = skyplane.request(
                    unit["src_uri"], dst_uri, journal_dir=journal, transfer_id=fleet.transfer_id
                )
                gateways = skyplane.gateways(fleet=fleet, plan=plan)
                result = api.CopyRun(request, gateways, _LogEvents(context, label)).run()
                summary = result.to_dict()
                status = (summary.get("verification") or {}).get("status", "passed")
                if status != "passed":
                    raise TransferError(f"verification of {label} did not pass: {status}")
                outcomes[dest.output_name].append(summary)
    except BaseException as exc:
        if isinstance(exc, Exception):
            failure = _fail(skyplane, context, "transfer failed", exc)
        else:  # interrupted (run terminated): still deprovision below, then re-raise as is
            context.log.error("transfer interrupted; deprovisioning the fleet")
            _deprovision(context, skyplane, fleet)
            raise
    deprovision_error = _deprovision(context, skyplane, fleet)
    if failure is not None:
        raise failure from None
    if deprovision_error is not None:
        raise _fail(skyplane, context, "deprovisioning failed", deprovision_error) from None
    for dest in spec.destinations:
        entry = planned["plans"][dest.output_name]
        plan = TransferPlan.from_dict(entry["plan"])
        yield dg.MaterializeResult(
            asset_key=dest.asset_key,
            metadata={
                **fleet_metadata(fleet),
                **transfer_metadata(
                    outcomes[dest.output_name],
                    plan,
                    entry["plan_uri"],
                    transfer_id=planned["transfer_id"],
                    replica_uri=dest.uri,
                    partitions=len(planned["units"]),
                    replica=api.replica_properties(dest.uri, skyplane.store_options_for(dest.uri)),
                ),
            },
        )


def _deprovision(
    context: Any, skyplane: SkyplaneResource, fleet: GatewayFleet
) -> BaseException | None:
    """Delete the fleet; returns the error instead of raising so the caller decides."""
    try:
        deleted = skyplane.deprovision(fleet)
    except Exception as exc:
        context.log.error(
            skyplane.redact(
                f"deprovision of {fleet.transfer_id} failed: {type(exc).__name__}: {exc}"
            )
        )
        return exc
    context.log.info(
        f"deprovisioned {fleet.transfer_id} ({len(fleet.gateways)} gateways, {len(deleted)} swept)"
    )
    return None
