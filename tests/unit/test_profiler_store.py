"""The grid store: journal, atomic versions, newest-wins merge, staleness, diff, clear errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from skyplane_ops.profiler import (
    GridStore,
    GridStoreError,
    Measurement,
    parse_duration,
    planner_grid,
)
from skyplane_ops.profiler.errors import ProfilerError
from skyplane_ops.profiles import load_default_profile, load_measured_grid

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
A, B, C = "aws:us-east-1", "aws:us-west-2", "gcp:us-central1"


def m(src: str, dst: str, gbps: float, at: datetime, run: str = "r1", conns: int = 64):
    return Measurement(
        src=src,
        dst=dst,
        gbps=gbps,
        sent_gbps=gbps * 1.01,
        received_gbps=gbps,
        rtt_ms=12.5,
        connections=conns,
        duration_s=5.0,
        measured_at=at,
        run_id=run,
        vm_class="m5.8xlarge",
        tier="",
        backend="test",
    )


def test_append_then_publish_makes_an_immutable_version(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path / "grid"))
    assert store.latest_version() is None and store.read_version() == []
    store.append(m(A, B, 4.0, T0))
    store.append(m(B, A, 3.0, T0))
    assert len(store.pending()) == 2
    assert store.read_version() == []  # not published yet
    v1 = store.publish()
    assert v1 and store.latest_version() == v1 and store.versions() == [v1]
    assert store.pending() == []  # folded into the version
    assert {(r.src, r.dst) for r in store.read_version(v1)} == {(A, B), (B, A)}
    assert store.publish() is None  # nothing new, no new version
    store.append(m(A, C, 2.0, T0 + timedelta(hours=1), run="r2"))
    v2 = store.publish()
    assert v2 and v2 > v1 and store.versions() == [v1, v2]
    assert len(store.read_version(v1)) == 2  # old version unchanged
    assert len(store.read_version(v2)) == 3
    pointer = json.loads((tmp_path / "grid" / "LATEST").read_text())
    assert pointer["version"] == v2 and pointer["new_rows"] == 1


def test_version_file_has_provenance_and_loads_as_a_measured_grid(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 4.0, T0))
    version = store.publish()
    path = tmp_path / "versions" / f"{version}.parquet"
    table = pq.read_table(path)
    for column in (
        "measured_at",
        "connections",
        "duration_s",
        "vm_class",
        "tier",
        "sent_gbps",
        "received_gbps",
        "rtt_ms",
        "run_id",
    ):
        assert column in table.column_names
    # H1's loader reads our version files as they are.
    grid = load_measured_grid(path, load_default_profile().catalog)
    assert grid.gbps(A, B) == pytest.approx(4.0)
    assert grid.measured_at(A, B) == T0


def test_newest_measurement_wins_whatever_the_order(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 9.0, T0 + timedelta(days=2), run="new"))
    store.publish()
    store.append(m(A, B, 1.0, T0, run="old"))  # an older measurement arrives later
    store.publish()
    latest = store.latest()
    assert latest[(A, B)].gbps == 9.0 and latest[(A, B)].run_id == "new"
    grid = planner_grid(store)
    assert grid.gbps(A, B) == pytest.approx(9.0)
    assert grid.source(A, B) == "measured"


def test_modelled_values_never_override_measurements(tmp_path: Path) -> None:
    profile = load_default_profile()
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 0.123, T0))
    store.publish()
    grid = planner_grid(store, profile.throughput)
    assert grid.gbps(A, B) == pytest.approx(0.123)
    assert grid.source(A, B) == "measured"
    # Pairs with no measurement keep the default (published 2022 figure or model).
    assert grid.source(B, A) == profile.throughput.source(B, A)
    assert grid.links()[(B, A)].source == "published"
    assert grid.gbps(B, A) == pytest.approx(profile.throughput.gbps(B, A))
    # Laying the model over the measured grid again does not undo the measurement.
    again = grid.merge(profile.throughput)
    assert again.gbps(A, B) == pytest.approx(0.123)


def test_measurements_with_fewer_connections_scale_to_the_grid(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 1.0, T0, conns=16))
    grid = planner_grid(store, include_pending=True)
    assert grid.connections == 64
    assert grid.gbps(A, B) == pytest.approx(4.0)


def test_staleness_and_age(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    now = T0 + timedelta(days=10)
    store.append(m(A, B, 4.0, now - timedelta(days=1)))
    store.append(m(B, A, 4.0, now - timedelta(days=5)))
    store.append(m(A, C, 4.0, now - timedelta(days=9)))
    store.append(m(A, C, 4.0, now - timedelta(hours=2)))  # re-measured: fresh again
    store.publish()
    status = {(s.src, s.dst): s for s in store.status(parse_duration("3d"), now=now)}
    assert not status[(A, B)].stale and status[(A, B)].age_s == pytest.approx(86400)
    assert status[(B, A)].stale and status[(B, A)].age_s == pytest.approx(5 * 86400)
    assert not status[(A, C)].stale and status[(A, C)].age_s == pytest.approx(7200)


def test_diff_between_versions(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 4.0, T0))
    store.append(m(B, A, 2.0, T0))
    v1 = store.publish()
    store.append(m(A, B, 4.2, T0 + timedelta(days=3)))  # +5%
    store.append(m(B, A, 3.0, T0 + timedelta(days=3)))  # +50%
    store.append(m(A, C, 1.0, T0 + timedelta(days=3)))  # new pair
    v2 = store.publish()
    changes = {(c.src, c.dst): c for c in store.diff(v1, v2)}
    assert changes[(A, B)].change_pct == pytest.approx(5.0)
    assert changes[(B, A)].change_pct == pytest.approx(50.0)
    assert changes[(A, C)].gbps_a is None and changes[(A, C)].change_pct is None


def test_object_store_location(tmp_path: Path) -> None:
    """The same store on an object store (the in-memory backend of gateway_agent.stores)."""
    from gateway_agent.stores.memory import create_bucket, delete_bucket

    create_bucket("grids")
    try:
        store = GridStore("mem://grids/team/throughput")
        store.append(m(A, B, 4.0, T0))
        v1 = store.publish()
        again = GridStore("mem://grids/team/throughput")
        assert again.latest_version() == v1
        assert again.latest()[(A, B)].gbps == 4.0
    finally:
        delete_bucket("grids")


@pytest.mark.emulator
def test_s3_location_on_moto(moto_s3) -> None:
    uri = moto_s3.make_bucket("profiler-grid")
    store = GridStore(f"{uri.rstrip('/')}/grids", moto_s3.options)
    store.append(m(A, B, 4.0, T0))
    v1 = store.publish()
    assert GridStore(f"{uri.rstrip('/')}/grids", moto_s3.options).latest_version() == v1


def test_bad_locations_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(GridStoreError, match="cannot open grid store"):
        GridStore("ftp://example/grid")
    with pytest.raises(GridStoreError, match="empty"):
        GridStore("")
    with pytest.raises(GridStoreError):
        GridStore("mem://no-such-bucket-here/x").latest_version()
    assert issubclass(GridStoreError, ProfilerError)


def test_unreadable_grid_is_a_clear_error(tmp_path: Path) -> None:
    store = GridStore(str(tmp_path))
    store.append(m(A, B, 4.0, T0))
    version = store.publish()
    (tmp_path / "versions" / f"{version}.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(GridStoreError, match="unreadable grid"):
        store.read_version()
    with pytest.raises(GridStoreError, match="no readable version 'v0-missing'"):
        store.read_version("v0-missing")
    (tmp_path / "LATEST").write_text("{not json")
    with pytest.raises(GridStoreError, match="LATEST is corrupt"):
        store.latest_version()


def test_durations() -> None:
    assert parse_duration("3d") == 3 * 86400
    assert parse_duration("90s") == 90
    assert parse_duration("1.5h") == 5400
    assert parse_duration(12) == 12
    with pytest.raises(ProfilerError):
        parse_duration("three days")


def test_export_plans_like_the_store_with_several_connection_counts(tmp_path: Path) -> None:
    """A run probed at 4 and 64 flows gives per-connection and saturation rates from both;
    the exported file must carry both rows, or ``--measured-grid`` plans on another link
    (it did: the newest row alone, a flaky plan in test_dagster_definitions)."""
    store = GridStore(str(tmp_path / "grid"))
    store.append(m(A, B, 2.0, T0, conns=4))
    store.append(m(A, B, 9.0, T0 + timedelta(seconds=1), conns=64))
    store.append(m(A, B, 1.0, T0 - timedelta(days=1), run="r0", conns=64))  # an older run
    store.publish()
    path = str(tmp_path / "grid.parquet")
    assert store.export(path) == 2
    base = load_default_profile().throughput
    from_store = planner_grid(store, base).links_of([(A, B)])[(A, B)]
    from_file = load_measured_grid(path, base.catalog).links_of([(A, B)])[(A, B)]
    assert from_store.per_conn_gbps == pytest.approx(from_file.per_conn_gbps)
    assert from_store.sat_gbps == pytest.approx(from_file.sat_gbps)
    assert from_store.scaled_gbps(16) == pytest.approx(from_file.scaled_gbps(16))
