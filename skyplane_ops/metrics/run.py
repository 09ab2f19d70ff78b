"""``RunMetrics``: one run's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client import write_to_textfile as _write_to_textfile

from skyplane_ops.metrics.gateways import GatewayCollector
from skyplane_ops.provision.fleet import GatewayFleet

NS = "skyplane"


class RunMetrics:
    """What a transfer did and is doing, labelled by its transfer id."""

    def __init__(self, transfer_id: str) -> None:
        self.transfer_id = transfer_id
        self.registry = CollectorRegistry(auto_describe=True)
        r, t = self.registry, ["transfer"]
        self.bytes = Gauge(f"{NS}_bytes_done", "Bytes moved so far by this run", t, registry=r)
        self.bytes_total = Gauge(f"{NS}_bytes_total", "Bytes this run moves", t, registry=r)
        self.chunks = Gauge(
            f"{NS}_chunks", "Chunks by outcome (done, total, resent, resumed)", [*t, "outcome"],
            registry=r,
        )  # fmt: skip
        self.retries = Counter(f"{NS}_retries", "Chunks sent again", t, registry=r)
        self.objects = Gauge(
            f"{NS}_objects", "Objects by outcome (copied, skipped, failed, changed, deleted)",
            [*t, "outcome"], registry=r,
        )  # fmt: skip
        self.gbps = Gauge(f"{NS}_gbps", "Gbit/s of the whole run so far", t, registry=r)
        self.path_gbps = Gauge(
            f"{NS}_path_gbps", "Gbit/s each plan path delivered so far", [*t, "path"], registry=r
        )
        self.seconds = Gauge(f"{NS}_seconds", "Seconds the run has taken", t, registry=r)
        # The driver's queue: chunks submitted to gateways and not finished, of its window.
        self.in_flight_chunks = Gauge(
            f"{NS}_in_flight_chunks", "Chunks submitted to gateways, not finished", t, registry=r
        )
        self.in_flight_bytes = Gauge(
            f"{NS}_in_flight_bytes", "Bytes of the chunks in flight", t, registry=r
        )
        self.window_chunks = Gauge(
            f"{NS}_window_chunks", "Chunks the driver keeps submitted at most", t, registry=r
        )
        self.gateways = GatewayCollector(transfer_id)
        self.registry.register(self.gateways)
        self._resent = 0

    def observe_progress(self, update: Any) -> None:
        """A ``transfer.Progress`` sample."""
        t = self.transfer_id
        self.bytes.labels(t).set(update.bytes_done)
        self.bytes_total.labels(t).set(update.bytes_total)
        self.chunks.labels(t, "done").set(update.chunks_done)
        self.chunks.labels(t, "total").set(update.chunks_total)
        self.gbps.labels(t).set(update.gbps)
        self.seconds.labels(t).set(update.elapsed_s)
        self.in_flight_chunks.labels(t).set(getattr(update, "chunks_in_flight", 0))
        self.in_flight_bytes.labels(t).set(getattr(update, "bytes_in_flight", 0))
        self.window_chunks.labels(t).set(getattr(update, "window_chunks", 0))
        for path, gbps in (update.path_gbps or {}).items():
            self.path_gbps.labels(t, path).set(gbps)
        if update.resent > self._resent:
            self.retries.labels(t).inc(update.resent - self._resent)
            self._resent = update.resent

    def observe_result(self, result: Any) -> None:
        """The run's ``TransferResult`` (also of a partial run)."""
        t = self.transfer_id
        for outcome, value in (
            ("copied", result.objects),
            ("skipped", result.objects_skipped),
            ("failed", result.objects_failed),
            ("changed", result.objects_changed),
            ("deleted", result.objects_deleted),
        ):
            self.objects.labels(t, outcome).set(value)
        self.bytes.labels(t).set(result.bytes)
        self.gbps.labels(t).set(result.gbps)
        self.seconds.labels(t).set(result.seconds)
        self.chunks.labels(t, "resent").set(result.chunks_resent)
        self.chunks.labels(t, "resumed").set(result.chunks_resumed)
        for path in result.paths:
            name = " -> ".join(path.get("regions", []))
            if name and path.get("achieved_gbps") is not None:
                self.path_gbps.labels(t, name).set(path["achieved_gbps"])

    def watch(self, fleet: GatewayFleet | None) -> None:
        """Read these gateways' figures at each scrape (None: stop, the fleet is gone)."""
        self.gateways.fleet = fleet

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on ``addr:port`` (loopback unless told) in a daemon thread; the
        server (``.server_port``, ``.shutdown()``)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server

    def write_textfile(self, path: str) -> None:
        """The metrics in the text format, written atomically (node_exporter's collector)."""
        self.watch(None)  # the fleet is gone when a run ends: no gateway to ask
        _write_to_textfile(path, self.registry)
