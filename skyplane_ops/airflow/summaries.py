"""Small JSON summaries for XCom and Asset event metadata.

XCom lives in the metadata database, so a task returns a few hundred bytes with URIs for
anything large (the full plan, the journal), never key lists. ``bounded`` enforces that even
if a core object grows a long list one day.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from skyplane_ops.api import GatewayFleet, TransferPlan

# The hard ceiling of any XCom value a skyplane task returns.
XCOM_LIMIT_BYTES = 4096
MAX_ROUTES = 8


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str, separators=(",", ":")))


def bounded(summary: Mapping[str, Any], limit: int = XCOM_LIMIT_BYTES) -> dict[str, Any]:
    """Drop long lists and nested blobs until the JSON fits in ``limit`` bytes.

    Long lists (more than 16 items) are replaced by their length; then the largest fields go
    first, and their names are recorded under ``"dropped"`` so nothing disappears silently.
    """
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in summary.items():
        if isinstance(value, list | tuple) and len(value) > 16:
            out[f"{key}_count"] = len(value)
            dropped.append(key)
        else:
            out[key] = value
    while _size(out) > limit:
        candidates = [k for k in out if k not in ("dropped", "transfer_id")]
        if not candidates:
            break
        largest = max(candidates, key=lambda k: _size(out[k]))
        out.pop(largest)
        dropped.append(largest)
    if dropped:
        out["dropped"] = dropped
    return out


def route_strings(plan: TransferPlan) -> list[str]:
    """Human-readable paths with their share, e.g. ``aws:a -> gcp:b (60%)``."""
    paths = sorted(plan.paths, key=lambda p: -p.share)[:MAX_ROUTES]
    return [f"{' -> '.join(p.regions)} ({p.share:.0%})" for p in paths]


def plan_summary(plan: TransferPlan, *, plan_uri: str, transfer_id: str) -> dict[str, Any]:
    """What the plan task returns: the numbers a DAG author branches on, plus the plan URI."""
    baseline = plan.baseline or {}
    return bounded(
        {
            "transfer_id": transfer_id,
            "plan_uri": plan_uri,
            "src": plan.src,
            "dsts": list(plan.dsts),
            "volume_gb": plan.volume_gb,
            "mode": plan.mode,
            "solver_status": plan.solver_status,
            "predicted_gbps": round(plan.predicted_gbps, 4),
            "egress_cost_usd": round(plan.egress_cost_usd, 6),
            "vm_cost_usd": round(plan.vm_cost_usd, 6),
            "total_cost_usd": round(plan.total_cost_usd, 6),
            "vms": dict(plan.vms),
            "route": route_strings(plan),
            "baseline_gbps": baseline.get("gbps", baseline.get("predicted_gbps")),
            "baseline_cost_usd": baseline.get("total_cost_usd", baseline.get("cost_usd")),
        }
    )


def fleet_reference(fleet: GatewayFleet) -> dict[str, Any]:
    """The fleet as XCom: ``GatewayFleet.to_dict()`` is small and secret-free by contract.

    Very large fleets (hundreds of gateways) would outgrow XCom; then the caller should store
    the fleet JSON at a URI instead, which ``SkyplaneProvisionOperator(fleet_uri=...)`` does.
    """
    return fleet.to_dict()


def transfer_summary(
    result: Any,
    *,
    transfer_id: str,
    plan: TransferPlan | None,
    plan_uri: str | None,
    src: str,
    dst: str,
    journal_dir: str | None,
) -> dict[str, Any]:
    """The transfer task's XCom: the core's own summary plus where the plan and journal are."""
    if hasattr(result, "to_dict"):
        core = dict(result.to_dict())
    elif isinstance(result, Mapping):
        core = dict(result)
    else:
        core = {"result": str(result)}
    summary: dict[str, Any] = {"transfer_id": transfer_id, "src": src, "dst": dst}
    summary.update(core)
    summary["plan_uri"] = plan_uri
    summary["journal_dir"] = journal_dir
    if plan is not None:
        summary.setdefault("route", route_strings(plan))
        summary.setdefault("predicted_gbps", round(plan.predicted_gbps, 4))
        summary.setdefault("predicted_cost_usd", round(plan.total_cost_usd, 6))
    return bounded(summary)


def _pick(summary: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if summary.get(name) is not None:
            return summary[name]
    return None


def verified(summary: Mapping[str, Any]) -> bool | None:
    """Whether the end check passed, as a bool in every face (None: no check was made)."""
    value = summary.get("verified", summary.get("verification"))
    if isinstance(value, Mapping):
        return str(value.get("status", "")).lower() == "passed" if value else None
    return None if value is None else bool(value)


def unchanged(summary: Mapping[str, Any]) -> bool:
    """The run wrote and deleted nothing at the destination (an up-to-date sync)."""
    return (
        summary.get("status", "ok") == "ok"
        and not summary.get("objects")
        and not summary.get("objects_deleted")
    )


def asset_metadata(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Event metadata for the destination Asset: bytes, objects, Gbit/s, cost, route, whether
    it verified (a bool, as in Dagster) and the transfer report."""
    return {
        "transfer_id": summary.get("transfer_id"),
        "bytes": _pick(summary, "bytes", "bytes_transferred", "total_bytes"),
        "objects": _pick(summary, "objects", "objects_transferred", "num_objects"),
        "gbps": _pick(summary, "gbps", "throughput_gbps", "actual_gbps"),
        "cost_usd": _pick(summary, "cost_usd", "actual_cost_usd", "predicted_cost_usd"),
        "route": summary.get("route"),
        "verified": verified(summary),
        "plan_uri": summary.get("plan_uri"),
        "report_uri": (summary.get("uris") or {}).get("report"),
    }


def progress_counters(update: Any) -> dict[str, Any]:
    """Scalar counters of a progress sample (a mapping or the core's ``Progress`` dataclass).

    Scalars, and the Gbit/s of each of the plan's paths (at most 8): a progress sample must
    never carry key lists into logs or status files.
    """
    if dataclasses.is_dataclass(update) and not isinstance(update, type):
        items = dataclasses.asdict(update)
    elif isinstance(update, Mapping):
        items = dict(update)
    else:
        items = dict(getattr(update, "__dict__", {}))
    out: dict[str, Any] = {
        str(k): v for k, v in items.items() if isinstance(v, int | float | str | bool) or v is None
    }
    paths = items.get("path_gbps")
    if isinstance(paths, Mapping):  # a few routes (the plan's paths), never keys
        out["path_gbps"] = {
            str(r): round(float(g), 4) for r, g in list(paths.items())[:8] if _number(g)
        }
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
