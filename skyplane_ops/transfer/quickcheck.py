"""Which files of one local folder lack an equal copy in another? Told folder by folder,
without a catalog.

A sync is two listings and a comparison. Through the catalog that is a row per file on each
side (a tuple and an insert each: ~0.8 s for 100k files on two cores, where rclone needs
~0.7 s), however few files changed. Between two local folders the question can be answered in
place: each folder is read on both sides (``scandir``), each source file and its copy are
``lstat``-ed, and a source file without an equal copy is named. Two processes share the work: a
forked child takes the files whose name hashes odd (a fork keeps the parent's string hash),
this process the even ones; both read every folder, which is cheap next to the ``lstat``s.

The answer is certain or it is None. ``Walked`` counts the files with an equal copy and names
the others. Equal is sync's rule (``syncstate``) without clocks: the sync record of the folder
holds the file, its size, mtime, ctime, device and inode are the recorded ones, and its copy
has the recorded size and mtime. A file the record lacks (or differs from) is named, and the
catalog decides it (by the record, or the old rule where there is none) and records it. Without
a record file (``TreeCheck.state`` None: a caller that keeps none) every file is judged by the
old rule: the same size, and a copy not older in nanoseconds than the source's last change. Anything
out of the ordinary (a link, a FIFO, a folder that cannot be read, a copy that is not a file or
folder like its source, under ``delete`` a destination entry the source lacks) answers None,
and so do more than ``MOST_DIFFERENT`` differing files (a first copy: listing is then as
short, and the named keys would grow with the tree). None costs the time walked, never a
wrong answer: the caller lists both sides into the catalog, which decides exactly and words
every error and warning.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway_agent.stores.local.files import mtime_micros
from skyplane_ops.transfer import forked, syncstate
from skyplane_ops.transfer.manifest import matches

# ``reserved(base, name)``: a name the store keeps for itself in the folder of keys ``base``.
Reserved = Callable[[str, str], bool]
Counted = Callable[[int], None]
REPORT_EVERY = 5000  # files between the child's progress lines
# Differing files a walk names before it gives up (None): ~100 bytes each, in each process.
MOST_DIFFERENT = 65_536
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# A folder to walk: (key prefix, source path, copy path or None when the copy has no folder).
Folder = tuple[str, str, str | None]


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
    state: str | None = None  # the sync record (``syncstate``), read in each process

    def keep(self, key: str) -> bool:
        return not (self.include or self.exclude) or matches(key, self.include, self.exclude)


@dataclass
class Walked:
    """What a walk found: the source files with an equal copy (count, bytes), and the keys of
    the others (no copy, or a different one), in no particular order."""

    equal: int = 0
    equal_bytes: int = 0
    different: list[str] = field(default_factory=list)

    @property
    def files(self) -> int:
        return self.equal + len(self.different)


def same_share(
    check: TreeCheck,
    share: int = 0,
    shares: int = 1,
    *,
    stop: Callable[[], bool] = lambda: False,
    counted: Counted | None = None,
) -> Walked | None:
    """What this share of the source files found (see ``Walked``), or None. ``stop`` is asked
    before each folder (the other share gave up); ``counted`` is told the files compared so far
    after each folder."""
    stack: list[Folder] = [("", check.src, check.dst)]
    walked = Walked()
    try:
        records = None if check.state is None else syncstate.FolderRecords(check.state)
    except sqlite3.Error:
        return None
    try:
        while stack:
            if stop():
                return None
            try:
                folders = _same_folder(check, stack.pop(), share, shares, walked, records)
            except OSError:  # unreadable, or changed while read: the catalog words it
                return None
            except sqlite3.Error:  # the record cannot be read: the catalog decides
                return None
            if folders is None or len(walked.different) > MOST_DIFFERENT:
                return None
            stack.extend(sorted(folders))  # greatest name popped first
            if counted is not None:
                counted(walked.files)
        return walked
    finally:
        if records is not None:
            records.close()


def _same_folder(
    check: TreeCheck,
    folder: Folder,
    share: int,
    shares: int,
    walked: Walked,
    records: syncstate.FolderRecords | None,
) -> list[Folder] | None:
    """One folder: its subfolders to walk (its share's files are added to ``walked``), or None.
    Read through open folders, so each ``lstat`` resolves one name, not a whole path. A
    folder the copy lacks (no copy path) is read on the source side only."""
    _, src, dst = folder
    src_fd = os.open(src, _FOLDER)
    dst_fd = -1
    try:
        with os.scandir(src_fd) as it:
            entries = list(it)
        there: dict[str, os.DirEntry[str]] = {}
        if dst is not None:
            dst_fd = os.open(dst, _FOLDER)
            with os.scandir(dst_fd) as it:
                there = {e.name: e for e in it}
        known = None if records is None else records.folder(folder[0])
        # Both folders stay open until the entries are compared: their stats resolve there.
        return _compare(check, entries, there, folder, share, shares, walked, known)
    finally:
        if dst_fd >= 0:
            os.close(dst_fd)
        os.close(src_fd)


def _compare(
    check: TreeCheck,
    entries: list[os.DirEntry[str]],
    there: dict[str, os.DirEntry[str]],
    folder: Folder,
    share: int,
    shares: int,
    walked: Walked,
    known: dict[str, tuple[str, int, int | None, str | None]] | None,
) -> list[Folder] | None:
    base, src, dst = folder
    reserved, delete = check.reserved, check.delete
    filtered = bool(check.include or check.exclude)
    folders: list[Folder] = []
    different = walked.different
    equal = size = 0
    for entry in entries:  # the hot loop of a re-sync: a few checks per file, two lstats
        name = entry.name
        if name[0] == "." and reserved(base, name):
            continue
        copy = there.pop(name, None)
        if entry.is_file(follow_symlinks=False):
            if hash(name) % shares != share:
                continue
        elif entry.is_dir(follow_symlinks=False):
            if copy is not None and not copy.is_dir(follow_symlinks=False):
                return None
            inside = None if copy is None else f"{dst}/{name}"
            folders.append((base + name + "/", src + "/" + name, inside))
            continue
        else:
            return None  # a link, FIFO, socket or device: the listing's rules decide
        if filtered and not check.keep(base + name):
            if delete and copy is not None:
                return None  # a copy of a filtered-out file is a delete candidate
            continue
        if copy is None:
            different.append(base + name)
            continue
        if not copy.is_file(follow_symlinks=False):
            return None
        a, b = entry.stat(follow_symlinks=False), copy.stat(follow_symlinks=False)
        if a.st_size != b.st_size:
            different.append(base + name)
            continue
        if known is None:
            # No record kept: the listings' old rule (``local.files.changed_at``), the copy's
            # mtime against the source's last change, the later of its mtime and ctime.
            if b.st_mtime_ns < max(a.st_mtime_ns, a.st_ctime_ns):
                different.append(base + name)
                continue
        else:
            # Both sides as recorded when last known equal (``syncstate``): the source's
            # identity is its listing's version (``local.files.file_version``), the copy's
            # size and mtime in microseconds as its listing shows them.
            rec = known.get(name)
            if (
                rec is None
                or rec[1] != b.st_size
                or rec[2] != mtime_micros(b)
                or (rec[3] is not None and rec[3] != "%x-%x" % (b.st_mtime_ns, b.st_size))  # noqa: UP031
                or rec[0]
                != "%d-%d-%d-%d-%d"  # noqa: UP031
                % (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_dev, a.st_ino)
            ):
                different.append(base + name)
                continue
        equal += 1
        size += a.st_size
    if delete and any(not (n[0] == "." and reserved(base, n)) for n in there):
        return None
    walked.equal += equal
    walked.equal_bytes += size
    return folders


def walk_trees(check: TreeCheck, counted: Counted | None = None) -> Walked | None:
    """What the source's files found at the destination (see ``Walked``), or None: ask the
    catalog. In two processes when this one may fork (``forked.forkable``), else here alone."""
    if not forked.forkable():
        return same_share(check, counted=counted)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the odd share, progress lines, keys, then "= equal bytes" or "-"
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
    if got is None:
        os.write(w, b"-\n")
        return 0
    lines = [b"d %s\n" % json.dumps(key).encode() for key in got.different]
    lines.append(b"= %d %d\n" % (got.equal, got.equal_bytes))
    out = memoryview(b"".join(lines))
    while out:
        out = out[os.write(w, out) :]
    return 0


def _parent(check: TreeCheck, r: int, pid: int, counted: Counted | None) -> Walked | None:
    """The even share here while reading the child's lines; the child is always reaped."""
    said: list[bytes] = []  # the child's last word
    theirs = [0]  # files the child compared so far
    keys: list[str] = []  # the differing files the child named
    pending = bytearray()

    def take(block: bool) -> None:
        """Read what the child wrote (to its end, with ``block``)."""
        os.set_blocking(r, block)
        while True:
            try:
                data = os.read(r, 65536)
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
                elif line.startswith(b"d "):
                    keys.append(json.loads(line[2:]))
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
        equal, size = (int(x) for x in said[0][2:].split())
        mine.equal, mine.equal_bytes = mine.equal + equal, mine.equal_bytes + size
        mine.different.extend(keys)
        return mine
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(r)
