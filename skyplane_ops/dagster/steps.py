"""The body of a replica materialisation: plan, provision, transfer, in one step.

One step, not three: the phases hand each other a plan and a fleet in memory, so nothing goes
through an IO manager or a filesystem shared by steps, and a one-second copy takes seconds,
not the start-up of three step processes. Dagster's own retry policy re-runs the step (the
journal makes the transfer resume) and run termination interrupts it: the fleet is deleted in
``finally`` either way; a run whose process dies is cleaned up by the leftover sweeper sensor
(:mod:`.sensors`). The phases still log as phases and their figures land in the metadata.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg

from skyplane_ops import api
from skyplane_ops.api import GatewayFleet, TransferError, TransferPlan
from skyplane_ops.dagster.journal_store import StoredJournal, unit_key
from skyplane_ops.dagster.locations import join_uri, prefix_for
from skyplane_ops.dagster.metadata import fleet_metadata, transfer_metadata
from skyplane_ops.dagster.metrics import StepMetrics, step_metrics
from skyplane_ops.dagster.spec import ReplicationSpec, run_partition_keys, transfer_id_for

# The resource is passed in, never imported: it imports this module (``replicate``).
SkyplaneResource = Any

GB = 1e9
PROGRESS_EVERY_S = 5.0


def _fail(skyplane: SkyplaneResource, context: Any, what: str, exc: BaseException) -> dg.Failure:
    """A Dagster Failure whose text (and the logged traceback) has every secret redacted."""
    context.log.error(skyplane.redact("".join(traceback.format_exception(exc)))[-4000:])
    return dg.Failure(description=skyplane.redact(f"{what}: {type(exc).__name__}: {exc}"))


def partition_window(
    partitions_def: dg.PartitionsDefinition[Any] | None, key: str | None
) -> tuple[Any, Any] | None:
    """A time-window partition's (start, end), for ``SkyplaneResource.partition_window``."""
    if key is None or not isinstance(partitions_def, dg.TimeWindowPartitionsDefinition):
        return None
    span = partitions_def.time_window_for_partition_key(key)
    return span.start, span.end


def replicate(context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec) -> Iterator[Any]:
    """Plan, provision and transfer every replica of ``spec`` for the run's partitions."""
    started = time.monotonic()
    planned = plan_units(context, skyplane, spec)
    context.log.info(f"planned in {time.monotonic() - started:.2f} s")
    fresh = replicas_up_to_date(context, skyplane, spec, planned)
    if len(fresh) == len(spec.destinations) * len(planned["units"]):
        context.log.info("every replica is up to date: no gateway started, nothing copied")
        yield from _results(spec, skyplane, planned, None, _by_dest(fresh))
        return
    fleet = provision_fleet(context, skyplane, spec, planned)
    yield from transfer_step(context, skyplane, spec, planned, fleet.to_dict(), fresh)


def replicas_up_to_date(
    context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec, planned: Mapping[str, Any]
) -> dict[tuple[str, str], dict[str, Any]]:
    """(destination, partition prefix) -> the up-to-date result of each replica that already
    matches its source (``CopyRun.list`` of a sync, under the journal lock): re-materialising an
    up-to-date partition starts no gateway (on a cloud backend, no VM paid for nothing)."""
    fresh: dict[tuple[str, str], dict[str, Any]] = {}
    for dest in spec.destinations:
        for unit in planned["units"]:
            journal = skyplane.journal_dir(
                "check", spec.name, dest.output_name, unit["partition"] or "all"
            )
            request = skyplane.request(
                unit["src_uri"],
                join_uri(dest.uri, unit["prefix"]),
                journal_dir=journal,
                transfer_id=planned["transfer_id"],
            ).replace(sync=True)
            # The run sequence's own lock and check (a sync's listing): no plan, no gateway.
            run = api.CopyRun(request, api.Gateways(early=False))
            try:
                with run.locked():
                    got = run.list()
            except Exception as exc:  # not a reason to fail: the copy will say what is wrong
                context.log.info(f"replica check of {dest.output_name} skipped: {exc}")
                continue
            finally:
                run.close()
            if got is not None:
                fresh[(dest.output_name, unit["prefix"])] = got.to_dict()
    return fresh


