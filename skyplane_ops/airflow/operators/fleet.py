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

    A parked (warm) fleet in the connection's state store that serves the plan is claimed
    instead (``docs/warm-fleets.md``); the claim's idle figure is XCom ``warm``.

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
        claimed = self.hook.claim_warm(plan, transfer_id=transfer_id)
        try:
            if claimed is not None:
                fleet, warm = claimed
                self.log.info("claimed warm fleet %s (parked %.0f s)", fleet.transfer_id,
                              warm["idle_s"])  # fmt: skip
                if ti is not None:
                    ti.xcom_push(key="warm", value=warm)
                # The transfer task finds a fleet's secret under its id when not given one.
                self.hook.transfer_state(fleet.transfer_id).save_secret(fleet.secret_ref)
            else:
                fleet = self.hook.provision(plan, transfer_id=transfer_id, tags=self.tags)
            # The transfer task may run on another worker: keep the secret with the transfer.
            self.hook.transfer_state(transfer_id).save_secret(fleet.secret_ref)
        except BaseException:
            if claimed is not None:
                self.hook.deprovision(claimed[0])
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

    With ``keep_warm`` (a duration, templated) the fleet is parked instead, for the next run
    to claim, when the ``transfer_task_id`` task's result says the transfer succeeded; the
    parking's $/h is ``plan``'s VM price (``docs/warm-fleets.md``).

    The fleet comes from ``fleet`` (JSON/dict) or is pulled from ``fleet_task_id``; when the
    provision task failed half-way and left no fleet, the transfer id alone is enough (the
    backend's sweep finds resources by tag, in ``regions`` and the regions of any fleet record
    of the transfer). Returns a count and the first deleted ids.
    """

    template_fields: Sequence[str] = ("fleet", "transfer_id", "keep_warm", "plan")

    def __init__(
        self,
        *,
        fleet: Any = None,
        fleet_task_id: str | None = None,
        sweep: bool = True,
        regions: Sequence[str] = (),
        keep_warm: str | float | None = None,
        transfer_task_id: str | None = None,
        plan: Any = None,
        plan_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if keep_warm and not transfer_task_id:
            raise ValueError("keep_warm needs transfer_task_id (only a successful transfer parks)")
        super().__init__(**kwargs)
        self.keep_warm = keep_warm
        self.transfer_task_id = transfer_task_id
        self.plan = plan
        self.plan_conn_id = plan_conn_id
        self.regions = list(regions)
        self.fleet = fleet
        self.fleet_task_id = fleet_task_id
        self.sweep = sweep

    def execute(self, context: Any) -> dict[str, Any]:
        fleet = _load_fleet(self.fleet)
        if fleet is None and self.fleet_task_id:
            fleet = _load_fleet(context["ti"].xcom_pull(task_ids=self.fleet_task_id))
        transfer_id = self.resolve_transfer_id(context, fleet.transfer_id if fleet else None)
        parked = self._park(context, fleet) if fleet is not None else None
        if parked is not None:
            removed = self.hook.transfer_state(transfer_id).delete()  # the pool holds its own
            self.log.info("parked %s for %g s; removed %d state objects", parked["parked"],
                          parked["keep_warm_s"], removed)  # fmt: skip
            return bounded({"transfer_id": transfer_id, "had_fleet": True, "deleted_count": 0,
                            "deleted": [], "warm": parked})  # fmt: skip
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

    def _park(self, context: Any, fleet: Any) -> dict[str, Any] | None:
        """Park ``fleet`` for ``keep_warm`` after a transfer that succeeded (None: delete)."""
        if not self.keep_warm or not self.transfer_task_id:
            return None
        from skyplane_ops.api import parse_duration, vm_usd_per_hour

        keep = parse_duration(self.keep_warm)
        if not 0 < keep <= 86400:
            raise ValueError(f"keep_warm must be above 0 and at most 24h, got {keep:g} s")
        result = context["ti"].xcom_pull(task_ids=self.transfer_task_id)
        if not isinstance(result, Mapping) or result.get("status") != "ok":
            self.log.info("the transfer did not succeed: the fleet is deleted, not parked")
            return None
        rate = 0.0
        if self.plan:
            rate = vm_usd_per_hour(_load_plan(self.plan, self.plan_conn_id)[0], fleet)
        return self.hook.park_warm(fleet, keep_warm_s=keep, usd_per_hour=rate)
