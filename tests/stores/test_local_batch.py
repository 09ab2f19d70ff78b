"""A sink writes a batch of small objects to a folder in one call: every object lands whole or
not at all, a name the folder cannot hold fails only itself, a durable batch (``fsync``) names
no file before its bytes are flushed, and a writer killed mid-batch leaves no torn file behind
(a re-run then produces the same tree, byte for byte)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway_agent.stores import KeyBlockedError, KeyNotSupportedError, open_store
from gateway_agent.stores.local import batch


def _body(key: str, size: int = 4096) -> bytes:
    """Deterministic content per key, so a torn or mixed file is recognisable."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def test_a_batch_lands_and_a_bad_name_fails_only_itself(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", {"links": "store"})
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "x").write_bytes(b"previous version")
    items = [
        ("a/1", memoryview(_body("a/1"))),
        ("a//bad", memoryview(b"never")),
        ("old/x", memoryview(_body("old/x"))),  # an overwrite replaces the file atomically
        ("b/c/2", memoryview(b"")),
        ("ln.rclonelink", memoryview(b"a/1")),  # links=store: becomes a symbolic link
    ]
    errors = store.write_batch(items)
    assert [type(e) for e in errors] == [
        type(None),
        KeyNotSupportedError,
        type(None),
        type(None),
        type(None),
    ]
    assert (tmp_path / "a" / "1").read_bytes() == _body("a/1")
    assert (tmp_path / "old" / "x").read_bytes() == _body("old/x")
    assert (tmp_path / "b" / "c" / "2").read_bytes() == b""
    assert os.readlink(tmp_path / "ln") == "a/1"
    assert sorted(o.key for o in store.list()) == ["a/1", "b/c/2", "ln.rclonelink", "old/x"]
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".%")]


@pytest.mark.parametrize("fsync", [False, True])
def test_a_name_held_by_another_kind_fails_only_itself_and_is_left_alone(
    tmp_path: Path, fsync: bool
) -> None:
    """A file where a key needs a folder, a folder where a key's file goes: each of those
    items fails with ``KeyBlockedError`` naming what is in the way; nothing there is touched
    (whole writes and multipart completion say the same)."""
    store = open_store(f"file://{tmp_path}", {"fsync": fsync})
    (tmp_path / "d").write_bytes(b"keep me")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "keep").write_bytes(b"keep me too")
    items = [("d/1", memoryview(b"x")), ("ok", memoryview(b"y")), ("e", memoryview(b"z"))]
    errors = store.write_batch(items)
    assert [type(e) for e in errors] == [KeyBlockedError, type(None), KeyBlockedError]
    assert "'d' is a file, not a folder" in str(errors[0])
    assert "'e' is a folder" in str(errors[2])
    with pytest.raises(KeyBlockedError, match="'d' is a file"):
        store.write("d/deeper/2", b"x")
    upload = store.create_multipart("e")
    store.upload_part("e", upload, 1, b"part")
    with pytest.raises(KeyBlockedError, match="'e' is a folder"):
        store.complete_multipart("e", upload, [1])
    assert (tmp_path / "d").read_bytes() == b"keep me"
    assert (tmp_path / "e" / "keep").read_bytes() == b"keep me too"
    assert (tmp_path / "ok").read_bytes() == b"y"


def test_a_durable_batch_flushes_every_file_before_naming_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"file://{tmp_path}", {"fsync": True})
    keys = [f"d{i % 3}/o{i:03d}" for i in range(batch.GROUP + 10)]
    events: list[tuple[str, object]] = []
    real_fdatasync, real_sync_folder = os.fdatasync, batch.sync_folder

    def fdatasync(fd: int) -> None:
        named = sum(1 for k in keys if (tmp_path / k).exists())
        events.append(("flush", named))
        real_fdatasync(fd)

    def sync_folder(folder: str) -> None:
        events.append(("folder", Path(folder).relative_to(tmp_path).as_posix()))
        real_sync_folder(folder)

    monkeypatch.setattr(batch.os, "fdatasync", fdatasync)
    monkeypatch.setattr(batch, "sync_folder", sync_folder)
    assert store.write_batch([(k, memoryview(_body(k))) for k in keys]) == [None] * len(keys)
    for k in keys:
        assert (tmp_path / k).read_bytes() == _body(k)
    flushes = [e for e in events if e[0] == "flush"]
    assert len(flushes) == len(keys)  # one per file
    # First group: nothing is named while its files are flushed; second group: only the first
    # group's files are.
    assert {n for _, n in flushes[: batch.GROUP]} == {0}
    assert {n for _, n in flushes[batch.GROUP :]} == {batch.GROUP}
    # Every folder that got names is flushed once per group, after that group's flushes.
    group = batch.GROUP
    assert sorted(events[group : group + 3]) == [("folder", f"d{i}") for i in range(3)]
    assert sorted(events[-3:]) == [("folder", f"d{i}") for i in range(3)]
    assert len(events) == len(keys) + 6


_WRITER = """
import hashlib, sys
from gateway_agent.stores import open_store
root, progress, fsync = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
store = open_store("file://" + root, {"fsync": fsync})
def body(key, size=32768):
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]
for b in range(int(sys.argv[4])):
    keys = [f"p{b:03d}/o{i:03d}" for i in range(64)]
    errors = store.write_batch([(k, memoryview(body(k))) for k in keys])
    assert errors == [None] * len(keys), errors
    with open(progress, "a") as fh:
        fh.write(f"{b}\\n")
"""


@pytest.mark.parametrize("fsync", [False, True])
def test_a_writer_killed_mid_batch_leaves_no_torn_file(tmp_path: Path, fsync: bool) -> None:
    root, progress = tmp_path / "dst", tmp_path / "progress"
    batches = 30
    cmd = [sys.executable, "-c", _WRITER, str(root), str(progress), "1" if fsync else "0"]
    proc = subprocess.Popen([*cmd, str(batches)])
    try:
        deadline = time.monotonic() + 120
        while not progress.exists() or len(progress.read_text().split()) < 3:
            assert proc.poll() is None, "the writer ended before it was killed"
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    store = open_store(f"file://{root}")
    listed = [o.key for o in store.list()]
    assert listed, "nothing was written before the kill"
    for key in listed:  # whatever is visible is whole
        assert (root / key).read_bytes() == _body(key, 32768), key
    # A re-run writes everything; the tree is then exactly what was asked for.
    subprocess.run([*cmd, str(batches)], check=True, timeout=300)
    want = {f"p{b:03d}/o{i:03d}" for b in range(batches) for i in range(64)}
    assert {o.key for o in store.list()} == want
    for key in want:
        assert (root / key).read_bytes() == _body(key, 32768), key
