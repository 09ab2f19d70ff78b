"""Link records: the two-count rule, measured-grid link columns, links() and export."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles import (
    LinkEstimate,
    combine_counts,
    load_default_profile,
    load_measured_grid,
)
from skyplane_ops.profiles.links import CountSample

T0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
A, B = "aws:us-east-1", "gcp:us-central1"


def test_two_counts_give_per_connection_and_saturation() -> None:
    # A link full with a few connections: 4 flows already reach 0.9 of what 64 reach.
    link = combine_counts(
        [CountSample(0.9, 4, T0), CountSample(1.0, 64, T0 + timedelta(minutes=1))]
    )
    assert link.gbps == 1.0 and link.connections == 64
    assert link.per_conn_gbps == pytest.approx(0.225)
    assert link.sat_gbps == 1.0
    assert link.measured_at == (T0 + timedelta(minutes=1)).isoformat()
    # The rule never predicts less than was measured at a measured count.
    assert link.scaled_gbps(4) == pytest.approx(0.9)
    assert link.scaled_gbps(64) == pytest.approx(1.0)
    assert link.scaled_gbps(2) == pytest.approx(0.45)


def test_one_count_leaves_rates_unknown_and_scales_linearly() -> None:
    link = combine_counts([CountSample(2.0, 32, T0)], source="passive")
    assert link.per_conn_gbps is None and link.sat_gbps is None
    assert link.source == "passive"
    assert link.scaled_gbps(64) == pytest.approx(4.0)


def test_stale_counts_are_not_combined_and_newest_per_count_wins() -> None:
    link = combine_counts(
        [
            CountSample(0.5, 4, T0 - timedelta(days=3)),  # another session: stale
            CountSample(7.0, 64, T0 - timedelta(hours=1)),  # older at the same count
            CountSample(6.0, 64, T0),
        ]
    )
    assert (link.gbps, link.per_conn_gbps, link.sat_gbps) == (6.0, None, None)
    with pytest.raises(ValueError):
        combine_counts([])


def test_measured_grid_rows_at_two_counts_become_link_rates(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(
        "src,dst,gbps,connections,measured_at,source,region_cap_gbps\n"
        f"{A},{B},0.8,4,2026-11-01T12:00:00Z,profile,\n"
        f"{A},{B},1.6,64,2026-11-01T12:01:00Z,profile,2.5\n"
        f"{B},{A},3.2,32,2026-11-01T12:00:00Z,passive,\n"
    )
    catalog = load_default_profile().catalog
    grid = load_measured_grid(path, catalog)
    link = grid.links()[(A, B)]
    assert link == LinkEstimate(
        gbps=1.6,
        connections=64,
        per_conn_gbps=0.2,
        sat_gbps=1.6,
        region_cap_gbps=2.5,
        source="profile",
        measured_at="2026-11-01T12:01:00+00:00",
    )
    assert grid.gbps(A, B) == 1.6
    back = grid.link(B, A)
    assert back.source == "passive" and back.connections == 32 and back.gbps == 3.2
    assert grid.gbps(B, A) == pytest.approx(6.4)  # grid figure scaled to 64 connections


def test_bad_source_and_bad_rate_name_the_field(tmp_path: Path) -> None:
    catalog = load_default_profile().catalog
    path = tmp_path / "bad.csv"
    path.write_text(f"src,dst,gbps,connections,measured_at,source\n{A},{B},1,64,2026-01-01,x\n")
    with pytest.raises(ProfileError, match="field 'source'"):
        load_measured_grid(path, catalog)
    path.write_text(f"src,dst,gbps,connections,measured_at,sat_gbps\n{A},{B},1,64,2026-01-01,-2\n")
    with pytest.raises(ProfileError, match="field 'sat_gbps'"):
        load_measured_grid(path, catalog)


def _measured_over(base: Any, tmp_path: Path) -> Any:
    """``base`` with A -> B measured at 4 and 64 connections laid over it."""
    path = tmp_path / "m.csv"
    path.write_text(
        "src,dst,gbps,connections,measured_at\n"
        f"{A},{B},0.5,4,2026-11-01T12:00:00Z\n"
        f"{A},{B},2.0,64,2026-11-01T12:00:05Z\n"
    )
    return base.merge(load_measured_grid(path, base.catalog))


def test_links_cover_every_pair_and_survive_merge_and_export(tmp_path: Path) -> None:
    base = load_default_profile().throughput
    links = base.links()
    assert links.keys() == base.as_dict().keys()
    sources = {link.source for link in links.values()}
    assert sources <= {"published", "model"} and "model" in sources
    merged = _measured_over(base, tmp_path)
    link = merged.link(A, B)
    assert (link.source, link.per_conn_gbps, link.sat_gbps) == ("profile", 0.125, 2.0)
    out = tmp_path / "export.parquet"
    merged.write(str(out))
    again = load_measured_grid(out, base.catalog)
    assert again.link(A, B) == link
    assert again.links() == merged.links()


def test_links_of_a_few_pairs_and_a_wider_catalog_give_what_links_gives(tmp_path: Path) -> None:
    """The planner reads its edges' links with ``links_of``; custom regions widen the catalog
    with ``with_catalog``: both must agree with the whole ``links()``, measured pairs too."""
    base = load_default_profile().throughput
    merged = _measured_over(base, tmp_path)
    whole = merged.links()
    wanted = [(A, B), (B, A), (A, A), (A, "nowhere:at-all")]
    assert merged.links_of(wanted) == {(A, B): whole[(A, B)], (B, A): whole[(B, A)]}
    assert merged.links_of(wanted)[(A, B)].source == "profile"
    assert merged.with_catalog(merged.catalog).links() == whole
