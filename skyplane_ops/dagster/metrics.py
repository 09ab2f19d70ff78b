"""A Dagster step's Prometheus metrics, with the CLI's settings under the CLI's names.

``metrics_port`` (``--metrics-port``) serves ``/metrics`` from the step's process while its
copies run, on ``metrics_addr`` (``--metrics-addr``, loopback unless told); ``metrics_textfile``
(``--metrics-textfile``) gets the final figures for node_exporter's textfile collector when the
step ends, also after a failed copy (``{transfer_id}`` in it is replaced, so steps running at
once keep a file each). A port already taken is a warning, never a failed materialisation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skyplane_ops import api


class StepMetrics:
    """One step's metrics: ``wrap`` each copy's events, ``observe`` each copy's result."""

    def __init__(self, metrics: api.RunMetrics | None) -> None:
        self.metrics = metrics

    def wrap(self, events: api.RunEvents) -> api.RunEvents:
        return events if self.metrics is None else api.MetricsEvents(self.metrics, events)

    def observe(self, result: Any) -> None:
        if self.metrics is not None:
            self.metrics.observe_result(result)


@contextmanager
def step_metrics(skyplane: Any, context: Any, transfer_id: str) -> Iterator[StepMetrics]:
    """The step's metrics as ``skyplane`` (a ``SkyplaneResource``) asks: served while the
    step runs, written to the textfile when it ends; nothing when neither is set."""
    port, textfile = skyplane.metrics_port, skyplane.metrics_textfile
    if port is None and not textfile:
        yield StepMetrics(None)
        return
    metrics = api.RunMetrics(transfer_id)
    server = None
    if port is not None:
        try:
            server = metrics.serve(port, skyplane.metrics_addr)
        except OSError as exc:
            context.log.warning(f"metrics: cannot serve on port {port}: {exc}")
        else:
            host, bound = server.server_address[:2]
            context.log.info(f"metrics on http://{host}:{bound}/metrics")
    try:
        yield StepMetrics(metrics)
    finally:
        if server is not None:
            server.shutdown()
        if textfile:
            path = Path(textfile.replace("{transfer_id}", transfer_id))
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                metrics.write_textfile(str(path))
            except OSError as exc:
                context.log.warning(f"metrics: cannot write {path}: {exc}")
