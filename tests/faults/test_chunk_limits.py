"""Chunk sizes that cannot work are refused up front, naming the option and the limit.

A chunk travels as one wire frame (at most 1 GiB of payload) and is held whole in a gateway's
byte budget (1 GiB by default): ``--chunk-mib`` 1025..5120, which the help used to allow, failed
every run on objects over 1 GiB ("Connection reset by peer") after listing and starting
gateways, with gateway memory far above its budget. Now it is one line before anything is
listed or started; objects needing more parts than their store allows get larger parts, never
above a frame.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gateway_agent.stores.base import Capabilities
from gateway_agent.wire import MAX_PAYLOAD
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.manifest import choose_part_size
from skyplane_ops.transfer.request import TransferRequest
from tests.faults._names import cp, finish

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_chunk_mib_2048_is_refused_before_any_listing(tmp_path: Path) -> None:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(1000))
    t0 = time.monotonic()
    rc, out, err = finish(cp(home, src, dst, "--chunk-mib", "2048"))
    assert rc not in (0, 3), (rc, out, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "--chunk-mib" in lines[0] and "1 GiB" in lines[0] and "1 to 1024" in lines[0], err
    assert time.monotonic() - t0 < 60
    assert not dst.exists()  # nothing written, nothing started
    assert not (home / "journal").exists() or not any((home / "journal").iterdir())
    assert (src / "a.bin").stat().st_size == 1000


@pytest.mark.parametrize("mib", [1025, 2048, 5120])
def test_the_request_refuses_parts_above_one_frame(tmp_path: Path, mib: int) -> None:
    with pytest.raises(TransferError, match=r"--chunk-mib.*1 GiB"):
        TransferRequest.build(str(tmp_path / "s"), str(tmp_path / "d"), part_size=mib * MiB)
    ok = TransferRequest.build(str(tmp_path / "s"), str(tmp_path / "d"), part_size=1024 * MiB)
    assert ok.part_size == MAX_PAYLOAD


def test_parts_grow_for_huge_objects_but_never_above_a_frame() -> None:
    s3 = Capabilities(min_part_size=5 * MiB, max_parts=10_000)
    # 1 TiB at 64 MiB parts needs 16,384 parts: parts grow to fit 10,000.
    part = choose_part_size(1024 * GiB, 64 * MiB, s3)
    assert 1024 * GiB / part <= 10_000 and part <= MAX_PAYLOAD
    # 20 TiB cannot fit 10,000 parts of at most a frame: the part stays a frame.
    assert choose_part_size(20 * 1024 * GiB, 64 * MiB, s3) == MAX_PAYLOAD
    azure = Capabilities(max_parts=50_000)
    assert choose_part_size(40 * 1024 * GiB, 64 * MiB, azure) <= MAX_PAYLOAD


def test_a_chunk_larger_than_a_gateways_budget_is_refused_before_any_byte_moves(
    tmp_path: Path,
) -> None:
    """A gateway holds a chunk whole: with a 2 MiB budget (backend option ``buffer_mib``),
    4 MiB parts of a 5 MiB file are refused when the job starts, in one line naming both
    knobs, and nothing is written; the same run with an 8 MiB budget copies it."""
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    data = os.urandom(5 * MiB)
    (src / "big.bin").write_bytes(data)
    small = ("--chunk-mib", "4", "--backend-options", '{"buffer_mib": 2}')
    rc, out, err = finish(cp(home, src, dst, *small))
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err
    assert "byte budget of 2 MiB" in err and "--chunk-mib" in err and "buffer_mib" in err, err
    assert not (dst / "big.bin").exists()  # nothing written (its upload is only staged)
    enough = ("--chunk-mib", "4", "--backend-options", '{"buffer_mib": 8}')
    rc, out, err = finish(cp(home, src, dst, *enough))
    assert rc == 0, (rc, out, err)
    assert (dst / "big.bin").read_bytes() == data
    assert sorted(p.name for p in dst.iterdir()) == ["big.bin"]  # the staged upload is gone
    assert (src / "big.bin").read_bytes() == data
