"""The Provisioner protocol every backend (local, ssh, aws, netns, later azure/gcp) implements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from skyplane_ops.provision.fleet import GatewayFleet


class Provisioner(Protocol):
    """Turns a region -> VM count map into a running ``GatewayFleet``, and back to nothing.

    ``provision`` must clean up everything it created before it raises. ``deprovision`` is
    idempotent and must work from the fleet alone (a fresh process, another Airflow worker); a
    cloud backend returns what it deleted (the sweeper reports it). ``sweep`` finds leftovers
    by tag and deletes them; it returns what it deleted.
    """

    name: str

    def provision(
        self, vms: Mapping[str, int], *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet: ...

    def deprovision(self, fleet: GatewayFleet) -> list[str] | None: ...

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]: ...
