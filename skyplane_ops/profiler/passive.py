"""Every transfer is a measurement: each hop's achieved rate goes into the grid store.

``after_transfer`` is called at the end of ``run_transfer``. Per path of the plan it compares
what the path delivered (its bytes over the time until its last chunk landed) with the plan's
prediction; a path that carried enough to judge (``MIN_PASSIVE_BYTES`` over
``MIN_PASSIVE_SECONDS``) and delivered under ``UNDER_RATIO`` of it is reported (returned, and
logged). Every hop of
every path becomes a passive ``Measurement`` (bytes, seconds, connections, VM class, time) in
the store the plan was made on (``plan.details["grid"]["store"]``, else the default store),
then a new version is published so the next plan sees it (``profiler.links`` says how
passive rows combine with profiles).

Loopback (the ``local`` backend) says nothing about a WAN: its transfers are never recorded,
unless ``SKYPLANE_OPS_PASSIVE_STORE`` names a store on purpose (a scratch store, e.g. in
tests). ``SKYPLANE_OPS_PASSIVE=0`` turns recording off. Recording never fails a transfer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from skyplane_ops.profiler.links import MIN_PASSIVE_BYTES, MIN_PASSIVE_SECONDS, UNDER_RATIO
from skyplane_ops.profiler.records import SOURCE_PASSIVE, Measurement, utcnow

log = logging.getLogger(__name__)

ENV_STORE = "SKYPLANE_OPS_PASSIVE_STORE"
ENV_SWITCH = "SKYPLANE_OPS_PASSIVE"


@dataclass(frozen=True)
class PathReport:
    """What one path of the plan was predicted to carry and what it carried."""

    regions: list[str]
    share: float
    bytes: int
    seconds: float
    predicted_gbps: float
    achieved_gbps: float

    @property
    def ratio(self) -> float | None:
        return self.achieved_gbps / self.predicted_gbps if self.predicted_gbps > 0 else None

    @property
    def judged(self) -> bool:
        """Carried enough for long enough to say how fast the path is (the bar a passive
        row must pass to count in a plan): a few KiB in a few ms are start-up, not a rate."""
        return self.bytes >= MIN_PASSIVE_BYTES and self.seconds >= MIN_PASSIVE_SECONDS

    @property
    def under(self) -> bool:
        """Delivered under ``UNDER_RATIO`` of its prediction, on enough data to judge."""
        ratio = self.ratio
        return self.judged and ratio is not None and ratio < UNDER_RATIO

    def to_dict(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            **asdict(self),
            "achieved_gbps": round(self.achieved_gbps, 4),
            "predicted_gbps": round(self.predicted_gbps, 4),
            "seconds": round(self.seconds, 3),
            "ratio": None if ratio is None else round(ratio, 3),
            "under": self.under,
        }

    def describe(self) -> str:
        ratio = self.ratio
        return (
            f"path {' -> '.join(self.regions)} delivered {self.achieved_gbps:.3f} Gbit/s of "
            f"{self.predicted_gbps:.3f} predicted" + ("" if ratio is None else f" ({ratio:.0%})")
        )


def path_reports(
    plan: Any,
    routes: list[tuple[list[str], float]],
    path_bytes: Mapping[int, int],
    path_seconds: Mapping[int, float],
) -> list[PathReport]:
    """One report per route that carried bytes (``routes`` as ``dispatch.plan_routes``)."""
    predicted = {tuple(p.regions): float(p.gbps) for p in getattr(plan, "paths", [])}
    reports = []
    for index, (regions, share) in enumerate(routes):
        nbytes = int(path_bytes.get(index, 0))
        seconds = float(path_seconds.get(index, 0.0))
        if nbytes <= 0 or seconds <= 0:
            continue
        gbps = predicted.get(tuple(regions), share * float(plan.predicted_gbps))
        reports.append(
            PathReport(list(regions), share, nbytes, seconds, gbps, nbytes * 8 / seconds / 1e9)
        )
    return reports


def hop_measurements(
    plan: Any, reports: list[PathReport], backend: str, run_id: str
) -> list[Measurement]:
    """One passive row per hop: the bytes of every path over it, at the slowest path's pace.

    A hop carried each path's bytes within that path's time, so the hop's rate is at least
    the sum of the paths' rates; per VM pair it is divided by the smaller VM count of its ends.
    """
    conns = {(h.src, h.dst): int(h.connections) for h in getattr(plan, "hops", [])}
    vms: Mapping[str, int] = getattr(plan, "vms", {}) or {}
    hops: dict[tuple[str, str], list[PathReport]] = {}
    for report in reports:
        for u, v in zip(report.regions, report.regions[1:], strict=False):
            hops.setdefault((u, v), []).append(report)
    now = utcnow()
    rows = []
    for (u, v), on_hop in hops.items():
        pairs = max(1, min(int(vms.get(u, 1) or 1), int(vms.get(v, 1) or 1)))
        gbps = sum(r.achieved_gbps for r in on_hop) / pairs
        nbytes = sum(r.bytes for r in on_hop) // pairs
        seconds = max(r.seconds for r in on_hop)
        rows.append(
            Measurement(
                src=u,
                dst=v,
                gbps=gbps,
                sent_gbps=gbps,
                received_gbps=gbps,
                rtt_ms=0.0,
                connections=max(1, conns.get((u, v), 0) // pairs),
                duration_s=seconds,
                measured_at=now,
                run_id=run_id,
                bytes_sent=nbytes,
                bytes_received=nbytes,
                vm_class=backend,
                backend=backend,
                source=SOURCE_PASSIVE,
            )
        )
    return rows


def passive_store(plan: Any, backend: str) -> str | None:
    """Where this transfer's hops are recorded, or None (loopback, or switched off)."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    explicit = os.environ.get(ENV_STORE)
    if explicit:
        return explicit
    if backend == "local":
        return None  # loopback never enters a store that plans read
    grid = (getattr(plan, "details", None) or {}).get("grid") or {}
    if grid.get("store"):
        return str(grid["store"])
    from skyplane_ops.profiler.store import default_store_uri

    return default_store_uri()


def after_transfer(
    plan: Any,
    backend: str,
    run_id: str,
    routes: list[tuple[list[str], float]],
    path_bytes: Mapping[int, int],
    path_seconds: Mapping[int, float],
    capped: bool = False,
) -> list[dict[str, Any]]:
    """Report every path (predicted vs achieved) and record its hops; never raises.
    ``capped``: the run had a bandwidth cap (``--bwlimit``), so its rates measure the cap,
    not the links: reported, never warned about nor recorded for the next plans."""
    try:
        reports = path_reports(plan, routes, path_bytes, path_seconds)
    except Exception:
        log.warning("could not compute path rates", exc_info=True)
        return []
    if capped:
        return [{**r.to_dict(), "under": False, "capped": True, "recorded": False} for r in reports]
    for report in reports:
        if report.under:
            log.warning("%s: under %.0f%% of the plan", report.describe(), UNDER_RATIO * 100)
    uri = passive_store(plan, backend)
    recorded = False
    if uri and reports:
        try:
            from skyplane_ops.profiler.store import GridStore

            store = GridStore(uri)
            for row in hop_measurements(plan, reports, backend, run_id):
                store.append(row)
            store.publish()
            recorded = True
        except Exception:
            log.warning("could not record the transfer's rates in %s", uri, exc_info=True)
    # "recorded": the next plan sees it (a path judged too small is stored but not counted).
    return [{**r.to_dict(), "recorded": recorded and r.judged} for r in reports]
