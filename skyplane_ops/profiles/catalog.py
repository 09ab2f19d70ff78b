"""Region catalog: every AWS, Azure and GCP region we can place, with continent and coordinates.

Region ids are ``provider:name`` (``aws:us-east-1``). Bare names (``us-east-1``) are accepted
wherever an id is, because no name is shared between the three providers today; if one ever is,
the bare name is rejected as ambiguous and the error lists the full ids.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path

from skyplane_ops.errors import ProfileError, UnknownRegionError
from skyplane_ops.profiles._data import default_file, read_text

PROVIDERS = ("aws", "azure", "gcp")
CONTINENTS = (
    "north_america",
    "south_america",
    "europe",
    "asia",
    "oceania",
    "middle_east",
    "africa",
)
REGION_COLUMNS = ("id", "provider", "name", "continent", "city", "lat", "lon")


@dataclass(frozen=True)
class Region:
    """One cloud region; ``city`` and coordinates are approximate (the region's metro)."""

    id: str
    provider: str
    name: str
    continent: str
    city: str
    lat: float
    lon: float
    custom: bool = False  # a user's own site (custom.py): no coordinates, no model throughput


class RegionCatalog:
    """An ordered, immutable set of regions with lookup by id or unambiguous bare name."""

    def __init__(self, regions: Iterable[Region]) -> None:
        self._regions: dict[str, Region] = {}
        bare: dict[str, list[str]] = {}
        for region in regions:
            if region.id in self._regions:
                raise ProfileError(f"duplicate region id {region.id!r}")
            self._regions[region.id] = region
            bare.setdefault(region.name, []).append(region.id)
        self._bare = bare

    def __iter__(self) -> Iterator[Region]:
        return iter(self._regions.values())

    def __len__(self) -> int:
        return len(self._regions)

    def __contains__(self, region_id: object) -> bool:
        if not isinstance(region_id, str):
            return False
        return region_id in self._regions or len(self._bare.get(region_id, ())) == 1

    def resolve(self, region_id: str) -> str:
        """Return the full id for ``region_id`` (full id or unambiguous bare name)."""
        if region_id in self._regions:
            return region_id
        matches = self._bare.get(region_id, [])
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise UnknownRegionError(region_id, sorted(matches))
        raise UnknownRegionError(region_id, self.suggest(region_id))

    def get(self, region_id: str) -> Region:
        """Return the region; raises UnknownRegionError with the closest names."""
        return self._regions[self.resolve(region_id)]

    def suggest(self, region_id: str, n: int = 3) -> list[str]:
        """Closest full ids to a misspelt id or bare name (difflib ratio)."""
        if ":" in region_id:
            return difflib.get_close_matches(region_id, list(self._regions), n=n, cutoff=0.6)
        names = difflib.get_close_matches(region_id, list(self._bare), n=n, cutoff=0.6)
        return [rid for name in names for rid in self._bare[name]][:n]

    def with_regions(self, regions: Iterable[Region]) -> RegionCatalog:
        """A new catalog with ``regions`` appended (an id already present is an error)."""
        extra = list(regions)
        for region in extra:
            if region.id in self._regions:
                raise ProfileError(f"region {region.id!r} is already in the catalog")
        return RegionCatalog([*self._regions.values(), *extra])

    def ids(self) -> list[str]:
        return list(self._regions)

    def by_provider(self, provider: str) -> list[Region]:
        return [r for r in self._regions.values() if r.provider == provider]


def _parse_float(text: str, where: str, field: str, lo: float, hi: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ProfileError(f"{where}: field {field!r}: {text!r} is not a number") from None
    if not lo <= value <= hi:
        raise ProfileError(f"{where}: field {field!r}: {value} is outside [{lo}, {hi}]")
    return value


def parse_regions_csv(text: str, source: str) -> RegionCatalog:
    """Parse a regions CSV; every problem names the file, the row (1 = header) and the field."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REGION_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ProfileError(f"{source}: missing column(s) {', '.join(missing)}")
    regions: list[Region] = []
    seen: set[str] = set()
    for row_no, row in enumerate(reader, start=2):
        where = f"{source}: row {row_no}"
        values = {c: (row.get(c) or "").strip() for c in REGION_COLUMNS}
        for column in ("id", "provider", "name", "continent"):
            if not values[column]:
                raise ProfileError(f"{where}: field {column!r} is empty")
        if values["provider"] not in PROVIDERS:
            raise ProfileError(
                f"{where}: field 'provider': unknown provider {values['provider']!r}"
            )
        if values["continent"] not in CONTINENTS:
            raise ProfileError(
                f"{where}: field 'continent': {values['continent']!r} is not one of "
                + ", ".join(CONTINENTS)
            )
        if values["id"] != f"{values['provider']}:{values['name']}":
            raise ProfileError(f"{where}: field 'id': expected provider:name, got {values['id']!r}")
        if values["id"] in seen:
            raise ProfileError(f"{where}: field 'id': duplicate region {values['id']!r}")
        seen.add(values["id"])
        regions.append(
            Region(
                id=values["id"],
                provider=values["provider"],
                name=values["name"],
                continent=values["continent"],
                city=values["city"],
                lat=_parse_float(values["lat"], where, "lat", -90.0, 90.0),
                lon=_parse_float(values["lon"], where, "lon", -180.0, 180.0),
            )
        )
    if not regions:
        raise ProfileError(f"{source}: no regions")
    return RegionCatalog(regions)


def load_catalog(path: str | Path | Traversable | None = None) -> RegionCatalog:
    """Load a region catalog CSV (default: the shipped ``regions.csv``)."""
    source = path if path is not None else default_file("regions.csv")
    return parse_regions_csv(read_text(source), str(source))
