"""Odd names, symbolic links and unreadable entries through a real ``skyplane-ops cp``.

Every kind of name a local disk holds must land under the same name, byte-identical (today one
``report%202024.txt`` made every run fail). Links follow rclone's habits: skipped with a warning
by default, ``-L`` follows (a loop is one skipped entry), ``-l`` copies the link itself. An
unreadable folder or file is a per-object error that names the key and the cause and blames
the source; the rest lands, and the next run copies what was missing.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan
from skyplane_ops.transfer import ObjectsFailedError, run_transfer
from tests.faults._names import (
    COMMON,
    DOUBLE_SLASH,
    NEWLINE,
    NO_USERNS,
    NOT_UTF8,
    cp,
    finish,
    tree,
    userns_available,
    wait_for,
)

MiB = 1024 * 1024


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    src, dst, home = tmp_path / "src", tmp_path / "dst", tmp_path / "home"
    src.mkdir()
    dst.mkdir()
    yield src, dst, home
    for folder, subdirs, _ in os.walk(tmp_path):  # give back what a test locked
        for d in subdirs:
            path = os.path.join(folder, d)
            if not os.path.islink(path):
                os.chmod(path, 0o755)


def _write(root: Path, key: str, data: bytes) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _odd_tree(src: Path, newline: bool = True) -> dict[bytes, bytes]:
    names = [*COMMON, NOT_UTF8, "big %41 file.bin", *([NEWLINE] if newline else [])]
    for i, key in enumerate(names):
        _write(src, key, os.urandom(3 * MiB if key.startswith("big") else 100 + i))
    return tree(src)


def test_every_odd_name_lands_verbatim(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, home = dirs
    expected = _odd_tree(src)
    assert b"report%202024.txt" in expected and b"%00" in expected
    rc, out, err = finish(cp(home, src, dst))
    assert rc == 0, err
    assert json.loads(out)["verification"]["status"] == "passed"
    assert tree(dst) == expected  # names as bytes: nothing decoded, nothing lost
    assert tree(src) == expected
    rc, _, err = finish(cp(home, src, dst))  # and again over the replica
    assert rc == 0, err
    assert tree(dst) == expected


def _links(src: Path) -> None:
    _write(src, "real/inside.txt", b"inside")
    _write(src, "file.txt", b"file")
    os.symlink("real", src / "to-folder")
    os.symlink("file.txt", src / "to-file")
    os.symlink(".", src / "real" / "loop")  # a folder that contains itself
    os.symlink("missing", src / "dangling")
    os.mkfifo(src / "fifo")


def test_links_are_skipped_by_default_with_a_warning(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, home = dirs
    _links(src)
    rc, _, err = finish(cp(home, src, dst))
    assert rc == 0, err
    assert tree(dst) == {b"file.txt": b"file", b"real/inside.txt": b"inside"}
    for name in ("to-folder", "to-file", "real/loop", "dangling", "fifo"):
        assert f"skipped '{name}'" in err
    assert not any(os.path.islink(p) for p in dst.rglob("*"))


def test_copy_links_follows_them_and_skips_a_loop_once(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, home = dirs
    _links(src)
    rc, _, err = finish(cp(home, src, dst, "--copy-links"))
    assert rc == 0, err
    assert tree(dst) == {
        b"file.txt": b"file",
        b"real/inside.txt": b"inside",
        b"to-file": b"file",
        b"to-folder/inside.txt": b"inside",
    }
    assert "symbolic link loop" in err and "dangling" in err
    # met twice (real/loop, to-folder/loop): one warning each, however often the CLI lists
    assert err.count("symbolic link loop") == 2


def test_links_flag_copies_the_links_themselves(dirs: tuple[Path, Path, Path]) -> None:
    src, dst, home = dirs
    _links(src)
    rc, _, err = finish(cp(home, src, dst, "--links"))
    assert rc == 0, err
    for name in ("to-folder", "to-file", "real/loop", "dangling"):
        assert os.readlink(dst / name) == os.readlink(src / name)
    assert not list(dst.rglob("*.rclonelink"))
    assert tree(dst) == {b"file.txt": b"file", b"real/inside.txt": b"inside"}


@pytest.mark.skipif(not userns_available(), reason=NO_USERNS)
def test_unreadable_folder_is_a_per_object_error_and_the_next_run_copies_it(
    dirs: tuple[Path, Path, Path],
) -> None:
    src, dst, home = dirs
    _write(src, "ok.txt", b"ok")
    _write(src, "locked/secret.txt", b"secret")
    os.chmod(src / "locked", 0)
    rc, out, err = finish(cp(home, src, dst, unprivileged=True))
    assert rc != 0, out
    line = err.strip().splitlines()[-1]
    assert "partial" in line and "'locked/'" in line and "permission denied" in line, err
    assert "destination" not in line  # the source is to blame
    assert "Traceback" not in err
    assert tree(dst) == {b"ok.txt": b"ok"}
    os.chmod(src / "locked", stat.S_IRWXU)
    rc, _, err = finish(cp(home, src, dst, unprivileged=True))
    assert rc == 0, err
    assert tree(dst) == tree(src)


def test_a_destination_name_held_by_another_kind_fails_only_its_objects(
    dirs: tuple[Path, Path, Path],
) -> None:
    """A file where a key needs a folder (``d`` for ``d/1``), a folder where a key's file goes
    (``e.txt/``): those objects fail with the cause, at the destination; nothing there is
    removed to make room; the rest lands; once the user moves them, the next run copies all."""
    src, dst, home = dirs
    for key in ("ok.txt", "d/1", "d/2", "e.txt", "f/ok"):
        _write(src, key, os.urandom(200))
    _write(src, "big/x.bin", os.urandom(3 * MiB))  # 1 MiB parts: placed at commit
    _write(dst, "d", b"a file the user keeps")
    _write(dst, "e.txt/keep", b"a folder the user keeps")
    _write(dst, "big", b"a file where the big object's folder goes")
    rc, out, err = finish(cp(home, src, dst))
    assert rc == 3, (out, err)
    assert "Traceback" not in err
    failures = "\n".join(ln for ln in err.splitlines() if "not copied: " in ln)
    assert "'d/1': destination:" in failures and "'d' is a file, not a folder" in failures
    assert "'e.txt': destination:" in failures and "'e.txt' is a folder" in failures, err
    assert "'big/x.bin': destination:" in failures and "'big' is a file" in failures, err
    result = json.loads(out)
    assert (result["objects"], result["objects_failed"]) == (2, 4), result
    assert result["verification"]["status"] == "passed"
    assert tree(dst) == {
        b"d": b"a file the user keeps",
        b"e.txt/keep": b"a folder the user keeps",
        b"big": b"a file where the big object's folder goes",
        b"ok.txt": (src / "ok.txt").read_bytes(),
        b"f/ok": (src / "f/ok").read_bytes(),
    }
    for path in (dst / "d", dst / "e.txt/keep", dst / "big"):
        path.unlink()
    (dst / "e.txt").rmdir()
    rc, out, err = finish(cp(home, src, dst))
    assert rc == 0, err
    assert tree(dst) == tree(src)
    # The big object's 3 parts stayed staged and journaled: this run only completed it (an
    # aborted upload would resume only the 2 chunks of the objects copied before).
    assert json.loads(out)["chunks_resumed"] >= 3


@pytest.mark.skipif(not userns_available(), reason=NO_USERNS)
def test_folder_made_unreadable_mid_run_fails_only_its_objects(
    dirs: tuple[Path, Path, Path],
) -> None:
    src, dst, home = dirs
    for name in ("a.bin", "locked/b.bin", "locked/c.bin"):  # 2 parts each: chunks 0-1, 2-3, 4-5
        _write(src, name, os.urandom(2 * MiB))
    expected = tree(src)
    gate = home.parent / "gate"
    proc = cp(
        home,
        src,
        dst,
        hooks={"read_gate": {"after": 2, "file": str(gate)}},
        unprivileged=True,
    )
    wait_for(Path(f"{gate}.paused"), proc)
    os.chmod(src / "locked", 0)
    gate.touch()
    rc, out, err = finish(proc)
    assert rc != 0, out
    line = err.strip().splitlines()[-1]
    assert "partial: 2 object(s)" in line, err
    assert "'locked/b.bin': source: reading the source failed" in line
    assert "permission denied" in line and "Traceback" not in err
    assert tree(dst) == {b"a.bin": expected[b"a.bin"]}
    os.chmod(src / "locked", stat.S_IRWXU)
    rc, _, err = finish(cp(home, src, dst, unprivileged=True))
    assert rc == 0, err
    assert tree(dst) == expected


@pytest.mark.emulator
def test_names_cross_to_s3_and_back_and_what_cannot_cross_is_named(
    tmp_path: Path, moto_s3: Any
) -> None:
    """local -> S3 (moto_server) -> local through real gateways: every name S3 can hold
    crosses verbatim both ways; a non-UTF-8 file name (S3 cannot hold it) and an ``a//b`` key
    (a disk cannot) are per-object errors that blame the destination, nothing else fails."""
    src, back, journal = tmp_path / "src", tmp_path / "back", tmp_path / "journal"
    expected = _odd_tree(src, newline=False)  # moto_server cannot hold a line break in a key
    bucket = moto_s3.make_bucket(f"names-{uuid.uuid4().hex[:8]}")
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet):
        with pytest.raises(ObjectsFailedError) as err:
            run_transfer(
                plan,
                fleet,
                f"file://{src}",
                bucket,
                dst_options=moto_s3.options,
                journal_dir=journal,
                part_size=MiB * 5,
            )
        assert list(err.value.failures) == [NOT_UTF8]
        assert err.value.failures[NOT_UTF8].startswith("destination: ")
        s3 = open_store(bucket, moto_s3.options)
        crossed = {os.fsencode(o.key): s3.read(o.key) for o in s3.list()}
        assert crossed == {k: v for k, v in expected.items() if k != os.fsencode(NOT_UTF8)}
        s3.write(DOUBLE_SLASH, b"two slashes")
        with pytest.raises(ObjectsFailedError) as err:
            run_transfer(
                plan,
                fleet,
                bucket,
                f"file://{back}",
                src_options=moto_s3.options,
                journal_dir=journal,
                part_size=MiB * 5,
            )
        assert list(err.value.failures) == [DOUBLE_SLASH]
        assert "destination: " in err.value.failures[DOUBLE_SLASH]
    assert tree(back) == crossed
