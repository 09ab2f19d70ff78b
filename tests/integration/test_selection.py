"""Selection by time and by a list of keys, and the overwrite policy, on real runs.

Real gateway processes on loopback copy between folders (times set with ``os.utime``) and
between S3 buckets of a real moto server behind a counting HTTP proxy, so "nothing is listed"
is what the server saw, not what the code meant to send.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops import api
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import run_transfer, selection
from skyplane_ops.transfer.result import PartialTransferError
from tests.integration.http_proxy import CountingProxy

HOUR = 3600.0


def _age(root: Path, key: str, seconds: float) -> None:
    """Date ``root/key`` ``seconds`` in the past (negative: in the future)."""
    when = time.time() - seconds
    os.utime(root / key, (when, when))


def _dated_tree(src: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Files a week, a day and a moment old, seen by a clock 20 days ahead.

    A local file's time is its last change (the later of mtime and ctime, see
    ``selection.window``), and the ctime cannot be set back: the files are dated into the
    future instead and the selection's clock (only it) is moved past them."""
    data = write_dataset(src, {"new/a": 100, "new/b": 200, "day/c": 300, "week/d": 400})
    ahead = 20 * 24 * HOUR
    for key, age in (("new/a", 60), ("new/b", 60), ("day/c", 30 * HOUR), ("week/d", 8 * 24 * HOUR)):
        _age(src, key, age - ahead)
    monkeypatch.setattr(selection, "clock", lambda: time.time() + ahead)
    return data


@pytest.fixture
def fleet() -> Any:
    plan = make_plan([SRC, DST])
    with local_fleet(plan) as (_, running):
        yield plan, running


def test_max_age_min_age_and_a_timestamp_window_select_by_modification_time(
    tmp_path: Path, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, running = fleet
    src, journal = tmp_path / "src", tmp_path / "j"
    data = _dated_tree(src, monkeypatch)

    dst = tmp_path / "fresh"
    dst.mkdir()
    result = copy_dirs(plan, running, (src, dst, journal), max_age="1h")
    assert result.objects == 2 and result.verified
    assert read_tree(dst) == {k: data[k] for k in ("new/a", "new/b")}

    dst = tmp_path / "older"
    dst.mkdir()
    result = copy_dirs(plan, running, (src, dst, journal), min_age="1d")
    assert read_tree(dst) == {k: data[k] for k in ("day/c", "week/d")}

    dst = tmp_path / "window"
    dst.mkdir()
    now = selection.clock()
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 2 * 24 * HOUR))
    before = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now - 2 * HOUR))
    result = copy_dirs(
        plan, running, (src, dst, journal), changed_since=since, changed_before=before
    )
    assert read_tree(dst) == {"day/c": data["day/c"]}


def test_a_window_that_selects_nothing_is_a_run_with_nothing_to_copy(
    tmp_path: Path, fleet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduled run when nothing landed is a normal answer, not an error."""
    plan, running = fleet
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    _dated_tree(src, monkeypatch)
    result = copy_dirs(plan, running, (src, dst, tmp_path / "j"), max_age="30s")
    assert result.objects == 0 and read_tree(dst) == {}


def test_ignore_existing_and_update_keep_destination_objects_and_the_dry_run_says_so(
    tmp_path: Path, fleet: Any
) -> None:
    plan, running = fleet
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "j"
    data = write_dataset(src, {"same": 10, "older": 20, "newer": 30, "absent": 40})
    theirs = write_dataset(dst, {"same": 11, "older": 21, "newer": 31}, seed=2)
    _age(dst, "older", 5 * HOUR)  # the destination's copy is older than the source
    for key in ("same", "newer"):
        _age(dst, key, -HOUR)  # ... these newer

    with api.preview_transfer(
        f"file://{src}", f"file://{dst}", journal_dir=journal, update=True
    ) as preview:
        lines = list(preview.lines())
    assert "would keep newer: newer at the destination (--update)" in lines
    assert "would keep same: newer at the destination (--update)" in lines
    assert any(line.startswith("would copy older") for line in lines)

    result = copy_dirs(plan, running, (src, dst, journal), update=True)
    assert result.objects == 2 and result.objects_skipped == 2
    got = read_tree(dst)
    assert got["older"] == data["older"] and got["absent"] == data["absent"]
    assert got["newer"] == theirs["newer"] and got["same"] == theirs["same"]

    write_dataset(dst, {"older": 22}, seed=3)  # someone replaced it again
    result = copy_dirs(plan, running, (src, dst, journal), ignore_existing=True)
    assert result.objects == 0 and read_tree(dst)["older"] != data["older"]

    # A plain sync afterwards is not fooled: the kept objects were never recorded as equal.
    result = copy_dirs(plan, running, (src, dst, journal), sync=True)
    assert read_tree(dst) == data


def _is_listing(method: str, path: str) -> bool:
    """A ListObjects request: a GET of a bucket, not of a key."""
    bucket_path = path.split("?", 1)[0].strip("/")
    return method == "GET" and ("list-type" in path or "/" not in bucket_path)


def test_files_from_reads_and_checks_by_key_and_sends_no_listing(
    tmp_path: Path, moto_s3: Any
) -> None:
    name = f"ff{uuid.uuid4().hex[:8]}"
    src_uri, dst_uri = moto_s3.make_bucket(name + "s"), moto_s3.make_bucket(name + "d")
    direct = open_store(src_uri, moto_s3.options)
    blobs = {f"k/{i:03d}": os.urandom(500 + i) for i in range(60)}
    for key, blob in blobs.items():
        direct.write(key, blob)
    open_store(dst_uri, moto_s3.options).write("k/002", b"theirs")
    named = ["k/001", "k/002", "k/017", "k/059"]
    plan = make_plan([SRC, DST])
    with (
        CountingProxy(moto_s3.options["endpoint_url"]) as proxy,
        local_fleet(plan, hooks=False) as (_, running),
    ):
        options = {**moto_s3.options, "endpoint_url": proxy.endpoint}
        result = run_transfer(
            plan,
            running,
            src_uri,
            dst_uri,
            src_options=options,
            dst_options=options,
            journal_dir=tmp_path / "j",
            files_from="\n".join(named),
            ignore_existing=True,
        )
        seen = list(proxy.requests)
    assert result.verified and result.objects == 3 and result.objects_skipped == 1
    got = {o.key: o for o in open_store(dst_uri, moto_s3.options).list()}
    assert sorted(got) == ["k/001", "k/002", "k/017", "k/059"]
    assert open_store(dst_uri, moto_s3.options).read("k/002") == b"theirs"
    for key in ("k/001", "k/017", "k/059"):
        assert open_store(dst_uri, moto_s3.options).read(key) == blobs[key], key
    assert [r for r in seen if _is_listing(*r)] == [], seen
    heads = [p for m, p in seen if m == "HEAD"]
    assert heads, seen
    assert len(seen) < 40  # requests per named key, not per object in the bucket


def test_a_named_key_the_source_lacks_fails_alone(tmp_path: Path, fleet: Any) -> None:
    plan, running = fleet
    src, dst = tmp_path / "src", tmp_path / "dst"
    dst.mkdir()
    data = write_dataset(src, {"a": 10, "b/c": 20, "d": 30})
    with pytest.raises(PartialTransferError) as err:
        copy_dirs(plan, running, (src, dst, tmp_path / "j"), files_from=["b/c", "gone"])
    assert list(err.value.failed) == ["gone"]
    assert re.search("not found", err.value.failed["gone"])
    assert read_tree(dst) == {"b/c": data["b/c"]}
