"""The ssh backend's inventory: the user's hosts per region, and what each region costs.

JSON or TOML. Each region maps to a list of hosts (the short form) or to a table with the
region's attributes and its ``hosts``::

    [regions."site:lab-a"]
    provider = "own"            # default "own" for a name outside the cloud catalog
    egress_usd_per_gb = 0.0     # what sending a GB out of this region costs (default 0)
    vm_usd_per_hour = 0.0       # what one host costs per hour while used (default 0)
    egress_cap_gbps = 10        # most one host sends / receives (default: no cap)
    ingress_cap_gbps = 10
    [[regions."site:lab-a".hosts]]
    address = "lab-a.example.org"          # where SSH connects
    control_address = "10.0.0.5"           # where the control plane reaches the agent
    data_address = "10.1.0.5"              # where peers send data (default: control address)
    peer_addresses = {"site:lab-b" = "192.168.7.5"}   # a peer region with its own network

Region names outside the catalog (``site:lab-a``) are the user's own; a catalog id
(``aws:us-east-1``) keeps the catalog's prices unless the table overrides them. With this
backend the inventory is the planning universe: only its regions relay, and a plan asks for
at most as many VMs per region as the region has hosts (``skyplane_ops.profiler.universe``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.documents import read_document

_REGION_FIELDS = (
    "provider",
    "egress_usd_per_gb",
    "vm_usd_per_hour",
    "egress_cap_gbps",
    "ingress_cap_gbps",
)


@dataclass(frozen=True)
class RegionAttrs:
    """What the planner needs about one inventory region (None: the catalog's or the default)."""

    id: str
    hosts: int
    provider: str | None = None
    egress_usd_per_gb: float | None = None
    vm_usd_per_hour: float | None = None
    egress_cap_gbps: float | None = None
    ingress_cap_gbps: float | None = None


def _number(value: Any, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ProvisionError(f"{where}: {value!r} is not a number") from None
    if math.isnan(number) or number < 0:
        raise ProvisionError(f"{where}: {number} must be a number >= 0")
    return number


def parse_regions(
    data: Mapping[str, Any],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, RegionAttrs]]:
    """(host entries per region, attributes per region) from an inventory document."""
    regions = data.get("regions", data)
    if not isinstance(regions, Mapping):
        raise ProvisionError("SSH inventory: 'regions' must map region ids to hosts")
    hosts: dict[str, list[dict[str, Any]]] = {}
    attrs: dict[str, RegionAttrs] = {}
    for region, entry in regions.items():
        where = f"SSH inventory region {region!r}"
        if not isinstance(region, str) or not region.strip() or region != region.strip():
            raise ProvisionError(f"{where}: a region id must be a non-empty name")
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"hosts", *_REGION_FIELDS}
            if unknown:
                raise ProvisionError(
                    f"{where}: unknown field(s) {', '.join(sorted(unknown))}; known: hosts, "
                    + ", ".join(_REGION_FIELDS)
                )
            entries = entry.get("hosts", [])
            numbers = {
                k: _number(entry[k], f"{where}: field {k!r}")
                for k in _REGION_FIELDS[1:]
                if entry.get(k) is not None
            }
            provider = entry.get("provider")
            if provider is not None and (not isinstance(provider, str) or not provider):
                raise ProvisionError(f"{where}: field 'provider' must be a name")
        else:
            entries, numbers, provider = entry, {}, None
        if not isinstance(entries, list) or not all(isinstance(h, Mapping) for h in entries):
            raise ProvisionError(f"{where}: hosts must be a list of tables")
        hosts[region] = [dict(h) for h in entries]
        attrs[region] = RegionAttrs(id=region, hosts=len(entries), provider=provider, **numbers)
    return hosts, attrs


def load_document(path: str | Path) -> dict[str, Any]:
    """The inventory file as a document (TOML by extension, JSON otherwise)."""
    path = Path(path)
    try:
        data = read_document(path)
    except OSError as exc:
        raise ProvisionError(f"cannot read SSH inventory {path}: {exc}") from exc
    except ValueError as exc:
        raise ProvisionError(f"SSH inventory {path} is not valid: {exc}") from exc
    if not isinstance(data, dict):
        raise ProvisionError(f"SSH inventory {path} must be a table/object")
    return data
