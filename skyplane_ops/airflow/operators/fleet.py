"""The fleet lifecycle: ``SkyplaneProvisionOperator`` (setup) and
``SkyplaneDeprovisionOperator`` (teardown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyplane_ops.airflow.operators.base import (
    _load_fleet,
    _load_plan,
    _SkyplaneBaseOperator,
)
from skyplane_ops.airflow.summaries import (
    bounded,
    fleet_reference,
)


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
        self._regions: list[str] = []

    def execute(self, context: Any) -> dict[str, Any]:
        plan, _ = _load_plan(self.plan, self.plan_conn_id)
        summary_id = self.plan.get("transfer_id") if isinstance(self.plan, Mapping) else None
        transfer_id = self.resolve_transfer_id(context, summary_id)
        self._provisioning_id = transfer_id
        self._regions = sorted(r for r, n in plan.vms.items() if n > 0)  # where the sweep looks
        ti = context.get("ti")
        if ti is not None and getattr(ti, "try_number", 1) > 1:
            leftovers = self.hook.deprovision(transfer_id=transfer_id, regions=self._regions)
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
            deleted = self.hook.deprovision(transfer_id=transfer_id, regions=self._regions)
            self.log.info("cleaned up %d resources tagged %s", len(deleted), transfer_id)
        except Exception:
            self.log.exception("cleanup by tag %s failed; the teardown task retries", transfer_id)

    def on_kill(self) -> None:
        if self._provisioning_id:
            self._sweep(self._provisioning_id)


class SkyplaneDeprovisionOperator(_SkyplaneBaseOperator):
    """Delete a fleet (a teardown task), and every leftover tagged with the transfer id.

    The fleet comes from ``fleet`` (JSON/dict) or is pulled from ``fleet_task_id``; when the
    provision task failed half-way and left no fleet, the transfer id alone is enough (the
    backend's sweep finds resources by tag, in ``regions`` and the regions of any fleet record
    of the transfer). Returns a count and the first deleted ids.
    """

    template_fields: Sequence[str] = ("fleet", "transfer_id")

    def __init__(
        self,
        *,
        fleet: Any = None,
        fleet_task_id: str | None = None,
        sweep: bool = True,
        regions: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.regions = list(regions)
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
            # Deleting a known fleet returns nothing (only a sweep by tag lists what it
            # found): its gateways are what went.
            deleted += self.hook.deprovision(fleet) or [
                f"{fleet.backend}:{fleet.transfer_id}:{g.gateway_id}" for g in fleet.gateways
            ]
        if self.sweep or fleet is None:
            regions = sorted({*self.regions, *(fleet.regions if fleet else [])})
            deleted += self.hook.deprovision(transfer_id=transfer_id, regions=regions)
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
