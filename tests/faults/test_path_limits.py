"""Keys a local destination cannot hold as a path, and trees of any depth, through a real
``skyplane-ops cp`` (planner, local gateway processes over real sockets, verification).

A 3,969-byte key fits under a short source root but not under a 215-byte destination root
(PATH_MAX: 4096 bytes with the terminating NUL). That object alone fails, with its cause, every
run (exit status 3, partial); every other object is copied, the source is untouched, and every
destination object is either what was there or the source's bytes. A file 340 folders deep (a
recursive walk hit Python's recursion limit there) and one ~400 folders deep are listed like
any other: the first is copied, the second is too long a path for the destination.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults._names import cp, finish, tree

MiB = 1024 * 1024
PATH_MAX = 4096


@pytest.fixture(autouse=True)
def _remove_deep_trees(tmp_path: Path) -> Iterator[None]:
    """Remove what the test made with ``rm -rf`` (iterative): Python's ``shutil.rmtree``,
    which pytest cleans old temporary folders with, recurses once per folder level."""
    yield
    subprocess.run(["rm", "-rf", str(tmp_path)], check=False)


def _write(root: Path, key: str, data: bytes) -> None:
    """Create ``root/key`` one folder at a time (``Path.mkdir(parents=True)`` recurses once
    per missing folder: too deep for the deepest tree here)."""
    root.mkdir(parents=True, exist_ok=True)
    folder = str(root)
    for name in key.split("/")[:-1]:
        folder = f"{folder}/{name}"
        if not os.path.isdir(folder):
            os.mkdir(folder)
    with open(f"{root}/{key}", "wb") as fh:
        fh.write(data)


def _root_of(tmp_path: Path, name: str, size: int) -> Path:
    """A folder under ``tmp_path`` whose path is exactly ``size`` bytes."""
    base = tmp_path / name
    pad = size - len(os.fsencode(str(base))) - 1
    assert 0 < pad <= 255, pad
    return base / ("p" * pad)


def _long_key(size: int) -> str:
    """A key of exactly ``size`` bytes: 200-byte folders and a shorter file name."""
    folders, rest = [], size
    while rest > 250:
        folders.append(f"{len(folders):03d}" + "k" * 197)
        rest -= 201
    return "/".join([*folders, "n" * rest])


def _failures(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "not copied: " in ln or "partial" in ln]


def test_a_key_too_long_for_the_destination_fails_alone_every_run(tmp_path: Path) -> None:
    src, home = tmp_path / "s", tmp_path / "home"
    dst = _root_of(tmp_path, "d", 215)
    long_key = _long_key(3969)
    assert len(os.fsencode(f"{src}/{long_key}")) < PATH_MAX  # the source holds it
    assert len(os.fsencode(f"{dst}/{long_key}")) >= PATH_MAX  # the destination cannot
    files = {
        long_key: os.urandom(1000),
        "ok.txt": os.urandom(300),
        "sub/also.txt": os.urandom(400),
        "big.bin": os.urandom(3 * MiB),  # 1 MiB parts: a multipart object
    }
    for key, data in files.items():
        _write(src, key, data)
    _write(dst, "ok.txt", b"the old copy")  # replaced whole by the source's bytes
    _write(dst, "mine.txt", b"the user's own file")
    before = tree(src)
    expected = {
        **{k.encode(): v for k, v in files.items() if k != long_key},
        b"mine.txt": b"the user's own file",
    }
    for run in range(2):
        rc, out, err = finish(cp(home, src, dst))
        assert rc == 3, (run, out, err)
        assert "Traceback" not in err and "RecursionError" not in err, err
        failed = "\n".join(_failures(err))
        assert f"not copied: '{long_key[:40]}" in failed and "destination:" in failed, err
        assert "at most 4095 bytes" in failed, err
        result = json.loads(out)
        assert result["objects_failed"] == 1, result
        assert result["verification"]["status"] == "passed", result
        assert tree(dst) == expected, run  # the rest copied, byte-identical; mine kept
        assert tree(src) == before  # the source untouched


def test_deep_trees_are_walked_and_a_path_too_long_fails_alone(tmp_path: Path) -> None:
    src, home = tmp_path / "s", tmp_path / "home"
    dst = _root_of(tmp_path, "d", 215)
    deep = "/".join(["d"] * 340) + "/deep.bin"
    # About 400 folders: fits under the source root, not under the longer destination root
    # (not deeper: pytest's own clean-up of old temporary folders recurses once per level).
    deeper = "/".join(["e" * 9] * ((PATH_MAX - len(os.fsencode(str(src)))) // 10 - 1)) + "/x"
    assert len(os.fsencode(f"{src}/{deeper}")) < PATH_MAX <= len(os.fsencode(f"{dst}/{deeper}"))
    files = {deep: os.urandom(5000), deeper: os.urandom(70), "top.txt": os.urandom(10)}
    for key, data in files.items():
        _write(src, key, data)
    before = tree(src)
    for run in range(2):
        rc, out, err = finish(cp(home, src, dst))
        assert rc == 3, (run, out, err)
        assert "Traceback" not in err and "RecursionError" not in err, err
        failed = "\n".join(_failures(err))
        assert f"'{'e' * 9}/{'e' * 9}/" in failed and "at most 4095 bytes" in failed, err
        result = json.loads(out)
        assert (result["objects"], result["objects_failed"]) == (2, 1), result
        assert tree(dst) == {deep.encode(): files[deep], b"top.txt": files["top.txt"]}
        assert tree(src) == before
