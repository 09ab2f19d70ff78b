"""Is one local folder already a copy of another? Told folder by folder, without a catalog.

A re-sync of an unchanged tree is two listings and a comparison. Through the catalog that is a
row per file on each side (a tuple and an insert each: ~0.8 s for 100k files on two cores, where
rclone needs ~0.7 s). Between two local folders the question can be answered in place: each
folder is read on both sides (``scandir``), each source file and its copy are ``lstat``-ed, and
the walk stops at the first file that differs. Two processes share the work: a forked child
takes the files whose name hashes odd (a fork keeps the parent's string hash), this process the
even ones; both read every folder, which is cheap next to the ``lstat``s.

The answer is certain or it is None. Anything out of the ordinary (a link, a FIFO, a folder that
cannot be read, a file missing or different, under ``delete`` a destination entry the source
lacks) answers None, and the caller lists both sides into the catalog, which decides exactly and
words every error and warning. So None costs the time walked, never a wrong answer: a file
called equal here is one ``todo.nothing_to_do`` would skip (the same size, and a destination
time not older in nanoseconds, so not older in the microseconds the catalog keeps).

Subfolders are walked greatest name first: a data lake's new partitions sort last, so a sync
that has work usually finds it in its first folder.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skyplane_ops.transfer import forked
from skyplane_ops.transfer.manifest import matches

# ``reserved(base, name)``: a name the store keeps for itself in the folder of keys ``base``.
Reserved = Callable[[str, str], bool]
Counted = Callable[[int], None]
REPORT_EVERY = 5000  # files between the child's progress lines
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class TreeCheck:
    """What to compare: two folder trees, the source filters, and whether a destination entry
    without a source would be deleted (then it is work, so the answer is None)."""

    src: str
    dst: str
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    delete: bool = False
    reserved: Reserved = lambda base, name: False

    def keep(self, key: str) -> bool:
        return not (self.include or self.exclude) or matches(key, self.include, self.exclude)


def same_share(
    check: TreeCheck,
    share: int = 0,
    shares: int = 1,
    *,
    stop: Callable[[], bool] = lambda: False,
    counted: Counted | None = None,
) -> tuple[int, int] | None:
    """(files, bytes) of this share's source files when every one has an equal copy, or None.
    ``stop`` is asked before each folder (the other share found work); ``counted`` is told the
    files compared so far after each folder."""
    stack = [("", check.src, check.dst)]
    files = size = 0
    while stack:
        if stop():
            return None
        base, src, dst = stack.pop()
        try:
            found = _same_folder(check, src, dst, base, share, shares)
        except OSError:  # unreadable, or changed while read: the catalog words it
            return None
        if found is None:
            return None
        folders, n, b = found
        files, size = files + n, size + b
        stack.extend(sorted(folders))  # (key prefix, source, copy): greatest name popped first
        if counted is not None:
            counted(files)
    return files, size


def _same_folder(
    check: TreeCheck, src: str, dst: str, base: str, share: int, shares: int
) -> tuple[list[tuple[str, str, str]], int, int] | None:
    """One folder: its subfolders to walk, and its share's files and bytes, or None. Read
    through open folders, so each ``lstat`` resolves one name, not a whole path."""
    src_fd = os.open(src, _FOLDER)
    try:
        dst_fd = os.open(dst, _FOLDER)
        try:
            with os.scandir(src_fd) as it:
                entries = list(it)
            with os.scandir(dst_fd) as it:
                there = {e.name: e for e in it}
            return _compare(check, entries, there, src, dst, base, share, shares)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def _compare(
    check: TreeCheck,
    entries: list[os.DirEntry[str]],
    there: dict[str, os.DirEntry[str]],
    src: str,
    dst: str,
    base: str,
    share: int,
    shares: int,
) -> tuple[list[tuple[str, str, str]], int, int] | None:
    reserved, delete = check.reserved, check.delete
    filtered = bool(check.include or check.exclude)
    folders: list[tuple[str, str, str]] = []
    files = size = 0
    for entry in entries:  # the hot loop of a re-sync: a few checks per file, two lstats
        name = entry.name
        if name[0] == "." and reserved(base, name):
            continue
        copy = there.pop(name, None)
        if entry.is_file(follow_symlinks=False):
            if hash(name) % shares != share:
                continue
        elif entry.is_dir(follow_symlinks=False):
            if copy is None or not copy.is_dir(follow_symlinks=False):
                return None
            folders.append((base + name + "/", src + "/" + name, dst + "/" + name))
            continue
        else:
            return None  # a link, FIFO, socket or device: the listing's rules decide
        if filtered and not check.keep(base + name):
            if delete and copy is not None:
                return None  # a copy of a filtered-out file is a delete candidate
            continue
        if copy is None or not copy.is_file(follow_symlinks=False):
            return None
        a, b = entry.stat(follow_symlinks=False), copy.stat(follow_symlinks=False)
        if a.st_size != b.st_size or b.st_mtime_ns < a.st_mtime_ns:
            return None
        files += 1
        size += a.st_size
    if delete and any(not (n[0] == "." and reserved(base, n)) for n in there):
        return None
    return folders, files, size


def trees_same(check: TreeCheck, counted: Counted | None = None) -> tuple[int, int] | None:
    """(files, bytes) of the source when the destination already holds an equal copy of every
    source file (and, under ``delete``, nothing else), or None: ask the catalog.

    In two processes when this one may fork (``forked.forkable``), else here alone."""
    if not forked.forkable():
        return same_share(check, counted=counted)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the odd share, progress lines, then "= files bytes" or "-"
        code = 1
        try:
            os.close(r)
            code = _child(check, w)
        finally:
            os._exit(code)
    os.close(w)
    return _parent(check, r, pid, counted)


def _child(check: TreeCheck, w: int) -> int:
    reported = [0]

    def progress(files: int) -> None:
        if files - reported[0] >= REPORT_EVERY:
            os.write(w, b"+%d\n" % (files - reported[0]))
            reported[0] = files

    got = same_share(check, 1, 2, counted=progress)
    os.write(w, b"-\n" if got is None else b"= %d %d\n" % got)
    return 0


def _parent(check: TreeCheck, r: int, pid: int, counted: Counted | None) -> tuple[int, int] | None:
    """The even share here while reading the child's lines; the child is always reaped."""
    said: list[bytes] = []  # the child's last word
    theirs = [0]  # files the child compared so far
    pending = bytearray()

    def take(block: bool) -> None:
        """Read what the child wrote (to its end, with ``block``)."""
        os.set_blocking(r, block)
        while True:
            try:
                data = os.read(r, 4096)
            except BlockingIOError:
                return
            if not data:
                return
            pending.extend(data)
            *lines, rest = pending.split(b"\n")
            pending[:] = rest
            for line in lines:
                if line.startswith(b"+"):
                    theirs[0] += int(line[1:])
                else:
                    said.append(bytes(line))

    def stop() -> bool:
        take(False)
        return bool(said) and said[0] == b"-"

    def progress(files: int) -> None:
        if counted is not None:
            counted(files + theirs[0])

    reaped = False
    try:
        mine = same_share(check, 0, 2, stop=stop, counted=progress)
        if mine is None:
            return None
        take(True)
        _, status = os.waitpid(pid, 0)
        reaped = True
        if status != 0 or not said or not said[0].startswith(b"= "):
            return None
        files, size = (int(x) for x in said[0][2:].split())
        return mine[0] + files, mine[1] + size
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(r)
