"""The planner's input: a pure-data ``Problem``, and ``build_problem`` to derive it from a profile.

A ``Problem`` holds everything the optimiser needs and nothing else (no profile objects, no
I/O), so it can be built by hand in tests, serialised, and solved repeatedly.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
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


#: Where an edge's figures came from (the ``profiles`` helper's ``LinkEstimate.source``).
SOURCES = ("published", "profile", "passive", "model")
#: Relative optimality gap at which a MILP counts as solved (the target is 0.1%).
DEFAULT_MIP_GAP = 1e-3


@dataclass(frozen=True)
class LinkSpec:
    """What is known about one directed link beyond its ``Problem.throughput`` figure.

    ``per_conn_gbps``: one TCP connection's rate where connections are the bottleneck;
    ``sat_gbps``: the most one VM pair carries with any number of connections;
    ``region_cap_gbps``: the most the region pair carries whatever the VM count (own networks).
    ``gbps`` / ``connections``: the measured figure and the count it was measured at (None:
    ``Problem.throughput`` and the problem's ``conns_measured``). None for the rates means
    unknown; ``Problem`` then falls back to the paper's model: per connection
    ``gbps / connections``, per VM pair ``gbps``, no region cap.
    """

    gbps: float | None = None
    per_conn_gbps: float | None = None
    sat_gbps: float | None = None
    region_cap_gbps: float | None = None
    connections: int | None = None
    source: str = "model"
    measured_at: str | None = None


@dataclass(frozen=True)
class LinkRates:
    """An edge's resolved figures (fallbacks applied), as the model uses them."""

    conns_per_gbps: float  # connections one Gbps needs (1 / per-connection rate)
    sat_gbps: float  # per VM pair
    region_cap_gbps: float  # math.inf when the link grows with VMs


@dataclass(frozen=True)
class Problem:
    """One planning problem: move ``volume_gb`` from ``src`` to every region in ``dsts``.

    ``throughput[(u, v)]`` is the Gbps one VM pair reaches with ``conns_measured`` parallel
    TCP connections; a missing pair cannot be used. ``egress_usd_per_gb[(u, v)]`` is the
    price the source side pays per GB sent from ``u`` to ``v`` (missing means free).
    ``objective`` is ``min_cost`` (``bound`` = throughput floor in Gbps) or
    ``max_throughput`` (``bound`` = cost ceiling in USD). ``max_relays`` fixes the overlay
    model: paths have at most that many relay regions (see ``skyplane_ops.planner.paths``).
    ``links`` adds per-edge connection figures and provenance (see ``LinkSpec``); an edge
    without an entry uses the paper's model. ``mip_gap`` is the relative gap at which an
    exact solve stops. ``max_gbps`` caps the throughput (a bandwidth cap).
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
    links: Mapping[Edge, LinkSpec] = field(default_factory=dict)
    mip_gap: float = DEFAULT_MIP_GAP
    # The transfer's bandwidth cap (``--bwlimit``, Gbps): the flow to each destination is at
    # most this, whatever the objective (None: no cap).
    max_gbps: float | None = None

    def with_objective(self, objective: Objective, bound: float | None) -> Problem:
        """The same problem with another mode/bound (cheap: shares every mapping)."""
        return replace(self, objective=objective, bound=bound)

    def gbps(self, u: str, v: str) -> float:
        return self.throughput.get((u, v), 0.0)

    def price(self, u: str, v: str) -> float:
        return self.egress_usd_per_gb.get((u, v), 0.0)

    @cached_property
    def _rates(self) -> dict[Edge, LinkRates]:
        out: dict[Edge, LinkRates] = {}
        for edge, gbps in self.throughput.items():
            spec = self.links.get(edge)
            if gbps <= 0:
                continue
            if spec is None:
                out[edge] = LinkRates(self.conns_measured / gbps, gbps, math.inf)
                continue
            count = spec.connections or self.conns_measured
            figure = gbps if spec.gbps is None else spec.gbps
            per_conn = spec.per_conn_gbps
            out[edge] = LinkRates(
                count / figure if per_conn is None else 1.0 / per_conn,
                figure if spec.sat_gbps is None else spec.sat_gbps,
                math.inf if spec.region_cap_gbps is None else spec.region_cap_gbps,
            )
        return out

    def rates(self, u: str, v: str) -> LinkRates:
        """The edge's connections per Gbps, per-VM-pair saturation and region cap."""
        return self._rates[(u, v)]

    def conns_per_gbps(self, u: str, v: str) -> float:
        return self._rates[(u, v)].conns_per_gbps

    def vm_pair_gbps(self, u: str, v: str) -> float:
        """The most one VM pair carries on the edge: saturation, or a VM's connection budget."""
        r = self._rates[(u, v)]
        return min(r.sat_gbps, self.max_conns_per_vm / r.conns_per_gbps)

    def sat_binds(self, u: str, v: str) -> bool:
        """True when saturation, not the connection budget, limits a VM pair on this edge.

        Otherwise ``f <= sat * N`` is implied by the connection rows and left out of the model
        (so with only 64-connection figures and ``max_conns_per_vm <= 64`` it is the paper's).
        """
        r = self._rates[(u, v)]
        return r.sat_gbps * r.conns_per_gbps < self.max_conns_per_vm * (1 - 1e-12)

    def link_source(self, u: str, v: str) -> tuple[str, str | None]:
        """(source, measured_at) of the edge's figures; ``model`` when nothing is known."""
        spec = self.links.get((u, v))
        return ("model", None) if spec is None else (spec.source, spec.measured_at)

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
        if not 0.0 <= self.mip_gap < 1.0:
            raise InvalidProblemError(f"the MIP gap must be in [0, 1), not {self.mip_gap}")
        if self.max_relays not in (0, 1, 2):
            raise InvalidProblemError(f"max_relays must be 0, 1 or 2, not {self.max_relays}")
        for spec in self.regions.values():
            caps = (spec.egress_cap_gbps, spec.ingress_cap_gbps)  # inf: no cap (own hosts)
            price = spec.vm_usd_per_hour
            if (
                spec.max_vms < 0
                or any(x < 0 or math.isnan(x) for x in caps)
                or not (price >= 0 and math.isfinite(price))
            ):
                raise InvalidProblemError(
                    f"region {spec.id}: caps, price and VM limit must be >= 0"
                )
        for name, grid in (("throughput", self.throughput), ("price", self.egress_usd_per_gb)):
            for (u, v), value in grid.items():
                if not (value >= 0 and math.isfinite(value)):
                    raise InvalidProblemError(f"{name} {u} -> {v} must be >= 0, not {value}")
        for (u, v), link in self.links.items():
            if self.throughput.get((u, v), 0.0) <= 0:
                continue  # "no link": never used, whatever its record says
            for what, rate in (
                ("measured rate", link.gbps),
                ("per-connection rate", link.per_conn_gbps),
                ("saturation", link.sat_gbps),
                ("region cap", link.region_cap_gbps),
            ):
                if rate is not None and not (rate > 0 and math.isfinite(rate)):
                    raise InvalidProblemError(f"{what} of {u} -> {v} must be > 0, not {rate}")
            if link.connections is not None and link.connections < 1:
                raise InvalidProblemError(f"connection count of {u} -> {v} must be >= 1")
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
    """Also read when present: ``vm_for_region(region_id)`` (custom regions' own hosts)."""

    def egress_usd_per_gb(self, src: str, dst: str) -> float: ...

    def vm(self, provider: str) -> Any: ...


class _Throughput(Protocol):
    """Today's grid: ``as_dict()`` + ``connections``; optionally ``links_of(edges)`` or
    ``links()`` (duck-typed: a mapping edge -> object with the ``LinkEstimate`` fields of
    ``profiles.throughput``) and ``source(u, v)`` / ``measured_at(u, v)`` for provenance."""

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
    relays_allow: Iterable[str] | None = None,
    relays_deny: Iterable[str] | None = None,
    measured_only: bool = False,
    mip_gap: float = DEFAULT_MIP_GAP,
    max_gbps: float | None = None,
) -> Problem:
    """Derive a ``Problem`` from a profile (pure: reads the profile, does no I/O).

    ``max_vms`` caps the provider's per-region instance limit; ``regions`` restricts the
    candidate relays (default: the whole catalog). ``relays_allow`` / ``relays_deny`` are
    region ids or shell patterns (``aws:*``, ``*:eu-*``) a relay must match / must not match
    (the source and destinations are never filtered). ``measured_only`` drops edges whose
    figure is a model value. ``deadline_seconds`` turns into a throughput floor for
    ``min_cost``.
    """
    dst_tuple = (dsts,) if isinstance(dsts, str) else tuple(dsts)
    # Resolve bare names ("us-east-1"); raises UnknownRegionError with suggestions.
    src = str(profile.catalog.get(src).id)
    dst_tuple = tuple(str(profile.catalog.get(d).id) for d in dst_tuple)
    if max_vms is not None and max_vms < 1:
        raise InvalidProblemError(f"--max-vms-per-region must be at least 1, not {max_vms}")
    if max_conns_per_vm is not None and max_conns_per_vm < 1:
        raise InvalidProblemError(
            f"--max-connections-per-vm must be at least 1, not {max_conns_per_vm}"
        )
    ids = list(profile.catalog.ids()) if regions is None else list(regions)
    ids = filter_relays(ids, {src, *dst_tuple}, relays_allow, relays_deny)
    for region in (src, *dst_tuple):
        if region not in ids:
            ids.append(region)
    specs: dict[str, RegionSpec] = {}
    vm_classes: dict[str, Any] = {}
    per_region = getattr(profile.prices, "vm_for_region", None)  # custom regions' own hosts
    for region_id in ids:
        region = profile.catalog.get(region_id)
        if callable(per_region):
            vm = per_region(region_id)
        else:
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
    links = read_links(profile.throughput, throughput)
    if measured_only:
        throughput = {e: g for e, g in throughput.items() if links[e].source != "model"}
        links = {e: links[e] for e in throughput}
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
        links=links,
        mip_gap=mip_gap,
        max_gbps=max_gbps,
    )
    problem.validate()
    return problem


