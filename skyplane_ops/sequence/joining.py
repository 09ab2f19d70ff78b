"""The overlay's gateways, provisioned on a thread while the worker's path moves bytes.

A schedule that runs both (``sequence.worker.both_plan``) starts the job on the worker's
in-process gateway at once; ``OverlayStart`` provisions the overlay's gateways meanwhile and
hands them to the dispatcher when they are up (``arrived``: the dispatcher then checks their
health, starts the job on them and lets their paths join, see ``transfer.dispatch.join``).

When the copy ends first, ``cancel`` abandons the provisioning: every backend stops waiting
and removes what it created (``provision.cancel``: local, netns, ssh, aws, gcp, azure). Whatever
came up is then the caller's to deprovision (``cancel`` returns it), so nothing is left
running either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.sequence.fleet import provision

log = logging.getLogger(__name__)


class OverlayStart:
    """``provision(plan, ...)`` on a thread; ``arrived`` once it is up, ``cancel`` at the end."""

    def __init__(
        self,
        plan: TransferPlan,
        *,
        backend: str,
        backend_options: Mapping[str, Any],
        transfer_id: str,
        tags: Mapping[str, str],
        max_per_region: int | None,
    ) -> None:
        self._kwargs: dict[str, Any] = {
            "backend": backend,
            "backend_options": backend_options,
            "transfer_id": transfer_id,
            "tags": tags,
            "max_per_region": max_per_region,
        }
        self._plan = plan
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._fleet: GatewayFleet | None = None
        self._handed = False
        self.started = time.monotonic()
        self.up_s: float | None = None  # seconds from the start until the gateways were up
        self.error: str | None = None
        self._thread = threading.Thread(target=self._provision, name="overlay-start", daemon=True)
        self._thread.start()

    def _provision(self) -> None:
        try:
            fleet = provision(self._plan, cancel=self._cancel, **self._kwargs)
        except BaseException as exc:  # the worker's path carries on; the report says why
            if not self._cancel.is_set():
                log.warning("the overlay's gateways did not come up: %s", exc)
                self.error = str(exc)
            return
        with self._lock:
            self._fleet = fleet
            self.up_s = round(time.monotonic() - self.started, 3)

    def arrived(self) -> GatewayFleet | None:
        """The overlay's fleet, once, when it is up (``transfer.dispatch.join.Arrivals``)."""
        with self._lock:
            if self._fleet is None or self._handed or self._cancel.is_set():
                return None
            self._handed = True
            return self._fleet

    def cancel(self) -> GatewayFleet | None:
        """Abandon the provisioning and wait for its thread; the fleet that came up (handed
        over or not), for the caller to deprovision, or None."""
        self._cancel.set()
        self._thread.join()
        with self._lock:
            fleet, self._fleet = self._fleet, None
        return fleet

    def summary(self, joined: bool) -> dict[str, Any]:
        """What became of the overlay, for the run's result."""
        if joined:
            state = "joined"
        elif self.error is not None:
            state = "failed"
        elif self.up_s is None:
            state = "cancelled"  # the copy was done before the gateways were up
        else:
            state = "unused"  # up, but it carried no byte (the copy was done first)
        return {"overlay": state, "overlay_up_s": self.up_s, "overlay_error": self.error}
