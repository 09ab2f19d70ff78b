"""The rounds of a profiling run: probe every pair of a round at once (each pair at its
connection counts in turn), journal each measurement the moment it arrives, record pairs that
could not be reached, and deprovision with retries. ``run.refresh_grid`` drives them."""

from __future__ import annotations

import logging
import queue
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gateway_agent.probe import ProbeResult
from skyplane_ops.profiler.budget import CostEstimate
from skyplane_ops.profiler.drivers import ProbeDriver
from skyplane_ops.profiler.records import Measurement, utcnow
from skyplane_ops.profiler.schedule import Pair
from skyplane_ops.profiler.store import GridStore
from skyplane_ops.provision.base import Provisioner
from skyplane_ops.provision.fleet import Gateway, GatewayFleet

log = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], None]

#: Connection counts each pair is probed at: a few connections give the per-connection rate
#: (where connections are the bottleneck), many the saturation rate of one VM pair.
DEFAULT_CONNECTIONS: tuple[int, ...] = (4, 64)


@dataclass
class RefreshResult:
    """What a run did; ``to_dict()`` is small enough for XCom / Dagster metadata."""

    run_id: str
    store_uri: str
    regions: list[str]
    version: str | None
    pairs_total: int
    skipped_fresh: int
    estimate: CostEstimate
    rounds: int
    seconds: float
    measurements: list[Measurement] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    backend: str = ""
    # Pairs no probe could reach, recorded in the store as "no link" rows (gbps 0).
    no_link: list[Measurement] = field(default_factory=list)
    connections: tuple[int, ...] = DEFAULT_CONNECTIONS

    @property
    def measured(self) -> int:
        return len(self.measurements)

    def to_dict(self) -> dict[str, Any]:
        rates = [m.gbps for m in self.measurements]
        return {
            "run_id": self.run_id,
            "store_uri": self.store_uri,
            "version": self.version,
            "backend": self.backend,
            "regions": list(self.regions),
            "pairs_total": self.pairs_total,
            "measured": self.measured,
            "skipped_fresh": self.skipped_fresh,
            "failed": len(self.failed),
            "failed_pairs": sorted(self.failed)[:20],
            "no_link": len(self.no_link),
            "connections": list(self.connections),
            "rounds": self.rounds,
            "seconds": round(self.seconds, 3),
            "estimate_usd": round(self.estimate.total_usd, 6),
            "estimate_gb": round(self.estimate.total_gb, 6),
            "gbps_min": round(min(rates), 4) if rates else None,
            "gbps_median": round(statistics.median(rates), 4) if rates else None,
            "gbps_max": round(max(rates), 4) if rates else None,
        }


def _provenance(
    profile: Any, region: str, backend: str, options: Mapping[str, Any]
) -> tuple[str, str]:
    """VM class and network tier recorded with each measurement."""
    vm = str(options.get("instance_type") or options.get("vm_class") or "")
    tier = str(options.get("network_tier") or "")
    provider = region.split(":", 1)[0] if ":" in region else ""
    if not vm and backend in ("aws", "azure", "gcp") and profile is not None:
        try:
            vm = str(profile.prices.vm(provider).instance)
        except Exception:
            vm = ""
    if not tier and provider == "gcp":
        tier = "premium"
    return vm or backend, tier


def _deprovision(provisioner: Provisioner, fleet: GatewayFleet, attempts: int = 3) -> None:
    """Deprovision, retrying: it is idempotent, and a gateway that dies while answering its
    shutdown request must not leave the others running."""
    for attempt in range(1, attempts + 1):
        try:
            provisioner.deprovision(fleet)
            return
        except Exception:
            if attempt == attempts:
                raise
            log.warning("deprovisioning %s failed, retrying", fleet.transfer_id, exc_info=True)
            time.sleep(0.5 * attempt)


def _probe_counts(
    driver: ProbeDriver,
    src: Gateway,
    dst: Gateway,
    counts: Sequence[int],
    duration_s: float,
    out: queue.Queue[tuple[Pair, int, ProbeResult | Exception]],
) -> None:
    """Probe one pair at each count in turn (never two at once on one pair); an unreachable
    pair is not tried again at the larger counts."""
    pair = (src.region, dst.region)
    for count in counts:
        try:
            out.put((pair, count, driver.probe(src, dst, count, duration_s)))
        except Exception as exc:
            out.put((pair, count, exc))
            return


def _run_round(
    rnd: list[Pair],
    gateways: Mapping[str, Gateway],
    driver: ProbeDriver,
    counts: Sequence[int],
    duration_s: float,
    store: GridStore,
    result: RefreshResult,
    run_id: str,
    backend: str,
    options: Mapping[str, Any],
    profile: Any,
    emit: Progress,
) -> None:
    """Probe every pair of one round at once; journal each result as soon as it arrives."""
    arrived: queue.Queue[tuple[Pair, int, ProbeResult | Exception]] = queue.Queue()
    measured: set[Pair] = set()
    errors: dict[Pair, str] = {}
    with ThreadPoolExecutor(max_workers=len(rnd), thread_name_prefix="probe") as pool:
        futures = [
            pool.submit(
                _probe_counts, driver, gateways[s], gateways[d], counts, duration_s, arrived
            )
            for s, d in rnd
        ]
        while not (all(f.done() for f in futures) and arrived.empty()):
            try:
                (src, dst), count, outcome = arrived.get(timeout=0.2)
            except queue.Empty:
                continue
            vm_class, tier = _provenance(profile, src, backend, options)
            if isinstance(outcome, Exception):
                errors[(src, dst)] = str(outcome)
                emit(
                    {
                        "event": "failed",
                        "src": src,
                        "dst": dst,
                        "connections": count,
                        "error": str(outcome),
                    }
                )
                continue
            row = Measurement(
                src=src,
                dst=dst,
                gbps=outcome.received_gbps,
                sent_gbps=outcome.sent_gbps,
                received_gbps=outcome.received_gbps,
                rtt_ms=outcome.rtt_ms,
                connections=outcome.connections,
                duration_s=duration_s,
                measured_at=utcnow(),
                run_id=run_id,
                bytes_sent=outcome.bytes_sent,
                bytes_received=outcome.bytes_received,
                vm_class=vm_class,
                tier=tier,
                backend=backend,
            )
            store.append(row)
            result.measurements.append(row)
            measured.add((src, dst))
            emit(
                {
                    "event": "measured",
                    "src": src,
                    "dst": dst,
                    "gbps": row.gbps,
                    "rtt_ms": row.rtt_ms,
                    "connections": row.connections,
                    "done": result.measured,
                }
            )
    for (src, dst), error in errors.items():
        if (src, dst) in measured:
            continue  # reachable at another count: not a missing link
        result.failed[f"{src}->{dst}"] = error
        vm_class, tier = _provenance(profile, src, backend, options)
        no_link = Measurement(
            src=src,
            dst=dst,
            gbps=0.0,
            sent_gbps=0.0,
            received_gbps=0.0,
            rtt_ms=0.0,
            connections=counts[0],
            duration_s=0.0,
            measured_at=utcnow(),
            run_id=run_id,
            vm_class=vm_class,
            tier=tier,
            backend=backend,
            error=error[:500] or "unreachable",
        )
        store.append(no_link)
        result.no_link.append(no_link)
