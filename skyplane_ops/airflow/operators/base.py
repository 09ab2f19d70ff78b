"""Plumbing every Skyplane operator shares: argument parsing, the transfer id, asset
events, sizing and planning, loading plans and fleets, and the transfer summary."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.configuration import conf

from skyplane_ops.airflow.deferral import TransferJob
from skyplane_ops.airflow.hooks import SkyplaneHook, exported_env
from skyplane_ops.airflow.links import SkyplaneReportLink, plan_url
from skyplane_ops.airflow.settings import DEFAULT_CONN_ID, make_transfer_id
from skyplane_ops.airflow.summaries import (
    asset_metadata,
    transfer_summary,
    unchanged,
)
from skyplane_ops.api import (
    CapFollower,
    CopyRun,
    GatewayFleet,
    ProgressLine,
    RunEvents,
    TransferPlan,
    TransferRequest,
    live_path,
    plan_paths,
)

_SAFE_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


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
        """Attach transfer metadata to every destination Asset outlet's event; a run that
        changed nothing at the destination emits none."""
        if unchanged(summary):
            # The task runner emits an event for every Asset outlet when the task succeeds,
            # and each one re-triggers the DAGs scheduled on the replica: drop them.
            self.outlets = [o for o in self.outlets or [] if not isinstance(o, Asset)]
            self.log.info("the destination is unchanged: no Asset event")
            return
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


def _transfer_task_defaults(
    dst: Any,
    dst_asset: Asset | bool | None,
    deferrable: bool | None,
    timeout: timedelta | float | None,
    kwargs: dict[str, Any],
) -> tuple[bool, timedelta | None]:
    """The transfer and copy operators' shared defaults: deferrable from Airflow's config, an
    ``Asset(dst)`` outlet, and ``timeout`` as ``execution_timeout`` when not deferring (set in
    ``kwargs`` for ``BaseOperator``); returns the resolved ``(deferrable, timeout)``."""
    if deferrable is None:
        deferrable = default_deferrable()
    kwargs["outlets"] = _default_dst_outlets(dst, dst_asset, kwargs.get("outlets"))
    if isinstance(timeout, int | float):
        timeout = timedelta(seconds=timeout)
    if timeout is not None and not deferrable and kwargs.get("execution_timeout") is None:
        kwargs["execution_timeout"] = timeout
    return deferrable, timeout


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


# What to copy beyond globs, when to overwrite, and move, named as the request's fields and
# the CLI's options (issue 39); the first five are templated: ``{{ data_interval_start }}``
# and an upstream task's XCom (a list of keys, or its rendering as text) come in through them.
SELECTION_TEMPLATED = ("max_age", "min_age", "changed_since", "changed_before", "files_from")
SELECTION_FIELDS = (
    *SELECTION_TEMPLATED, "ignore_existing", "update", "move", "max_delete", "bwlimit",
)  # fmt: skip


class _TransferringOperator(_SkyplaneBaseOperator):
    """What the transfer and the one-task copy operators share: the job and the summary."""

    max_age: str | float | None = None
    min_age: str | float | None = None
    changed_since: Any = None
    changed_before: Any = None
    files_from: Any = None
    ignore_existing: bool = False
    update: bool = False
    move: bool = False  # delete each source object once its copy is verified
    max_delete: int | None = None  # with move: refuse a move that would delete more
    bwlimit: str | None = None  # a rate with its unit (200Mbit, 25MiB), per second

    def _selection(self) -> dict[str, Any]:
        """The request's selection fields as rendered (an empty template is no filter)."""
        out = {name: getattr(self, name) for name in SELECTION_FIELDS}
        for name in SELECTION_TEMPLATED:
            if isinstance(out[name], str) and not out[name].strip():
                out[name] = None
        return out

    src: str | None
    dst: str
    include: Sequence[str] | str | None
    exclude: Sequence[str] | str | None
    sync: bool
    plan_conn_id: str | None

    def __init__(
        self,
        *,
        report_uri: str | None = None,
        report_options: Mapping[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> None:
        """``report_uri`` (templated): the folder, in any store, of the transfer report
        (every object's outcome); ``report_options``: that store's options."""
        super().__init__(**kwargs)
        self.report_uri = report_uri
        self.report_options = report_options

    def _job(
        self,
        transfer_id: str,
        journal: str,
        *,
        src_options: Mapping[str, Any],
        dst_options: Mapping[str, Any],
        env: Mapping[str, str],
        fields: Mapping[str, Any],
    ) -> TransferJob:
        """The task's ``TransferRequest`` (``fields``: the request's other fields, such as its
        regions, planning and the engine options) with the credentials to run it under."""
        request = TransferRequest.build(
            str(self.src),
            str(self.dst),
            src_options=src_options,
            dst_options=dst_options,
            include=_as_list(self.include),
            exclude=_as_list(self.exclude),
            sync=self.sync,
            journal_dir=journal,
            transfer_id=transfer_id,
            **self._selection(),
            report_uri=self.report_uri or None,
            report_options=_as_mapping("report_options", self.report_options) or {},
            **fields,
        )
        return TransferJob(request=request, env=env)

    def _finish_event(
        self,
        context: Any,
        event: Mapping[str, Any],
        result: Any,
        plan_uri: str | None,
        journal: str | None,
    ) -> dict[str, Any]:
        """``_finish`` after a deferral: the plan is read back from its URI."""
        plan = SkyplaneHook.read_plan(plan_uri, conn_id=self.plan_conn_id) if plan_uri else None
        return self._finish(
            context,
            result,
            transfer_id=str(event.get("transfer_id")),
            plan=plan,
            plan_uri=plan_uri,
            journal=journal,
        )

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
        report = (summary.get("uris") or {}).get("report")
        if report:
            SkyplaneReportLink.persist(context, plan_url(report))
            self.log.info("transfer report: %s", report)
        self._emit_asset_events(context, summary)
        return summary


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


class TaskLogEvents(RunEvents):
    """A run's phases and progress as task log lines; every few seconds while data moves,
    the journal is snapshotted to the state store too (a retry elsewhere resumes from it)."""

    wants_progress = True

    def __init__(self, op: Any, transfer_id: str, state: Any, journal: str) -> None:
        self.op, self.state, self.journal = op, state, journal
        self.transfer_id = transfer_id
        self.line: ProgressLine | None = None
        self.last = 0.0
        self.restored = False  # the journal is snapshotted back only once it was restored

    def locked(self, request: Any) -> None:
        """Resume from the state store: its journal snapshot, when this worker lacks one."""
        self.restored = True
        if self.state.restore_journal(self.journal):
            self.op.log.info("restored the journal of %s from %s", self.transfer_id, self.state.uri)

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        started = time.monotonic()
        note: dict[str, str] = {}
        yield note
        took = time.monotonic() - started
        self.op.log.info("%s %s: %s (%.2f s)", name, detail, note.get("done", "done"), took)

    def planned(self, plan: TransferPlan) -> None:
        self.line = ProgressLine(f"transfer {self.transfer_id}", plan_paths(plan))

    def progress(self, update: Any) -> None:
        now = time.monotonic()
        if now - self.last < 5.0:
            return
        self.last = now
        text = self.line.update(update) if self.line is not None else None
        if text:
            self.op.log.info("%s", text)
        self.state.save_journal(self.journal)


def run_here(
    op: Any,
    job: TransferJob,
    gateways: Any,
    events: TaskLogEvents | None = None,
    *,
    volume_gb: float | None = None,
) -> tuple[Any, CopyRun]:
    """The run sequence in this task's process, with the job's credentials exported: the
    journal restored from the state store when this worker lacks it (and snapshotted back),
    the secret of a fleet another task started fetched from there, progress as log lines.
    Returns the result and the run (its plan, or ``up_to_date``)."""
    transfer_id, journal = job.transfer_id, job.journal
    state = op.hook.transfer_state(transfer_id)
    if gateways.fleet is not None:
        fleet = gateways.fleet
        secret_ref = state.local_secret_ref(fleet.secret_ref)
        gateways = dataclasses.replace(
            gateways, fleet=dataclasses.replace(fleet, secret_ref=secret_ref)
        )
    events = events or TaskLogEvents(op, transfer_id, state, journal)
    run = CopyRun(job.request, gateways, events, volume_gb=volume_gb)
    try:
        # A cap set through the state store (``SkyplaneHook.set_bwlimit``) reaches this run.
        with exported_env(job.env), CapFollower(state, live_path(transfer_id)):
            return run.run(), run
    finally:
        try:
            if events.restored:  # else a short local journal could stand for the snapshot
                state.save_journal(journal)
        except Exception:
            op.log.exception("saving the journal snapshot failed")
