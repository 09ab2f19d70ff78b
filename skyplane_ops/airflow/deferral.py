"""Deferring a transfer: start the detached driver, hand off to the trigger, read its event.

Shared by ``SkyplaneTransferOperator`` and ``SkyplaneCopyOperator``. Everything the trigger
and a retry need is in the transfer's state store (``SkyplaneHook.transfer_state``), so the
triggerer and the retry may run on other hosts than the worker that started the driver.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk.exceptions import AirflowException

from skyplane_ops.airflow import driver
from skyplane_ops.airflow.triggers import SkyplaneTransferTrigger
from skyplane_ops.api import GatewayFleet, TransferPlan, TransferRequest, heartbeat_age

# A driver whose heartbeat is older than this is lost (its worker died).
LOST_AFTER_S = 60.0


class SkyplaneTransferFailed(AirflowException):
    """The transfer failed (the core's error type and message are in the text)."""


class SkyplaneTransferTimeout(AirflowException):
    """The transfer did not finish within the operator's own ``timeout``."""


@dataclass(frozen=True)
class TransferJob:
    """One transfer's request and the store credentials its process needs (exported only
    around the run, handed to a driver only through its pipe): the same here or there."""

    request: TransferRequest
    env: Mapping[str, str]

    @property
    def transfer_id(self) -> str:
        return str(self.request.transfer_id)

    @property
    def journal(self) -> str:
        return str(self.request.journal_dir)


class TransferDeferral:
    """Mixin for operators that run their transfer through a driver and a trigger."""

    poll_interval: float
    timeout: timedelta | None
    lost_after: float = LOST_AFTER_S

    def _deadline(self) -> float | None:
        limit = self.timeout or getattr(self, "execution_timeout", None)
        return time.time() + limit.total_seconds() if limit else None

    def defer_transfer(
        self,
        context: Any,
        *,
        plan: TransferPlan,
        plan_uri: str | None,
        fleet: GatewayFleet,
        job: TransferJob,
        teardown: bool = False,
        warm: Mapping[str, Any] | None = None,
    ) -> None:
        """Start (or re-attach to) the driver, then defer to the trigger; never returns."""
        transfer_id, journal = job.transfer_id, job.journal
        hook: Any = getattr(self, "hook")  # noqa: B009 - provided by the operator
        log: Any = getattr(self, "log")  # noqa: B009
        settings = hook.settings
        state = hook.transfer_state(transfer_id)
        previous = state.read_status() or {}
        if self._driver_still_runs(state, previous):
            # A retry after the worker died while its driver still works (on whatever host):
            # follow it instead of starting a second driver on the same journal.
            log.info(
                "re-attaching to the running driver of %s on %s", transfer_id, previous.get("host")
            )
            pid, host = previous.get("pid"), previous.get("host")
        else:
            handle = driver.start_driver(
                request=job.request,
                plan=plan.to_dict(),
                fleet=fleet.to_dict(),
                env=job.env,
                work_dir=settings.work_dir,
                state_uri=settings.state_uri,
                state_options=settings.state_store_options,
                teardown=(
                    {"backend": fleet.backend, "backend_options": hook.backend_options()}
                    if teardown
                    else None
                ),
                warm=warm,
            )
            log.info(
                "started transfer driver pid %d on %s for %s (state in %s)",
                handle.pid,
                handle.host,
                transfer_id,
                state.uri,
            )
            pid, host = handle.pid, handle.host
        setattr(self, "_driver", (pid, host, transfer_id))  # noqa: B010 - for on_kill
        deadline = self._deadline()
        getattr(self, "defer")(  # noqa: B009
            trigger=SkyplaneTransferTrigger(
                transfer_id=transfer_id,
                state_uri=settings.state_uri,
                state_options=settings.state_store_options,
                driver_pid=pid,
                driver_host=host,
                deadline=deadline,
                poll_interval=self.poll_interval,
                lost_after=self.lost_after,
                fleet=fleet.to_dict(),
                skyplane_conn_id=getattr(self, "skyplane_conn_id", None),
                label=f"transfer {transfer_id}",
            ),
            method_name="execute_complete",
            # A backstop only: the trigger itself fires a timeout event (and stops the
            # driver) at the deadline; Airflow's own deferral timeout would not stop it.
            timeout=timedelta(seconds=deadline - time.time() + 120) if deadline else None,
            kwargs={"plan_uri": plan_uri, "journal": journal, "fleet": fleet.to_dict()},
        )

    def _driver_still_runs(self, state: Any, previous: Mapping[str, Any]) -> bool:
        """Whether the driver that wrote ``previous`` still works: a retry follows it then.

        A fresh heartbeat is not enough: a retry often starts seconds after its worker died,
        with the dead driver's last heartbeat still young, and following that driver would
        only fail again as "lost". On the driver's own host its pid says; elsewhere the
        heartbeat must move within a few beats."""
        age = heartbeat_age(previous)
        if previous.get("state") not in ("starting", "running") or age is None:
            return False
        if age >= self.lost_after:
            return False
        pid, host = previous.get("pid"), previous.get("host")
        if pid and host == socket.gethostname():
            return driver.is_alive(int(pid))
        stamp = previous.get("updated_at")
        deadline = time.monotonic() + 3 * driver.HEARTBEAT_S + 1.0
        while time.monotonic() < deadline:
            time.sleep(driver.HEARTBEAT_S / 4)
            now = state.read_status() or {}
            if now.get("updated_at") != stamp:
                return now.get("state") in ("starting", "running")
        return False

    @staticmethod
    def event_result(event: Mapping[str, Any]) -> dict[str, Any]:
        """The result summary of a ``success`` event; raises for ``error`` and ``timeout``."""
        status = event.get("status")
        transfer_id = str(event.get("transfer_id"))
        if status == "success":
            return dict(event.get("result") or {})
        if status == "timeout":
            raise SkyplaneTransferTimeout(
                f"transfer {transfer_id} exceeded its timeout; the driver was stopped and "
                f"a retry resumes from the journal (progress: {event.get('progress')})"
            )
        error = event.get("error") or {}
        raise SkyplaneTransferFailed(
            f"transfer {transfer_id} failed: {error.get('type')}: {error.get('message')}"
        )

    def stop_deferred_driver(self) -> None:
        """``on_kill``: ask the driver to stop through the state store (and directly here)."""
        found = getattr(self, "_driver", None)
        if not found:
            return
        pid, host, transfer_id = found
        getattr(self, "hook").transfer_state(transfer_id).request_cancel("the task was killed")  # noqa: B009
        if pid and host == socket.gethostname():
            driver.stop_driver(int(pid))
