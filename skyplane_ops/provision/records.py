"""Fleet records: every provisioned fleet is written to ``$SKYPLANE_OPS_HOME/fleets``.

``skyplane-ops deprovision --transfer-id`` reads them back, so a fleet whose process died
(Ctrl-C, a killed Airflow worker) can still be torn down from another process.

Cloud backends write a *pending* record (``PendingRecord``) before their first create call and
rewrite it before every further one, naming the resource about to be created; so a control
plane killed at any point leaves a record that ``deprovision`` and the sweeper can act on. The
final record replaces it; a provisioning that cleaned up after itself removes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import check_transfer_id, private_dir, write_private


def _path(transfer_id: str, backend: str) -> Path:
    return private_dir("fleets") / f"{check_transfer_id(transfer_id)}.{backend}.json"


def save_fleet(fleet: GatewayFleet) -> Path:
    """Persist a fleet (0600: it names hosts and key paths, never secrets)."""
    return write_private(_path(fleet.transfer_id, fleet.backend), fleet.to_json().encode())


def forget_fleet(fleet: GatewayFleet) -> None:
    _path(fleet.transfer_id, fleet.backend).unlink(missing_ok=True)


def load_fleets(transfer_id: str | None = None, backend: str | None = None) -> list[GatewayFleet]:
    """Recorded fleets, optionally only one transfer's or one backend's."""
    fleets = []
    for path in sorted(private_dir("fleets").glob("*.json")):
        fleet = GatewayFleet.from_json(path.read_text())
        if transfer_id is not None and fleet.transfer_id != transfer_id:
            continue
        if backend is not None and fleet.backend != backend:
            continue
        fleets.append(fleet)
    return fleets


class PendingRecord:
    """The record of a fleet being provisioned: ``snapshot()`` says what may exist (every
    resource named *before* its create call); ``save()`` writes it, thread-safely."""

    def __init__(
        self,
        *,
        transfer_id: str,
        backend: str,
        secret_ref: str,
        tags: dict[str, str],
        created_at: str,
        snapshot: Callable[[], dict[str, Any]],
    ) -> None:
        self._lock = threading.Lock()
        self._snapshot = snapshot
        self.fleet = GatewayFleet(
            transfer_id=transfer_id,
            backend=backend,
            gateways=[],
            secret_ref=secret_ref,
            tags=dict(tags),
            created_at=created_at,
        )

    def save(self) -> None:
        with self._lock:
            for attempt in range(10):  # another region's thread may be adding a name right now
                try:
                    snapshot = self._snapshot()
                    break
                except RuntimeError:  # "changed size during iteration"
                    if attempt == 9:
                        raise
            self.fleet.resources = {**snapshot, "pending": True}
            save_fleet(self.fleet)

    def forget(self) -> None:
        with self._lock:
            forget_fleet(self.fleet)
