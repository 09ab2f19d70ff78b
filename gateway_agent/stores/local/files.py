"""File-level helpers of the local store: which names a folder can hold, what identifies one
content of a file (its version), whole reads, and in-kernel copies."""

from __future__ import annotations

import errno
import math
import os
from dataclasses import replace
from datetime import UTC, datetime

from gateway_agent.stores.base import ListRow, ObjectInfo
from gateway_agent.stores.local.atomic import TMP_PREFIX, write_all

STAGING = ".%staging"
_COPY_BUFFER = 8 * 1024 * 1024
NAME_MAX = 255
# The longest path a system call takes is PATH_MAX (4096) bytes with its terminating NUL.
PATH_MAX = 4096
# A file is written under a temporary name in its folder first (``atomic.tmp_name``) when the
# file system has no unnamed files or an existing file is replaced: that name must fit too.
TMP_NAME_BYTES = len(TMP_PREFIX) + 16


def path_problem(path: str, name: str) -> str | None:
    """Why the file system cannot take ``path`` (a key's file, ``name`` its last segment) as
    a path, or None: the path, or its temporary name's, is longer than PATH_MAX allows."""
    if 4 * (len(path) + TMP_NAME_BYTES) < PATH_MAX:  # the common case: no encoding needed
        return None
    size = len(os.fsencode(path))
    longest = size + max(0, TMP_NAME_BYTES - len(os.fsencode(name)))
    if longest < PATH_MAX:
        return None
    return (
        f"a local path is at most {PATH_MAX - 1} bytes, root included (this one is {size} "
        f"bytes{'' if size >= PATH_MAX else ', its temporary name longer'})"
    )


def segment_problem(segment: str, top: bool) -> str | None:
    """Why a local folder cannot hold this key segment as a file name, or None."""
    # The common name first (this runs for every object of a transfer): not starting with a
    # dot, and short enough that even 4 UTF-8 bytes a character stay within NAME_MAX.
    if segment and segment[0] != "." and len(segment) <= NAME_MAX // 4:
        return None
    if segment in ("", ".", ".."):
        return f"a local path cannot have an empty, '.' or '..' segment ({segment!r})"
    if len(os.fsencode(segment)) > NAME_MAX:
        return f"a file name is at most {NAME_MAX} bytes"
    if segment.startswith(TMP_PREFIX) or (top and segment == STAGING):
        return f"{segment!r} is a name this store reserves for itself"
    return None


def copy_into(src_fd: int, out_fd: int) -> None:
    """Copy all of ``src_fd`` at ``out_fd``'s offset in the kernel (no trip through Python).

    ``out_fd`` must not be O_APPEND (copy_file_range refuses that); both offsets advance, so the
    buffered fallback (other filesystems, old kernels) continues exactly where it stopped.
    """
    remaining = os.fstat(src_fd).st_size
    while remaining > 0:
        try:
            sent = os.copy_file_range(src_fd, out_fd, min(remaining, 1 << 30))
        except OSError:
            chunk = os.read(src_fd, min(remaining, _COPY_BUFFER))
            write_all(out_fd, chunk)
            sent = len(chunk)
        if sent == 0:
            return
        remaining -= sent


def copy_range(src_fd: int, src_offset: int, out_fd: int, out_offset: int, length: int) -> None:
    """Copy ``length`` bytes between explicit offsets in the kernel (file offsets untouched);
    a buffered ``pread``/``pwrite`` where ``copy_file_range`` is refused."""
    while length > 0:
        try:
            sent = os.copy_file_range(src_fd, out_fd, min(length, 1 << 30), src_offset, out_offset)
        except OSError:
            chunk = os.pread(src_fd, min(length, _COPY_BUFFER), src_offset)
            view = memoryview(chunk)
            pos = out_offset
            while view:
                n = os.pwrite(out_fd, view, pos)
                view, pos = view[n:], pos + n
            sent = len(chunk)
        if sent == 0:
            raise OSError(errno.EIO, "source shorter than the range to copy")
        src_offset, out_offset, length = src_offset + sent, out_offset + sent, length - sent


def file_version(st: os.stat_result) -> str:
    """What identifies one content of a file: a rewrite that keeps size and mtime still moves
    the ctime, a replacement by rename changes the inode."""
    return f"{st.st_size}-{st.st_mtime_ns}-{st.st_ctime_ns}-{st.st_dev}-{st.st_ino}"


