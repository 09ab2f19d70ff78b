"""``SkyplaneCopyOperator(destinations=[...])``: one task copies one source to several
destinations (``api.FanoutRun``: one plan and fleet, each destination committed and verified
on its own) and reports per destination: the XCom has one summary per destination, and each
destination's Asset outlet gets that destination's metadata."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow.sdk import Asset

from skyplane_ops.airflow.deferral import TransferJob
from skyplane_ops.airflow.hooks import exported_env, merge_env
from skyplane_ops.airflow.operators.base import TaskLogEvents, _as_list, _float_or_none
from skyplane_ops.airflow.summaries import asset_metadata, transfer_summary
from skyplane_ops.api import FanoutError, FanoutRun, TransferRequest


def destination_outlets(destinations: Any, dst_asset: Any, outlets: Any) -> Any:
    """An ``Asset(uri=d)`` outlet per literal destination URI when no outlets were given."""
    if outlets or not dst_asset or isinstance(destinations, str):
        return outlets
    if all(isinstance(d, str) and "{{" not in d for d in destinations or ()):
        return [Asset(uri=str(d)) for d in destinations]
    return outlets


def execute_fanout(op: Any, context: Any) -> dict[str, Any]:
    """The whole run in this task, or (``deferrable``) planned and provisioned here and run by
    the driver while the task defers (``execute_complete`` then reports it). Raises
    ``FanoutError`` after every destination had its turn when some failed, the others
    committed (a retry resumes each from its own journal)."""
    transfer_id = op.resolve_transfer_id(context)
    op._transfer_id = transfer_id
    src_access = op.hook.store_access(op.src_conn_id)
    dst_access = op.hook.store_access(op.dst_conn_id)
    journal = op.journal_dir or os.path.join(op.hook.settings.work_dir, "journals", transfer_id)
    planning = op.hook.plan_options(
        min_throughput_gbps=_float_or_none("min_throughput_gbps", op.min_throughput_gbps),
        max_cost_usd=_float_or_none("max_cost_usd", op.max_cost_usd),
        deadline_seconds=_float_or_none("deadline_seconds", op.deadline_seconds),
    )
    request = TransferRequest.build(
        str(op.src),
        [str(d) for d in op.destinations],
        src_options=src_access.options,
        dst_options=dst_access.options,
        src_region=str(op.src_region),
        dst_region=[str(r) for r in op.dst_regions or ()],
        include=_as_list(op.include),
        exclude=_as_list(op.exclude),
        sync=op.sync,
        journal_dir=journal,
        transfer_id=transfer_id,
        planning=planning,
    )
    state = op.hook.transfer_state(transfer_id)
    events = TaskLogEvents(op, transfer_id, state, journal)
    run = FanoutRun(request, op.hook.gateways(transfer_id), events)
    env = merge_env(src_access, dst_access)
    if op.deferrable:
        _defer(op, context, run, TransferJob(request, env), state)
    failed: FanoutError | None = None
    with exported_env(env):
        try:
            result = run.run()
        except FanoutError as exc:
            failed, result = exc, exc.result
    out = report_fanout(op, context, result.to_dict(), transfer_id, journal)
    if failed is not None:
        raise failed
    op.log.info("%s", result.summary())
    return out


def _defer(op: Any, context: Any, run: Any, job: TransferJob, state: Any) -> None:
    """Plan and provision here, then hand the run to the driver (which deletes the fleet when
    it ends) and defer to the trigger; never returns. A failure here deletes the fleet."""
    try:
        with exported_env(job.env):
            fleet = op._fleet = run.prepare()
        state.save_secret(fleet.secret_ref)
    except BaseException:
        try:
            op._teardown()
        except Exception:
            op.log.exception("deprovisioning after the failure failed")
        raise
    op.defer_transfer(context, plan=run.plan, plan_uri=None, fleet=fleet, job=job, teardown=True)


def report_fanout(
    op: Any, context: Any, result: Mapping[str, Any], transfer_id: str, journal: str | None
) -> dict[str, Any]:
    """The XCom (one summary per destination) from a ``FanoutResult``'s dict, and each
    copied destination's metadata on its Asset outlet; in the task or after a deferral."""
    summaries = {
        str(d["dst_uri"]): transfer_summary(
            d,
            transfer_id=transfer_id,
            plan=None,
            plan_uri=None,
            src=str(op.src),
            dst=str(d["dst_uri"]),
            journal_dir=journal,
        )
        for d in result.get("destinations", [])
        if not d.get("error")
    }
    outlet_events = context.get("outlet_events")
    by_uri = {uri.rstrip("/"): s for uri, s in summaries.items()}  # Asset drops a final /
    for outlet in op.outlets or []:
        summary = by_uri.get(str(getattr(outlet, "uri", "")).rstrip("/"))
        if isinstance(outlet, Asset) and summary is not None and outlet_events is not None:
            outlet_events[outlet].extra.update(asset_metadata(summary))
    out = dict(result)
    out["destinations"] = [summaries.get(str(d["dst_uri"]), d) for d in out["destinations"]]
    return out
