"""Emulated VM start-up for the backends that run here (``local``, ``netns``): ``boot_delay``.

A cloud gateway is billed and tracked from the moment it is asked for, but moves no byte until
its VM has booted (``t0``: about a minute). Here a gateway comes up in well under a second, so
the effect of ``t0`` (bytes moved on VM-less paths meanwhile, VMs not worth starting) could not
be seen without a cloud. With ``boot_delay`` the agent's process starts at once (so ``sweep``
and ``deprovision`` find and stop it by its command line, as any agent) but sleeps that long
before it becomes the agent: it opens no port and writes no ready file until then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from skyplane_ops.errors import ProvisionError

MAX_BOOT_DELAY_S = 3600.0

# Sleeps, then replaces itself (same pid, same command-line tail) with the agent's command.
_BOOT = "import os,sys,time;time.sleep(float(sys.argv[1]));os.execvp(sys.argv[2],sys.argv[2:])"


def check_boot_delay(value: Any, backend: str) -> float:
    """``value`` as seconds (0..1 h), or a one-line ``ProvisionError`` naming the option."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_BOOT_DELAY_S
    ):
        raise ProvisionError(
            f"bad options for backend {backend!r}: boot_delay must be 0..{MAX_BOOT_DELAY_S:.0f} "
            f"seconds, not {value!r}"
        )
    return float(value)


def delayed(argv: Sequence[str], delay: float, python: str) -> list[str]:
    """``argv`` started ``delay`` seconds late in the same process (``argv`` itself if 0)."""
    if delay <= 0:
        return list(argv)
    return [python, "-c", _BOOT, repr(float(delay)), *argv]
