"""Default provisioning time ``t0`` per backend: part of every plan's completion time and VM bill.

Gateways of one plan start in parallel, so a plan pays ``t0`` once in completion time, and
every VM is billed for ``t0`` plus the transfer. The figures are medians measured here:

- ``ssh``: 2.2 s to bootstrap a 3-host fleet over real sshd (connect, verify the host key,
  upload the agent, start it, health check): ``benchmarks/provision.py``'s ``ssh provision``
  row, 2 runs.
- ``netns``: 2.8 s to build a 5-region testbed and start its agents (README, profiler table;
  1.5-5.8 s for 3-5 regions).

``t0`` is one figure per plan, not per VM: the backends start gateways in parallel. That is
an approximation: on this 2-core machine under load, ssh bootstrap took 3.1-3.8 s for one
host, 3.6-3.9 s for three and 6.1-6.6 s for six (uploads compete for CPU), so pass a larger
``provisioning_seconds`` for big own-host fleets.

- ``local``: 0.5 s for an agent process on this host to write its ready file and answer its
  health check (``benchmarks/everyday.py`` prints it).

``local`` and ``netns`` take a ``boot_delay`` backend option (``provision.boot_delay``) that
emulates a VM's start-up: their ``t0`` is that delay plus the figure above
(``backend_provisioning_seconds``), so ``plan`` and ``cp`` on those backends plan for the
start-up their gateways really take.

Everything else (``aws`` and the other clouds) uses ``CLOUD_FALLBACK_SECONDS`` = 60 s, a typical
cloud VM start-up to a running agent. Callers with their own measurements pass them as
``measured``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MEASURED_PROVISIONING_SECONDS: Mapping[str, float] = {"ssh": 2.2, "netns": 2.8, "local": 0.5}
BOOT_DELAY_BACKENDS = ("local", "netns")
CLOUD_FALLBACK_SECONDS = 60.0


def default_provisioning_seconds(
    backend: str | None, measured: Mapping[str, float] | None = None
) -> float:
    """``t0`` for ``backend`` (None: cloud VMs): ``measured`` first, then the table above."""
    table = {**MEASURED_PROVISIONING_SECONDS, **(measured or {})}
    if backend is not None and backend in table:
        return float(table[backend])
    return CLOUD_FALLBACK_SECONDS


def backend_provisioning_seconds(
    backend: str | None,
    backend_options: Mapping[str, Any] | None = None,
    measured: Mapping[str, float] | None = None,
) -> float:
    """``t0`` for ``backend`` as configured: its default plus its emulated ``boot_delay``."""
    t0 = default_provisioning_seconds(backend, measured)
    delay = (backend_options or {}).get("boot_delay") if backend in BOOT_DELAY_BACKENDS else None
    if isinstance(delay, int | float) and not isinstance(delay, bool) and delay > 0:
        t0 += float(delay)
    return t0
