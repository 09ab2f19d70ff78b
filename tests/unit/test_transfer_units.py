"""Pure parts of the transfer engine: CRC folding, manifest cutting, journal, budget."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import google_crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_agent.flow import ByteBudget
from gateway_agent.stores.base import Capabilities, ObjectInfo
from skyplane_ops.transfer.checksum import combine_ranges, crc32c_b64, crc32c_combine
from skyplane_ops.transfer.journal import Journal, transfer_key
from skyplane_ops.transfer.manifest import (
    build_manifest,
    make_chunks,
    matches,
    same_object,
)

MiB = 1024 * 1024


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=4))
def test_crc_combine_equals_whole(data: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    ranges = [(google_crc32c.value(data[a:b]), b - a) for a, b in itertools.pairwise(points)]
    whole = google_crc32c.value(data)
    assert (combine_ranges(ranges) if ranges else 0) == whole
    if len(points) > 2:
        a = google_crc32c.value(data[: points[1]])
        b = google_crc32c.value(data[points[1] :])
        assert crc32c_combine(a, b, len(data) - points[1]) == whole


def test_crc_b64_is_gcs_form() -> None:
    # GCS/S3 report base64 of the big-endian CRC32C; "hello" -> 0x9a71bb4c.
    assert crc32c_b64(google_crc32c.value(b"hello")) == "mnG7TA=="


def test_manifest_parts_align_and_small_objects_batch() -> None:
    objs = [ObjectInfo("big", 130 * MiB), ObjectInfo("exact", 64 * MiB)]
    objs += [ObjectInfo(f"tiny/{i}", 4096) for i in range(10_000)]
    m = build_manifest(objs, Capabilities(), 64 * MiB)
    big = m.segments["big"]
    assert [(s.offset, s.length, s.part) for s in big] == [
        (0, 64 * MiB, 1),
        (64 * MiB, 64 * MiB, 2),
        (128 * MiB, 2 * MiB, 3),
    ]
    assert m.segments["exact"][0].part == 0  # fits one part: written whole
    chunks = make_chunks(s for segs in m.segments.values() for s in segs)
    assert sum(len(c.segments) for c in chunks) == 3 + 1 + 10_000
    assert len(chunks) < 60  # 10,000 tiny objects ride in a few dozen chunks


def test_manifest_respects_destination_limits() -> None:
    caps = Capabilities(min_part_size=5 * MiB, max_parts=10)
    m = build_manifest([ObjectInfo("o", 100 * MiB)], caps, part_size=1 * MiB)
    segs = m.segments["o"]
    assert len(segs) <= 10 and all(s.length >= 5 * MiB for s in segs[:-1])


def test_globs_and_sync_comparison() -> None:
    assert matches("a/b.csv", ["*.csv"], [])
    assert not matches("a/b.csv", ["*.csv"], ["a/*"])
    assert not matches("a/b.txt", ["*.csv"], [])
    s = ObjectInfo("k", 10, checksums={"crc32c": "x"})
    assert same_object(s, ObjectInfo("k", 10, checksums={"crc32c": "x"}))
    assert not same_object(s, ObjectInfo("k", 10, checksums={"crc32c": "y"}))
    assert not same_object(s, ObjectInfo("k", 11))


def test_journal_resumes_only_matching_fingerprints(tmp_path: Path) -> None:
    key = transfer_key("file:///a", "file:///b", 64, [], [])
    j = Journal(tmp_path, key)
    j.record_upload("big", "up-1", [10, "e1", None])
    j.record_done([("1:big", 123, [10, "e1", None]), ("0:small", 7, [1, "e", None])])
    j.record_commit("big", 10, 456, [10, "e1", None])
    again = Journal(tmp_path, key)
    assert again.commit_for("big", [10, "e1", None]) == (10, 456)
    assert again.commit_for("big", [10, "e2", None]) is None  # a new version: copy again
    assert again.commit_for("small", [1, "e", None]) is None
    assert again.upload_for("big", [10, "e1", None]) == "up-1"
    assert again.finished("1:big", [10, "e1", None]) == 123
    assert again.finished("1:big", [10, "e2", None]) is None  # source changed since
    with open(again.path, "a") as fh:
        fh.write('{"t": "done", "segs": [[')  # torn last line after a crash
    assert Journal(tmp_path, key).finished("0:small", [1, "e", None]) == 7
    again.remove()
    assert not again.path.exists()


def test_byte_budget_blocks_and_pool_stays_bounded() -> None:
    b = ByteBudget(4 * MiB)
    assert b.acquire(3 * MiB)
    assert not b.acquire(2 * MiB, timeout=0.05)
    got: list[float] = []

    def waiter() -> None:
        t0 = time.monotonic()
        b.acquire(2 * MiB)
        got.append(time.monotonic() - t0)

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.1)
    b.release(3 * MiB)
    t.join(2)
    assert got and got[0] >= 0.09
    bufs = [b.take_buffer(MiB) for _ in range(8)]
    for buf in bufs:
        b.give_buffer(buf)
    assert b._pooled <= 2 * b.capacity


def test_encrypt_per_hop_modes() -> None:
    from skyplane_ops.planner.plan import Hop, PlanPath, TransferPlan
    from skyplane_ops.provision.fleet import Gateway, GatewayFleet
    from skyplane_ops.transfer.dispatch import Dispatcher, DispatchOptions

    path = ("aws:us-east-1", "aws:us-west-2", "gcp:us-west1")
    plan = TransferPlan(
        src=path[0], dsts=(path[2],), volume_gb=1, mode="min_cost",
        paths=[PlanPath(path, 1.0, 1.0)], hops=[Hop(path[0], path[1], 1, 2)],
        vms=dict.fromkeys(path, 1), predicted_gbps=1, egress_cost_usd=0, vm_cost_usd=0,
    )  # fmt: skip
    fleet = GatewayFleet(
        "t", "local", [Gateway(f"g{i}", r, "127.0.0.1", 1, 2) for i, r in enumerate(path)], "x"
    )
    for mode, want in (
        ("cross-cloud", {f"{path[0]}>{path[1]}": False, f"{path[1]}>{path[2]}": True}),
        (True, {f"{path[0]}>{path[1]}": True, f"{path[1]}>{path[2]}": True}),
        (
            frozenset({(path[0], path[1])}),
            {f"{path[0]}>{path[1]}": True, f"{path[1]}>{path[2]}": False},
        ),
    ):
        d = Dispatcher(plan, fleet, b"s" * 32, src_uri="mem://a/", dst_uri="mem://b/",
                       options=DispatchOptions(encrypt=mode))  # fmt: skip
        spec = d.job_spec(fleet.gateways[0])
        assert {h: v["encrypt"] for h, v in spec["hops"].items()} == want
        # The plan's 2 connections on the first hop, 8 (default) where the plan is silent.
        assert spec["hops"][f"{path[0]}>{path[1]}"]["connections"] == 2


# ---- safety checks (issue 12) ------------------------------------------------------------------


def test_overlap_of_object_store_places() -> None:
    from skyplane_ops.errors import TransferError
    from skyplane_ops.transfer.overlap import check_disjoint

    refused = [
        ("s3://bkt/data", "s3://bkt/data/"),
        ("s3://bkt/", "s3://bkt/x/"),
        ("az://acct/cont/p/", "az://acct/cont/p/q/"),
        ("https://acct.blob.core.windows.net/cont/p/", "az://acct/cont/p/"),
        ("gs://bkt/a/b/", "gs://bkt/a/"),
    ]
    for src, dst in refused:
        with pytest.raises(TransferError, match=r"same place|overlap"):
            check_disjoint(src, dst)
    allowed = [
        ("s3://bkt/data/", "s3://bkt/data2/"),
        ("s3://bkt/data/", "gs://bkt/data/"),
        ("az://acct/cont/p/", "az://other/cont/p/"),
        ("synthetic://x?size=1", "null://y"),
    ]
    for src, dst in allowed:
        check_disjoint(src, dst)
    check_disjoint("s3://bkt/d/", "s3://bkt/d/", {"endpoint_url": "http://a:1"}, {})


def test_mirror_candidates_follow_filters_and_spare_skipped_entries() -> None:
    from skyplane_ops.transfer.mirror import extra_keys

    existing = {k: ObjectInfo(k, 1) for k in ("a", "b", "logs/x", "locked/y", "link")}
    got = extra_keys(existing, {"a"}, (), ("logs/*",), keep=("locked/", "link"))
    assert got == ["b"]


def test_option_ranges() -> None:
    from skyplane_ops.errors import TransferError
    from skyplane_ops.transfer.checks import check_transfer_options
    from skyplane_ops.transfer.dispatch import DispatchOptions

    for mode in ("full", "read-back", "size"):
        check_transfer_options(part_size=MiB, verify=mode, dispatch=DispatchOptions(), max_delete=0)
    for kwargs in (
        {"verify": "readback"},
        {"part_size": 0},
        {"part_size": True},
        {"part_size": 6 * 1024**3},
        {"max_delete": -1},
        {"dispatch": DispatchOptions(connections=-3)},
        {"dispatch": DispatchOptions(writer_threads=1000)},
    ):
        args = {"part_size": MiB, "verify": "full", **kwargs}
        with pytest.raises(TransferError):
            check_transfer_options(**args)


def test_journal_lock_is_reentrant_in_one_process_and_exclusive_across(tmp_path: Path) -> None:
    import subprocess
    import sys

    from skyplane_ops.transfer.journal import JournalLock

    with JournalLock(tmp_path, "k"), JournalLock(tmp_path, "k"):
        probe = subprocess.run(
            [sys.executable, "-c",
             "import fcntl, sys; fd = open(sys.argv[1], 'a');"
             "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(tmp_path / "k.lock")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert probe.returncode != 0 and "BlockingIOError" in probe.stderr
    free = subprocess.run(
        [sys.executable, "-c",
         "import fcntl, sys; fd = open(sys.argv[1], 'a');"
         "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(tmp_path / "k.lock")],
    )  # fmt: skip
    assert free.returncode == 0
