"""``MetricsEvents``: the run's events into ``RunMetrics``, then on to the face's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from skyplane_ops.metrics.run import RunMetrics
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.sequence.events import RunEvents


class MetricsEvents(RunEvents):
    """Feeds ``metrics`` and passes every event to ``inner`` (the face's display)."""

    wants_progress = True

    def __init__(self, metrics: RunMetrics, inner: RunEvents | None = None) -> None:
        self.metrics = metrics
        self.inner = inner or RunEvents()

    def locked(self, request: Any) -> None:
        self.inner.locked(request)

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        with self.inner.phase(name, detail) as note:
            yield note
        if name == "teardown":
            self.metrics.watch(None)

    def listing(self, src_objects: int, dst_objects: int) -> None:
        self.inner.listing(src_objects, dst_objects)

    def progress(self, update: Any) -> None:
        self.metrics.observe_progress(update)
        if self.inner.wants_progress:
            self.inner.progress(update)

    def planned(self, plan: TransferPlan) -> None:
        self.inner.planned(plan)

    def provisioned(self, fleet: GatewayFleet) -> None:
        self.metrics.watch(fleet)
        self.inner.provisioned(fleet)
