"""Gateway leases: the control plane keeps its gateways alive; gateways it forgets stop.

The rule, for every backend:

1. Provisioning starts each agent with a long *initial* lease (``bundle.INITIAL_LEASE_S``,
   30 min by default; backends accept ``lease_s``). It covers the gap between a pipeline's
   provision step and its transfer step (separate Airflow tasks or Dagster ops).
2. Whoever drives a transfer holds ``keep_alive(fleet, secret)`` around it: every
   ``lease_s / 4`` seconds it renews every gateway's lease to ``lease_s`` (60 s, or the
   fleet's ``resources["lease_s"]`` when its provisioner was given one). If that
   process dies (SIGKILL, a lost worker), the gateways stop by themselves at most ``lease_s``
   plus one watchdog tick later.
3. On a clean exit the lease is set to ``linger_s`` (default 10 min) so a following step
   (deprovision, an Airflow retry) still finds the gateways; a CLI that deprovisions right
   away passes a short linger.

The agents' idle timeout stays as a fallback, and cloud VMs keep the provider-side dead-man
(aws: instance-initiated shutdown terminates).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.provision.fleet import GatewayFleet

log = logging.getLogger(__name__)

LEASE_S = 60.0
LINGER_S = 600.0


class LeaseKeeper:
    """Renews the lease of every gateway of a fleet from a background thread."""

    def __init__(
        self,
        fleet: GatewayFleet,
        secret: bytes,
        *,
        lease_s: float | None = None,
        renew_every: float | None = None,
        linger_s: float = LINGER_S,
    ) -> None:
        if lease_s is None:
            lease_s = float(fleet.resources.get("lease_s") or LEASE_S)
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, not {lease_s}")
        self.lease_s = lease_s
        self.renew_every = renew_every or max(0.5, lease_s / 4)
        self.linger_s = linger_s
        self.renewals = 0
        self._clients = [
            GatewayClient(
                g.host,
                g.control_port,
                secret,
                timeout=min(10.0, max(1.0, self.renew_every / 2)),
                gateway_id=g.gateway_id,
            )
            for g in fleet.gateways
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def renew(self, seconds: float) -> None:
        """One renewal round; an unreachable gateway is logged, not fatal (it may come back,
        and a dead one is the transfer's to report)."""

        def one(client: GatewayClient) -> None:
            try:
                client.renew_lease(seconds)
            except GatewayError as exc:
                log.debug("lease renewal for %s failed: %s", client.gateway_id, exc)

        if self._clients:  # in parallel: a hung gateway must not delay the others
            with ThreadPoolExecutor(max_workers=min(16, len(self._clients))) as pool:
                list(pool.map(one, self._clients))
        self.renewals += 1

    def _run(self) -> None:
        while not self._stop.wait(self.renew_every):
            self.renew(self.lease_s)

    def start(self) -> None:
        self.renew(self.lease_s)
        self._thread.start()

    def stop(self, wait_s: float = 3.0) -> None:
        """Stop renewing and leave the linger lease, waiting at most ``wait_s`` for it (a hung
        gateway must not hold the caller; an unrenewed one stops by itself anyway)."""
        self._stop.set()
        if self.linger_s > 0:
            final = threading.Thread(
                target=self.renew, args=(self.linger_s,), name="lease-linger", daemon=True
            )
            final.start()
            final.join(timeout=wait_s)


@contextmanager
def keep_alive(
    fleet: GatewayFleet,
    secret: bytes,
    *,
    lease_s: float | None = None,
    linger_s: float = LINGER_S,
) -> Iterator[LeaseKeeper]:
    """Hold the fleet's leases while the body runs (see the module docstring for the rule)."""
    keeper = LeaseKeeper(fleet, secret, lease_s=lease_s, linger_s=linger_s)
    keeper.start()
    try:
        yield keeper
    finally:
        keeper.stop()
