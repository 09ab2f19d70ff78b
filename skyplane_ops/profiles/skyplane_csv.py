"""Read Skyplane-format throughput CSVs (the grid Skyplane's planner used) as they are.

Two layouts are accepted, told apart by their columns:

* Skyplane's own: ``src_region, dst_region, throughput_sent, throughput_received`` in bit/s,
  optional ``src_tier, dst_tier, success`` and more;
* the compacted copy in ``/work/shared/data``-style files: ``src, dst, gbit_s_sent,
  gbit_s_received`` in Gbit/s, optional ``src_tier, dst_tier, connections, samples``.

GCP ends are zones (``gcp:us-central1-a``); the region is the zone without its last ``-x``.
Rows with ``success`` false are skipped. Duplicate rows (several zones of one region, repeated
measurements) are aggregated per region pair and tier by the sample-weighted MEAN of each rate
(``samples`` column, else 1 per row): the mean is what a transfer over those paths sees on
average, and it is how the published copy was derived. Rates are converted with 1 Gbit = 1e9
bit (SI). ``tier="premium"`` keeps rows whose ends are all PREMIUM; ``"standard"`` keeps rows
whose GCP ends are all STANDARD (AWS and Azure ends have one tier, PREMIUM).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from skyplane_ops.errors import ProfileError

TIERS = ("premium", "standard")
_BITS = {"throughput_sent": "sent", "throughput_received": "received"}
_GBITS = {"gbit_s_sent": "sent", "gbit_s_received": "received"}


@dataclass(frozen=True)
class SkyplaneRate:
    """One region pair after aggregation: Gbit/s sent and received, samples, connections."""

    src: str
    dst: str
    gbps_received: float
    gbps_sent: float
    samples: int
    connections: int


def region_of(endpoint: str) -> str:
    """``gcp:us-central1-a`` -> ``gcp:us-central1``; other providers' ids are regions."""
    text = endpoint.strip()
    provider, _, name = text.partition(":")
    if not provider or not name:
        raise ValueError(f"{endpoint!r} is not provider:region")
    if provider == "gcp" and name.count("-") >= 2 and len(name.rsplit("-", 1)[1]) == 1:
        name = name.rsplit("-", 1)[0]
    return f"{provider}:{name}"


def _tier_ok(row: Mapping[str, str], src: str, dst: str, tier: str) -> bool:
    ends = ((src, row.get("src_tier")), (dst, row.get("dst_tier")))
    for region, value in ends:
        label = (value or "PREMIUM").strip().upper()
        want = "STANDARD" if tier == "standard" and region.startswith("gcp:") else "PREMIUM"
        if label != want:
            return False
    return True


def _number(row: Mapping[str, str], column: str, where: str) -> float:
    try:
        value = float(row.get(column) or "")
    except ValueError:
        raise ProfileError(
            f"{where}: field {column!r}: {row.get(column)!r} is not a number"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where}: field {column!r}: {value} must be a finite number >= 0")
    return value


def _rows(path: str | Path) -> Iterator[tuple[str, dict[str, str]]]:
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read Skyplane grid: {exc}") from exc
    with handle:
        reader = csv.DictReader(handle)
        names = set(reader.fieldnames or [])
        if not ({"src_region", "dst_region"} | set(_BITS) <= names) and not (
            {"src", "dst"} | set(_GBITS) <= names
        ):
            raise ProfileError(
                f"{path}: not a Skyplane grid: need src_region, dst_region, throughput_sent, "
                "throughput_received (bit/s) or src, dst, gbit_s_sent, gbit_s_received"
            )
        for i, row in enumerate(reader, start=1):
            yield f"{path}: row {i} (line {reader.line_num})", row


def read_skyplane_csv(path: str | Path, *, tier: str = "premium") -> list[SkyplaneRate]:
    """Aggregated rates per ordered region pair (same-region pairs included), file order."""
    if tier not in TIERS:
        raise ProfileError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    sums: dict[tuple[str, str], list[float]] = {}
    rows = 0
    for where, row in _rows(path):
        rows += 1
        if str(row.get("success", "True")).strip().lower() in ("false", "0", "no"):
            continue
        raw = "src_region" in row
        try:
            src = region_of(row["src_region" if raw else "src"])
            dst = region_of(row["dst_region" if raw else "dst"])
        except ValueError as exc:
            raise ProfileError(f"{where}: {exc}") from None
        if not _tier_ok(row, src, dst, tier):
            continue
        scale = 1e-9 if raw else 1.0
        columns = _BITS if raw else _GBITS
        rate = {kind: _number(row, col, where) * scale for col, kind in columns.items()}
        samples = int(_number(row, "samples", where)) if row.get("samples") else 1
        conns = int(_number(row, "connections", where)) if row.get("connections") else 64
        acc = sums.setdefault((src, dst), [0.0, 0.0, 0, conns])
        if acc[3] != conns:
            raise ProfileError(f"{where}: {src} -> {dst} measured at {conns} and {acc[3]} flows")
        acc[0] += rate["received"] * samples
        acc[1] += rate["sent"] * samples
        acc[2] += samples
    if rows == 0:
        raise ProfileError(f"{path}: the grid has no rows")
    return [
        SkyplaneRate(s, d, rec / n, sent / n, int(n), int(c))
        for (s, d), (rec, sent, n, c) in sums.items()
        if n > 0
    ]
