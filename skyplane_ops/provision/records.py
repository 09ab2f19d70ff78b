"""Fleet records: every provisioned fleet is written to ``$SKYPLANE_OPS_HOME/fleets``.

``skyplane-ops deprovision --transfer-id`` reads them back, so a fleet whose process died
(Ctrl-C, a killed Airflow worker) can still be torn down from another process.
"""

from __future__ import annotations

from pathlib import Path

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
