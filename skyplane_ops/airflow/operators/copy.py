"""``SkyplaneCopyOperator``: plan, provision, transfer and deprovision in one task."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset

from skyplane_ops.airflow.deferral import TransferDeferral
from skyplane_ops.airflow.hooks import SkyplaneHook, exported_env, merge_env
from skyplane_ops.airflow.lineage import operator_lineage, replica_facet
from skyplane_ops.airflow.links import (
    SkyplanePlanLink,
    SkyplaneReportLink,
    SkyplaneRouteLink,
    persist_links,
)
from skyplane_ops.airflow.operators.base import (
    SELECTION_TEMPLATED,
    TaskLogEvents,
    _float_or_none,
    _PlanningOperator,
    _transfer_task_defaults,
    _TransferringOperator,
    run_here,
)
from skyplane_ops.airflow.operators.fanout import (
    destination_outlets,
    execute_fanout,
    report_fanout,
)
from skyplane_ops.api import CopyRun, GatewayFleet, TransferPlan


class SkyplaneCopyOperator(TransferDeferral, _TransferringOperator, _PlanningOperator):
    """One task: plan, provision, transfer, and always deprovision.

    The convenience for a DAG that does not need the steps as separate tasks. A retry
    re-plans and re-provisions but resumes the data from the journal (restored from the state
    store on another worker). ``deferrable`` (default: Airflow's ``[operators]
    default_deferrable``): after provisioning, the driver transfers and then deletes the fleet
    itself, and the task defers to the trigger; if the driver is lost, the task deletes the
    fleet when it resumes.
    """

    operator_extra_links = (SkyplanePlanLink(), SkyplaneRouteLink(), SkyplaneReportLink())
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "src_region",
        "dst_region",
        "destinations",
        "dst_regions",
        "volume_gb",
        "min_throughput_gbps",
        "max_cost_usd",
        "deadline_seconds",
        "include",
        "exclude",
        "plan_uri",
        "journal_dir",
        "transfer_id",
        *SELECTION_TEMPLATED,
        "report_uri",
        "metadata_set",
        "keep_warm",
    )

    def __init__(
        self,
        *,
        src: str,
        dst: str | None = None,
        src_region: str,
        dst_region: str | None = None,
        destinations: Sequence[str] | None = None,
        dst_regions: Sequence[str] | None = None,
        volume_gb: float | str | None = None,
        min_throughput_gbps: float | str | None = None,
        max_cost_usd: float | str | None = None,
        deadline_seconds: float | str | None = None,
        include: Sequence[str] | str | None = None,
        exclude: Sequence[str] | str | None = None,
        src_conn_id: str | None = None,
        dst_conn_id: str | None = None,
        plan_uri: str | None = None,
        plan_conn_id: str | None = None,
        sync: bool = False,
        max_age: str | float | None = None,
        min_age: str | float | None = None,
        changed_since: Any = None,
        changed_before: Any = None,
        files_from: Sequence[str] | str | None = None,
        ignore_existing: bool = False,
        update: bool = False,
        move: bool = False,
        max_delete: int | None = None,
        bwlimit: str | None = None,
        journal_dir: str | None = None,
        dst_asset: Asset | bool | None = True,
        deferrable: bool | None = None,
        timeout: timedelta | float | None = None,
        poll_interval: float = 5.0,
        metadata: bool = True,
        metadata_set: Mapping[str, str] | Sequence[str] | None = None,
        keep_warm: str | float | None = None,
        **kwargs: Any,
    ) -> None:
        if destinations:  # several destinations (fanout.py); dst/dst_region are the first
            if dst is not None or dst_region is not None:
                raise ValueError("give dst/dst_region or destinations/dst_regions, not both")
            kwargs["outlets"] = destination_outlets(destinations, dst_asset, kwargs.get("outlets"))
            dst, dst_asset = destinations[0], False
            dst_region = dst_regions[0] if dst_regions else None
        elif dst is None or dst_region is None:
            raise ValueError("dst and dst_region are required (or destinations/dst_regions)")
        deferrable, timeout = _transfer_task_defaults(dst, dst_asset, deferrable, timeout, kwargs)
        super().__init__(**kwargs)
        self.destinations = list(destinations) if destinations else None
        self.dst_regions = list(dst_regions) if dst_regions else None
        self.src = src
        self.dst = dst
        # Objects keep their metadata (docs/metadata.md); ``metadata_set`` adds or overrides.
        self.metadata = metadata
        self.metadata_set = metadata_set
        # Park the fleet this long after the run for the next run to claim (docs/vmless.md).
        self.keep_warm = keep_warm
        self.src_region = src_region
        self.dst_region = dst_region
        self.volume_gb = volume_gb
        self.min_throughput_gbps = min_throughput_gbps
        self.max_cost_usd = max_cost_usd
        self.deadline_seconds = deadline_seconds
        self.include = include
        self.exclude = exclude
        self.src_conn_id = src_conn_id
        self.dst_conn_id = dst_conn_id
        self.plan_uri = plan_uri
        self.plan_conn_id = plan_conn_id
        self.sync = sync
        self.max_age = max_age
        self.min_age = min_age
        self.changed_since = changed_since
        self.changed_before = changed_before
        self.files_from = files_from
        self.ignore_existing = ignore_existing
        self.update = update
        self.move = move
        self.max_delete = max_delete
        self.bwlimit = bwlimit
        self.journal_dir = journal_dir
        self.deferrable = deferrable
        self.timeout = timeout
        self.poll_interval = poll_interval
        self._fleet: GatewayFleet | None = None
        self._transfer_id: str | None = None

    def execute(self, context: Any) -> dict[str, Any] | None:
        if self.destinations:
            return execute_fanout(self, context)
        transfer_id = self.resolve_transfer_id(context)
        self._transfer_id = transfer_id
        src_access = self.hook.store_access(self.src_conn_id)
        dst_access = self.hook.store_access(self.dst_conn_id)
        journal = self.journal_dir or os.path.join(
            self.hook.settings.work_dir, "journals", transfer_id
        )
        planning = self.hook.plan_options(
            min_throughput_gbps=_float_or_none("min_throughput_gbps", self.min_throughput_gbps),
            max_cost_usd=_float_or_none("max_cost_usd", self.max_cost_usd),
            deadline_seconds=_float_or_none("deadline_seconds", self.deadline_seconds),
        )
        job = self._job(
            transfer_id,
            journal,
            src_options=src_access.options,
            dst_options=dst_access.options,
            env=merge_env(src_access, dst_access),
            fields={
                "src_region": str(self.src_region),
                "dst_region": str(self.dst_region),
                "planning": planning,
                "metadata": self.metadata,
                "metadata_set": self.metadata_set or {},
                "keep_warm": self.keep_warm or None,
            },
        )
        state = self.hook.transfer_state(transfer_id)
        events = _CopyEvents(self, context, transfer_id, state, journal)
        volume = _float_or_none("volume_gb", self.volume_gb)
        gateways = self.hook.gateways(transfer_id)
        try:
            if self.deferrable:
                run = CopyRun(job.request, gateways, events, volume_gb=volume)
                result = self._start_deferred(run, job, state)
                if result is not None:
                    self._fleet = None  # ran inline (or nothing to do): no fleet left
            else:
                result, run = run_here(self, job, gateways, events, volume_gb=volume)
                self._fleet = None  # the run deleted it
        except BaseException:
            try:
                self._teardown()
            except Exception:
                self.log.exception("deprovisioning after the failure failed")
            raise
        if result is None:  # provisioned: the driver moves, finishes and deletes the fleet
            assert run.plan is not None and self._fleet is not None
            self.defer_transfer(
                context,
                plan=run.plan,
                plan_uri=events.plan_uri,
                fleet=self._fleet,
                job=job,
                teardown=True,
                warm=run.warm,  # a claimed fleet's idle, for the driver's result
            )
        if run.up_to_date:  # nothing to do: no plan, no gateways (on a cloud, no VMs to pay for)
            self.log.info(
                "sync %s: %d objects up to date, no plan and no gateways",
                transfer_id,
                result.objects_skipped,
            )
            return self._finish(
                context, result, transfer_id=transfer_id, plan=None, plan_uri=None, journal=None
            )
        return self._finish(
            context,
            result,
            transfer_id=transfer_id,
            plan=run.plan,
            plan_uri=events.plan_uri,
            journal=journal,
        )

    def _start_deferred(self, run: CopyRun, job: Any, state: Any) -> Any:
        """The run's steps up to its fleet (lock, list, plan, provision), here; None when the
        driver is to take over, or the result of a sync with nothing to do or of a copy the
        plan gives to this worker (no VM pays: it runs inline, in seconds)."""
        with exported_env(job.env), run.locked():
            try:
                done = run.list()
                if done is not None:
                    return done
                run.make_plan()
                if run.on_worker:  # seconds on this worker, no VM: inline, no deferral
                    return run.transfer()
                run.provision()
                assert run.fleet is not None
                state.save_secret(run.fleet.secret_ref)
                # From here on the driver owns the fleet and deletes it when it ends.
                run.detach()
            finally:
                run.close()
        return None

    def execute_complete(
        self,
        context: Any,
        event: Mapping[str, Any],
        plan_uri: str | None = None,
        journal: str | None = None,
        fleet: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        try:
            result = self.event_result(event)
        except BaseException:
            # The driver deletes the fleet itself, unless it was lost: delete it (idempotent).
            if fleet:
                try:
                    self.hook.deprovision(GatewayFleet.from_dict(dict(fleet)))
                except Exception:
                    self.log.exception("deprovisioning after the failure failed")
            raise
        if self.destinations:  # the driver ran the fan-out: one summary per destination
            transfer_id = str(event.get("transfer_id"))
            return report_fanout(self, context, result, transfer_id, journal)
        return self._finish_event(context, event, result, plan_uri, journal)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Source in, replica out (one per destination), named by the OpenLineage naming spec;
        the replica's storage class and encryption (its connection's write options) as a
        facet."""
        first, *more = map(str, self.destinations or [self.dst])
        options = self.hook.store_access(self.dst_conn_id).options
        return operator_lineage(str(self.src), first, *more, replica=replica_facet(first, options))

    def _teardown(self) -> None:
        """Delete the fleet, or sweep by tag when provisioning never returned one."""
        if self._fleet is not None:
            self.hook.deprovision(self._fleet)
            self._fleet = None
        elif self._transfer_id is not None:
            self.hook.deprovision(transfer_id=self._transfer_id)

    def on_kill(self) -> None:
        self.stop_deferred_driver()
        try:
            self._teardown()
        except Exception:
            self.log.exception("deprovisioning on kill failed")


class _CopyEvents(TaskLogEvents):
    """The task log, plus the plan: stored at ``plan_uri`` (default
    ``<work_dir>/plans/<transfer_id>.json``) with its route picture, logged as text, and
    linked from the task ("Skyplane plan", "Skyplane route")."""

    def __init__(
        self, op: SkyplaneCopyOperator, context: Any, transfer_id: str, state: Any, journal: str
    ) -> None:
        super().__init__(op, transfer_id, state, journal)
        self.context = context
        self.plan_uri: str | None = None

    def planned(self, plan: TransferPlan) -> None:
        super().planned(plan)
        op = self.op
        uri = op.plan_uri or os.path.join(
            op.hook.settings.work_dir, "plans", f"{self.transfer_id}.json"
        )
        self.plan_uri = SkyplaneHook.write_plan(plan, uri, conn_id=op.plan_conn_id)
        op.log.info(
            "plan %s (full plan at %s):\n%s", self.transfer_id, self.plan_uri, plan.to_text()
        )
        persist_links(self.context, self.plan_uri, plan, route_stored=True)

    def provisioned(self, fleet: GatewayFleet) -> None:
        self.op._fleet = fleet  # for on_kill and a failure's teardown
