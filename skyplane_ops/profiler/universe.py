"""The user's fleet as the planning universe: which regions exist, what they cost, how many VMs.

With the ssh backend and an inventory (or the netns testbed and its grid) a plan may use only
regions where hosts exist: they are the only relays, a region gets at most as many VMs as it
has hosts, and names outside the cloud catalog (``site:lab-a``) are regions of their own
(provider ``own``, free egress and VMs unless the inventory prices them). Their throughput
comes only from measurements (``skyplane-ops profile`` on the same backend): a pair nobody
measured, or one recorded as "no link", is not an edge.

``FleetUniverse.from_backend`` finds the universe; ``profile`` extends a planning profile with
its own regions (the profiles' ``Profile.with_regions``) and the grid store's measurements;
``constrain`` caps a built problem by the inventory (hosts, prices, caps per region).

It lives with the profiler, above ``provision``: it reads the inventory (``provision.inventory``)
and the profiler's grid store, and ``provision`` imports neither it nor the profiler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyplane_ops.errors import PlanningError, ProfileError, ProvisionError
from skyplane_ops.provision.inventory import RegionAttrs, load_document, parse_regions

OWN_PROVIDER = "own"
#: "No cap" for a host's NIC (the planner wants finite numbers): far above any one host.
NO_CAP_GBPS = 10_000.0
#: Hosts per region the planner may use when nothing says otherwise.
UNLIMITED_VMS = 1_000


@dataclass(frozen=True)
class FleetUniverse:
    """The regions of the user's fleet and their attributes."""

    regions: Mapping[str, RegionAttrs]
    backend: str

    @classmethod
    def from_backend(cls, backend: str, options: Mapping[str, Any] | None) -> FleetUniverse | None:
        """The universe of an ssh inventory or a netns testbed grid; None for other backends."""
        options = dict(options or {})
        if backend == "ssh" and options.get("inventory") is not None:
            inventory = options["inventory"]
            if hasattr(inventory, "regions") and hasattr(inventory, "hosts"):
                attrs = dict(inventory.regions)
            else:
                doc = (
                    inventory
                    if isinstance(inventory, Mapping)
                    else load_document(Path(str(inventory)))
                )
                _, attrs = parse_regions(doc)
            attrs = {r: a for r, a in attrs.items() if a.hosts > 0}
            if not attrs:
                raise ProvisionError("the SSH inventory has no hosts")
            return cls(attrs, backend)
        if backend == "netns" and options.get("grid"):
            hosts = int(options.get("hosts_per_region", 1))
            names: list[str] = []
            for key in options["grid"]:
                pair = key.split("->") if isinstance(key, str) else list(key)
                names.extend(p.strip() for p in pair)
            return cls({r: RegionAttrs(id=r, hosts=hosts) for r in dict.fromkeys(names)}, backend)
        return None

    @classmethod
    def standing(cls, fleet: Any, base: FleetUniverse | None = None) -> FleetUniverse:
        """The universe of a fleet that is already running (``cp --fleet``): its regions,
        each with as many hosts as it has gateways. A region the backend's own universe
        (``base``: an inventory's prices and caps) knows keeps its attributes."""
        counts: dict[str, int] = {}
        for gateway in fleet.gateways:
            counts[gateway.region] = counts.get(gateway.region, 0) + 1
        if not counts:
            raise ProvisionError(f"fleet {fleet.transfer_id} has no gateways")
        known = base.regions if base is not None else {}
        regions = {
            r: dataclasses.replace(known[r], hosts=n) if r in known else RegionAttrs(id=r, hosts=n)
            for r, n in counts.items()
        }
        return cls(regions, fleet.backend)

    def ids(self) -> list[str]:
        return list(self.regions)

    def check_ends(self, regions: Iterable[str]) -> None:
        """Source and destinations must be fleet regions: nothing else can run a gateway."""
        missing = [r for r in regions if r not in self.regions]
        if missing:
            raise PlanningError(
                f"{', '.join(missing)} has no host in the {self.backend} fleet "
                f"(fleet regions: {', '.join(self.regions)})"
            )

    def custom_regions(self, catalog: Any) -> list[dict[str, Any]]:
        """The fleet's own regions (not in ``catalog``) as ``Profile.with_regions`` specs."""
        specs = []
        for rid, attrs in self.regions.items():
            if rid in catalog:
                continue
            spec: dict[str, Any] = {"id": rid, "hosts": attrs.hosts}
            for name in (
                "provider",
                "egress_usd_per_gb",
                "vm_usd_per_hour",
                "egress_cap_gbps",
                "ingress_cap_gbps",
            ):
                if getattr(attrs, name) is not None:
                    spec[name] = getattr(attrs, name)
            specs.append(spec)
        return specs

    def profile(self, profile: Any, grid_store: str | None, version: str | None = None) -> Any:
        """``profile`` with the fleet's own regions added (``Profile.with_regions``: their
        prices, caps and hosts) and the grid store's measurements laid over its throughput
        (an own site's links exist only where measured)."""
        known = profile.catalog
        bare = [r for r in self.regions if r in known and known.resolve(r) != r]
        if bare:
            raise PlanningError(
                f"inventory regions must be full ids: {', '.join(bare)} -> "
                + ", ".join(known.resolve(r) for r in bare)
            )
        try:
            extended = profile.with_regions(self.custom_regions(known))
        except ProfileError as exc:
            raise PlanningError(f"the {self.backend} fleet's regions: {exc}") from exc
        grid = extended.throughput
        if grid_store is not None:
            from skyplane_ops.profiler.planner_grid import planner_grid
            from skyplane_ops.profiler.store import GridStore

            store = GridStore(grid_store)
            version = version or store.latest_version()
            if version is not None:
                grid = planner_grid(store, grid, version=version)
        prices = FleetPrices(extended.prices)
        return dataclasses.replace(extended, prices=prices, throughput=grid)

    def constrain(self, problem: Any) -> Any:
        """The problem with each region's VMs capped by its hosts and the inventory's prices
        and caps applied (the planner reads VM classes per provider, the fleet per region)."""
        specs = {}
        for rid, spec in problem.regions.items():
            attrs = self.regions.get(rid)
            if attrs is None:
                continue  # not in the fleet: no gateway can run there
            specs[rid] = dataclasses.replace(
                spec,
                max_vms=min(spec.max_vms, attrs.hosts),
                vm_usd_per_hour=_first(attrs.vm_usd_per_hour, spec.vm_usd_per_hour),
                egress_cap_gbps=_first(attrs.egress_cap_gbps, spec.egress_cap_gbps),
                ingress_cap_gbps=_first(attrs.ingress_cap_gbps, spec.ingress_cap_gbps),
            )
        edges = {e: g for e, g in problem.throughput.items() if e[0] in specs and e[1] in specs}
        prices = {e: p for e, p in problem.egress_usd_per_gb.items() if e in edges}
        for u, v in prices:  # an inventory price beats the catalog's for its region
            own = self.regions[u].egress_usd_per_gb
            if own is not None:
                prices[(u, v)] = float(own)
        return dataclasses.replace(
            problem, regions=specs, throughput=edges, egress_usd_per_gb=prices
        )


def _first(value: float | None, default: float) -> float:
    """The inventory's figure if it gives one (an infinite cap counts as "no cap")."""
    return default if value is None else min(float(value), NO_CAP_GBPS)


@dataclass(frozen=True)
class _OwnVm:
    """The VM class of a provider the price document does not know (the user's own hosts)."""

    provider: str
    instance: str = "own host"
    usd_per_hour: float = 0.0
    egress_cap_gbps: float = NO_CAP_GBPS
    ingress_cap_gbps: float = NO_CAP_GBPS
    max_per_region: int = UNLIMITED_VMS


class FleetPrices:
    """The profile's prices; a provider the price document lacks (the user's own) gets a free,
    uncapped VM class (``constrain`` then applies each region's own figures)."""

    def __init__(self, base: Any) -> None:
        self._base = base

    def vm(self, provider: str) -> Any:
        try:
            return self._base.vm(provider)
        except ProfileError:
            return _OwnVm(provider)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)
