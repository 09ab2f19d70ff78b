"""The throughput grid as a Dagster asset, refreshed by the profiler every three days.

Materialising ``throughput_grid`` runs :func:`skyplane_ops.api.refresh_grid` (through
``SkyplaneResource.refresh_grid``) on the resource's backend and publishes a new grid version
to the grid store the resource's plans read (``SkyplaneResource.grid_store``). Pairs measured
within ``freshness`` are skipped, so a re-run after a failure measures only what is missing. A
time-window freshness policy marks the grid stale in the UI when no refresh succeeded for
longer than the schedule's period plus slack.

Safe to turn on: the grid store plans read is written only with a backend that reaches real
remote hosts (:func:`skyplane_ops.api.publish_target`); on ``local``/``netns`` or SSH on
loopback the figures go to ``<home>/grid-scratch`` and the materialisation says so
(``publish_emulated=True`` overrides, for testbeds). Old journal folders left empty are
removed by age after each refresh.
"""

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import dagster as dg

from skyplane_ops import api
from skyplane_ops.dagster.metadata import clean_uri
from skyplane_ops.dagster.resource import SkyplaneResource

# 03:00 UTC on days 1, 4, 7, ... of the month: every three days (the 31st -> 1st gap is one day).
EVERY_THREE_DAYS = "0 3 */3 * *"


@dataclass
class GridRefresh:
    """The grid asset, the job that materialises it and its schedule."""

    asset: dg.AssetsDefinition
    job: Any  # what dg.define_asset_job returns (an unresolved asset job)
    schedule: dg.ScheduleDefinition


def build_grid_refresh(
    regions: Sequence[str],
    *,
    key: str | Sequence[str] = "throughput_grid",
    store_uri: str | None = None,
    connections: int | None = None,
    duration_s: float | None = None,
    budget_usd: float | None = None,
    freshness: timedelta = timedelta(days=2),
    cron_schedule: str = EVERY_THREE_DAYS,
    execution_timezone: str = "UTC",
    group_name: str | None = "skyplane",
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    publish_emulated: bool = False,
    cleanup_after: timedelta = timedelta(days=7),
) -> GridRefresh:
    """Define the grid asset for ``regions`` and a schedule that refreshes it.

    ``store_uri`` defaults to the resource's ``grid_store`` (so plans use what was
    measured). ``freshness`` is passed to the profiler: pairs measured more recently are kept.
    The schedule starts stopped unless ``default_status`` says otherwise: probing costs money.
    """
    order = list(regions)
    asset_key = dg.AssetKey.from_coercible(key)

    @dg.asset(
        key=asset_key,
        group_name=group_name,
        kinds={"skyplane"},
        description=f"Measured throughput between {len(order)} regions (skyplane-ops profiler).",
        freshness_policy=dg.FreshnessPolicy.time_window(
            fail_window=timedelta(days=4), warn_window=timedelta(days=3, hours=6)
        ),
        metadata={"regions": ", ".join(order)},
        output_required=False,  # a scratch refresh observes; it does not update the grid
    )
    def _grid(
        context: dg.AssetExecutionContext, skyplane: SkyplaneResource
    ) -> Iterator[dg.MaterializeResult | dg.AssetObservation]:
        planning = store_uri or skyplane.grid_store
        if not planning:
            raise dg.Failure(
                description="no grid store: set store_uri or SkyplaneResource.grid_store"
            )
        where = api.publish_target(
            skyplane.backend,
            skyplane.backend_options,
            grid_store=planning,
            scratch_store=os.path.join(skyplane.home(), "grid-scratch"),
            allow_emulated=publish_emulated,
        )
        target = where.store_uri
        if where.scratch:
            context.log.warning(f"NOT publishing to the planning grid: {where.reason}")
        try:
            result = skyplane.refresh_grid(
                order,
                store_uri=target,
                connections=connections,
                duration_s=duration_s,
                budget_usd=budget_usd,
                freshness_s=freshness.total_seconds(),
                run_id=f"prof-{context.run_id.replace('-', '')[:24]}",
            )
        except Exception as exc:
            raise dg.Failure(
                description=skyplane.redact(f"grid refresh failed: {type(exc).__name__}: {exc}")
            ) from None
        summary = result.to_dict()
        context.log.info(
            f"grid refresh: {summary['measured']} measured, {summary['skipped_fresh']} fresh, "
            f"{summary['failed']} failed -> version {summary['version']}"
        )
        meta = {
            k: v
            for k, v in summary.items()
            if k not in ("store_uri", "regions", "failed_pairs") and v is not None
        }
        meta["store_uri"] = clean_uri(str(summary["store_uri"]))
        meta["scratch"] = where.scratch
        meta["publish_reason"] = where.reason
        cleaned = api.clean_leftovers(skyplane.home(), cleanup_after.total_seconds())
        if cleaned:
            context.log.info(f"removed {len(cleaned)} old leftovers: {cleaned}")
        if summary["failed_pairs"]:
            meta["failed_pairs"] = ", ".join(map(str, summary["failed_pairs"]))
        if summary["failed"] and not summary["measured"]:
            raise dg.Failure(description="grid refresh measured no pair", metadata=meta)
        if where.scratch:
            # Figures in the scratch store are not the planning grid: a materialization would
            # tell every asset and sensor downstream of the grid that it changed.
            yield dg.AssetObservation(asset_key=asset_key, metadata=meta)
            return
        yield dg.MaterializeResult(metadata=meta)

    job = dg.define_asset_job(f"{asset_key.to_python_identifier()}_refresh", selection=[asset_key])
    schedule = dg.ScheduleDefinition(
        name=f"{asset_key.to_python_identifier()}_every_three_days",
        job=job,
        cron_schedule=cron_schedule,
        execution_timezone=execution_timezone,
        default_status=default_status,
    )
    return GridRefresh(asset=_grid, job=job, schedule=schedule)
