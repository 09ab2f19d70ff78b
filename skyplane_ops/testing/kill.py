"""Killing a run mid-way, as the data-safety tests do: SIGKILL a process the moment a condition
holds (its first bytes landed, say), without a fixed sleep."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from typing import Any


def kill_when(proc: subprocess.Popen[Any], ready: Callable[[], bool]) -> bool:
    """SIGKILL ``proc`` as soon as ``ready()`` holds; wait for it to end either way. True when
    the kill landed (False: it finished first, e.g. on a fast, idle machine)."""
    while proc.poll() is None:
        if ready():
            proc.send_signal(signal.SIGKILL)
            break
        try:
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            pass
    proc.communicate(timeout=120)
    return proc.returncode == -signal.SIGKILL
