"""Refresh the measured throughput grid every three days with the skyplane-ops profiler.

One gateway per region is provisioned with the ``skyplane_default`` connection's backend, every
ordered pair is probed (N parallel TCP connections for T seconds, in rounds so that no gateway
probes twice at once) and a new grid version is published to the connection's grid store,
which plans made with that connection then use.

* Budget enforced: the egress cost of the probes is estimated from the price grid before
  anything is provisioned; above ``budget_usd`` the run fails without starting a gateway.
* Idempotent per interval: the profiling run id is derived from the data interval, and pairs
  measured within the interval are skipped, so a re-run (or a retry) of the same interval
  measures only what is missing and publishes no duplicate rows.
* Fleet always torn down: the profiler deprovisions in a ``finally``; the ``sweep`` teardown
  also deletes anything tagged with the run id if the worker died half-way.
* Safe to unpause: it publishes into the grid store that plans read only when the
  connection's backend reaches real remote hosts (``aws``, ``ssh`` to non-loopback hosts).
  On ``local``/``netns`` (or SSH on loopback) it writes to ``<work_dir>/grid-scratch`` and
  says so in the log and the result (param ``publish_emulated`` overrides, for testbeds).
* Cleans its own leftovers: ``runs/<id>`` driver folders and empty journal folders under the
  connection's work dir older than ``cleanup_after_days``.

Regions, probe size and budget are DAG params (defaults from ``SKYPLANE_GRID_REGIONS``, a
comma-separated list, else three regions).
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, DeltaDataIntervalTimetable, Param, TriggerRule, task

REFRESH_EVERY = timedelta(days=3)
DEFAULT_REGIONS = os.environ.get(
    "SKYPLANE_GRID_REGIONS", "aws:us-east-1,aws:eu-west-1,gcp:europe-west4"
).split(",")

log = logging.getLogger(__name__)
GRID = Asset(name="skyplane_throughput_grid", uri="skyplane://grid/default")


def _run_id(context: dict[str, Any]) -> str:
    """One profiling run id per data interval (manual runs: per run)."""
    from skyplane_ops.airflow.settings import make_transfer_id

    start = context.get("data_interval_start")
    if start is not None:
        return f"grid-{start:%Y%m%d%H%M}"
    return make_transfer_id(f"grid-{context['run_id']}")


with DAG(
    dag_id="skyplane_grid_refresh",
    schedule=DeltaDataIntervalTimetable(REFRESH_EVERY),
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["skyplane-ops", "profiler"],
    doc_md=__doc__,
    params={
        "regions": Param(DEFAULT_REGIONS, type="array", minItems=2),
        "connections": Param(64, type="integer", minimum=1, maximum=256),
        "duration_s": Param(5.0, type="number", exclusiveMinimum=0, maximum=600),
        "budget_usd": Param(25.0, type="number", minimum=0),
        "skyplane_conn_id": Param("skyplane_default", type="string"),
        "publish_emulated": Param(False, type="boolean"),
        "cleanup_after_days": Param(7, type="number", minimum=0),
    },
):

    @task(outlets=[GRID], retries=1, retry_delay=timedelta(minutes=5))
    def refresh(params: dict[str, Any] | None = None, **context: Any) -> dict[str, Any]:
        """Probe every pair not measured in this interval; publish a new grid version."""
        from airflow.sdk.exceptions import AirflowFailException

        from skyplane_ops.airflow.hooks import SkyplaneHook
        from skyplane_ops.api import BudgetExceededError

        p = params or {}
        hook = SkyplaneHook(p.get("skyplane_conn_id", "skyplane_default"))
        target = hook.publish_target(allow_emulated=bool(p.get("publish_emulated", False)))
        if target.scratch:
            log.warning("NOT publishing to the planning grid: %s", target.reason)
        else:
            log.info("publishing to %s: %s", target.store_uri, target.reason)
        try:
            result = hook.refresh_grid(
                list(p["regions"]),
                run_id=_run_id(context),
                connections=int(p["connections"]),
                duration_s=float(p["duration_s"]),
                budget_usd=float(p["budget_usd"]),
                freshness_s=REFRESH_EVERY.total_seconds(),
                store_uri=target.store_uri,
            )
        except BudgetExceededError as exc:
            raise AirflowFailException(str(exc)) from exc  # retrying cannot make it cheaper
        summary: dict[str, Any] = {
            **result.to_dict(),
            "scratch": target.scratch,
            "publish_reason": target.reason,
        }
        if target.scratch:
            # Scratch figures are not the planning grid: no GRID event (the task runner emits
            # one for every Asset outlet of a task that succeeds), so nothing scheduled on the
            # grid runs for them.
            context["task"].outlets = [o for o in context["task"].outlets if o != GRID]
            return summary
        context["outlet_events"][GRID].extra.update(
            {
                "scratch": target.scratch,
                "version": summary["version"],
                "store_uri": summary["store_uri"],
                "measured": summary["measured"],
                "estimate_usd": summary["estimate_usd"],
                "gbps_median": summary["gbps_median"],
            }
        )
        return summary

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def sweep(params: dict[str, Any] | None = None, **context: Any) -> dict[str, Any]:
        """Delete whatever a dead worker may have left behind, by the run's tag."""
        from skyplane_ops.airflow.hooks import SkyplaneHook
        from skyplane_ops.api import clean_leftovers

        hook = SkyplaneHook((params or {}).get("skyplane_conn_id", "skyplane_default"))
        run_id = _run_id(context)
        deleted = hook.deprovision(transfer_id=run_id)
        days = float((params or {}).get("cleanup_after_days", 7))
        cleaned = clean_leftovers(hook.settings.work_dir, days * 86400)
        if cleaned:
            log.info("removed %d leftovers older than %g days: %s", len(cleaned), days, cleaned)
        return {"run_id": run_id, "deleted_count": len(deleted), "cleaned": len(cleaned)}

    refreshed = refresh()
    swept = sweep()
    # A teardown so that the run's state is the refresh's, and ALL_DONE so that it also runs
    # when the refresh failed (a teardown otherwise needs a successful setup).
    refreshed >> swept.as_teardown(setups=refreshed)
    swept.operator.trigger_rule = TriggerRule.ALL_DONE
