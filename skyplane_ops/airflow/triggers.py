"""``SkyplaneTransferTrigger``: follows a detached transfer driver while the task is deferred.

The trigger reads the driver's small status file (a few hundred bytes) every
``poll_interval`` seconds; it never touches the data. It enforces the task's own deadline,
because Airflow stops counting ``execution_timeout`` once a task is deferred: past the
deadline it stops the driver and fires a ``timeout`` event. When a user kills the deferred
task it stops the driver and deletes the fleet (``on_kill``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from skyplane_ops.airflow.driver import TERMINAL_STATES, is_alive, read_status, stop_driver


class SkyplaneTransferTrigger(BaseTrigger):
    """Fires one event: ``success`` (with the result summary), ``error`` or ``timeout``."""

    def __init__(
        self,
        *,
        transfer_id: str,
        status_path: str,
        driver_pid: int,
        deadline: float | None = None,
        poll_interval: float = 5.0,
        fleet: dict[str, Any] | None = None,
        skyplane_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.transfer_id = transfer_id
        self.status_path = status_path
        self.driver_pid = int(driver_pid)
        self.deadline = deadline
        self.poll_interval = float(poll_interval)
        self.fleet = fleet
        self.skyplane_conn_id = skyplane_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Only secret-free values: trigger kwargs are stored in the metadata database.
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "transfer_id": self.transfer_id,
                "status_path": self.status_path,
                "driver_pid": self.driver_pid,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "fleet": self.fleet,
                "skyplane_conn_id": self.skyplane_conn_id,
            },
        )

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "transfer_id": self.transfer_id, **payload})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last_progress: dict[str, Any] | None = None
        while True:
            status = await asyncio.to_thread(read_status, self.status_path)
            state = (status or {}).get("state")
            if state == "success":
                yield self._event("success", result=(status or {}).get("result") or {})
                return
            if state in TERMINAL_STATES:
                error = (status or {}).get("error") or {"type": state, "message": state}
                yield self._event("error", error=error)
                return
            if not await asyncio.to_thread(is_alive, self.driver_pid):
                # It may have written its final status just before exiting: read once more.
                status = await asyncio.to_thread(read_status, self.status_path)
                if (status or {}).get("state") in TERMINAL_STATES:
                    continue
                yield self._event(
                    "error",
                    error={
                        "type": "DriverLost",
                        "message": f"transfer driver pid {self.driver_pid} exited without a "
                        "final status (see driver.log next to the status file)",
                    },
                )
                return
            if self.deadline is not None and time.time() >= self.deadline:
                await asyncio.to_thread(stop_driver, self.driver_pid)
                yield self._event("timeout", progress=(status or {}).get("progress"))
                return
            progress = (status or {}).get("progress")
            if progress and progress != last_progress:
                self.log.info("transfer %s progress: %s", self.transfer_id, progress)
                last_progress = progress
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the driver, then the gateways."""
        await asyncio.to_thread(stop_driver, self.driver_pid)
        if self.fleet is not None and self.skyplane_conn_id is not None:
            await asyncio.to_thread(self._deprovision)

    def _deprovision(self) -> None:
        from skyplane_ops.airflow.hooks import SkyplaneHook
        from skyplane_ops.provision.fleet import GatewayFleet

        assert self.fleet is not None and self.skyplane_conn_id is not None
        hook = SkyplaneHook(self.skyplane_conn_id)
        hook.deprovision(GatewayFleet.from_dict(self.fleet))
