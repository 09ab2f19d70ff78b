"""Atomic file creation for the local store: a file appears complete under its name, or not at all.

Fast path (Linux ``O_TMPFILE``: ext4, xfs, btrfs, tmpfs): an unnamed file is opened in the
target's folder, filled, then given its name with ``linkat`` -- four system calls for a small
object (open, write, fstat, link) and nothing left behind if the process dies half-way. ``linkat``
never replaces a file, so an overwrite links under a hidden temporary name and renames that over
the old file. Where ``O_TMPFILE`` is missing, a hidden named temporary file (``.%tmp-<random>``,
a name key escaping never produces, so listings skip it) is written in the same folder and
renamed into place.

Missing parent folders are created on demand: the first attempt assumes they exist (the common
case costs no extra call), and a folder that vanishes under us (another process pruning empty
folders after a delete) is recreated and the step retried.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable

TMP_PREFIX = ".%tmp-"
_ATTEMPTS = 16
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)  # what kernels/filesystems answer
_state: dict[str, int | None] = {}  # "proc": an fd of /proc (None: no usable O_TMPFILE)
# Bytes per write system call. The page cache sizes its folios by the write: a 64 MiB write
# asks for large folios, which come from the buddy allocator's high orders, and on a VM with
# free page reporting those blocks are the ones handed back to the host, so every first touch
# faults there. Here (a nested VM with reporting on) one thread wrote 4 GiB into the page cache
# in 2.4-3.9 s of system time with 32 KiB writes (order 3, the largest order the per-CPU page
# lists keep), 5 s with 1 MiB and 10 s with 64 MiB. rclone writes 32 KiB at a time too.
WRITE_PIECE = 32 * 1024


def _proc_fd() -> int | None:
    """A directory fd of ``/proc`` (``self/fd/N`` is resolved per call, so it survives fork)."""
    if "proc" not in _state:
        fd = None
        if hasattr(os, "O_TMPFILE"):
            with contextlib.suppress(OSError):
                fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        _state["proc"] = fd
    return _state["proc"]


def tmp_name(folder: str) -> str:
    """A fresh hidden name in ``folder`` for a temporary file."""
    return os.path.join(folder, TMP_PREFIX + os.urandom(8).hex())


def make_folder(folder: str) -> None:
    """``mkdir -p`` for a retry loop: it tolerates a concurrent creator and a concurrent pruner
    (the caller's next attempt tells); an existing *file* in the way surfaces there as ENOTDIR.
    """
    missing: list[str] = []  # iterative (os.makedirs recurses once per missing folder)
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return


def _open(folder: str, make_parents: bool) -> tuple[int, str | None]:
    """Open a writable file in ``folder``: unnamed (``None``) or a hidden temporary name."""
    for _ in range(_ATTEMPTS):
        try:
            if _proc_fd() is not None:
                try:
                    return os.open(folder, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666), None
                except OSError as exc:
                    if exc.errno in _UNSUPPORTED:
                        _state["proc"] = None  # this filesystem has no O_TMPFILE: stop trying
                    elif exc.errno != errno.EPERM:
                        raise
                    # EPERM: also what O_TMPFILE answers in a folder removed under us; the named
                    # open below tells that race (ENOENT, retried) from a real refusal.
            tmp = tmp_name(folder)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            return os.open(tmp, flags, 0o666), tmp
        except FileNotFoundError:
            if not make_parents:
                raise
            make_folder(folder)
    raise FileNotFoundError(errno.ENOENT, "folder keeps vanishing", folder)


def _link(fd: int, dest: str) -> None:
    """Give the unnamed file ``fd`` the name ``dest``, replacing an existing file atomically."""
    proc = _state["proc"]
    source = f"self/fd/{fd}"
    try:
        os.link(source, dest, src_dir_fd=proc, follow_symlinks=True)
    except FileExistsError:
        tmp = tmp_name(os.path.dirname(dest))
        os.link(source, tmp, src_dir_fd=proc, follow_symlinks=True)
        try:
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def rename_into(src: str, dest: str, make_parents: bool = True) -> None:
    """``os.replace`` that creates (or recreates) the destination's folders when needed."""
    for _ in range(_ATTEMPTS):
        try:
            os.replace(src, dest)
            return
        except FileNotFoundError:
            if not make_parents or not os.path.exists(src):
                raise
            make_folder(os.path.dirname(dest))
    raise FileNotFoundError(errno.ENOENT, "folder keeps vanishing", dest)


def _name(fd: int, tmp: str | None, dest: str, make_parents: bool) -> None:
    """Give the filled file its name ``dest`` (rename of the temporary name, or link of the
    unnamed file), recreating vanished folders."""
    if tmp is not None:
        rename_into(tmp, dest, make_parents)
        return
    for _ in range(_ATTEMPTS):
        try:
            _link(fd, dest)
            return
        except FileNotFoundError:
            if not make_parents:
                raise
            make_folder(os.path.dirname(dest))
    raise FileNotFoundError(errno.ENOENT, "folder keeps vanishing", os.path.dirname(dest))


def sync_folder(folder: str) -> None:
    """Make the names in ``folder`` durable (a new name lives in its folder's data)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_file(
    dest: str, fill: Callable[[int], None], *, fsync: bool = False, make_parents: bool = True
) -> os.stat_result:
    """Create ``dest`` with ``fill(fd)``; it appears whole or not at all. Returns its stat.

    With ``fsync`` the bytes are on disk before the name exists, and the name once this
    returns."""
    folder = os.path.dirname(dest)
    fd, tmp = _open(folder, make_parents)
    try:
        fill(fd)
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
        _name(fd, tmp, dest, make_parents)
        tmp = None
        if fsync:
            sync_folder(folder)
        return st
    finally:
        os.close(fd)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (short writes happen on some filesystems), at
    most :data:`WRITE_PIECE` bytes per call."""
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view[:WRITE_PIECE]) :]


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """``os.pwrite`` until every byte is written at ``offset``, :data:`WRITE_PIECE` at a time."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view[:WRITE_PIECE], offset)
        view, offset = view[n:], offset + n
