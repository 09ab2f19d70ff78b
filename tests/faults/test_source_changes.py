"""Source objects that change while a real ``skyplane-ops cp`` reads them.

The copy is paused at a known point by the source gateways' ``read_gate`` test hook (the first
chunk reads done, the others waiting for a file to appear), the source is changed, the gate
opens. Each case asserts nothing was lost: the source holds exactly what the test wrote, every
destination object is its old version or the new one, byte-identical, never a mix, and the
next run copies the new version.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.faults._names import cp, finish, tree, wait_for

MiB = 1024 * 1024


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    return src, dst, home


def _dataset(src: Path) -> dict[bytes, bytes]:
    (src / "big.bin").write_bytes(os.urandom(4 * MiB))  # 4 parts of 1 MiB: chunks 0..3
    for i in range(5):
        (src / f"small-{i}.txt").write_bytes(os.urandom(3000))
    return tree(src)


def _rewrite_in_place_keeping_mtime(path: Path, offset: int, data: bytes) -> None:
    """What an editor or a database does to a file: same inode, same size, and (here) the old
    atime/mtime put back, so size and mtime alone cannot tell."""
    st = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def _paused_copy(
    dirs: tuple[Path, Path, Path], after_reads: int
) -> tuple[subprocess.Popen[str], Path]:
    src, dst, home = dirs
    gate = home.parent / "gate"
    proc = cp(home, src, dst, hooks={"read_gate": {"after": after_reads, "file": str(gate)}})
    wait_for(Path(f"{gate}.paused"), proc)
    return proc, gate


def test_same_size_rewrite_with_restored_mtime_keeps_the_old_replica(
    dirs: tuple[Path, Path, Path],
) -> None:
    src, dst, home = dirs
    first = _dataset(src)
    rc, _, err = finish(cp(home, src, dst))
    assert rc == 0, err
    assert tree(dst) == first  # the replica the next run must not lose

    proc, gate = _paused_copy(dirs, after_reads=2)  # parts 1-2 of big.bin read, 3-4 waiting
    _rewrite_in_place_keeping_mtime(src / "big.bin", 3 * MiB, os.urandom(MiB))
    new_source = tree(src)
    gate.touch()
    rc, out, err = finish(proc)

    assert rc != 0 and "changed" in err and "big.bin" in err, (rc, out, err)
    assert tree(src) == new_source  # the copy never touches its source
    landed = tree(dst)
    assert landed[b"big.bin"] == first[b"big.bin"]  # the old version, whole: never torn
    assert landed == first  # small files re-copied identical, nothing deleted

    rc, _, err = finish(cp(home, src, dst))  # the next run copies the new version
    assert rc == 0, err
    assert tree(dst) == new_source


def test_rewrite_of_a_new_object_mid_copy_never_lands(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, home = dirs
    _dataset(src)
    proc, gate = _paused_copy(dirs, after_reads=1)
    _rewrite_in_place_keeping_mtime(src / "big.bin", 2 * MiB, os.urandom(100))
    new_source = tree(src)
    gate.touch()
    rc, out, err = finish(proc)

    assert rc != 0 and "big.bin" in err, (rc, out, err)
    landed = tree(dst)
    assert b"big.bin" not in landed  # neither version is complete here: nothing lands
    assert landed == {k: v for k, v in new_source.items() if k != b"big.bin"}
    rc, _, err = finish(cp(home, src, dst))
    assert rc == 0, err
    assert tree(dst) == new_source


def test_object_deleted_mid_copy_is_reported_and_the_rest_lands(
    dirs: tuple[Path, Path, Path],
) -> None:
    src, dst, _home = dirs
    _dataset(src)
    proc, gate = _paused_copy(dirs, after_reads=1)
    (src / "big.bin").unlink()
    gate.touch()
    rc, out, err = finish(proc)

    assert rc != 0 and "big.bin" in err, (rc, out, err)
    assert tree(dst) == tree(src)  # the small files, whole; no trace of big.bin


# -- the gateway's read path on its own (no end-of-run re-listing behind it) ---------------------
def test_gateway_read_pinned_to_the_listing_refuses_a_same_size_rewrite(tmp_path: Path) -> None:
    """What a source gateway does with one segment: the listed version is checked on the open
    file before the first and after the last byte, so the rewrite with the old mtime put back
    is a ``changed`` object, not bytes to send; an unreadable file is a ``failed`` object
    blamed on the source."""
    from gateway_agent.job import Job, ObjectFailed
    from gateway_agent.stores import open_store

    (tmp_path / "f.bin").write_bytes(b"a" * 4096)
    store = open_store(f"file://{tmp_path}")
    (info,) = list(store.list())
    seg = {"key": "f.bin", "offset": 1024, "length": 1024, "version": info.version}
    assert Job._read_segment(store, seg) == b"a" * 1024
    _rewrite_in_place_keeping_mtime(tmp_path / "f.bin", 2048, b"b" * 10)
    with pytest.raises(ObjectFailed) as err:
        Job._read_segment(store, seg)
    assert (err.value.kind, err.value.key, err.value.side) == ("changed", "f.bin", "source")
    assert "changed after it was listed" in err.value.why

    (tmp_path / "f.bin").unlink()
    with pytest.raises(ObjectFailed) as err:
        Job._read_segment(store, seg)
    assert err.value.kind == "changed"  # deleted since the listing

    (tmp_path / "g.bin").write_bytes(b"g")
    with pytest.raises(ObjectFailed) as err:
        Job._read_segment(store, {"key": "g.bin/x", "offset": 0, "length": 1})
    assert (err.value.kind, err.value.side) == ("failed", "source")
    assert "reading the source failed" in err.value.why
