"""Small, secret-free Dagster metadata for plans, fleets and finished transfers.

Metadata is stored in the event log forever and shown in the UI, so it holds numbers, a route
(a table, one row per hop, and a rendered SVG image) and URIs of anything large, never key
lists, credentials or the fleet's secret reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import dagster as dg

from skyplane_ops.api import GatewayFleet, TransferPlan
from skyplane_ops.dagster.render import paths_table, route_image_markdown, route_table

MAX_TEXT = 8000

# Names the TransferResult summary may use for each figure (first present wins).
_FIELDS: dict[str, tuple[str, ...]] = {
    "objects": ("objects", "object_count", "num_objects"),
    "bytes": ("bytes", "total_bytes", "bytes_transferred"),
    "seconds": ("seconds", "elapsed_seconds", "duration_seconds", "wall_seconds"),
    "actual_cost_usd": ("actual_cost_usd", "cost_usd", "actual_total_cost_usd"),
    "predicted_cost_usd": ("predicted_cost_usd", "predicted_total_cost_usd"),
}


def clean_uri(uri: str) -> str:
    """A URI without query string, fragment or user info (SAS tokens, keys)."""
    parts = urlsplit(uri)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _text(value: str) -> str:
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 20] + "\n… (truncated)"


def _pick(summary: Mapping[str, Any], name: str) -> Any:
    for key in _FIELDS[name]:
        if key in summary and summary[key] is not None:
            return summary[key]
    return None


def plan_metadata(plan: TransferPlan, plan_uri: str) -> dict[str, Any]:
    """What the planning step shows: predicted throughput and cost, route, plan URI."""
    return {
        "predicted_gbps": dg.MetadataValue.float(round(plan.predicted_gbps, 4)),
        "predicted_cost_usd": dg.MetadataValue.float(round(plan.total_cost_usd, 6)),
        "predicted_egress_usd": dg.MetadataValue.float(round(plan.egress_cost_usd, 6)),
        "predicted_vm_usd": dg.MetadataValue.float(round(plan.vm_cost_usd, 6)),
        "vms": dg.MetadataValue.int(sum(plan.vms.values())),
        "solver_status": dg.MetadataValue.text(plan.solver_status),
        "route": route_table(plan),
        "paths": paths_table(plan),
        "route_diagram": dg.MetadataValue.md(route_image_markdown(plan)),
        "plan_uri": dg.MetadataValue.url(clean_uri(plan_uri)),
    }


def fleet_metadata(fleet: GatewayFleet) -> dict[str, Any]:
    """What the provisioning step shows: ids and counts, never addresses' secrets."""
    return {
        "transfer_id": dg.MetadataValue.text(fleet.transfer_id),
        "backend": dg.MetadataValue.text(fleet.backend),
        "gateways": dg.MetadataValue.int(len(fleet.gateways)),
        "regions": dg.MetadataValue.text(", ".join(fleet.regions)),
    }


def transfer_metadata(
    summaries: Sequence[Mapping[str, Any]],
    plan: TransferPlan,
    plan_uri: str,
    *,
    transfer_id: str,
    replica_uri: str,
    partitions: int,
    replica: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The replica's materialisation metadata, summed over the run's partitions; ``replica``
    (``api.replica_properties``): its storage class, encryption and key."""
    objects = sum(int(_pick(s, "objects") or 0) for s in summaries)
    nbytes = sum(int(_pick(s, "bytes") or 0) for s in summaries)
    seconds = sum(float(_pick(s, "seconds") or 0.0) for s in summaries)
    actual = [_pick(s, "actual_cost_usd") for s in summaries]
    predicted = [_pick(s, "predicted_cost_usd") for s in summaries]
    verified = [_verified(s) for s in summaries]
    meta: dict[str, Any] = {
        "objects": dg.MetadataValue.int(objects),
        "bytes": dg.MetadataValue.int(nbytes),
        "seconds": dg.MetadataValue.float(round(seconds, 3)),
        "gbps": dg.MetadataValue.float(round(nbytes * 8 / seconds / 1e9, 4) if seconds else 0.0),
        "predicted_gbps": dg.MetadataValue.float(round(plan.predicted_gbps, 4)),
        "predicted_cost_usd": dg.MetadataValue.float(
            round(
                sum(float(p) for p in predicted)
                if predicted and all(p is not None for p in predicted)
                else plan.total_cost_usd,
                6,
            )
        ),
        "route": route_table(plan),
        "paths": paths_table(plan),
        "route_diagram": dg.MetadataValue.md(route_image_markdown(plan)),
        "plan_uri": dg.MetadataValue.url(clean_uri(plan_uri)),
        "replica_uri": dg.MetadataValue.text(clean_uri(replica_uri)),
        "transfer_id": dg.MetadataValue.text(transfer_id),
        "partitions": dg.MetadataValue.int(partitions),
    }
    for name in ("storage_class", "encryption", "kms_key"):
        if replica and replica.get(name):
            meta[name] = dg.MetadataValue.text(str(replica[name]))
    if actual and all(a is not None for a in actual):
        meta["actual_cost_usd"] = dg.MetadataValue.float(round(sum(float(a) for a in actual), 6))
    if verified and all(v is not None for v in verified):
        meta["verified"] = dg.MetadataValue.bool(all(bool(v) for v in verified))
    methods = sorted(
        {
            str(s["verification"].get("method"))
            for s in summaries
            if isinstance(s.get("verification"), Mapping) and s["verification"].get("method")
        }
    )
    reports = [
        str(s["uris"]["report"])
        for s in summaries
        if isinstance(s.get("uris"), Mapping) and s["uris"].get("report")
    ]
    if len(reports) == 1:
        meta["report_uri"] = dg.MetadataValue.url(reports[0])
    elif reports:  # one per partition: the first few (each names its transfer and run)
        meta["report_uris"] = dg.MetadataValue.text("\n".join(reports[:20]))
    if methods:
        meta["verification_method"] = dg.MetadataValue.text(", ".join(methods)[:200])
    return meta


def _verified(summary: Mapping[str, Any]) -> bool | None:
    value = summary.get("verification", summary.get("verified"))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, Mapping):
        if "status" in value:
            return str(value["status"]).lower() == "passed"
        for key in ("ok", "passed", "verified"):
            if key in value:
                return bool(value[key])
        return None
    if isinstance(value, str):
        return value.lower() in ("ok", "passed", "verified", "true")
    return None
