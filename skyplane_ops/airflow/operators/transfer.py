"""``SkyplaneTransferOperator``: run a planned transfer on a provisioned fleet, here or
through a detached driver (deferrable)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import Asset

from skyplane_ops.airflow.deferral import TransferDeferral
from skyplane_ops.airflow.hooks import StoreAccess, merge_env
from skyplane_ops.airflow.lineage import operator_lineage, replica_facet
from skyplane_ops.airflow.links import (
    SkyplanePlanLink,
    SkyplaneReportLink,
    SkyplaneRouteLink,
    persist_links,
)
from skyplane_ops.airflow.operators.base import (
    SELECTION_TEMPLATED,
    _load_fleet,
    _load_plan,
    _transfer_task_defaults,
    _TransferringOperator,
    run_here,
)
from skyplane_ops.api import GatewayFleet, TransferPlan


class SkyplaneTransferOperator(TransferDeferral, _TransferringOperator):
    """Run the transfer on the fleet along the plan, then verify it.

    ``plan`` is the plan task's summary (or a plan URI / JSON), ``fleet`` the provision task's
    fleet JSON. ``src``/``dst`` are store URIs (``s3://``, ``gs://``, ``az://``, ``file://``);
    credentials come from ``src_conn_id``/``dst_conn_id`` (aws, google_cloud_platform, wasb
    connections) or the SDKs' default chains, and never enter templates, logs or XCom.

    A retry resumes, on any worker: the journal (``journal_dir``, by default
    ``<work_dir>/journals/<id>``) records finished chunks, is snapshotted to the connection's
    state store, and is restored from there when this worker does not have it.

    ``engine_options`` are more fields of the run's ``TransferRequest`` (``part_size``,
    ``verify``, ``connections_per_hop``, ``encrypt``, ``compress_level``, ``wait_lock``).

    ``deferrable`` (default: Airflow's ``[operators] default_deferrable``): a detached
    control-plane driver (``skyplane_ops.airflow.driver``) runs the transfer and the task
    defers to ``SkyplaneTransferTrigger``, which follows the driver through the state store
    and frees the worker slot. ``timeout`` is enforced in both modes (in deferrable mode by
    the trigger, since Airflow stops counting ``execution_timeout`` after a deferral).
    ``on_kill`` stops the driver and the gateways.
    """

    operator_extra_links = (SkyplanePlanLink(), SkyplaneRouteLink(), SkyplaneReportLink())
    template_fields: Sequence[str] = (
        "src",
        "dst",
        "include",
        "exclude",
        "plan",
        "fleet",
        "journal_dir",
        "transfer_id",
        *SELECTION_TEMPLATED,
        "report_uri",
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
        engine_options: Mapping[str, Any] | None = None,
        deferrable: bool | None = None,
        timeout: timedelta | float | None = None,
        poll_interval: float = 5.0,
        stop_fleet_on_kill: bool = True,
        dst_asset: Asset | bool | None = True,
        **kwargs: Any,
    ) -> None:
        deferrable, timeout = _transfer_task_defaults(dst, dst_asset, deferrable, timeout, kwargs)
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

    def execute(self, context: Any) -> dict[str, Any] | None:
        plan, plan_uri, fleet, transfer_id, journal = self._prepare(context)
        src_access = self.hook.store_access(self.src_conn_id)
        dst_access = self.hook.store_access(self.dst_conn_id)
        access = StoreAccess(
            options={**src_access.options, **self.src_options},
            env=merge_env(src_access, dst_access),
        )
        job = self._job(
            transfer_id,
            journal,
            src_options=access.options,
            dst_options={**dst_access.options, **self.dst_options},
            env=access.env,
            fields=self.engine_options,
        )
        if self.deferrable:
            self.defer_transfer(context, plan=plan, plan_uri=plan_uri, fleet=fleet, job=job)
            return None
        result, _ = run_here(self, job, self.hook.gateways(transfer_id, fleet=fleet, plan=plan))
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
        return self._finish_event(context, event, self.event_result(event), plan_uri, journal)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Source in, replica out, named by the OpenLineage naming spec."""
        options = {**self.hook.store_access(self.dst_conn_id).options, **self.dst_options}
        return operator_lineage(
            str(self.src), str(self.dst), replica=replica_facet(str(self.dst), options)
        )

    def on_kill(self) -> None:
        """Stop the driver (deferrable mode) and the gateways, so nothing keeps running."""
        self.stop_deferred_driver()
        if self.stop_fleet_on_kill and self._fleet is not None:
            try:
                self.hook.deprovision(self._fleet)
            except Exception:
                self.log.exception("stopping the gateways failed; the teardown task retries")
