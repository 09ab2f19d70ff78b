"""The planner's input: a pure-data ``Problem``, and ``build_problem`` to derive it from a profile.

A ``Problem`` holds everything the optimiser needs and nothing else (no profile objects, no
I/O), so it can be built by hand in tests, serialised, and solved repeatedly.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from skyplane_ops.errors import PlanningError, UnknownRegionError

Objective = Literal["min_cost", "max_throughput"]
Edge = tuple[str, str]

#: Bytes per GB / bits per byte: a volume of V GB at T Gbps takes 8 V / T seconds.
BITS_PER_BYTE = 8.0


class InvalidProblemError(PlanningError):
    """The problem's arguments are malformed (bad volume, bound, caps, duplicate regions...)."""


@dataclass(frozen=True)
class RegionSpec:
    """What the planner needs to know about one candidate region's gateway VMs."""

    id: str
    provider: str
    vm_usd_per_hour: float
    egress_cap_gbps: float
    ingress_cap_gbps: float
    max_vms: int

    @property
    def vm_usd_per_second(self) -> float:
        return self.vm_usd_per_hour / 3600.0


@dataclass(frozen=True)
class Problem:
    """One planning problem: move ``volume_gb`` from ``src`` to every region in ``dsts``.

    ``throughput[(u, v)]`` is the Gbps one VM pair reaches with ``conns_measured`` parallel
    TCP connections; a missing pair cannot be used. ``egress_usd_per_gb[(u, v)]`` is the
    price the source side pays per GB sent from ``u`` to ``v`` (missing means free).
    ``objective`` is ``min_cost`` (``bound`` = throughput floor in Gbps) or
    ``max_throughput`` (``bound`` = cost ceiling in USD). ``max_relays`` fixes the overlay
    model: paths have at most that many relay regions (see ``skyplane_ops.planner.paths``).
    """

    src: str
    dsts: tuple[str, ...]
    volume_gb: float
    regions: Mapping[str, RegionSpec]
    throughput: Mapping[Edge, float]
    egress_usd_per_gb: Mapping[Edge, float]
    objective: Objective = "min_cost"
    bound: float | None = None
    conns_measured: int = 64
    max_conns_per_vm: int = 64
    provisioning_seconds: float = 0.0
    max_relays: int = 1
    details: Mapping[str, Any] = field(default_factory=dict)

    def with_objective(self, objective: Objective, bound: float | None) -> Problem:
        """The same problem with another mode/bound (cheap: shares every mapping)."""
        return replace(self, objective=objective, bound=bound)

    def gbps(self, u: str, v: str) -> float:
        return self.throughput.get((u, v), 0.0)

    def price(self, u: str, v: str) -> float:
        return self.egress_usd_per_gb.get((u, v), 0.0)

    def transfer_seconds(self, gbps: float) -> float:
        """Wall time of the whole job at ``gbps``, provisioning included."""
        return BITS_PER_BYTE * self.volume_gb / gbps + self.provisioning_seconds

    def validate(self) -> None:
        """Raise a typed error for anything malformed; a valid problem may still be infeasible."""
        if not self.dsts:
            raise InvalidProblemError("at least one destination region is needed")
        for region in (self.src, *self.dsts):
            if region not in self.regions:
                raise UnknownRegionError(region, suggest(region, self.regions))
        if len(set(self.dsts)) != len(self.dsts):
            raise InvalidProblemError(f"destination regions repeat: {', '.join(self.dsts)}")
        if self.src in self.dsts:
            raise InvalidProblemError(f"source {self.src} is also a destination")
        if not (self.volume_gb > 0 and math.isfinite(self.volume_gb)):
            raise InvalidProblemError(
                f"volume must be a positive number of GB, not {self.volume_gb}"
            )
        if self.objective not in ("min_cost", "max_throughput"):
            raise InvalidProblemError(f"unknown objective {self.objective!r}")
        if self.bound is not None and not (self.bound > 0 and math.isfinite(self.bound)):
            raise InvalidProblemError(f"the bound must be a positive number, not {self.bound}")
        if self.conns_measured < 1 or self.max_conns_per_vm < 1:
            raise InvalidProblemError("connection counts must be at least 1")
        if self.provisioning_seconds < 0 or not math.isfinite(self.provisioning_seconds):
            raise InvalidProblemError("provisioning time must be a non-negative number of seconds")
        if self.max_relays not in (0, 1, 2):
            raise InvalidProblemError(f"max_relays must be 0, 1 or 2, not {self.max_relays}")
        for spec in self.regions.values():
            numbers = (spec.vm_usd_per_hour, spec.egress_cap_gbps, spec.ingress_cap_gbps)
            if spec.max_vms < 0 or any(x < 0 or not math.isfinite(x) for x in numbers):
                raise InvalidProblemError(
                    f"region {spec.id}: caps, price and VM limit must be >= 0"
                )
        for name, grid in (("throughput", self.throughput), ("price", self.egress_usd_per_gb)):
            for (u, v), value in grid.items():
                if not (value >= 0 and math.isfinite(value)):
                    raise InvalidProblemError(f"{name} {u} -> {v} must be >= 0, not {value}")
        for region in (self.src, *self.dsts):
            if self.regions[region].max_vms < 1:
                raise InvalidProblemError(f"{region} allows no VMs, but the transfer needs one")


