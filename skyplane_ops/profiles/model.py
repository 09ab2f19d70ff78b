"""The default throughput model: great-circle distance -> RTT -> TCP -> connections -> caps.

For a VM pair (one gateway VM at each end) with ``connections`` parallel TCP flows:

    rtt_ms      = base_rtt_ms + 2 * distance_km * detour_factor / fibre_km_per_ms
    per_conn    = min(window_bytes * 8 / rtt,  mss_bytes * 8 * mathis_c / (rtt * sqrt(loss)))
    gbps        = min(connections * per_conn, src egress cap, dst ingress cap)

``loss`` is ``loss_intra_cloud`` inside one provider (window-limited in practice) and
``loss_inter_cloud_by_dst_provider[dst provider]`` between providers: that is the inter-cloud
penalty (peering/transit paths lose more, so Mathis bounds each flow lower). Parameters and
their provenance live in ``throughput_model.json``; see profiles/README.md for calibration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles.catalog import PROVIDERS, Region

EARTH_RADIUS_KM = 6371.0


@dataclass(frozen=True)
class ModelParams:
    """Numeric parameters of the model (see throughput_model.json for provenance)."""

    connections: int
    fibre_km_per_ms: float
    detour_factor: float
    base_rtt_ms: float
    window_bytes: float
    mss_bytes: float
    mathis_c: float
    loss_intra_cloud: float
    loss_inter_cloud_by_dst_provider: Mapping[str, float]

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], source: str) -> ModelParams:
        """Read and check the ``parameters`` object of throughput_model.json."""
        params = doc.get("parameters")
        if not isinstance(params, Mapping):
            raise ProfileError(f"{source}: missing object 'parameters'")

        def num(name: str, value: Any = None, *, positive: bool = True) -> float:
            raw = params.get(name) if value is None else value
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise ProfileError(f"{source}: field 'parameters.{name}': {raw!r} is not a number")
            if raw < 0 or (positive and raw == 0):
                raise ProfileError(f"{source}: field 'parameters.{name}': {raw} must be > 0")
            return float(raw)

        inter = params.get("loss_inter_cloud_by_dst_provider")
        if not isinstance(inter, Mapping) or set(inter) != set(PROVIDERS):
            raise ProfileError(
                f"{source}: field 'parameters.loss_inter_cloud_by_dst_provider' needs "
                + ", ".join(PROVIDERS)
            )
        connections = doc.get("connections")
        if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
            raise ProfileError(f"{source}: field 'connections' must be an int >= 1")
        return cls(
            connections=connections,
            fibre_km_per_ms=num("fibre_km_per_ms"),
            detour_factor=num("detour_factor"),
            base_rtt_ms=num("base_rtt_ms"),
            window_bytes=num("window_bytes"),
            mss_bytes=num("mss_bytes"),
            mathis_c=num("mathis_c"),
            loss_intra_cloud=num("loss_intra_cloud"),
            loss_inter_cloud_by_dst_provider={
                p: num(f"loss_inter_cloud_by_dst_provider.{p}", inter[p]) for p in PROVIDERS
            },
        )


def great_circle_km(a: Region, b: Region) -> float:
    """Haversine distance between two regions' cities."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a.lat, a.lon, b.lat, b.lon))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def rtt_ms(p: ModelParams, distance_km: float) -> float:
    """Round-trip time over fibre that detours ``detour_factor`` times the great circle."""
    return p.base_rtt_ms + 2.0 * distance_km * p.detour_factor / p.fibre_km_per_ms


def per_connection_gbps(p: ModelParams, rtt: float, loss: float) -> float:
    """One TCP flow: the lower of the window bound and the Mathis loss bound."""
    rtt_s = rtt / 1000.0
    window = p.window_bytes * 8 / rtt_s
    mathis = p.mss_bytes * 8 * p.mathis_c / (rtt_s * math.sqrt(loss))
    return min(window, mathis) / 1e9


def uncapped_gbps(p: ModelParams, src: Region, dst: Region) -> float:
    """``connections`` flows between one VM at each end, before per-VM caps."""
    loss = (
        p.loss_intra_cloud
        if src.provider == dst.provider
        else p.loss_inter_cloud_by_dst_provider[dst.provider]
    )
    return p.connections * per_connection_gbps(p, rtt_ms(p, great_circle_km(src, dst)), loss)


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
