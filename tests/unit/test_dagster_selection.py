"""Dagster's spelling of the selection controls (issue 39): ``SkyplaneResource`` fields with the
request's names, and a time-window partition's window as ``changed_since``/``changed_before``."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from skyplane_ops.dagster.resource import SkyplaneResource
from skyplane_ops.dagster.steps import partition_window


def test_a_daily_partition_selects_the_objects_changed_within_its_day(tmp_path: Path) -> None:
    days = dg.DailyPartitionsDefinition(start_date="2026-11-01")
    window = partition_window(days, "2026-11-20")
    assert window is not None
    resource = SkyplaneResource(partition_window=True, ignore_existing=True, max_age="3d")
    request = resource.request(
        str(tmp_path / "src"), str(tmp_path / "dst"), journal_dir=str(tmp_path), transfer_id="t",
        window=window,
    )  # fmt: skip
    assert request.changed_since == "2026-11-20T00:00:00+00:00"
    assert request.changed_before == "2026-11-21T00:00:00+00:00"
    assert request.ignore_existing and request.max_age == 3 * 86400.0
    assert partition_window(dg.StaticPartitionsDefinition(["a"]), "a") is None
    plain = SkyplaneResource(files_from=["k/1", "k/2"]).request(
        str(tmp_path / "src"), str(tmp_path / "dst"), journal_dir=str(tmp_path), transfer_id="t",
        window=window,
    )  # fmt: skip
    assert plain.changed_since is None and plain.files_from == ("k/1", "k/2")