def suggest(region: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Closest known region ids, also matching on the part after the provider prefix."""
    known = list(known)
    hits = difflib.get_close_matches(region, known, n=n, cutoff=0.5)
    if len(hits) < n:
        short = {k.split(":", 1)[-1]: k for k in known}
        tail = region.split(":", 1)[-1]
        for name in difflib.get_close_matches(tail, list(short), n=n, cutoff=0.5):
            if short[name] not in hits:
                hits.append(short[name])
    return hits[:n]


class _Catalog(Protocol):
    def get(self, region_id: str) -> Any: ...

    def ids(self) -> Iterable[str]: ...


class _Prices(Protocol):
    def egress_usd_per_gb(self, src: str, dst: str) -> float: ...

    def vm(self, provider: str) -> Any: ...


class _Throughput(Protocol):
    connections: int

    def as_dict(self) -> Mapping[Edge, float]: ...


class ProfileLike(Protocol):
    """The subset of ``skyplane_ops.profiles.Profile`` the planner reads."""

    @property
    def catalog(self) -> _Catalog: ...

    @property
    def prices(self) -> _Prices: ...

    @property
    def throughput(self) -> _Throughput: ...


def deadline_to_floor(volume_gb: float, deadline_seconds: float, provisioning_s: float) -> float:
    """The throughput floor that moves ``volume_gb`` within the deadline, provisioning included."""
    budget = deadline_seconds - provisioning_s
    if budget <= 0:
        raise InvalidProblemError(
            f"deadline {deadline_seconds:g} s leaves no time after {provisioning_s:g} s "
            "of provisioning"
        )
    return BITS_PER_BYTE * volume_gb / budget


def build_problem(
    profile: ProfileLike,
    src: str,
    dsts: str | Iterable[str],
    volume_gb: float,
    *,
    objective: Objective = "min_cost",
    bound: float | None = None,
    deadline_seconds: float | None = None,
    max_vms: int | None = None,
    max_conns_per_vm: int | None = None,
    provisioning_seconds: float = 60.0,
    max_relays: int = 1,
    regions: Iterable[str] | None = None,
) -> Problem:
    """Derive a ``Problem`` from a profile (pure: reads the profile, does no I/O).

    ``max_vms`` caps the provider's per-region instance limit; ``regions`` restricts the
    candidate relays (default: the whole catalog). ``deadline_seconds`` turns into a
    throughput floor for ``min_cost``.
    """
    dst_tuple = (dsts,) if isinstance(dsts, str) else tuple(dsts)
    # Resolve bare names ("us-east-1"); raises UnknownRegionError with suggestions.
    src = str(profile.catalog.get(src).id)
    dst_tuple = tuple(str(profile.catalog.get(d).id) for d in dst_tuple)
    if max_vms is not None and max_vms < 1:
        raise InvalidProblemError(f"--max-vms must be at least 1, not {max_vms}")
    if max_conns_per_vm is not None and max_conns_per_vm < 1:
        raise InvalidProblemError(f"--max-conns must be at least 1, not {max_conns_per_vm}")
    ids = list(profile.catalog.ids()) if regions is None else list(regions)
    for region in (src, *dst_tuple):
        if region not in ids:
            ids.append(region)
    specs: dict[str, RegionSpec] = {}
    vm_classes: dict[str, Any] = {}
    for region_id in ids:
        region = profile.catalog.get(region_id)
        if region.provider not in vm_classes:
            vm_classes[region.provider] = profile.prices.vm(region.provider)
        vm = vm_classes[region.provider]
        limit = int(vm.max_per_region) if max_vms is None else min(int(vm.max_per_region), max_vms)
        specs[region_id] = RegionSpec(
            id=region_id,
            provider=region.provider,
            vm_usd_per_hour=float(vm.usd_per_hour),
            egress_cap_gbps=float(vm.egress_cap_gbps),
            ingress_cap_gbps=float(vm.ingress_cap_gbps),
            max_vms=limit,
        )
    wanted = set(specs)
    ends = {src, *dst_tuple}

    def needed(u: str, v: str) -> bool:
        """With at most one relay only edges leaving the source or entering a destination
        (or joining destinations) can be on a path; keeping just those is exact."""
        return max_relays >= 2 or u == src or v in ends

    throughput = {
        (u, v): float(g)
        for (u, v), g in profile.throughput.as_dict().items()
        if u != v and u in wanted and v in wanted and needed(u, v)
    }
    prices = {(u, v): float(profile.prices.egress_usd_per_gb(u, v)) for (u, v) in throughput}
    if deadline_seconds is not None:
        objective = "min_cost"
        bound = deadline_to_floor(volume_gb, deadline_seconds, provisioning_seconds)
    conns = int(profile.throughput.connections)
    problem = Problem(
        src=src,
        dsts=dst_tuple,
        volume_gb=volume_gb,
        regions=specs,
        throughput=throughput,
        egress_usd_per_gb=prices,
        objective=objective,
        bound=bound,
        conns_measured=conns,
        max_conns_per_vm=conns if max_conns_per_vm is None else max_conns_per_vm,
        provisioning_seconds=provisioning_seconds,
        max_relays=max_relays,
        details={} if deadline_seconds is None else {"deadline_seconds": deadline_seconds},
    )
    problem.validate()
    return problem
