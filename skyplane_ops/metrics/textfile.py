"""Metrics of a detached run (the Airflow driver) for node_exporter's textfile collector.

A worker that sets ``SKYPLANE_OPS_METRICS_DIR`` gets ``<dir>/skyplane-<transfer id>.prom``
from each transfer its drivers run, rewritten atomically when the run ends (a retry of the
same transfer replaces it): no port per driver, nothing to scrape on short-lived processes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skyplane_ops.metrics.run import RunMetrics

ENV_DIR = "SKYPLANE_OPS_METRICS_DIR"


def textfile_path(transfer_id: str) -> Path | None:
    """Where this transfer's metrics go, or None when the worker asked for none."""
    folder = os.environ.get(ENV_DIR)
    return Path(folder) / f"skyplane-{transfer_id}.prom" if folder else None


def write_final_metrics(metrics: RunMetrics, path: Path, result: Any = None) -> None:
    """The run's last figures (its result's, when it has one) into ``path``."""
    if result is not None:
        metrics.observe_result(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_textfile(str(path))