def _by_dest(fresh: Mapping[tuple[str, str], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for (dest, _), summary in fresh.items():
        out.setdefault(dest, []).append(summary)
    return out


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
    if total_objects == 0:  # a retry would find the same nothing: not retried
        raise dg.Failure(
            description=f"nothing to replicate: no objects under {spec.source.uri} "
            f"for partitions {[u['partition'] for u in units]}",
            allow_retries=False,
        )
    plans: dict[str, dict[str, Any]] = {}
    vms: dict[str, int] = {}
    multicast = _multicast_plan(context, skyplane, spec, max(total_bytes / GB, 1e-9))
    for dest in spec.destinations:
        try:
            plan = (
                api.destination_plan(multicast, dest.region)
                if multicast is not None
                else skyplane.plan(spec.source.region, dest.region, max(total_bytes / GB, 1e-9))
            )
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
    out = {"transfer_id": tid, "units": units, "plans": plans, "vms": vms}
    if multicast is not None:  # one transfer per partition for every destination (``fanout``)
        out["multicast"] = multicast.to_dict()
    return out


def _multicast_plan(
    context: Any, skyplane: SkyplaneResource, spec: ReplicationSpec, volume_gb: float
) -> TransferPlan | None:
    """Destinations in distinct regions: one multicast plan for all (a shared edge carries the
    data once; each destination follows its routes of it), else None (a plan each)."""
    regions = [d.region for d in spec.destinations]
    if len(regions) < 2 or len(set(regions)) != len(regions) or spec.source.region in regions:
        return None
    try:
        plan = skyplane.plan(spec.source.region, regions, volume_gb)
    except Exception as exc:
        raise _fail(skyplane, context, f"planning {', '.join(regions)} failed", exc) from None
    context.log.info(f"one multicast plan for {len(regions)} destinations:\n{plan.to_text()}")
    return plan


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
        self.latest: Any = None  # the newest sample, logged when the transfer ends

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        note: dict[str, str] = {}
        yield note
        if name == "transfer" and self.line is not None and self.latest is not None:
            text = self.line.update(self.latest)  # None when it was the last one logged
            if text:
                self.context.log.info(text)
        if "done" in note:
            self.context.log.info(f"{self.label}: {name}: {note['done']}")

    def planned(self, plan: TransferPlan) -> None:
        self.line = api.ProgressLine(f"transfer {self.label}", api.plan_paths(plan))

    def progress(self, update: Any) -> None:
        self.latest = update
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S or self.line is None:
            return
        if not getattr(update, "bytes_done", 1):  # nothing moved yet: no lone "0.0%" line
            return
        self.last = now
        text = self.line.update(update)
        if text:
            self.context.log.info(text)


class _StoredEvents(_LogEvents):
    """The log, and the journal snapshotted to the state store as chunks land."""

    def __init__(self, context: Any, label: str, stored: StoredJournal | None) -> None:
        super().__init__(context, label)
        self.stored = stored

    def progress(self, update: Any) -> None:
        if self.stored is not None:
            self.stored.tick()
        super().progress(update)


def transfer_step(
    context: Any,
    skyplane: SkyplaneResource,
    spec: ReplicationSpec,
    planned: Mapping[str, Any],
    fleet_dict: Mapping[str, Any],
    fresh: Mapping[tuple[str, str], dict[str, Any]] | None = None,
) -> Iterator[Any]:
    """Copy every partition to every destination on the shared fleet, then always deprovision;
    replicas in ``fresh`` (up to date) are not copied again."""
    fleet = GatewayFleet.from_dict(dict(fleet_dict))
    outcomes: dict[str, list[dict[str, Any]]] = {d.output_name: [] for d in spec.destinations}
    failure: dg.Failure | None = None
    failed: dict[str, str] = {}
    try:
        with step_metrics(skyplane, context, fleet.transfer_id) as metrics:
            _copy_all(context, skyplane, spec, planned, fleet, fresh, outcomes, failed, metrics)
    except BaseException as exc:
        if isinstance(exc, Exception):
            failure = _fail(skyplane, context, "transfer failed", exc)
        else:  # interrupted (run terminated): still deprovision below, then re-raise as is
            context.log.error("transfer interrupted; deprovisioning the fleet")
            _deprovision(context, skyplane, fleet)
            raise
    ok = failure is None and not failed  # only a successful step parks (keep_warm)
    deprovision_error = _deprovision(context, skyplane, fleet, planned if ok else None)
    if failure is not None:
        raise failure from None
    if deprovision_error is not None:
        raise _fail(skyplane, context, "deprovisioning failed", deprovision_error) from None
    # The replicas that were copied are materialised even when another one failed.
    yield from _results(spec, skyplane, planned, fleet, outcomes, skip=set(failed))
    if failed:
        names = ", ".join(f"{d}: {why}" for d, why in failed.items())
        raise dg.Failure(
            description=skyplane.redact(
                f"{len(failed)} of {len(spec.destinations)} replicas not copied ({names}); "
                "the others are materialised: re-execute to resume"
            )
        )


def _copy_all(
    context: Any,
    skyplane: SkyplaneResource,
    spec: ReplicationSpec,
    planned: Mapping[str, Any],
    fleet: GatewayFleet,
    fresh: Mapping[tuple[str, str], dict[str, Any]] | None,
    outcomes: dict[str, list[dict[str, Any]]],
    failed: dict[str, str],
    metrics: StepMetrics,
) -> None:
    """Copy each partition: to every destination in one transfer (``fan_out_unit``) under a
    multicast plan, else to each destination in turn; summaries go to ``outcomes``."""
    root_run = getattr(context.run, "root_run_id", None) or context.run_id
    if planned.get("multicast"):  # one transfer per partition to every destination
        for unit in planned["units"]:
            fan_out_unit(
                context, skyplane, spec, planned, fleet, unit, fresh, outcomes, failed, metrics
            )
    for dest in [] if planned.get("multicast") else spec.destinations:
        plan = TransferPlan.from_dict(planned["plans"][dest.output_name]["plan"])
        for unit in planned["units"]:
            done = (fresh or {}).get((dest.output_name, unit["prefix"]))
            if done is not None:  # up to date: not copied again
                outcomes[dest.output_name].append(done)
                continue
            dst_uri = join_uri(dest.uri, unit["prefix"])
            label = f"{dest.output_name}" + (f"[{unit['partition']}]" if unit["partition"] else "")
            journal = skyplane.journal_dir(
                root_run.replace("-", ""),
                spec.name,
                dest.output_name,
                unit["partition"] or "all",
            )
            context.log.info(f"transfer {label}: {unit['objects']} objects, {unit['bytes']} bytes")
            # The run sequence on the shared fleet and this destination's plan.
            request = skyplane.request(
                unit["src_uri"],
                dst_uri,
                journal_dir=journal,
                transfer_id=fleet.transfer_id,
                window=partition_window(spec.partitions_def, unit["partition"]),
            )
            gateways = skyplane.gateways(fleet=fleet, plan=plan)
            key = unit_key(root_run, spec.name, dest.output_name, unit["partition"] or "")
            stored = skyplane.stored_journal(key, journal, context.log)
            if stored is not None:
                stored.restore()
            events = metrics.wrap(_StoredEvents(context, label, stored))
            try:
                with skyplane.follow_bwlimit(fleet.transfer_id):  # ``set_bwlimit``
                    result = api.CopyRun(request, gateways, events).run()
            except api.PartialTransferError as exc:
                metrics.observe(exc.result)  # the metrics tell what landed, then it fails
                raise
            finally:
                if stored is not None:
                    stored.save()
            if stored is not None:
                stored.forget()
            metrics.observe(result)
            if result.chunks_resumed:
                context.log.info(
                    f"{label}: {result.chunks_resumed} chunk(s) resumed from the journal"
                )
            summary = result.to_dict()
            status = (summary.get("verification") or {}).get("status", "passed")
            if status != "passed":
                raise TransferError(f"verification of {label} did not pass: {status}")
            outcomes[dest.output_name].append(summary)


def fan_out_unit(
    context: Any,
    skyplane: SkyplaneResource,
    spec: ReplicationSpec,
    planned: Mapping[str, Any],
    fleet: GatewayFleet,
    unit: Mapping[str, Any],
    fresh: Mapping[tuple[str, str], dict[str, Any]] | None,
    outcomes: dict[str, list[dict[str, Any]]],
    failed: dict[str, str],
    metrics: StepMetrics | None = None,
) -> None:
    """One partition to every destination not up to date in one transfer (``FanoutRun``:
    each chunk read once and sent down the multicast plan's trees, then each replica
    committed and verified on its own); a destination that fails is put in ``failed`` and the
    others are still copied. One destination left: its own ``CopyRun``, on its routes."""
    multicast = TransferPlan.from_dict(planned["multicast"])
    root_run = getattr(context.run, "root_run_id", None) or context.run_id
    todo = []
    for dest in spec.destinations:
        done = (fresh or {}).get((dest.output_name, unit["prefix"]))
        if done is not None:  # up to date: not copied again
            outcomes[dest.output_name].append(done)
        elif dest.output_name not in failed:
            todo.append(dest)
    if not todo:
        return
    part = unit["partition"] or "all"
    journal = skyplane.journal_dir(root_run.replace("-", ""), spec.name, "fanout", part)
    requests = [
        skyplane.request(
            unit["src_uri"],
            join_uri(d.uri, unit["prefix"]),
            journal_dir=journal,
            transfer_id=fleet.transfer_id,
            window=partition_window(spec.partitions_def, unit["partition"]),
        )
        for d in todo
    ]
    regions = tuple(d.region for d in todo)
    label = ", ".join(d.output_name for d in todo) + (
        f"[{unit['partition']}]" if unit["partition"] else ""
    )
    context.log.info(f"transfer {label}: {unit['objects']} objects, {unit['bytes']} bytes")
    stored: StoredJournal | None = None
    if len(todo) == 1:
        plan = api.destination_plan(multicast, regions[0])
        runner: Any = api.CopyRun(requests[0], skyplane.gateways(fleet=fleet, plan=plan))
    else:
        request = requests[0].replace(
            dst_region=regions[0],
            destinations=tuple(r.dst for r in requests),
            dst_regions=regions,
        )
        if len(regions) != len(multicast.dsts):  # some are up to date: their routes only
            multicast = _sub_multicast(multicast, regions)
        key = unit_key(root_run, spec.name, "fanout", unit["partition"] or "")
        stored = skyplane.stored_journal(key, journal, context.log)
        if stored is not None:
            stored.restore()
        events: api.RunEvents = _StoredEvents(context, label, stored)
        runner = api.FanoutRun(
            request,
            skyplane.gateways(fleet=fleet, plan=multicast),
            metrics.wrap(events) if metrics is not None else events,
        )
    try:
        with skyplane.follow_bwlimit(fleet.transfer_id):
            got = runner.run()
    except api.FanoutError as exc:
        got = exc.result
    except TransferError as exc:  # the one destination's run
        failed[todo[0].output_name] = str(exc).splitlines()[0]
        return
    finally:
        if stored is not None:
            stored.save()
    if stored is not None and not isinstance(got, api.TransferResult) and not got.errors:
        stored.forget()
    results = {requests[0].dst_uri: got} if len(todo) == 1 else dict(got.results)
    errors = {} if len(todo) == 1 else dict(got.errors)
    if len(todo) > 1 and runner.tree is not None and runner.tree.served:
        context.log.info(
            f"{label}: tree pass landed {sum(runner.tree.landed.values())} chunk(s) at "
            f"{len(runner.tree.served)} destinations, each read once at the source"
        )
    for dest, req in zip(todo, requests, strict=True):
        summary = results[req.dst_uri].to_dict() if req.dst_uri in results else None
        status = ((summary or {}).get("verification") or {}).get("status", "passed")
        if req.dst_uri in errors or summary is None:
            failed[dest.output_name] = errors.get(req.dst_uri, "not copied")
        elif status != "passed":
            failed[dest.output_name] = f"verification did not pass: {status}"
        else:
            outcomes[dest.output_name].append(summary)


def _sub_multicast(plan: TransferPlan, regions: tuple[str, ...]) -> TransferPlan:
    """A multicast plan cut to ``regions`` (some replicas were up to date): its trees pruned
    by the tree pass, its routes those ending there."""
    return dataclasses.replace(
        plan,
        dsts=regions,
        paths=[p for p in plan.paths if p.regions[-1] in regions],
    )


def _results(
    spec: ReplicationSpec,
    skyplane: SkyplaneResource,
    planned: Mapping[str, Any],
    fleet: GatewayFleet | None,
    outcomes: Mapping[str, list[dict[str, Any]]],
    skip: set[str] | None = None,
) -> Iterator[Any]:
    """One materialisation per destination (``fleet`` None: every replica was up to date),
    except those in ``skip`` (not copied)."""
    for dest in spec.destinations:
        if dest.output_name in (skip or ()):
            continue
        entry = planned["plans"][dest.output_name]
        plan = TransferPlan.from_dict(entry["plan"])
        yield dg.MaterializeResult(
            asset_key=dest.asset_key,
            metadata={
                **(fleet_metadata(fleet) if fleet is not None else {"gateways": 0}),
                **transfer_metadata(
                    outcomes.get(dest.output_name, []),
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
    context: Any,
    skyplane: SkyplaneResource,
    fleet: GatewayFleet,
    succeeded: Mapping[str, Any] | None = None,
) -> BaseException | None:
    """Delete the fleet, or park it (``keep_warm``) after a step that ``succeeded`` (its
    plans: the parking's $/h is their VM price); returns the error instead of raising so the
    caller decides."""
    try:
        deleted = skyplane.deprovision(
            fleet,
            succeeded=succeeded is not None,
            usd_per_hour=_fleet_usd_per_hour(succeeded, fleet) if succeeded else 0.0,
        )
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


def _fleet_usd_per_hour(planned: Mapping[str, Any], fleet: GatewayFleet) -> float:
    """The shared fleet's $/h at its plans' VM price (the dearest: an upper bound)."""
    plans = [TransferPlan.from_dict(p["plan"]) for p in planned.get("plans", {}).values()]
    return max((api.vm_usd_per_hour(p, fleet) for p in plans), default=0.0)