def filter_relays(
    ids: list[str],
    ends: set[str],
    allow: Iterable[str] | None,
    deny: Iterable[str] | None,
) -> list[str]:
    """``ids`` whose relays match some ``allow`` pattern and no ``deny`` pattern; ends stay."""
    allow_list = None if allow is None else list(allow)
    deny_list = list(deny or ())
    for pattern in (*(allow_list or ()), *deny_list):
        if not any(ch in pattern for ch in "*?[") and pattern not in ids:
            raise UnknownRegionError(pattern, suggest(pattern, ids))

    def keep(region: str) -> bool:
        if region in ends:
            return True
        if allow_list is not None and not any(fnmatch.fnmatchcase(region, p) for p in allow_list):
            return False
        return not any(fnmatch.fnmatchcase(region, p) for p in deny_list)

    return [r for r in ids if keep(r)]


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    iso = getattr(value, "isoformat", None)
    return str(iso()) if callable(iso) else str(value)


def read_links(grid: Any, edges: Mapping[Edge, float]) -> dict[Edge, LinkSpec]:
    """Per-edge ``LinkSpec`` from the grid: ``links_of(edges)`` or ``links()`` if it has
    them, else today's grid (``source(u, v)`` says measured/modelled; a measured value counts
    as an active profile)."""
    links_of = getattr(grid, "links_of", None)
    links_fn = getattr(grid, "links", None)
    out: dict[Edge, LinkSpec] = {}
    estimates: Mapping[Edge, Any] | None = None
    if callable(links_of):
        estimates = links_of(edges)
    elif callable(links_fn):
        estimates = links_fn()
    if estimates is not None:
        for edge in edges:
            est = estimates.get(edge)
            if est is None:
                out[edge] = LinkSpec()
                continue
            source = str(getattr(est, "source", "model") or "model")
            out[edge] = LinkSpec(
                gbps=_positive(getattr(est, "gbps", None)),
                per_conn_gbps=_positive(getattr(est, "per_conn_gbps", None)),
                sat_gbps=_positive(getattr(est, "sat_gbps", None)),
                region_cap_gbps=_positive(getattr(est, "region_cap_gbps", None)),
                connections=int(getattr(est, "connections", 0) or 0) or None,
                source=source,
                measured_at=_iso(getattr(est, "measured_at", None)),
            )
        return out
    source_fn = getattr(grid, "source", None)
    when_fn = getattr(grid, "measured_at", None)
    for u, v in edges:
        measured = callable(source_fn) and source_fn(u, v) == "measured"
        when = _iso(when_fn(u, v)) if measured and callable(when_fn) else None
        out[(u, v)] = LinkSpec(source="profile" if measured else "model", measured_at=when)
    return out


def _positive(value: Any) -> float | None:
    return None if value is None else float(value)