def version_mtime_ns(version: str) -> int | None:
    """The mtime a :func:`file_version` holds (None for anything else)."""
    parts = version.split("-")
    return int(parts[1]) if len(parts) == 5 and parts[1].isdigit() else None


def changed_at(st: os.stat_result) -> float:
    """When the file last changed, as far as the file system can tell: the later of its mtime
    and ctime. The mtime alone can be put back (a tarball extracted over the file, ``cp -p``,
    ``touch -d``); the ctime cannot, and moves with any such change. A versioned listing (a
    source's) reports this time, so sync copies a file replaced by one of the same size and an
    older mtime; it also copies one whose mode or links changed, which is wasted, not wrong."""
    return st.st_mtime if st.st_mtime_ns >= st.st_ctime_ns else st.st_ctime


def file_info(key: str, st: os.stat_result, size: int | None = None) -> ObjectInfo:
    """What ``list`` and ``head`` report for a file (once per listed file: kept lean); its
    time is ``changed_at``."""
    mtime_ns, st_size = st.st_mtime_ns, st.st_size
    version = f"{st_size}-{mtime_ns}-{st.st_ctime_ns}-{st.st_dev}-{st.st_ino}"  # file_version
    return ObjectInfo(
        key,
        st_size if size is None else size,
        f"{mtime_ns:x}-{st_size:x}",
        {},
        datetime.fromtimestamp(changed_at(st), UTC),
        version,
        None if st.st_mtime_ns >= st.st_ctime_ns else datetime.fromtimestamp(st.st_mtime, UTC),
    )


def file_row(key: str, st: os.stat_result, size: int | None = None) -> ListRow:
    """``file_info`` as the plain tuple of ``list_rows``: the same facts, no objects. The time
    is the microseconds ``datetime.fromtimestamp(changed_at(st))`` holds (its half-even
    rounding of the float), so both forms give one fingerprint."""
    mtime_ns, st_size = st.st_mtime_ns, st.st_size
    frac, whole = math.modf(changed_at(st))
    return (
        key,
        st_size if size is None else size,
        int(whole) * 1_000_000 + round(frac * 1e6),
        None,
        # file_version's and file_info's strings; %-formatting: the same text, a little faster
        "%d-%d-%d-%d-%d" % (st_size, mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino),  # noqa: UP031
        "%x-%x" % (mtime_ns, st_size),  # noqa: UP031
    )


def mtime_micros(st: os.stat_result) -> int:
    """A file's mtime in the microseconds ``file_row_unversioned`` reports."""
    frac, whole = math.modf(st.st_mtime)
    return int(whole) * 1_000_000 + round(frac * 1e6)


def file_row_unversioned(key: str, st: os.stat_result, size: int | None = None) -> ListRow:
    """``file_row`` without version: what a sync's destination listing needs (size, time and
    the etag its sync record keeps, ``transfer/syncstate.py``), without formatting the version
    string per file. Its time is the mtime,
    when the file's bytes were last written: a copy's ctime also moves when it gets another
    name (a hard-link snapshot of the replica) or mode, which says nothing of its bytes and
    must not make an old copy look newer than its changed source."""
    size = st.st_size if size is None else size
    etag = "%x-%x" % (st.st_mtime_ns, st.st_size)  # noqa: UP031 - file_info's, a little faster
    return (key, size, mtime_micros(st), None, None, etag)


def written_info(key: str, st: os.stat_result) -> ObjectInfo:
    """What a write returns: its stat predates linking the file into place (which moves the
    ctime), so the version is left for ``head``/``list`` to tell."""
    return replace(file_info(key, st), version=None)


def preadv_all(fd: int, start: int, view: memoryview) -> int:
    """Fill ``view`` from ``start`` (less at the end of the file); the bytes read."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], start + got)
        if n == 0:
            break
        got += n
    return got


def pread_all(fd: int, start: int, length: int) -> bytes:
    """``length`` bytes from ``start`` (fewer at the end of the file)."""
    first = os.pread(fd, length, start)
    if len(first) in (0, length):
        return first
    out = bytearray(first)
    while len(out) < length:
        more = os.pread(fd, length - len(out), start + len(out))
        if not more:
            break
        out += more
    return bytes(out)
