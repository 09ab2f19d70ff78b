"""Abandoning a provisioning the copy outran: the ``cancel`` Event every backend takes.

A run of both (``sequence.joining.OverlayStart``) provisions the overlay on a thread while the
VM-less paths move bytes; when the copy is done first, it sets ``cancel``. A backend checks it
between its steps and while it waits (for a VM to boot, an agent to write its ready file, a
host key to appear) and then raises ``ProvisionCancelled``: its ordinary failure path deletes
what was created (by the pending record where there is one), so an abandoned provisioning
leaves nothing running or billed, as any failed one.
"""

from __future__ import annotations

import threading
import time

from skyplane_ops.errors import ProvisionError


class ProvisionCancelled(ProvisionError):
    """The provisioning was abandoned (its work was done first); what it created is gone."""


def check(cancel: threading.Event | None, what: str = "provisioning") -> None:
    """Raise ``ProvisionCancelled`` if ``cancel`` is set (called between steps)."""
    if cancel is not None and cancel.is_set():
        raise ProvisionCancelled(f"{what}: cancelled")


def pause(cancel: threading.Event | None, seconds: float, what: str = "provisioning") -> None:
    """Sleep ``seconds`` in a wait loop, waking at once (and raising) when ``cancel`` is set."""
    if cancel is None:
        time.sleep(seconds)
        return
    cancel.wait(seconds)
    check(cancel, what)
