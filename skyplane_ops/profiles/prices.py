"""Egress prices and gateway VM classes, computed from the published RULES in prices.json.

We keep the rules (by source region, continent class, provider) rather than an expanded table
so that a user can override one rule and every affected pair follows. Egress is paid by the
source; ingress is free; traffic between providers is priced at the source provider's
internet rate.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles.catalog import PROVIDERS, Region, RegionCatalog

if TYPE_CHECKING:
    from skyplane_ops.profiles.custom import CustomRegion

GCP_TIERS = ("premium", "standard")


@dataclass(frozen=True)
class VmClass:
    """The gateway instance type used in a provider, with its network caps (Gbps per VM)."""

    provider: str
    instance: str
    vcpus: int
    mem_gib: float
    usd_per_hour: float
    egress_cap_gbps: float
    ingress_cap_gbps: float
    max_per_region: int


class _Doc:
    """Typed, field-naming access to the merged price document."""

    def __init__(self, doc: Mapping[str, Any], source: str) -> None:
        self.doc = doc
        self.source = source

    def node(self, path: str) -> Any:
        cur: Any = self.doc
        for part in path.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                raise ProfileError(f"{self.source}: missing field {path!r}")
            cur = cur[part]
        return cur

    def price(self, path: str, value: Any = None) -> float:
        raw = self.node(path) if value is None else value
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ProfileError(f"{self.source}: field {path!r}: {raw!r} is not a number")
        if raw < 0:
            raise ProfileError(f"{self.source}: field {path!r}: {raw} is negative")
        return float(raw)

    def price_map(self, path: str) -> dict[str, float]:
        raw = self.node(path)
        if not isinstance(raw, Mapping):
            raise ProfileError(f"{self.source}: field {path!r} must be an object")
        return {str(k): self.price(f"{path}.{k}", v) for k, v in raw.items()}

    def str_list(self, path: str) -> list[str]:
        raw = self.node(path)
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise ProfileError(f"{self.source}: field {path!r} must be a list of strings")
        return list(raw)


def _vm_class(d: _Doc, provider: str) -> VmClass:
    base = f"vm_classes.{provider}"

    def integer(field: str) -> int:
        value = d.node(f"{base}.{field}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProfileError(f"{d.source}: field '{base}.{field}': {value!r} must be an int >= 1")
        return value

    instance = d.node(f"{base}.instance")
    if not isinstance(instance, str) or not instance:
        raise ProfileError(f"{d.source}: field '{base}.instance' must be a non-empty string")
    vm = VmClass(
        provider=provider,
        instance=instance,
        vcpus=integer("vcpus"),
        mem_gib=d.price(f"{base}.mem_gib"),
        usd_per_hour=d.price(f"{base}.usd_per_hour"),
        egress_cap_gbps=d.price(f"{base}.egress_cap_gbps"),
        ingress_cap_gbps=d.price(f"{base}.ingress_cap_gbps"),
        max_per_region=integer("max_per_region"),
    )
    if vm.egress_cap_gbps <= 0 or vm.ingress_cap_gbps <= 0:
        raise ProfileError(f"{d.source}: '{base}' network caps must be > 0")
    return vm


class PriceGrid:
    """$/GB for every ordered region pair plus the gateway VM class of each provider."""

    def __init__(
        self,
        document: Mapping[str, Any],
        catalog: RegionCatalog,
        *,
        gcp_tier: str = "premium",
        source: str = "prices.json",
        applied_overrides: list[str] | None = None,
    ) -> None:
        if gcp_tier not in GCP_TIERS:
            raise ProfileError(f"gcp_tier must be one of {', '.join(GCP_TIERS)}, not {gcp_tier!r}")
        d = _Doc(document, source)
        self._catalog = catalog
        self.gcp_tier = gcp_tier
        self.as_of = str(d.node("as_of"))
        sources = d.node("sources")
        if not isinstance(sources, list):
            raise ProfileError(f"{source}: field 'sources' must be a list")
        self.sources: list[str] = [str(s) for s in sources]
        self.applied_overrides: list[str] = list(applied_overrides or [])
        raw_tiers = d.node("aws.volume_tiers")
        self.volume_tiers: dict[str, Any] = dict(raw_tiers) if isinstance(raw_tiers, dict) else {}

        self._aws_inter_default = d.price("aws.inter_region.default")
        self._aws_inter = d.price_map("aws.inter_region.by_source")
        self._aws_pair: dict[frozenset[str], float] = {}
        exceptions = d.node("aws.inter_region.pair_exceptions")
        if not isinstance(exceptions, list):
            raise ProfileError(f"{source}: field 'aws.inter_region.pair_exceptions' must be a list")
        for i, exc in enumerate(exceptions):
            path = f"aws.inter_region.pair_exceptions[{i}]"
            if not isinstance(exc, Mapping) or not {"a", "b", "usd_per_gb"} <= set(exc):
                raise ProfileError(f"{source}: field {path!r} needs a, b and usd_per_gb")
            key = frozenset((str(exc["a"]), str(exc["b"])))
            self._aws_pair[key] = d.price(f"{path}.usd_per_gb", exc["usd_per_gb"])
        self._aws_net_default = d.price("aws.internet.default")
        self._aws_net = d.price_map("aws.internet.by_source")

        self._gcp_same_cont = d.price_map("gcp.inter_region.same_continent")
        self._gcp_interc = d.price("gcp.inter_region.intercontinental")
        self._gcp_interc_exp = d.price("gcp.inter_region.intercontinental_expensive")
        self._gcp_exp_cont = set(d.str_list("gcp.inter_region.expensive_continents"))
        self._gcp_exp_regions = set(d.str_list("gcp.inter_region.expensive_regions"))
        self.gcp_same_region_other_zone = d.price("gcp.same_region_other_zone")
        self._gcp_prem_default = d.price("gcp.internet.premium.default")
        self._gcp_prem_to_cont = d.price_map("gcp.internet.premium.to_continent")
        self._gcp_prem_src_cont = d.price_map("gcp.internet.premium.by_source_continent")
        self._gcp_prem_src = d.price_map("gcp.internet.premium.by_source")
        self._gcp_std = d.price_map("gcp.internet.standard.by_source_continent")

        self._az_intra = d.price_map("azure.intra_continent")
        self._az_inter = d.price_map("azure.inter_continent")
        self._az_net = d.price_map("azure.internet")

        self._vms = {p: _vm_class(d, p) for p in PROVIDERS}
        self._pairs: dict[tuple[str, str], float] = {}
        raw_pairs = d.node("pair_overrides")
        if not isinstance(raw_pairs, Mapping):
            raise ProfileError(f"{source}: field 'pair_overrides' must be an object")
        for key, value in raw_pairs.items():
            path = f"pair_overrides.{key}"
            parts = str(key).split("->")
            if len(parts) != 2:
                raise ProfileError(f"{source}: field {path!r}: key must be 'src->dst'")
            try:
                pair = (catalog.resolve(parts[0].strip()), catalog.resolve(parts[1].strip()))
            except UnknownRegionError as exc:
                raise ProfileError(f"{source}: field {path!r}: {exc}") from exc
            self._pairs[pair] = d.price(path, value)
        self._check_continents()
        self._all: dict[tuple[str, str], float] | None = None
        self._custom: dict[str, VmClass] = {}
        self._custom_egress: dict[str, float] = {}

    def with_regions(self, regions: Iterable[CustomRegion], catalog: RegionCatalog) -> PriceGrid:
        """A copy that also prices custom regions (``catalog`` must already list them).

        Sending from a custom region costs its ``egress_usd_per_gb`` to any destination;
        sending from a cloud region to a custom one costs the cloud's internet egress rate.
        """
        out = copy.copy(self)
        out._catalog = catalog
        out._all = None
        out._custom = dict(self._custom)
        out._custom_egress = dict(self._custom_egress)
        for r in regions:
            out._custom_egress[r.id] = r.egress_usd_per_gb
            out._custom[r.id] = VmClass(
                provider=r.provider,
                instance="own host",
                vcpus=1,
                mem_gib=0.0,
                usd_per_hour=r.vm_usd_per_hour,
                egress_cap_gbps=r.egress_cap_gbps,
                ingress_cap_gbps=r.ingress_cap_gbps,
                max_per_region=r.hosts,
            )
        return out

    def vm_for_region(self, region_id: str) -> VmClass:
        """The gateway class used in ``region_id``: the provider's class for a cloud region,
        the region's own prices, caps and host count (``max_per_region``) for a custom one."""
        region = self._catalog.get(region_id)
        custom = self._custom.get(region.id)
        return custom if custom is not None else self.vm(region.provider)

    def custom_regions(self) -> list[str]:
        """Ids of the custom regions this grid prices."""
        return list(self._custom)

    def _check_continents(self) -> None:
        """Every continent in the catalog must have a price in every continent-keyed rule."""
        continents = {r.continent for r in self._catalog}
        tables = {
            "gcp.inter_region.same_continent": self._gcp_same_cont,
            "gcp.internet.standard.by_source_continent": self._gcp_std,
            "azure.intra_continent": self._az_intra,
            "azure.inter_continent": self._az_inter,
            "azure.internet": self._az_net,
        }
        for path, table in tables.items():
            missing = sorted(continents - set(table))
            if missing:
                raise ProfileError(f"price rule {path!r} has no price for {', '.join(missing)}")

    def vm(self, provider: str) -> VmClass:
        """The gateway VM class of ``provider`` (aws, azure, gcp)."""
        try:
            return self._vms[provider]
        except KeyError:
            raise ProfileError(
                f"no VM class for provider {provider!r}; known: {', '.join(PROVIDERS)}"
            ) from None

    def egress_usd_per_gb(self, src: str, dst: str) -> float:
        """$/GB from ``src`` to ``dst`` (paid by the source; 0.0 within one region)."""
        s = self._catalog.get(src)
        t = self._catalog.get(dst)
        return self._price(s, t)

    def internet_usd_per_gb(self, src: str, dst_continent: str | None = None) -> float:
        """The source provider's internet egress rate (what inter-cloud traffic costs)."""
        s = self._catalog.get(src)
        if s.provider == "aws":
            return self._aws_net.get(s.name, self._aws_net_default)
        if s.provider == "azure":
            return self._az_net[s.continent]
        if self.gcp_tier == "standard":
            return self._gcp_std[s.continent]
        rate = self._gcp_prem_src.get(
            s.name, self._gcp_prem_src_cont.get(s.continent, self._gcp_prem_default)
        )
        if dst_continent is not None and dst_continent in self._gcp_prem_to_cont:
            rate = max(rate, self._gcp_prem_to_cont[dst_continent])
        return rate

    def _price(self, s: Region, t: Region) -> float:
        if s.id == t.id:
            return 0.0
        override = self._pairs.get((s.id, t.id))
        if override is not None:
            return override
        if s.id in self._custom_egress:
            return self._custom_egress[s.id]
        if t.id in self._custom_egress:
            return self.internet_usd_per_gb(s.id, t.continent or None)
        if s.provider != t.provider:
            return self.internet_usd_per_gb(s.id, t.continent)
        if s.provider == "aws":
            pair = self._aws_pair.get(frozenset((s.name, t.name)))
            if pair is not None:
                return pair
            return self._aws_inter.get(s.name, self._aws_inter_default)
        if s.provider == "azure":
            table = self._az_intra if s.continent == t.continent else self._az_inter
            return table[s.continent]
        if s.continent == t.continent:
            return self._gcp_same_cont[s.continent]
        ends_cont = {s.continent, t.continent}
        if ends_cont & self._gcp_exp_cont or {s.name, t.name} & self._gcp_exp_regions:
            return self._gcp_interc_exp
        return self._gcp_interc

    def as_dict(self) -> dict[tuple[str, str], float]:
        """$/GB for every ordered pair of distinct regions (computed once, then copied)."""
        if self._all is None:
            regions = list(self._catalog)
            self._all = {
                (s.id, t.id): self._price(s, t) for s in regions for t in regions if s != t
            }
        return dict(self._all)
