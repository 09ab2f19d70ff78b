"""Listing a local folder tree: file names are keys verbatim, links follow a policy, and one
bad entry is recorded, not fatal.

Names are never decoded: ``report%202024.txt``, ``%00``, a name with a newline, and bytes that
are not UTF-8 (``os.scandir`` hands them over as surrogate escapes) are the keys, so every file
found reads back under its key. Symbolic links follow rclone's habits, by the store option
``links``: ``skip`` (the default, a warning per link: a link may point anywhere, even back up
the tree), ``follow`` (``-L``: copy what it points to; a link back to a folder above it is one
skipped entry, a loop or a dangling link too) or ``store`` (``-l``: the link itself becomes an
object ``NAME.rclonelink`` whose content is the link's target). FIFOs, sockets and devices are
skipped (reading a FIFO would block). A folder or file that cannot be read is recorded as an
*error* entry and the walk goes on; only an unreadable starting folder fails the listing.

A walk can be one *share* of ``shares``: only the entries of the starting folder whose name
hashes (CRC32 of the name's bytes) to ``share`` are followed, so ``shares`` walks, in as many
processes, list disjoint parts that together are the whole listing. The hash of a name does
not depend on the folder's other entries: a file created or removed during the walks moves no
other entry from one share to another (an index into the sorted folder would).
"""

from __future__ import annotations

import errno
import logging
import operator
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from gateway_agent.stores.base import SkippedEntry

T = TypeVar("T")
# Entries per yielded batch at most: a folder of a million files streams in slices.
CHUNK = 5000

log = logging.getLogger("gateway_agent.stores.local")

_NAME = operator.attrgetter("name")
LINK_SUFFIX = ".rclonelink"
LINK_MODES = ("skip", "follow", "store")
_WARNED: set[tuple[str, str, str]] = set()
_MAX_WARNED = 100_000
_SKIP_HINT = (
    "symbolic link not copied (links=skip; links=follow copies its target, links=store the link)"
)


class _Folder(NamedTuple):
    """A folder to walk into: its path, its key prefix and the folders above it."""

    path: str
    base: str
    ancestors: frozenset[tuple[int, int]]


# What one entry gives: its listing entries, a folder to walk into, or nothing.
Found = list[T] | _Folder | None


def _why(exc: OSError) -> str:
    """``permission denied (EACCES)``: the cause in words and its errno name."""
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return f"{(exc.strerror or str(exc)).lower()} ({code})"


