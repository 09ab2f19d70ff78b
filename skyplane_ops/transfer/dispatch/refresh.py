"""Fresh store credentials for running jobs, before the old ones expire.

While a job runs, a thread of the dispatcher mints the credentials of each end again half-way
through their life (``Minted.refresh_at``) and sends them, sealed for that job on that gateway
with a higher serial, to every started gateway that opens that end
(``POST /v1/jobs/ID/credentials``); the gateway's stores take them in place. A failed mint
is tried again soon (the old set still works until it expires); a gateway that could not be
reached is sent the newest set at the next turn. Nothing is written anywhere.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Protocol

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.provision.fleet import Gateway
from skyplane_ops.transfer.dispatch.minting import Mint, Minted

log = logging.getLogger(__name__)

# A failed mint is tried again after this long at most (sooner as the old set nears expiry);
# an undelivered set is sent again after RESEND_S.
RETRY_S = 30.0
RESEND_S = 1.0


class Refreshable(Protocol):
    """What the refresher needs of the dispatcher (``JobSpecs``)."""

    job_id: str
    _started: list[str]
    _by_id: dict[str, Gateway]

    def minted_ends(self) -> dict[str, tuple[Minted, Mint]]: ...

    def replace_credentials(self, side: str, minted: Minted) -> None: ...

    def credentials_for(self, gateway: Gateway) -> tuple[int, str | None]: ...


class CredentialRefresher:
    """``with CredentialRefresher(specs, clients):`` keeps the job's credentials fresh."""

    def __init__(self, specs: Refreshable, clients: Mapping[str, GatewayClient]) -> None:
        self._specs = specs
        self._clients = clients
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._delivered: dict[str, int] = {}
        self.minted = 0  # fresh sets minted (for tests)
        self.sent = 0  # fresh sets a gateway took

    def __enter__(self) -> CredentialRefresher:
        if self._specs.minted_ends():
            self._thread = threading.Thread(
                target=self._loop, name="credential-refresh", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop refreshing (idempotent): before the jobs are stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        retry_at: dict[str, float] = {}
        while not self._stop.is_set():
            now = time.time()
            wake = now + 60.0
            for side, (minted, mint) in self._specs.minted_ends().items():
                due = retry_at.get(side, minted.refresh_at)
                if now >= due:
                    try:
                        fresh = mint()
                    except TransferError as exc:
                        left = minted.expires_at - now
                        retry_at[side] = now + min(RETRY_S, max(0.5, left / 4))
                        log.warning("refreshing the %s credentials failed: %s", side, exc)
                    else:
                        retry_at.pop(side, None)
                        self._specs.replace_credentials(side, fresh)
                        self.minted += 1
                        due = fresh.refresh_at
                    due = retry_at.get(side, due)
                wake = min(wake, due)
            if not self._deliver():
                wake = min(wake, time.time() + RESEND_S)
            self._stop.wait(max(0.05, wake - time.time()))

    def _deliver(self) -> bool:
        """Send the newest set to every started gateway that lacks it; False if one could
        not take it (it is tried again soon)."""
        ok = True
        for gid in list(self._specs._started):
            gateway = self._specs._by_id.get(gid)
            if gateway is None or self._stop.is_set():
                continue
            serial, sealed = self._specs.credentials_for(gateway)
            if sealed is None or self._delivered.get(gid, 0) >= serial:
                continue
            try:
                self._clients[gid].update_credentials(self._specs.job_id, sealed)
            except GatewayError as exc:
                ok = False
                log.warning("gateway %s did not take fresh credentials: %s", gid, exc)
                continue
            self._delivered[gid] = serial
            self.sent += 1
        return ok
