"""What provisioning produces and what deprovisioning consumes.

A ``GatewayFleet`` is small and JSON-serialisable (it travels through Airflow XCom and
Dagster metadata), holds no secret (only a reference to where the per-transfer secret is kept)
and is enough on its own to find and delete every resource that was created.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Gateway:
    """One gateway agent: where it runs and how to reach its control API and data listener."""

    gateway_id: str
    region: str
    host: str
    control_port: int
    data_port: int
    # Backend-specific ids needed to clean up (pid, instance id, namespace, remote dir, ...).
    resources: dict[str, Any] = field(default_factory=dict)


def data_host(gateway: Gateway, peer_region: str) -> str:
    """The address a gateway in ``peer_region`` dials to send data to ``gateway``: a host on
    several networks lists one per peer region (or ``*``) in ``resources["data_addresses"]``."""
    addresses = gateway.resources.get("data_addresses") or {}
    return str(addresses.get(peer_region) or addresses.get("*") or gateway.host)


@dataclass
class GatewayFleet:
    """The gateways of one transfer, with the tags every created resource carries."""

    transfer_id: str
    backend: str
    gateways: list[Gateway]
    # Where the per-transfer secret is kept (e.g. a 0600 file path); never the secret itself.
    secret_ref: str
    tags: dict[str, str] = field(default_factory=dict)
    created_at: str = ""
    # Backend-level resources shared by gateways (security groups, key pairs, links, ...).
    resources: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        transfer_id: str,
        backend: str,
        gateways: list[Gateway],
        secret_ref: str,
        tags: Mapping[str, str] | None = None,
        resources: dict[str, Any] | None = None,
    ) -> GatewayFleet:
        """A fleet just provisioned: tagged with its transfer id, stamped with the time now."""
        return cls(
            transfer_id=transfer_id,
            backend=backend,
            gateways=gateways,
            secret_ref=secret_ref,
            tags={"skyplane-ops:transfer-id": transfer_id, **(tags or {})},
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            resources=resources or {},
        )

    def in_region(self, region: str) -> list[Gateway]:
        return [g for g in self.gateways if g.region == region]

    @property
    def regions(self) -> list[str]:
        return sorted({g.region for g in self.gateways})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GatewayFleet:
        data = dict(data)
        data["gateways"] = [Gateway(**g) for g in data["gateways"]]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> GatewayFleet:
        return cls.from_dict(json.loads(text))