@dataclass
class Walk(Generic[T]):
    """One listing: its policy, where skipped entries go, and how a stat becomes an entry
    (an ``ObjectInfo`` for ``list``, a plain tuple for the catalog's ``list_rows``).

    The walk yields *lists* of entries in listing order (a folder's files between its
    sub-folders, at most ``CHUNK`` each): one generator step per slice, not per file, so a
    file costs its ``stat`` and ``info`` and little else however deep the tree."""

    root: str
    prefix: str
    links: str
    info: Callable[[str, os.stat_result, int | None], T]
    skipped: list[SkippedEntry] = field(default_factory=list)
    # Names the store keeps for itself; only asked about names starting with ".".
    hidden: Callable[[str, str], bool] = lambda base, name: False
    share: int = 0  # this walk follows the starting folder's entries of this share only
    shares: int = 1

    def skip(self, key: str, reason: str, error: bool = False) -> None:
        """Record an entry left out (once per store, however often it is listed) and warn
        once per process (the CLI lists a source to size the plan and again to copy it)."""
        entry = SkippedEntry(key, reason, error)
        if entry not in self.skipped:
            self.skipped.append(entry)
        said = (self.root, key, reason)
        if said not in _WARNED and len(_WARNED) < _MAX_WARNED:
            _WARNED.add(said)
            log.warning("%s %r: %s", "cannot list" if error else "skipped", key, reason)

    def in_share(self, name: str) -> bool:
        return zlib.crc32(os.fsencode(name)) % self.shares == self.share

    def wanted(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def descend(self, folder_key: str) -> bool:
        return folder_key.startswith(self.prefix) or self.prefix.startswith(folder_key)

    def tree(
        self,
        directory: str,
        base: str,
        ancestors: frozenset[tuple[int, int]],
        split: bool = False,
    ) -> Iterator[list[T]]:
        """Entries under ``directory`` (whose key prefix is ``base``), sorted by name, depth
        first; with ``split`` (the starting folder) only those of this walk's share.

        Iterative: the folders being read are a list, not nested calls, so a tree of any
        depth is walked (nested generators hit Python's recursion limit ~330 folders down)."""
        first = self.folder(directory, base, split)
        if first is None:
            return
        stack: list[tuple[Iterator[os.DirEntry[str]], str, frozenset[tuple[int, int]]]] = [
            (iter(first), base, ancestors)
        ]
        info, hidden, prefix = self.info, self.hidden, self.prefix
        out: list[T] = []
        while stack:
            entries, base, ancestors = stack[-1]
            inner: _Folder | None = None
            for entry in entries:
                name = entry.name
                if name[0] == "." and hidden(base, name):  # the store's own names start "."
                    continue
                key = base + name
                try:
                    # Fast path, most entries of a data lake: the folder entry's type says
                    # "regular file" (no system call), one lstat gives what the listing reports.
                    if entry.is_file(follow_symlinks=False):
                        if key.startswith(prefix):
                            st = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode):
                                out.append(info(key, st, None))
                                if len(out) >= CHUNK:
                                    yield out
                                    out = []
                                continue
                        else:
                            continue
                    found = self.entry(entry, key, ancestors)
                except FileNotFoundError:
                    continue  # deleted while listing
                except OSError as exc:
                    if self.wanted(key) or self.descend(key + "/"):
                        self.skip(key, f"cannot read: {_why(exc)}", error=True)
                    continue
                if isinstance(found, _Folder):
                    inner = found
                    break
                if found:
                    out.extend(found)
                    if len(out) >= CHUNK:
                        yield out
                        out = []
            if inner is None:
                stack.pop()  # this folder is done: back to the one it is in
                continue
            listed = self.folder(inner.path, inner.base)
            if listed is not None:
                stack.append((iter(listed), inner.base, inner.ancestors))
        if out:
            yield out

    def folder(
        self, directory: str, base: str, split: bool = False
    ) -> list[os.DirEntry[str]] | None:
        """The entries of one folder sorted by name (with ``split``, of this share only), or
        None when it vanished or cannot be read (recorded as an error entry)."""
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=_NAME)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self.skip(base, f"cannot read folder: {_why(exc)}", error=True)
            return None
        if split and self.shares > 1:
            entries = [e for e in entries if self.in_share(e.name)]
        return entries

    def entry(
        self, entry: os.DirEntry[str], key: str, ancestors: frozenset[tuple[int, int]]
    ) -> Found[T]:
        if entry.is_symlink():
            return self.link(entry, key, ancestors)
        st = entry.stat(follow_symlinks=False)
        return self.node(entry.path, key, st, ancestors)

    def node(
        self, path: str, key: str, st: os.stat_result, ancestors: frozenset[tuple[int, int]]
    ) -> Found[T]:
        """A file or folder found at ``key`` (already resolved for a followed link): its
        entries, or the folder to walk into."""
        if stat.S_ISDIR(st.st_mode):
            if self.descend(key + "/"):
                return _Folder(path, key + "/", ancestors | {(st.st_dev, st.st_ino)})
        elif not self.wanted(key):
            return None
        elif stat.S_ISREG(st.st_mode):
            return [self.info(key, st, None)]
        else:
            self.skip(key, "not a regular file (FIFO, socket or device)")
        return None

    def link(
        self, entry: os.DirEntry[str], key: str, ancestors: frozenset[tuple[int, int]]
    ) -> Found[T]:
        if self.links == "store":
            if self.wanted(key + LINK_SUFFIX):
                target = os.readlink(entry.path)
                st = entry.stat(follow_symlinks=False)
                return [self.info(key + LINK_SUFFIX, st, len(os.fsencode(target)))]
            return None
        if not (self.wanted(key) or self.descend(key + "/")):
            return None
        if self.links == "skip":
            self.skip(key, _SKIP_HINT)
            return None
        try:
            st = os.stat(entry.path)
        except FileNotFoundError:
            self.skip(key, "dangling symbolic link (its target does not exist)")
            return None
        except OSError as exc:
            self.skip(key, f"symbolic link not followed: {_why(exc)}")
            return None
        if (st.st_dev, st.st_ino) in ancestors:
            self.skip(key, "symbolic link loop (it points to a folder above it)")
            return None
        return self.node(entry.path, key, st, ancestors)
