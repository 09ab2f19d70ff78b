"""The local store's multipart uploads are written in place: parts at their offsets in one
hidden file that completion renames into place (no second copy of the data), with the same
guarantees as before: nothing visible before completion, retries that lose nothing, and no
writer ever touching an object once it is visible."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from gateway_agent.stores import UploadNotFoundError, open_store
from gateway_agent.stores.local import STAGING
from tests.stores.conftest import local_tree

MiB = 1024 * 1024


def _parts(sizes: list[int]) -> dict[int, bytes]:
    return {n: os.urandom(size) for n, size in enumerate(sizes, start=1)}


def _wait_for_blocked_lock(path: Path, timeout: float = 60.0) -> None:
    """Until some process waits for a lock on ``path`` (``/proc/locks`` lists waiters with
    ``->``), so the test exercises the waiting writer, not one that came too late."""
    inode = f":{path.stat().st_ino} "
    deadline = time.monotonic() + timeout
    while not any(
        "->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()
    ):
        assert time.monotonic() < deadline, "the writer never waited for the lock"
        time.sleep(0.01)


def _slot_inodes(root: Path, upload: str) -> dict[str, int]:
    folder = root / STAGING / upload
    return {p.name: p.stat().st_ino for p in folder.iterdir() if p.name.startswith("slots-")}


@pytest.mark.parametrize("order", [[1, 2, 3, 4], [4, 3, 2, 1], [4, 1, 3, 2]])
def test_equal_parts_land_in_place_and_are_renamed_not_copied(
    tmp_path: Path, order: list[int]
) -> None:
    """Parts of one size (the last one shorter) go to one file at their offsets, whichever
    arrives first; the object IS that file (same inode): completion copied no full part."""
    store = open_store(f"file://{tmp_path}")
    parts = _parts([MiB, MiB, MiB, 1000])
    upload = store.create_multipart("d/obj")
    for n in order:
        store.upload_part("d/obj", upload, n, parts[n])
    slots = _slot_inodes(tmp_path, upload)
    assert sorted(slots) == sorted([f"slots-{MiB}", "slots-1000"])
    assert list(store.list()) == []  # nothing visible yet
    info = store.complete_multipart("d/obj", upload, [1, 2, 3, 4])
    assert info.size == 3 * MiB + 1000
    assert store.read("d/obj") == b"".join(parts[n] for n in (1, 2, 3, 4))
    assert (tmp_path / "d" / "obj").stat().st_ino == slots[f"slots-{MiB}"]
    assert local_tree(tmp_path) == ["d/obj"]  # the upload's folder and .%staging are gone


@pytest.mark.parametrize(
    ("sizes", "listed"),
    [
        ([3, 5, 7], [1, 2, 3]),  # every part of its own size
        ([4, 2, 4], [1, 2, 3]),  # a short part in the middle
        ([4, 4, 4, 4], [1, 2, 4]),  # a gap: part 3 uploaded but not listed
        ([4, 4, 4], [2, 3]),  # not starting at 1
    ],
)
def test_other_part_shapes_are_assembled_correctly(
    tmp_path: Path, sizes: list[int], listed: list[int]
) -> None:
    store = open_store(f"file://{tmp_path}")
    parts = _parts(sizes)
    upload = store.create_multipart("k")
    for n in reversed(parts):
        store.upload_part("k", upload, n, parts[n])
    store.complete_multipart("k", upload, listed)
    assert store.read("k") == b"".join(parts[n] for n in listed)
    assert local_tree(tmp_path) == ["k"]


def test_a_part_uploaded_again_replaces_the_first_version(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    upload = store.create_multipart("k")
    store.upload_part("k", upload, 1, b"aaaa")
    store.upload_part("k", upload, 2, b"bbbbbb")  # wrong size first, then the right one
    store.upload_part("k", upload, 2, b"cc")
    store.upload_part("k", upload, 1, b"AAAA")
    store.complete_multipart("k", upload, [1, 2])
    assert store.read("k") == b"AAAAcc"


def test_unlisted_parts_cut_off_are_forgotten_not_joined_as_zeros(tmp_path: Path) -> None:
    """Completing 1..2 cuts part 3's bytes off the shared file; if that completion fails
    after the cut (simulated: the destination's folder is a file), a retry listing part 3
    must be refused, not produce zeros."""
    store = open_store(f"file://{tmp_path}")
    parts = _parts([8, 8, 8])
    upload = store.create_multipart("dir/k")
    for n, data in parts.items():
        store.upload_part("dir/k", upload, n, data)
    (tmp_path / "dir").write_bytes(b"in the way")
    with pytest.raises(Exception):  # noqa: B017 - whichever StoreError the rename maps to
        store.complete_multipart("dir/k", upload, [1, 2])
    (tmp_path / "dir").unlink()
    with pytest.raises(UploadNotFoundError):
        store.complete_multipart("dir/k", upload, [1, 2, 3])
    store.complete_multipart("dir/k", upload, [1, 2])
    assert store.read("dir/k") == parts[1] + parts[2]


def test_completion_retried_after_its_rename_says_upload_not_found(tmp_path: Path) -> None:
    """A completion that renamed the object but died before cleaning up (simulated by putting
    the folder's owner file back) is reported as an unknown upload; the object stays whole."""
    store = open_store(f"file://{tmp_path}")
    parts = _parts([16, 16])
    upload = store.create_multipart("k")
    for n, data in parts.items():
        store.upload_part("k", upload, n, data)
    folder = tmp_path / STAGING / upload
    saved = {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith("slots")}
    store.complete_multipart("k", upload, [1, 2])
    folder.mkdir(parents=True)
    for name, data in saved.items():
        (folder / name).write_bytes(data)
    with pytest.raises(UploadNotFoundError):
        store.complete_multipart("k", upload, [1, 2])
    assert store.read("k") == parts[1] + parts[2]


def test_completion_waits_for_a_part_being_written(tmp_path: Path) -> None:
    """A writer holds the upload's shared lock while it writes; completion waits for it."""
    store = open_store(f"file://{tmp_path}")
    upload = store.create_multipart("k")
    store.upload_part("k", upload, 1, b"12345678")
    writer = os.open(tmp_path / STAGING / upload / "key", os.O_RDONLY)
    fcntl.flock(writer, fcntl.LOCK_SH)  # a part write in progress
    done = threading.Event()
    completer = threading.Thread(
        target=lambda: (store.complete_multipart("k", upload, [1]), done.set())
    )
    completer.start()
    completer.join(0.3)
    assert not done.is_set() and list(store.list()) == []
    os.close(writer)  # the write finished
    completer.join(60)
    assert done.is_set() and store.read("k") == b"12345678"


def test_a_writer_that_waited_for_completion_cannot_touch_the_object(tmp_path: Path) -> None:
    """A part write that was waiting for the lock while completion renamed the file fails
    with UploadNotFoundError and the visible object keeps its bytes."""
    store = open_store(f"file://{tmp_path}")
    upload = store.create_multipart("k")
    store.upload_part("k", upload, 1, b"good")
    owner = tmp_path / STAGING / upload / "key"
    completing = os.open(owner, os.O_RDONLY)
    fcntl.flock(completing, fcntl.LOCK_EX)  # a completion in progress
    errors: list[BaseException] = []

    def late_write() -> None:
        try:
            store.upload_part("k", upload, 1, b"evil")
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=late_write)
    writer.start()
    _wait_for_blocked_lock(owner)
    # What completion does under its lock: the slot file becomes the object, the owner goes.
    os.replace(tmp_path / STAGING / upload / "slots-4", tmp_path / "k")
    owner.unlink()
    os.close(completing)
    writer.join(60)
    assert len(errors) == 1 and isinstance(errors[0], UploadNotFoundError)
    assert (tmp_path / "k").read_bytes() == b"good"


def test_parts_are_written_in_small_pieces_one_writer_per_file_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``pwrite`` carries at most ``WRITE_PIECE`` bytes (large writes ask the page cache
    for large folios, slow to first touch on VMs with free page reporting), short writes are
    continued, and threads writing parts of one object take turns, whole part by whole part,
    instead of spinning on the file's lock in the kernel."""
    from gateway_agent.stores.local import atomic

    real_pwrite = os.pwrite
    sizes: list[int] = []
    inside = {"now": 0, "most": 0}
    guard = threading.Lock()

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        with guard:
            inside["now"] += 1
            inside["most"] = max(inside["most"], inside["now"])
        try:
            sizes.append(len(data))
            time.sleep(0.0005)  # leave time for another writer to come in, if one could
            return real_pwrite(fd, data[: max(1, len(data) - 7)], offset)  # short writes
        finally:
            with guard:
                inside["now"] -= 1

    monkeypatch.setattr(os, "pwrite", pwrite)
    store = open_store(f"file://{tmp_path}")
    part = 4 * atomic.WRITE_PIECE + 123
    parts = _parts([part] * 6)
    upload = store.create_multipart("obj")
    threads = [
        threading.Thread(target=store.upload_part, args=("obj", upload, n, data))
        for n, data in parts.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.complete_multipart("obj", upload, list(parts))
    assert store.read("obj") == b"".join(parts[n] for n in sorted(parts))
    assert sizes and max(sizes) == atomic.WRITE_PIECE
    assert inside["most"] == 1
