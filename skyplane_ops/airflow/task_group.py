"""``skyplane_transfer_group``: plan >> provision (setup) >> transfer >> deprovision (teardown).

One call wires the four operators into a ``TaskGroup`` that shares one transfer id per DAG
run, so the teardown finds the fleet (or, when provisioning died half-way, its tags) and a
retry of the transfer resumes from the same journal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset, TaskGroup, TriggerRule

from skyplane_ops.airflow.operators import (
    SkyplaneDeprovisionOperator,
    SkyplanePlanOperator,
    SkyplaneProvisionOperator,
    SkyplaneTransferOperator,
)
from skyplane_ops.airflow.settings import DEFAULT_CONN_ID


def skyplane_transfer_group(
    group_id: str,
    *,
    src: str,
    dst: str,
    src_region: str,
    dst_region: str | Sequence[str],
    volume_gb: float | str | None = None,
    min_throughput_gbps: float | str | None = None,
    max_cost_usd: float | str | None = None,
    deadline_seconds: float | str | None = None,
    include: Sequence[str] | str | None = None,
    exclude: Sequence[str] | str | None = None,
    sync: bool = False,
    src_conn_id: str | None = None,
    dst_conn_id: str | None = None,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    engine_options: Mapping[str, Any] | None = None,
    skyplane_conn_id: str = DEFAULT_CONN_ID,
    plan_uri: str | None = None,
    plan_conn_id: str | None = None,
    transfer_id: str | None = None,
    deferrable: bool | None = None,
    timeout: timedelta | float | None = None,
    poll_interval: float = 5.0,
    dst_asset: Asset | bool | None = True,
    tags: Mapping[str, str] | None = None,
    transfer_kwargs: Mapping[str, Any] | None = None,
    **task_kwargs: Any,
) -> TaskGroup:
    """Build the four-task transfer group inside the current DAG; returns the ``TaskGroup``.

    Without ``volume_gb`` the plan task measures the source (``src`` with include/exclude).

    ``task_kwargs`` (retries, pool, queue, ...) go to every task; ``transfer_kwargs`` only to
    the transfer task (e.g. ``retries=3``). ``upstream >> group >> downstream`` works as
    usual: downstream tasks wait for the transfer, not for the teardown. The teardown runs
    whatever happened upstream (even when provisioning failed half-way: it then deletes by
    tag) and a failed teardown fails the DAG run, so a leaked fleet never goes unnoticed.
    """
    with TaskGroup(group_id=group_id) as group:
        run_transfer_id = transfer_id or "{{ dag.dag_id }}-{{ run_id }}-" + str(group.group_id)
        common: dict[str, Any] = {
            "skyplane_conn_id": skyplane_conn_id,
            "transfer_id": run_transfer_id,
        }
        # What to copy: the plan task sizes it, the transfer task moves it.
        source: dict[str, Any] = {
            "src": src,
            "src_conn_id": src_conn_id,
            "src_options": src_options,
            "include": include,
            "exclude": exclude,
        }
        plan = SkyplanePlanOperator(
            task_id="plan",
            src_region=src_region,
            dst_regions=dst_region,
            volume_gb=volume_gb,
            min_throughput_gbps=min_throughput_gbps,
            max_cost_usd=max_cost_usd,
            deadline_seconds=deadline_seconds,
            plan_uri=plan_uri,
            plan_conn_id=plan_conn_id,
            **source,
            **common,
            **task_kwargs,
        )
        provision = SkyplaneProvisionOperator(
            task_id="provision",
            plan=plan.output,
            plan_conn_id=plan_conn_id,
            tags=tags,
            **common,
            **task_kwargs,
        )
        transfer = SkyplaneTransferOperator(
            task_id="transfer",
            dst=dst,
            plan=plan.output,
            fleet=provision.output,
            **source,
            dst_conn_id=dst_conn_id,
            dst_options=dst_options,
            engine_options=engine_options,
            plan_conn_id=plan_conn_id,
            sync=sync,
            deferrable=deferrable,
            timeout=timeout,
            poll_interval=poll_interval,
            dst_asset=dst_asset,
            **common,
            **{**task_kwargs, **dict(transfer_kwargs or {})},
        )
        deprovision = SkyplaneDeprovisionOperator(
            task_id="deprovision",
            fleet_task_id=provision.task_id,
            **common,
            **task_kwargs,
        )
        plan >> provision >> transfer >> deprovision
        deprovision.as_teardown(setups=provision, on_failure_fail_dagrun=True)
        # A teardown normally runs only if a setup succeeded; ours must also run when
        # provisioning failed half-way, to delete what it left by tag.
        deprovision.trigger_rule = TriggerRule.ALL_DONE
    return group
