"""``SkyplanePlanOperator``: plan a transfer and store the full plan at a URI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skyplane_ops.airflow.links import SkyplanePlanLink, SkyplaneRouteLink, persist_links
from skyplane_ops.airflow.operators.base import (
    _as_list,
    _PlanningOperator,
)
from skyplane_ops.airflow.summaries import (
    plan_summary,
)


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
