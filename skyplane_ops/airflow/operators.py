"""Operators: plan, provision (setup), transfer, deprovision (teardown) and the one-task copy.

Each operator is a thin adapter over ``SkyplaneHook`` -> ``skyplane_ops.api`` and is usable on
its own. XCom values are small JSON summaries (see ``summaries``): the full plan lives at a URI,
the fleet reference is the secret-free ``GatewayFleet`` JSON, and nothing returns key lists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import TaskDeferred

from skyplane_ops.airflow.deferral import SkyplaneTransferFailed, TransferDeferral
from skyplane_ops.airflow.hooks import SkyplaneHook, StoreAccess, merge_env
from skyplane_ops.airflow.lineage import operator_lineage
from skyplane_ops.airflow.links import SkyplanePlanLink, SkyplaneRouteLink, persist_links
from skyplane_ops.airflow.settings import DEFAULT_CONN_ID, make_transfer_id
from skyplane_ops.airflow.summaries import (
    asset_metadata,
    bounded,
    fleet_reference,
    plan_summary,
    transfer_summary,
)
from skyplane_ops.api import GatewayFleet, ProgressLine, TransferPlan, plan_paths

_SAFE_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


__all__ = [
    "SkyplaneCopyOperator",
    "SkyplaneDeprovisionOperator",
    "SkyplanePlanOperator",
    "SkyplaneProvisionOperator",
    "SkyplaneTransferFailed",
    "SkyplaneTransferOperator",
]


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable`` (False when unset)."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def _float_or_none(name: str, value: Any) -> float | None:
    if value is None or value == "" or value == "None":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _as_mapping(name: str, value: Any) -> dict[str, Any] | None:
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping or JSON object, got {type(value).__name__}")
    return dict(value)


def _is_literal(text: Any) -> bool:
    return isinstance(text, str) and "{{" not in text and "{%" not in text


class _SkyplaneBaseOperator(BaseOperator):
    """Connection handling and the run's deterministic transfer id, shared by all operators."""

    ui_color = "#d7ecfb"

    def __init__(
        self,
        *,
        skyplane_conn_id: str = DEFAULT_CONN_ID,
        transfer_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.skyplane_conn_id = skyplane_conn_id
        self.transfer_id = transfer_id
        self._hook: SkyplaneHook | None = None

    @property
    def hook(self) -> SkyplaneHook:
        if self._hook is None:
            self._hook = SkyplaneHook(self.skyplane_conn_id)
        return self._hook

    def resolve_transfer_id(self, context: Any, fallback: str | None = None) -> str:
        """Explicit id > id carried by the plan/fleet > ``dag-run-group`` default.

        The default is deterministic per DAG run and task group, so every task of one
        transfer (and every retry) agrees on the tags, the journal and the driver.
        """
        raw = self.transfer_id or fallback
        if raw:
            raw = str(raw)
            if set(raw) <= _SAFE_ID_CHARS and 0 < len(raw) <= 63:
                return raw
            return make_transfer_id(raw)
        group = self.task_group.group_id if self.task_group and self.task_group.group_id else ""
        run_id = context.get("run_id", "norun")
        return make_transfer_id(f"{self.dag_id}-{run_id}-{group}")

    def _emit_asset_events(self, context: Any, summary: Mapping[str, Any]) -> None:
        """Attach transfer metadata to every destination Asset outlet's event."""
        meta = asset_metadata(summary)
        events = context.get("outlet_events")
        if events is None:  # run outside a task runner (a test, a script)
            return
        for outlet in self.outlets or []:
            if isinstance(outlet, Asset):
                events[outlet].extra.update(meta)


def _default_dst_outlets(dst: Any, dst_asset: Asset | bool | None, outlets: Any) -> Any:
    """An ``Asset(uri=dst)`` outlet when dst is a literal URI and no outlets were given."""
    if outlets:
        return outlets
    if isinstance(dst_asset, Asset):
        return [dst_asset]
    if dst_asset and _is_literal(dst):
        return [Asset(uri=str(dst))]
    return outlets


class _PlanningOperator(_SkyplaneBaseOperator):
    """Sizing the source and planning, shared by the plan and the one-task copy operators."""

    src_region: str
    src: str | None
    volume_gb: float | str | None
    min_throughput_gbps: float | str | None
    max_cost_usd: float | str | None
    deadline_seconds: float | str | None
    include: Sequence[str] | str | None
    exclude: Sequence[str] | str | None
    plan_uri: str | None
    plan_conn_id: str | None

    def _volume(self, access: Callable[[], tuple[Mapping[str, Any], Mapping[str, str]]]) -> float:
        """``volume_gb`` as given, else what listing ``src`` (include/exclude) finds, with the
        store options and credential environment ``access()`` gives (called only then)."""
        volume = _float_or_none("volume_gb", self.volume_gb)
        if volume is None and self.src:
            src_options, env = access()
            volume = SkyplaneHook.source_volume_gb(
                str(self.src),
                src_options=src_options,
                include=_as_list(self.include),
                exclude=_as_list(self.exclude),
                env=env,
            )
            self.log.info("volume measured at the source: %.6f GB", volume)
        if volume is None or volume < 0:
            raise ValueError(
                f"volume_gb must be a non-negative number (or give src), got {self.volume_gb!r}"
            )
        return volume

    def _plan_and_store(
        self, dst_regions: str | Sequence[str], volume: float, transfer_id: str
    ) -> tuple[TransferPlan, str]:
        """Plan with the operator's bound; the full plan is written to ``plan_uri`` (default
        ``<work_dir>/plans/<transfer_id>.json``), whose URI is returned with it."""
        plan = self.hook.plan(
            str(self.src_region),
            dst_regions,
            volume,
            min_throughput_gbps=_float_or_none("min_throughput_gbps", self.min_throughput_gbps),
            max_cost_usd=_float_or_none("max_cost_usd", self.max_cost_usd),
            deadline_seconds=_float_or_none("deadline_seconds", self.deadline_seconds),
        )
        uri = self.plan_uri or os.path.join(
            self.hook.settings.work_dir, "plans", f"{transfer_id}.json"
        )
        return plan, SkyplaneHook.write_plan(plan, uri, conn_id=self.plan_conn_id)


class SkyplanePlanOperator(_PlanningOperator):
    """Plan an overlay transfer; stores the full plan at ``plan_uri``, returns a summary.

    At most one bound: ``min_throughput_gbps`` (cheapest plan at least this fast),
    ``max_cost_usd`` (fastest plan under this cost) or ``deadline_seconds``. With none, the
    connection's ``max_cost_usd`` applies, else the planner's default. ``plan_uri`` is a local
    path or an object-store URI (``ObjectStoragePath``, with ``plan_conn_id`` for credentials);
    by default ``<work_dir>/plans/<transfer_id>.json``.
    """

    operator_extra_links = (SkyplanePlanLink(), SkyplaneRouteLink())
    template_fields: Sequence[str] = (
        "src_region",
        "dst_regions",
        "volume_gb",
        "min_throughput_gbps",
        "max_cost_usd",
        "deadline_seconds",
        "plan_uri",
        "transfer_id",
        "src",
        "include",
        "exclude",
    )

    def __init__(
        self,
        *,
        src_region: str,
        dst_regions: str | Sequence[str],
        volume_gb: float | str | None = None,
        min_throughput_gbps: float | str | None = None,
        max_cost_usd: float | str | None = None,
        deadline_seconds: float | str | None = None,
        plan_uri: str | None = None,
        plan_conn_id: str | None = None,
        src: str | None = None,
        src_conn_id: str | None = None,
        src_options: Mapping[str, Any] | None = None,
        include: Sequence[str] | str | None = None,
        exclude: Sequence[str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.src_region = src_region
        self.dst_regions = dst_regions
        self.volume_gb = volume_gb
        self.src = src
        self.src_conn_id = src_conn_id
        self.src_options = dict(src_options or {})
        self.include = include
        self.exclude = exclude
        self.min_throughput_gbps = min_throughput_gbps
        self.max_cost_usd = max_cost_usd
        self.deadline_seconds = deadline_seconds
        self.plan_uri = plan_uri
        self.plan_conn_id = plan_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        transfer_id = self.resolve_transfer_id(context)

        def access() -> tuple[dict[str, Any], dict[str, str]]:
            found = self.hook.store_access(self.src_conn_id)
            return {**found.options, **self.src_options}, found.env

        dsts = _as_list(self.dst_regions)
        plan, stored = self._plan_and_store(
            dsts if len(dsts) != 1 else dsts[0], self._volume(access), transfer_id
        )
        summary = plan_summary(plan, plan_uri=stored, transfer_id=transfer_id)
        self.log.info("plan %s (full plan at %s):\n%s", transfer_id, stored, plan.to_text())
        persist_links(context, stored, plan, route_stored=True)
        return summary


def _load_plan(value: Any, conn_id: str | None) -> tuple[TransferPlan, str | None]:
    """A plan from a plan summary (``plan_uri``), a URI string or a full plan dict."""
    if isinstance(value, TransferPlan):
        return value, None
    if isinstance(value, str) and not value.lstrip().startswith("{"):
        return SkyplaneHook.read_plan(value, conn_id=conn_id), value
    data = _as_mapping("plan", value)
    if data is None:
        raise ValueError("a plan is required (the plan task's summary, a plan URI or JSON)")
    if "plan_uri" in data and "paths" not in data:
        return SkyplaneHook.read_plan(data["plan_uri"], conn_id=conn_id), data["plan_uri"]
    return TransferPlan.from_dict(data), None


def _load_fleet(value: Any) -> GatewayFleet | None:
    if isinstance(value, GatewayFleet):
        return value
    data = _as_mapping("fleet", value)
    return GatewayFleet.from_dict(data) if data else None


class SkyplaneProvisionOperator(_SkyplaneBaseOperator):
    """Start the plan's gateways (a setup task); returns the small, secret-free fleet JSON.

    A retry first deletes what an earlier attempt may have left (by transfer-id tag); a
    failure deletes its own partial state before the task fails.
    """

    template_fields: Sequence[str] = ("plan", "transfer_id", "tags")

    def __init__(
        self,
        *,
        plan: Any,
        plan_conn_id: str | None = None,
        tags: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.plan_conn_id = plan_conn_id
        self.tags = dict(tags or {})
        self._provisioning_id: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        plan, _ = _load_plan(self.plan, self.plan_conn_id)
        summary_id = self.plan.get("transfer_id") if isinstance(self.plan, Mapping) else None
        transfer_id = self.resolve_transfer_id(context, summary_id)
        self._provisioning_id = transfer_id
        ti = context.get("ti")
        if ti is not None and getattr(ti, "try_number", 1) > 1:
            leftovers = self.hook.deprovision(transfer_id=transfer_id)
            if leftovers:
                self.log.info("deleted %d leftovers of an earlier attempt", len(leftovers))
        try:
            fleet = self.hook.provision(plan, transfer_id=transfer_id, tags=self.tags)
            # The transfer task may run on another worker: keep the secret with the transfer.
            self.hook.transfer_state(transfer_id).save_secret(fleet.secret_ref)
        except BaseException:
            self._sweep(transfer_id)
            raise
        self.log.info(
            "fleet %s: %d gateways in %s",
            transfer_id,
            len(fleet.gateways),
            ", ".join(fleet.regions),
        )
        return fleet_reference(fleet)

    def _sweep(self, transfer_id: str) -> None:
        try:
            deleted = self.hook.deprovision(transfer_id=transfer_id)
            self.log.info("cleaned up %d resources tagged %s", len(deleted), transfer_id)
        except Exception:
            self.log.exception("cleanup by tag %s failed; the teardown task retries", transfer_id)

    def on_kill(self) -> None:
        if self._provisioning_id:
            self._sweep(self._provisioning_id)


class SkyplaneTransferOperator(TransferDeferral, _SkyplaneBaseOperator):
    """Run the transfer on the fleet along the plan, then verify it.

    ``plan`` is the plan task's summary (or a plan URI / JSON), ``fleet`` the provision task's
    fleet JSON. ``src``/``dst`` are store URIs (``s3://``, ``gs://``, ``az://``, ``file://``);
    credentials come from ``src_conn_id``/``dst_conn_id`` (aws, google_cloud_platform, wasb
    connections) or the SDKs' default chains, and never enter templates, logs or XCom.

    A retry resumes, on any worker: the journal (``journal_dir``, by default
    ``<work_dir>/journals/<id>``) records finished chunks, is snapshotted to the connection's
    state store, and is restored from there when this worker does not have it.

    ``deferrable`` (default: Airflow's ``[operators] default_deferrable``): a detached
    control-plane driver (``skyplane_ops.airflow.driver``) runs the transfer and the task
    defers to ``SkyplaneTransferTrigger``, which follows the driver through the state store
    and frees the worker slot. ``timeout`` is enforced in both modes (in deferrable mode by
    the trigger, since Airflow stops counting ``execution_timeout`` after a deferral).
    ``on_kill`` stops the driver and the gateways.
    """

    operator_extra_links = (SkyplanePlanLink(), SkyplaneRouteLink())
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "include",
        "exclude",
        "plan",
        "fleet",
        "journal_dir",
        "transfer_id",
    )
    template_fields_renderers = {"plan": "json", "fleet": "json"}

    def __init__(
        self,
        *,
        src: str,
        dst: str,
        plan: Any,
        fleet: Any,
        include: Sequence[str] | str | None = None,
        exclude: Sequence[str] | str | None = None,
        src_conn_id: str | None = None,
        dst_conn_id: str | None = None,
        src_options: Mapping[str, Any] | None = None,
        dst_options: Mapping[str, Any] | None = None,
        plan_conn_id: str | None = None,
        sync: bool = False,
        journal_dir: str | None = None,
        engine_options: Mapping[str, Any] | None = None,
        deferrable: bool | None = None,
        timeout: timedelta | float | None = None,
        poll_interval: float = 5.0,
        stop_fleet_on_kill: bool = True,
        dst_asset: Asset | bool | None = True,
        **kwargs: Any,
    ) -> None:
        if deferrable is None:
            deferrable = default_deferrable()
        kwargs["outlets"] = _default_dst_outlets(dst, dst_asset, kwargs.get("outlets"))
        if isinstance(timeout, int | float):
            timeout = timedelta(seconds=timeout)
        if timeout is not None and not deferrable and kwargs.get("execution_timeout") is None:
            kwargs["execution_timeout"] = timeout
        super().__init__(**kwargs)
        self.src = src
        self.dst = dst
        self.plan = plan
        self.fleet = fleet
        self.include = include
        self.exclude = exclude
        self.src_conn_id = src_conn_id
        self.dst_conn_id = dst_conn_id
        self.src_options = dict(src_options or {})
        self.dst_options = dict(dst_options or {})
        self.plan_conn_id = plan_conn_id
        self.sync = sync
        self.journal_dir = journal_dir
        self.engine_options = dict(engine_options or {})
        self.deferrable = deferrable
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.stop_fleet_on_kill = stop_fleet_on_kill
        self._fleet: GatewayFleet | None = None

    # -- shared -----------------------------------------------------------------------------

    def _prepare(self, context: Any) -> tuple[TransferPlan, str | None, GatewayFleet, str, str]:
        plan, plan_uri = _load_plan(self.plan, self.plan_conn_id)
        fleet = _load_fleet(self.fleet)
        if fleet is None:
            raise ValueError("a fleet is required (the provision task's return value)")
        self._fleet = fleet
        transfer_id = self.resolve_transfer_id(context, fleet.transfer_id)
        journal = self.journal_dir or os.path.join(
            self.hook.settings.work_dir, "journals", transfer_id
        )
        persist_links(context, plan_uri, plan)
        return plan, plan_uri, fleet, transfer_id, journal

    def _finish(
        self,
        context: Any,
        result: Any,
        *,
        transfer_id: str,
        plan: TransferPlan | None,
        plan_uri: str | None,
        journal: str | None,
    ) -> dict[str, Any]:
        summary = transfer_summary(
            result,
            transfer_id=transfer_id,
            plan=plan,
            plan_uri=plan_uri,
            src=str(self.src),
            dst=str(self.dst),
            journal_dir=journal,
        )
        self.log.info("%s", done_line(transfer_id, summary))
        self._emit_asset_events(context, summary)
        return summary

    def execute(self, context: Any) -> dict[str, Any] | None:
        plan, plan_uri, fleet, transfer_id, journal = self._prepare(context)
        src_access = self.hook.store_access(self.src_conn_id)
        dst_access = self.hook.store_access(self.dst_conn_id)
        access = StoreAccess(
            options={**src_access.options, **self.src_options},
            env=merge_env(src_access, dst_access),
        )
        dst_options = {**dst_access.options, **self.dst_options}
        selection: dict[str, Any] = {
            "src": str(self.src),
            "dst": str(self.dst),
            "include": _as_list(self.include),
            "exclude": _as_list(self.exclude),
            "sync": self.sync,
        }
        if self.deferrable:
            self.defer_transfer(
                context,
                plan=plan,
                plan_uri=plan_uri,
                fleet=fleet,
                transfer_id=transfer_id,
                journal=journal,
                src_options=access.options,
                dst_options=dst_options,
                env=access.env,
                engine_options=self.engine_options,
                **selection,
            )
            return None
        result = run_here(
            self,
            plan,
            fleet,
            transfer_id=transfer_id,
            journal=journal,
            src_options=access.options,
            dst_options=dst_options,
            env=access.env,
            engine_options=self.engine_options,
            **selection,
        )
        return self._finish(
            context, result, transfer_id=transfer_id, plan=plan, plan_uri=plan_uri, journal=journal
        )

    def execute_complete(
        self,
        context: Any,
        event: Mapping[str, Any],
        plan_uri: str | None = None,
        journal: str | None = None,
        fleet: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        result = self.event_result(event)
        plan = SkyplaneHook.read_plan(plan_uri, conn_id=self.plan_conn_id) if plan_uri else None
        return self._finish(
            context,
            result,
            transfer_id=str(event.get("transfer_id")),
            plan=plan,
            plan_uri=plan_uri,
            journal=journal,
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Source in, replica out, named by the OpenLineage naming spec."""
        return operator_lineage(str(self.src), str(self.dst))

    def on_kill(self) -> None:
        """Stop the driver (deferrable mode) and the gateways, so nothing keeps running."""
        self.stop_deferred_driver()
        if self.stop_fleet_on_kill and self._fleet is not None:
            try:
                self.hook.deprovision(self._fleet)
            except Exception:
                self.log.exception("stopping the gateways failed; the teardown task retries")


def done_line(transfer_id: str, summary: Mapping[str, Any]) -> str:
    """The one human line a finished transfer logs."""
    verification = summary.get("verification")
    if isinstance(verification, Mapping):
        verification = verification.get("status")
    size = summary.get("bytes") or 0
    return (
        f"transfer {transfer_id} done: {summary.get('objects')} objects, "
        f"{size / 1024 / 1024:.1f} MiB in {summary.get('seconds')} s at "
        f"{summary.get('gbps')} Gbit/s, verification {verification}"
    )


def run_here(
    op: Any,
    plan: TransferPlan,
    fleet: GatewayFleet,
    *,
    transfer_id: str,
    journal: str,
    src: str,
    dst: str,
    include: Sequence[str],
    exclude: Sequence[str],
    sync: bool,
    src_options: Mapping[str, Any],
    dst_options: Mapping[str, Any],
    env: Mapping[str, str],
    engine_options: Mapping[str, Any],
) -> Any:
    """Transfer in this task's process: journal and secret from the state store when this
    worker lacks them, the journal snapshotted back, progress as human log lines."""
    state = op.hook.transfer_state(transfer_id)
    if state.restore_journal(journal):
        op.log.info("restored the journal of %s from %s", transfer_id, state.uri)
    fleet = dataclasses.replace(fleet, secret_ref=state.local_secret_ref(fleet.secret_ref))
    line = ProgressLine(f"transfer {transfer_id}", plan_paths(plan))
    last = [0.0]

    def progress(update: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0:
            last[0] = now
            text = line.update(update)
            if text:
                op.log.info("%s", text)
            state.save_journal(journal)

    try:
        return op.hook.transfer(
            plan,
            fleet,
            src,
            dst,
            src_options=src_options,
            dst_options=dst_options,
            include=list(include),
            exclude=list(exclude),
            journal_dir=journal,
            sync=sync,
            progress=progress,
            env=env,
            **engine_options,
        )
    finally:
        try:
            state.save_journal(journal)
        except Exception:
            op.log.exception("saving the journal snapshot failed")


class SkyplaneDeprovisionOperator(_SkyplaneBaseOperator):
    """Delete a fleet (a teardown task), and every leftover tagged with the transfer id.

    The fleet comes from ``fleet`` (JSON/dict) or is pulled from ``fleet_task_id``; when the
    provision task failed half-way and left no fleet, the transfer id alone is enough (the
    backend's sweep finds resources by tag). Returns a count and the first deleted ids.
    """

    template_fields: Sequence[str] = ("fleet", "transfer_id")

    def __init__(
        self,
        *,
        fleet: Any = None,
        fleet_task_id: str | None = None,
        sweep: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fleet = fleet
        self.fleet_task_id = fleet_task_id
        self.sweep = sweep

    def execute(self, context: Any) -> dict[str, Any]:
        fleet = _load_fleet(self.fleet)
        if fleet is None and self.fleet_task_id:
            fleet = _load_fleet(context["ti"].xcom_pull(task_ids=self.fleet_task_id))
        transfer_id = self.resolve_transfer_id(context, fleet.transfer_id if fleet else None)
        deleted: list[str] = []
        if fleet is not None:
            deleted += self.hook.deprovision(fleet)
        if self.sweep or fleet is None:
            deleted += self.hook.deprovision(transfer_id=transfer_id)
        # The transfer's status, journal snapshot and secret go with the fleet.
        removed = self.hook.transfer_state(transfer_id).delete()
        self.log.info("removed %d state objects of %s", removed, transfer_id)
        self.log.info("deprovisioned %s: %d resources", transfer_id, len(deleted))
        return bounded(
            {
                "transfer_id": transfer_id,
                "had_fleet": fleet is not None,
                "deleted_count": len(deleted),
                "deleted": deleted[:16],
            }
        )


class SkyplaneCopyOperator(TransferDeferral, _PlanningOperator):
    """One task: plan, provision, transfer, and always deprovision.

    The convenience for a DAG that does not need the steps as separate tasks. A retry
    re-plans and re-provisions but resumes the data from the journal (restored from the state
    store on another worker). ``deferrable`` (default: Airflow's ``[operators]
    default_deferrable``): after provisioning, the driver transfers and then deletes the fleet
    itself, and the task defers to the trigger; if the driver is lost, the task deletes the
    fleet when it resumes.
    """

    operator_extra_links = (SkyplanePlanLink(), SkyplaneRouteLink())
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "src_region",
        "dst_region",
        "volume_gb",
        "min_throughput_gbps",
        "max_cost_usd",
        "deadline_seconds",
        "include",
        "exclude",
        "plan_uri",
        "journal_dir",
        "transfer_id",
    )

    def __init__(
        self,
        *,
        src: str,
        dst: str,
        src_region: str,
        dst_region: str,
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
        journal_dir: str | None = None,
        dst_asset: Asset | bool | None = True,
        deferrable: bool | None = None,
        timeout: timedelta | float | None = None,
        poll_interval: float = 5.0,
        **kwargs: Any,
    ) -> None:
        if deferrable is None:
            deferrable = default_deferrable()
        kwargs["outlets"] = _default_dst_outlets(dst, dst_asset, kwargs.get("outlets"))
        if isinstance(timeout, int | float):
            timeout = timedelta(seconds=timeout)
        if timeout is not None and not deferrable and kwargs.get("execution_timeout") is None:
            kwargs["execution_timeout"] = timeout
        super().__init__(**kwargs)
        self.src = src
        self.dst = dst
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
        self.journal_dir = journal_dir
        self.deferrable = deferrable
        self.timeout = timeout
        self.poll_interval = poll_interval
        self._fleet: GatewayFleet | None = None
        self._transfer_id: str | None = None

    def execute(self, context: Any) -> dict[str, Any] | None:
        transfer_id = self.resolve_transfer_id(context)
        self._transfer_id = transfer_id
        src_access = self.hook.store_access(self.src_conn_id)
        dst_access = self.hook.store_access(self.dst_conn_id)
        env = merge_env(src_access, dst_access)
        volume = self._volume(lambda: (src_access.options, env))
        plan, plan_uri = self._plan_and_store(str(self.dst_region), volume, transfer_id)
        self.log.info("plan %s (full plan at %s):\n%s", transfer_id, plan_uri, plan.to_text())
        persist_links(context, plan_uri, plan, route_stored=True)
        work_dir = self.hook.settings.work_dir
        journal = self.journal_dir or os.path.join(work_dir, "journals", transfer_id)
        selection: dict[str, Any] = {
            "src": str(self.src),
            "dst": str(self.dst),
            "include": _as_list(self.include),
            "exclude": _as_list(self.exclude),
            "sync": self.sync,
            "src_options": src_access.options,
            "dst_options": dst_access.options,
            "env": env,
            "engine_options": {},
        }
        try:
            self._fleet = self.hook.provision(plan, transfer_id=transfer_id)
            if self.deferrable:
                self.hook.transfer_state(transfer_id).save_secret(self._fleet.secret_ref)
                # From here on the driver owns the fleet and deletes it when it ends.
                self.defer_transfer(
                    context,
                    plan=plan,
                    plan_uri=plan_uri,
                    fleet=self._fleet,
                    transfer_id=transfer_id,
                    journal=journal,
                    teardown=True,
                    **selection,
                )
            result = run_here(
                self, plan, self._fleet, transfer_id=transfer_id, journal=journal, **selection
            )
        except TaskDeferred:
            raise
        except BaseException:
            try:
                self._teardown()
            except Exception:
                self.log.exception("deprovisioning after the failure failed")
            raise
        self._teardown()
        return self._summary(context, result, transfer_id, plan, plan_uri, journal)

    def _summary(
        self,
        context: Any,
        result: Any,
        transfer_id: str,
        plan: TransferPlan | None,
        plan_uri: str | None,
        journal: str | None,
    ) -> dict[str, Any]:
        summary = transfer_summary(
            result,
            transfer_id=transfer_id,
            plan=plan,
            plan_uri=plan_uri,
            src=str(self.src),
            dst=str(self.dst),
            journal_dir=journal,
        )
        self.log.info("%s", done_line(transfer_id, summary))
        self._emit_asset_events(context, summary)
        return summary

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
        transfer_id = str(event.get("transfer_id"))
        plan = SkyplaneHook.read_plan(plan_uri, conn_id=self.plan_conn_id) if plan_uri else None
        return self._summary(context, result, transfer_id, plan, plan_uri, journal)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Source in, replica out, named by the OpenLineage naming spec."""
        return operator_lineage(str(self.src), str(self.dst))

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
