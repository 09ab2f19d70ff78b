"""The gateways' figures, read at scrape time over their signed control API (``/v1/health``):
the same authentication as every other control request, so a gateway exposes nothing to a
scraper; the control plane's exporter is the one place Prometheus reads."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway_agent.auth import load_secret
from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.provision.fleet import GatewayFleet

log = logging.getLogger(__name__)
NS = "skyplane_gateway"
TIMEOUT_S = 2.0  # a scrape must not hang on a dead gateway


class GatewayCollector(Collector):
    """Byte-budget use, queue depths, threads, descriptors, refused and pending connections
    per gateway."""

    def __init__(self, transfer_id: str) -> None:
        self.transfer_id = transfer_id
        self.fleet: GatewayFleet | None = None

    def describe(self) -> list[Any]:
        return []  # the families depend on the fleet: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fleet = self.fleet
        labels = ["transfer", "gateway", "region"]
        families = {
            "buffer_bytes": GaugeMetricFamily(
                f"{NS}_buffer_bytes",
                "Byte budget: in_use, peak, capacity",
                labels=[*labels, "kind"],
            ),
            "up": GaugeMetricFamily(f"{NS}_up", "1 if the gateway answered", labels=labels),
            "threads": GaugeMetricFamily(f"{NS}_threads", "Threads of the agent", labels=labels),
            "open_fds": GaugeMetricFamily(f"{NS}_open_fds", "Open descriptors", labels=labels),
            "rejected": GaugeMetricFamily(
                f"{NS}_rejected_connections", "Data connections refused", labels=labels
            ),
            "pending": GaugeMetricFamily(
                f"{NS}_pending_connections", "Data connections not yet authenticated", labels=labels
            ),
            "queued_chunks": GaugeMetricFamily(
                f"{NS}_queued_chunks",
                "Chunks waiting: per next hop, for the sink's writers, for the readers (source)",
                labels=[*labels, "queue", "next_hop"],
            ),
            "queued_bytes": GaugeMetricFamily(
                f"{NS}_queued_bytes",
                "Bytes of chunks waiting per next hop and for the sink's writers",
                labels=[*labels, "queue", "next_hop"],
            ),
        }
        if fleet is not None:
            try:
                secret = load_secret(fleet.secret_ref)
            except OSError:
                secret = None
            for gw in fleet.gateways if secret is not None else []:
                ids = [self.transfer_id, gw.gateway_id, gw.region]
                health = _health(gw, secret) if secret is not None else None
                families["up"].add_metric(ids, 0.0 if health is None else 1.0)
                if health is None:
                    continue
                buffer = health.get("buffer") or {}
                for kind in ("in_use", "peak", "capacity"):
                    families["buffer_bytes"].add_metric([*ids, kind], float(buffer.get(kind, 0)))
                families["threads"].add_metric(ids, float(health.get("threads", 0)))
                families["open_fds"].add_metric(ids, float(health.get("open_fds") or 0))
                families["rejected"].add_metric(ids, float(health.get("rejected_connections", 0)))
                families["pending"].add_metric(
                    ids, float(health.get("pending_data_connections", 0))
                )
                _add_queues(families, ids, health.get("queues") or {})
        yield from families.values()


def _add_queues(
    families: dict[str, GaugeMetricFamily], ids: list[str], jobs: dict[str, Any]
) -> None:
    """The queue depths of the gateway's running jobs, summed (one job per run, as a rule)."""
    chunks: dict[tuple[str, str], int] = {("sink", ""): 0, ("source", ""): 0}
    held: dict[tuple[str, str], int] = {("sink", ""): 0}
    for queues in jobs.values():
        for hop, q in (queues.get("next_hop") or {}).items():
            chunks[("next_hop", hop)] = chunks.get(("next_hop", hop), 0) + int(q["chunks"])
            held[("next_hop", hop)] = held.get(("next_hop", hop), 0) + int(q["bytes"])
        sink = queues.get("sink") or {}
        chunks[("sink", "")] += int(sink.get("chunks", 0))
        held[("sink", "")] += int(sink.get("bytes", 0))
        chunks[("source", "")] += int(queues.get("source", 0))
    for (queue, hop), n in chunks.items():
        families["queued_chunks"].add_metric([*ids, queue, hop], float(n))
    for (queue, hop), n in held.items():
        families["queued_bytes"].add_metric([*ids, queue, hop], float(n))


def _health(gw: Any, secret: bytes) -> dict[str, Any] | None:
    try:
        return GatewayClient(gw.host, gw.control_port, secret, timeout=TIMEOUT_S).health()
    except (GatewayError, OSError) as exc:
        log.debug("gateway %s did not answer: %s", gw.gateway_id, exc)
        return None
