"""Prometheus metrics of a transfer (``prometheus-client``), for the monitoring users have.

``RunMetrics`` keeps one run's metrics in its own registry: bytes, objects by outcome, chunks
by outcome, per-path Gbit/s, retries (re-sent chunks), and each gateway's byte-budget use,
threads, descriptors and refused connections, read at scrape time through the gateways'
signed control API (``gateways``): a gateway never serves metrics to anyone but its control
plane. ``MetricsEvents`` feeds it from the run sequence; ``serve`` exposes it over HTTP and
``write_textfile`` leaves it for node_exporter's textfile collector (a batch job's metrics;
``textfile`` names the file of a detached run, the Airflow driver's, from the environment).
"""

from skyplane_ops.metrics.events import MetricsEvents
from skyplane_ops.metrics.run import RunMetrics
from skyplane_ops.metrics.textfile import textfile_path, write_final_metrics

__all__ = ["MetricsEvents", "RunMetrics", "textfile_path", "write_final_metrics"]
