"""The rule that turns measurement rows into one link estimate per pair, and the planner grid."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from skyplane_ops.profiler import GridStore, Measurement, planner_grid
from skyplane_ops.profiler.links import MIN_PASSIVE_BYTES, link_estimates
from skyplane_ops.profiles import load_default_profile

A, B = "aws:us-east-1", "aws:us-west-2"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _row(
    gbps: float,
    conns: int,
    at: timedelta,
    *,
    run: str = "r1",
    source: str = "profile",
    nbytes: int = 0,
    seconds: float = 5.0,
    error: str = "",
) -> Measurement:
    return Measurement(
        src=A,
        dst=B,
        gbps=gbps,
        sent_gbps=gbps,
        received_gbps=gbps,
        rtt_ms=1.0,
        connections=conns,
        duration_s=seconds,
        measured_at=T0 + at,
        run_id=run,
        bytes_sent=nbytes,
        bytes_received=nbytes,
        source=source,
        error=error,
    )


def test_two_counts_give_per_connection_and_saturation_rates() -> None:
    link = link_estimates([_row(0.4, 4, timedelta(0)), _row(1.0, 64, timedelta(seconds=6))])[(A, B)]
    assert link is not None
    assert link.per_conn_gbps == 0.1 and link.sat_gbps == 1.0
    assert (link.gbps, link.connections, link.source) == (1.0, 64, "profile")
    # A link full with a few connections: 8 connections reach 0.8, 64 never more than 1.0.
    assert link.scaled_gbps(8) == 0.8 and link.scaled_gbps(64) == 1.0


def test_one_count_falls_back_to_linear_and_newer_run_replaces_older_as_a_whole() -> None:
    rows = [
        _row(0.4, 4, timedelta(0), run="old"),
        _row(1.0, 64, timedelta(0), run="old"),
        _row(2.0, 64, timedelta(days=1), run="new"),
    ]
    link = link_estimates(rows)[(A, B)]
    assert link is not None and link.per_conn_gbps is None and link.sat_gbps is None
    assert link.scaled_gbps(32) == 1.0  # linear from 2.0 at 64: counts of two runs never mix


def test_no_link_row_and_a_passive_row_bringing_it_back() -> None:
    dead = _row(0.0, 4, timedelta(0), error="unreachable")
    assert link_estimates([dead]) == {(A, B): None}
    alive = _row(0.5, 8, timedelta(hours=1), source="passive", nbytes=MIN_PASSIVE_BYTES)
    link = link_estimates([dead, alive])[(A, B)]
    assert link is not None and link.gbps == 0.5 and link.source == "passive"


def test_a_passive_shortfall_lowers_the_estimate_and_small_ones_do_not_count() -> None:
    profile = [_row(0.4, 4, timedelta(0)), _row(1.0, 64, timedelta(seconds=6))]
    slow = _row(0.3, 64, timedelta(hours=1), source="passive", nbytes=10 * MIN_PASSIVE_BYTES)
    link = link_estimates([*profile, slow])[(A, B)]
    assert link is not None and link.source == "passive"
    assert abs(link.scaled_gbps(64) - 0.3) < 1e-9 and abs(link.scaled_gbps(4) - 0.12) < 1e-9
    tiny = _row(0.01, 64, timedelta(hours=1), source="passive", nbytes=1024)
    assert link_estimates([*profile, tiny])[(A, B)] == link_estimates(profile)[(A, B)]
    near = _row(0.8, 64, timedelta(hours=1), source="passive", nbytes=10 * MIN_PASSIVE_BYTES)
    assert link_estimates([*profile, near])[(A, B)].scaled_gbps(64) == 1.0  # type: ignore[union-attr]
    older = _row(0.1, 64, timedelta(hours=-1), source="passive", nbytes=10 * MIN_PASSIVE_BYTES)
    assert link_estimates([*profile, older])[(A, B)] == link_estimates(profile)[(A, B)]


def test_planner_grid_exposes_links_and_never_predicts_above_saturation(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    for row in (_row(0.4, 4, timedelta(0)), _row(1.0, 64, timedelta(seconds=6))):
        store.append(row)
    store.publish()
    base = load_default_profile().throughput
    grid = planner_grid(store, base)
    links = grid.links()
    assert links[(A, B)].sat_gbps == 1.0 and links[(A, B)].per_conn_gbps == 0.1
    assert grid.gbps(A, B) == 1.0 and grid.source(A, B) == "measured"
    # Unmeasured pairs keep the base figure and its source (here the published 2022 grid).
    assert links[(B, A)].source == "published" and links[(B, A)].gbps == base.gbps(B, A)
    assert len(links) == len(grid.as_dict())


def test_a_no_link_pair_carries_nothing_in_the_planner_grid(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(_row(0.0, 4, timedelta(0), error="unreachable"))
    store.publish()
    grid = planner_grid(store, load_default_profile().throughput)
    assert grid.gbps(A, B) == 0.0 and grid.links()[(A, B)].gbps == 0.0
