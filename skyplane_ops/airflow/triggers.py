"""``SkyplaneTransferTrigger``: follows a detached transfer driver while the task is deferred.

The trigger reads the transfer's small ``status.json`` from its state store
(:mod:`skyplane_ops.transfer.state`) every ``poll_interval`` seconds, so the triggerer may run
on any host that reaches the store; it never touches the data. A driver is lost when its
heartbeat is older than ``lost_after`` seconds (or, on the driver's own host, when its pid is
gone). It enforces the task's deadline, because Airflow stops counting ``execution_timeout``
once a task is deferred: past the deadline it asks the driver to stop (through the store) and
fires a ``timeout`` event. Progress goes to the task log as human lines.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from skyplane_ops.airflow.driver import TERMINAL_STATES, is_alive, stop_driver
from skyplane_ops.api import ProgressLine, TransferState, heartbeat_age


class SkyplaneTransferTrigger(BaseTrigger):
    """Fires one event: ``success`` (with the result summary), ``error`` or ``timeout``."""

    def __init__(
        self,
        *,
        transfer_id: str,
        state_uri: str,
        state_options: dict[str, Any] | None = None,
        driver_pid: int | None = None,
        driver_host: str | None = None,
        deadline: float | None = None,
        poll_interval: float = 5.0,
        lost_after: float = 60.0,
        fleet: dict[str, Any] | None = None,
        skyplane_conn_id: str | None = None,
        label: str | None = None,
    ) -> None:
        super().__init__()
        self.transfer_id = transfer_id
        self.state_uri = state_uri
        self.state_options = dict(state_options or {})
        self.driver_pid = int(driver_pid) if driver_pid else None
        self.driver_host = driver_host
        self.deadline = deadline
        self.poll_interval = float(poll_interval)
        self.lost_after = float(lost_after)
        self.fleet = fleet
        self.skyplane_conn_id = skyplane_conn_id
        self.label = label

    def serialize(self) -> tuple[str, dict[str, Any]]:
        # Only secret-free values: trigger kwargs are stored in the metadata database
        # (state_options are store options such as an endpoint, never credentials).
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "transfer_id": self.transfer_id,
                "state_uri": self.state_uri,
                "state_options": self.state_options,
                "driver_pid": self.driver_pid,
                "driver_host": self.driver_host,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "lost_after": self.lost_after,
                "fleet": self.fleet,
                "skyplane_conn_id": self.skyplane_conn_id,
                "label": self.label,
            },
        )

    def _state(self) -> TransferState:
        return TransferState(self.state_uri, self.transfer_id, self.state_options)

    def _event(self, status: str, **payload: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "transfer_id": self.transfer_id, **payload})

    def _local_driver(self) -> int | None:
        """The driver's pid when it runs on this host (else None: only the heartbeat counts)."""
        if self.driver_pid and self.driver_host == socket.gethostname():
            return self.driver_pid
        return None

    def _lost(self, status: dict[str, Any] | None) -> str | None:
        pid = self._local_driver()
        if pid is not None and not is_alive(pid):
            return f"transfer driver pid {pid} exited without a final status"
        age = heartbeat_age(status)
        if age is not None and age > self.lost_after:
            return (
                f"no heartbeat from the transfer driver on {(status or {}).get('host')} for "
                f"{age:.0f} s (its worker is gone?); a retry resumes from the journal"
            )
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        state = self._state()
        line = ProgressLine(self.label or self.transfer_id)
        while True:
            status = await asyncio.to_thread(state.read_status)
            current = (status or {}).get("state")
            if current == "success":
                yield self._event("success", result=(status or {}).get("result") or {})
                return
            if current in TERMINAL_STATES:
                error = (status or {}).get("error") or {"type": current, "message": current}
                yield self._event("error", error=error)
                return
            lost = await asyncio.to_thread(self._lost, status)
            if lost is not None:
                # It may have written its final status just before exiting: read once more.
                status = await asyncio.to_thread(state.read_status)
                if (status or {}).get("state") in TERMINAL_STATES:
                    continue
                yield self._event("error", error={"type": "DriverLost", "message": lost})
                return
            if self.deadline is not None and time.time() >= self.deadline:
                await asyncio.to_thread(self._stop, "the task's timeout passed")
                yield self._event("timeout", progress=(status or {}).get("progress"))
                return
            text = line.update((status or {}).get("progress"))
            if text:
                self.log.info("%s", text)
            await asyncio.sleep(self.poll_interval)

    def _stop(self, reason: str) -> None:
        """Ask the driver to stop wherever it runs; stop it directly when it runs here."""
        self._state().request_cancel(reason)
        pid = self._local_driver()
        if pid is not None:
            stop_driver(pid)

    async def on_kill(self) -> None:
        """The user killed the deferred task: stop the driver, then the gateways."""
        await asyncio.to_thread(self._stop, "the task was killed")
        if self.fleet is not None and self.skyplane_conn_id is not None:
            await asyncio.to_thread(self._deprovision)

    def _deprovision(self) -> None:
        from skyplane_ops.airflow.hooks import SkyplaneHook
        from skyplane_ops.api import GatewayFleet

        assert self.fleet is not None and self.skyplane_conn_id is not None
        hook = SkyplaneHook(self.skyplane_conn_id)
        hook.deprovision(GatewayFleet.from_dict(self.fleet))
