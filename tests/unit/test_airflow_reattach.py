"""When a retry follows the driver of an earlier try, and when it starts its own.

A retry often starts seconds after its worker died, with the dead driver's last heartbeat
still young: following it would only fail again as "driver lost" (what the CeleryExecutor
e2e test found). On the driver's own host its pid decides; elsewhere the heartbeat must move.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from skyplane_ops.airflow import driver
from skyplane_ops.airflow.deferral import TransferDeferral


class _Op(TransferDeferral):
    poll_interval = 1.0
    timeout = None


class _State:
    """A state store whose status is whatever ``beats`` says at each read."""

    def __init__(self, beats: list[dict[str, Any]]) -> None:
        self.beats = beats
        self.reads = 0

    def read_status(self) -> dict[str, Any]:
        self.reads += 1
        return self.beats[min(self.reads - 1, len(self.beats) - 1)]


def _running(host: str, pid: int | None, age: float = 1.0) -> dict[str, Any]:
    return {"state": "running", "host": host, "pid": pid, "updated_at": time.time() - age}


@pytest.fixture(autouse=True)
def _quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "HEARTBEAT_S", 0.1)


def test_a_dead_driver_on_this_host_is_not_followed() -> None:
    # This test process is alive but is no driver: its command line lacks the driver module.
    previous = _running(socket.gethostname(), os.getpid())
    assert _Op()._driver_still_runs(_State([previous]), previous) is False


def test_a_live_driver_on_this_host_is_followed() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", driver.MODULE],
        stdin=subprocess.DEVNULL,
    )
    try:
        # Until the child has exec'd, its /proc cmdline is briefly empty: wait for it.
        deadline = time.monotonic() + 30
        while not driver.is_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        previous = _running(socket.gethostname(), proc.pid)
        assert _Op()._driver_still_runs(_State([previous]), previous) is True
    finally:
        proc.kill()
        proc.wait()


def test_elsewhere_a_still_heartbeat_means_dead_and_a_moving_one_alive() -> None:
    previous = _running("another-host", 12345)
    still = _State([previous])
    assert _Op()._driver_still_runs(still, previous) is False
    assert still.reads > 1  # it watched for a few beats before deciding
    moving = _State([previous, {**previous, "updated_at": previous["updated_at"] + 2}])
    assert _Op()._driver_still_runs(moving, previous) is True


@pytest.mark.parametrize(
    "status",
    [
        {"state": "success", "host": "h", "pid": 1, "updated_at": time.time()},
        _running("another-host", 1, age=120.0),  # older than lost_after
        {"state": "running", "host": "h", "pid": 1},  # no heartbeat at all
    ],
)
def test_a_finished_stale_or_unknown_driver_is_not_followed(status: dict[str, Any]) -> None:
    assert _Op()._driver_still_runs(_State([status]), status) is False
