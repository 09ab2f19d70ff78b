"""The default throughput model for pairs with no published measurement.

Calibrated on the published Skyplane grid (published.py), per ordered provider pair and by
great-circle distance:

    ln gbps = a[src provider -> dst provider] + b[...] * distance_km / 1000
    gbps    = min(exp(ln gbps), src VM egress cap, dst VM ingress cap)

Within one region only the NICs bind: ``min(ingress caps)``. ``fit_model`` is the one fit
(ordinary least squares on ln gbps, per provider pair); ``scripts/calibrate_throughput.py``
runs it on the published data and writes the result to ``throughput_model.json``;
``benchmarks/grid_fidelity.py`` cross-validates it by holding out whole regions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles.catalog import PROVIDERS, Region

EARTH_RADIUS_KM = 6371.0


def pair_key(src_provider: str, dst_provider: str) -> str:
    return f"{src_provider}->{dst_provider}"


@dataclass(frozen=True)
class PairFit:
    """ln gbps = intercept + slope * distance_km / 1000 for one provider pair."""

    intercept: float
    slope_per_1000km: float
    pairs: int = 0
    rmse_ln: float = 0.0

    def gbps(self, distance_km: float) -> float:
        return math.exp(self.intercept + self.slope_per_1000km * distance_km / 1000.0)


@dataclass(frozen=True)
class ModelParams:
    """The fitted coefficients per provider pair (see throughput_model.json)."""

    connections: int
    by_pair: Mapping[str, PairFit]

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], source: str) -> ModelParams:
        """Read and check ``connections`` and ``parameters.by_provider_pair``."""
        params = doc.get("parameters")
        table = params.get("by_provider_pair") if isinstance(params, Mapping) else None
        if not isinstance(table, Mapping):
            raise ProfileError(f"{source}: missing object 'parameters.by_provider_pair'")
        by_pair: dict[str, PairFit] = {}
        for s in PROVIDERS:
            for d in PROVIDERS:
                key = pair_key(s, d)
                entry = table.get(key)
                where = f"{source}: field 'parameters.by_provider_pair.{key}'"
                if not isinstance(entry, Mapping):
                    raise ProfileError(f"{where} is missing")
                values = []
                for name in ("intercept", "slope_per_1000km"):
                    raw = entry.get(name)
                    if isinstance(raw, bool) or not isinstance(raw, int | float):
                        raise ProfileError(f"{where}.{name}: {raw!r} is not a number")
                    if not math.isfinite(raw):
                        raise ProfileError(f"{where}.{name}: {raw} is not finite")
                    values.append(float(raw))
                by_pair[key] = PairFit(
                    values[0],
                    values[1],
                    int(entry.get("pairs", 0)),
                    float(entry.get("rmse_ln", 0.0)),
                )
        connections = doc.get("connections")
        if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
            raise ProfileError(f"{source}: field 'connections' must be an int >= 1")
        return cls(connections=connections, by_pair=by_pair)


def great_circle_km(a: Region, b: Region) -> float:
    """Haversine distance between two regions' cities."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def uncapped_gbps(p: ModelParams, src: Region, dst: Region) -> float:
    """The fitted curve of the pair's providers at the pair's distance, before VM caps."""
    return p.by_pair[pair_key(src.provider, dst.provider)].gbps(great_circle_km(src, dst))


def modelled_gbps(
    p: ModelParams,
    src: Region,
    dst: Region,
    egress_cap: Mapping[str, float],
    ingress_cap: Mapping[str, float],
) -> float:
    """Model value for an ordered pair; within one region only the NICs (ingress caps) bind."""
    if src.id == dst.id:
        return min(ingress_cap[src.provider], ingress_cap[dst.provider])
    return min(uncapped_gbps(p, src, dst), egress_cap[src.provider], ingress_cap[dst.provider])


def fit_model(
    samples: Iterable[tuple[Region, Region, float]], connections: int = 64
) -> ModelParams:
    """Least squares of ln gbps on distance, per ordered provider pair.

    Every provider pair needs two or more samples at different distances; a fitted slope
    above 0 (faster with distance) is clamped to 0, since that is noise, not physics.
    """
    groups: dict[str, list[tuple[float, float]]] = {}
    for src, dst, gbps in samples:
        if src.id == dst.id or gbps <= 0:
            continue
        key = pair_key(src.provider, dst.provider)
        groups.setdefault(key, []).append((great_circle_km(src, dst) / 1000.0, math.log(gbps)))
    fits: dict[str, PairFit] = {}
    for key, points in groups.items():
        n = len(points)
        mx = sum(x for x, _ in points) / n
        my = sum(y for _, y in points) / n
        sxx = sum((x - mx) ** 2 for x, _ in points)
        if n < 2 or sxx == 0:
            raise ProfileError(f"cannot fit {key}: need samples at two or more distances")
        slope = min(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx)
        intercept = my - slope * mx
        rmse = math.sqrt(sum((y - intercept - slope * x) ** 2 for x, y in points) / n)
        fits[key] = PairFit(intercept, slope, n, rmse)
    missing = [pair_key(s, d) for s in PROVIDERS for d in PROVIDERS if pair_key(s, d) not in fits]
    if missing:
        raise ProfileError(f"cannot fit {', '.join(missing)}: no samples")
    return ModelParams(connections=connections, by_pair=fits)
