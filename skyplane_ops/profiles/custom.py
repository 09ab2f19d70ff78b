"""Custom regions: the user's own sites (``site:lab-a``) added next to the cloud catalog.

An own site has no published prices and no model throughput: its egress and VM prices default
to 0, its NIC caps to none, and its links come only from measurements (a pair with no
measurement has no link). ``hosts`` is how many machines the site has, so it is the most
gateways the planner may place there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles.catalog import CONTINENTS, PROVIDERS, Region

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]*:[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class CustomRegion:
    """One custom region; every number is per region, defaults fit an own network."""

    id: str  # "prefix:name", e.g. "site:lab-a"; the prefix may not be aws, azure or gcp
    provider: str = "own"  # a label; prices never come from a cloud's rules
    egress_usd_per_gb: float = 0.0  # what sending one GB out of this region costs
    vm_usd_per_hour: float = 0.0  # what one gateway host costs per hour while used
    egress_cap_gbps: float = math.inf  # most one host sends (inf = no cap)
    ingress_cap_gbps: float = math.inf  # most one host receives (inf = no cap)
    hosts: int = 1  # machines at the site: the planner's VM limit here
    continent: str = ""  # optional, one of catalog.CONTINENTS (used for cloud egress pricing)
    city: str = ""

    def __post_init__(self) -> None:
        where = f"custom region {self.id!r}"
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise ProfileError(f"{where}: id must look like 'site:lab-a' (prefix:name)")
        if self.id.split(":", 1)[0] in PROVIDERS:
            raise ProfileError(f"{where}: the prefix may not be a cloud ({', '.join(PROVIDERS)})")
        if not isinstance(self.provider, str) or not self.provider:
            raise ProfileError(f"{where}: provider must be a non-empty string")
        for name in ("egress_usd_per_gb", "vm_usd_per_hour"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProfileError(f"{where}: {name} must be a number, not {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ProfileError(f"{where}: {name} must be a finite number >= 0, not {value}")
        for name in ("egress_cap_gbps", "ingress_cap_gbps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ProfileError(f"{where}: {name} must be a number > 0 (inf = no cap)")
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise ProfileError(f"{where}: hosts must be an int >= 1, not {self.hosts!r}")
        if self.continent and self.continent not in CONTINENTS:
            raise ProfileError(
                f"{where}: continent {self.continent!r} is not one of {', '.join(CONTINENTS)}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CustomRegion:
        """Build from a dict (inventory file); unknown keys are an error, ``null`` = default.
        ``max_vms`` is accepted as another name for ``hosts``."""
        known = {f.name for f in fields(cls)}
        values = {("hosts" if k == "max_vms" else k): v for k, v in data.items() if v is not None}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ProfileError(
                f"custom region {data.get('id')!r}: unknown field(s) {', '.join(unknown)}"
                f" (known: {', '.join(sorted(known))})"
            )
        if "id" not in values:
            raise ProfileError("custom region: field 'id' is missing")
        for cap in ("egress_cap_gbps", "ingress_cap_gbps"):
            if isinstance(values.get(cap), str) and values[cap].strip().lower() in ("inf", "none"):
                values[cap] = math.inf
        return cls(**values)

    def region(self) -> Region:
        """The catalog entry (no coordinates: the throughput model never covers it)."""
        return Region(
            id=self.id,
            provider=self.provider,
            name=self.id.split(":", 1)[1],
            continent=self.continent,
            city=self.city,
            lat=math.nan,
            lon=math.nan,
            custom=True,
        )


def as_custom_regions(specs: Iterable[CustomRegion | Mapping[str, Any]]) -> list[CustomRegion]:
    """Normalise specs and reject ids given twice."""
    out: list[CustomRegion] = []
    seen: set[str] = set()
    for spec in specs:
        region = spec if isinstance(spec, CustomRegion) else CustomRegion.from_mapping(spec)
        if region.id in seen:
            raise ProfileError(f"custom region {region.id!r} is given twice")
        seen.add(region.id)
        out.append(region)
    return out
