"""Local filesystem store (``file:///abs/path``): keys are files under the root directory.

The root behaves like a prefix in a bucket, not like a bucket: a missing root lists as empty
and is created (``mkdir -p``) by the first write, so this backend never raises
:class:`BucketNotFoundError`; permission problems raise :class:`AccessDeniedError`.

Keys are file paths under the root, verbatim: one folder per ``/``-separated segment, and every
name a file can have is a key (spaces, ``%XX``, ``%00``, line breaks, bytes that are not UTF-8 as
surrogate escapes), so whatever ``list`` finds reads back under its key. A key a filesystem
cannot hold (an empty, ``.`` or ``..`` segment, from ``a//b`` or a trailing ``/``; a segment over
255 bytes; a path over 4095 bytes with the root, PATH_MAX; the store's own hidden names) raises
:class:`KeyNotSupportedError`, and so does a name the file system calls too long. A key cannot be
both an object and a "folder" of other keys (``a`` and ``a/b``): the filesystem refuses that and
the store raises :class:`StoreError`. Listing rules (symbolic links by the ``links`` option,
unreadable folders recorded in ``skipped``) are in :mod:`.walk`.

Each listed file carries a ``version`` (size, mtime_ns, ctime_ns, device, inode); a read pinned
to it checks the open file before the first and after the last byte, so a file rewritten in
place while it is read (even with its old size and mtime put back: the ctime still moves)
raises :class:`SourceChangedError` instead of returning a torn mix.

Writes and copies create the file atomically in its own folder (:mod:`.atomic`: an unnamed
``O_TMPFILE`` linked into place, or a hidden ``.%tmp-*`` file renamed into place), so nothing
half-written is ever visible and a small write costs a handful of system calls. A write that
returns wrote every byte (``write_all`` loops over short writes) and fsynced it when the option
``fsync`` is on: the store declares ``checked_writes``, so what a sink CRC-checked and wrote here
is not read back at verification.
Multipart parts are written in place (:mod:`.parts`): each part at its offset in one
hidden sparse file under ``.%staging/<upload_id>/``, by any process in any order; completion
copies at most the short last part over and renames that file into place, abort removes the
folder. So a multipart object is written once, like a plain write. Nothing stays behind: an
upload's folder is removed on completion or abort, and ``.%staging`` itself once it is empty
(so a replica tree is identical to its source). Other processes may be creating their own
uploads at that moment, so creating a staging folder retries when ``.%staging`` vanishes under
it, and removing ``.%staging`` only succeeds when it is empty. ``.%staging`` (at the root) and
``.%tmp-*`` are reserved: ``list`` skips them and keys using them are refused.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from gateway_agent.stores._common import check_key, check_options, check_range
from gateway_agent.stores.base import Capabilities, ListRow, ObjectInfo, SkippedEntry
from gateway_agent.stores.errors import (
    AccessDeniedError,
    InvalidURIError,
    KeyBlockedError,
    KeyNotSupportedError,
    ObjectNotFoundError,
    SourceChangedError,
    StoreError,
)
from gateway_agent.stores.local.atomic import (
    TMP_PREFIX,
    create_file,
    make_folder,
    rename_into,
    tmp_name,
    write_all,
)
from gateway_agent.stores.local.batch import create_many
from gateway_agent.stores.local.files import (
    STAGING,
    copy_into,
    file_info,
    file_row,
    file_row_unversioned,
    file_version,
    path_problem,
    pread_all,
    preadv_all,
    segment_problem,
    version_mtime_ns,
    written_info,
)
from gateway_agent.stores.local.meta import apply_meta, read_meta
from gateway_agent.stores.local.parts import StagedUploads
from gateway_agent.stores.local.walk import LINK_MODES, LINK_SUFFIX, T, Walk
from gateway_agent.stores.objmeta import Meta
from gateway_agent.stores.uri import StoreURI

# Operations that put a file in place under its key: there, ENOTDIR and EISDIR mean something
# of another kind holds the key's place (``KeyBlockedError``), not a missing key.
_PLACING = ("write", "complete_multipart")


@functools.lru_cache(maxsize=4096)
def _folder_problem(folder: str) -> str | None:
    """Why a local folder cannot hold the folders of ``folder/NAME``, or None (cached: the
    keys of a data lake share their folders, thousands of files each)."""
    for i, segment in enumerate(folder.split("/")):
        why = segment_problem(segment, top=i == 0)
        if why is not None:
            return why
    return None


def _short(key: str, most: int = 600) -> str:
    """``repr`` of a key for a message, its middle elided past ``most`` characters (a 4 KiB
    key would drown the one line that reports it)."""
    if len(key) <= most:
        return repr(key)
    return f"{key[: most // 2]!r}...{key[-most // 2 :]!r} ({len(os.fsencode(key))} bytes)"


class LocalStore:
    """An ObjectStore over a directory tree; safe across threads and processes."""

    capabilities = Capabilities(
        native_checksums=frozenset(),
        server_side_copy=True,
        min_part_size=0,
        local_calls=True,
        checked_writes=True,
        file_names=True,
    )

    def __init__(self, parsed: StoreURI, options: Mapping[str, Any] | None = None):
        self.uri = str(parsed)
        opts = check_options(options, frozenset({"fsync", "links"}), self.uri)
        # Writes reach the disk before they return: each waits for it (a sink overlaps them).
        self.fsync = bool(opts.get("fsync", False))
        self.links = str(opts.get("links", "skip"))
        if self.links not in LINK_MODES:
            raise InvalidURIError(f"option links must be one of {LINK_MODES}, not {self.links!r}")
        # Entries the listings left out (links, unreadable folders), for the caller to report.
        self.skipped: list[SkippedEntry] = []
        self.root = Path(parsed.bucket)
        self._root = os.fspath(self.root).rstrip("/")
        self._parts = StagedUploads(
            self.root,
            self.uri,
            fsync=self.fsync,
            path=self._path,
            error=self._error,
            max_parts=self.capabilities.max_parts,
        )

    # -- paths and errors ---------------------------------------------------------------------
    def _path(self, key: str) -> str:
        """The file of a key (a plain string: this is on every small write's hot path, and on
        the control plane's name check of every object: a key's folders are checked once)."""
        folder, sep, name = check_key(key).rpartition("/")
        why = (_folder_problem(folder) if sep else None) or segment_problem(name, top=not sep)
        path = self._root + "/" + key
        why = why or path_problem(path, name)
        if why is not None:
            raise KeyNotSupportedError(
                f"{self.uri} cannot hold key {_short(key)}: {why}", code="BadFileName"
            )
        return path

    def check_name(self, key: str) -> None:
        """Raise :class:`KeyNotSupportedError` if a folder cannot hold ``key`` as a file."""
        self._path(key)

    def _link_path(self, key: str) -> str | None:
        """With ``links=store``, the symbolic link a ``NAME.rclonelink`` key stands for."""
        if self.links != "store" or not key.endswith(LINK_SUFFIX) or key == LINK_SUFFIX:
            return None
        return self._path(key[: -len(LINK_SUFFIX)])

    def _error(self, exc: OSError, op: str, key: str = "") -> StoreError:
        where = f"{op} {self.uri}{key!r}" if key else f"{op} {self.uri}"
        code = errno.errorcode.get(exc.errno or 0, "OSError")
        if op in _PLACING and isinstance(exc, NotADirectoryError | IsADirectoryError):
            return KeyBlockedError(f"{where}: {self._in_the_way(key)}", code=code)
        if exc.errno == errno.ENAMETOOLONG:  # a file system with limits below Linux's usual
            where = f"{op} {self.uri}{_short(key)}"
            return KeyNotSupportedError(f"{where}: name too long for this file system", code=code)
        if isinstance(exc, PermissionError) or exc.errno in (
            errno.EROFS,
            errno.EPERM,
            errno.EACCES,
        ):
            return AccessDeniedError(f"{where}: permission denied ({code})", code=code)
        if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError):
            return ObjectNotFoundError(f"{where}: no such key", code=code)
        return StoreError(f"{where}: {exc.strerror or code} ({code})", code=code)

    def _in_the_way(self, key: str) -> str:
        """What holds ``key``'s place: the first of its folders that is a file, or a folder
        under its own name (what ENOTDIR and EISDIR mean when a file is put in place)."""
        parts = key.split("/")
        for n in range(1, len(parts)):
            prefix = "/".join(parts[:n])
            path = self._root + "/" + prefix
            if os.path.lexists(path) and not os.path.isdir(path):
                return f"{prefix!r} is a file, not a folder (nothing was removed to make room)"
        if os.path.isdir(self._root + "/" + key):
            return f"{key!r} is a folder (nothing was removed to make room)"
        return "something else holds this name (nothing was removed to make room)"

    # -- protocol ------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every file under the root whose key starts with ``prefix``; entries left out are
        appended to :attr:`skipped` (see :mod:`.walk`)."""
        for batch in self._walk(prefix, file_info):
            yield from batch

    def list_rows(
        self, prefix: str = "", *, versions: bool = True
    ) -> Iterator[builtins.list[ListRow]]:
        """``list`` as batches of plain tuples (``ListRow``): what the run's catalog stores;
        without ``versions``, version and etag are None (nothing will pin or compare them)."""
        return self._walk(prefix, file_row if versions else file_row_unversioned)

    def list_share(
        self, share: int, shares: int, prefix: str = "", *, versions: bool = True
    ) -> Iterator[builtins.list[ListRow]]:
        """``list_rows`` of one share of ``shares`` (see :mod:`.walk`): the walk is
        Python work per file, so a caller lists the shares in as many processes at once."""
        if not 0 <= share < shares:
            raise ValueError(f"share {share} of {shares}")
        info = file_row if versions else file_row_unversioned
        return self._walk(prefix, info, share, shares)

    def rows_of(
        self, keys: Sequence[str], *, versions: bool = True
    ) -> builtins.list[ListRow | None]:
        """The ``list_rows`` row of each key, looked up instead of listed; None where the key
        names no file (nothing there, or a folder or link: the listing would show no such
        file either). For a few keys of a large tree (a sync's changed files)."""
        info = file_row if versions else file_row_unversioned
        rows: builtins.list[ListRow | None] = []
        for key in keys:
            try:
                st = os.lstat(self._root + "/" + check_key(key))
            except (FileNotFoundError, NotADirectoryError):
                rows.append(None)
                continue
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:  # no file can have this key here
                    rows.append(None)
                    continue
                raise self._error(exc, "list", key) from None
            rows.append(info(key, st) if stat.S_ISREG(st.st_mode) else None)
        return rows

    def _walk(
        self,
        prefix: str,
        info: Callable[[str, os.stat_result, int | None], T],
        share: int = 0,
        shares: int = 1,
    ) -> Iterator[builtins.list[T]]:
        folder, _, _ = prefix.rpartition("/")
        if folder and any(segment_problem(s, False) for s in folder.split("/")):
            return  # no file can have a key under such a folder
        start = self._root + "/" + folder if folder else self._root
        walk = Walk(self.uri, prefix, self.links, info, self.skipped, self.reserved, share, shares)
        try:
            st = os.stat(start)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise self._error(exc, "list", prefix) from None
        if not os.access(start, os.R_OK | os.X_OK):
            raise AccessDeniedError(f"list {self.uri}{prefix!r}: permission denied", code="EACCES")
        yield from walk.tree(
            start, folder + "/" if folder else "", frozenset({(st.st_dev, st.st_ino)}), True
        )

    @staticmethod
    def reserved(base: str, name: str) -> bool:
        """Whether ``name`` in the folder of keys ``base`` is the store's own (never listed)."""
        return name.startswith(TMP_PREFIX) or (base == "" and name == STAGING)

    def head(self, key: str) -> ObjectInfo:
        link = self._link_path(key)
        try:
            if link is not None and os.path.islink(link):
                return file_info(key, os.lstat(link), len(os.fsencode(os.readlink(link))))
            st = os.stat(self._path(key))
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a file")
            return file_info(key, st)
        except OSError as exc:
            raise self._error(exc, "head", key) from None

    def _changed(self, key: str, version: str, found: str) -> SourceChangedError:
        return SourceChangedError(
            f"read {self.uri}{key!r}: the file changed after it was listed",
            key=key,
            expected=version,
            found=found,
        )

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        check_range(start, length)
        link = self._link_path(key)
        if link is not None and os.path.islink(link):
            return self._read_link(key, link, start, length, version)
        fd = self._open_read(key, version)
        try:
            before = self._check_read(fd, key, version)
            n = max(0, before.st_size - start) if length is None else length
            data = pread_all(fd, start, n) if n else b""
            if length is None and len(data) == n:  # the file may have grown: read to the end
                more = pread_all(fd, start + n, 1 << 20)
                while more:
                    data += more
                    more = pread_all(fd, start + len(data), 1 << 20)
            if version is not None:
                after = file_version(os.fstat(fd))
                if after != version:
                    raise self._changed(key, version, after)
            return data
        except OSError as exc:
            raise self._error(exc, "read", key) from None
        finally:
            os.close(fd)

    def read_into(
        self, key: str, start: int, buf: bytearray | memoryview, version: str | None = None
    ) -> int:
        """``read(key, start, len(buf), version)`` into ``buf``; the bytes read. The big-file
        path reads into pooled buffers: no fresh pages to fault in (and give back) per chunk."""
        view = memoryview(buf).cast("B")
        check_range(start, len(view))
        link = self._link_path(key)
        if link is not None and os.path.islink(link):
            data = self._read_link(key, link, start, len(view), version)
            view[: len(data)] = data
            return len(data)
        fd = self._open_read(key, version)
        try:
            self._check_read(fd, key, version)
            n = preadv_all(fd, start, view)
            if version is not None:
                after = file_version(os.fstat(fd))
                if after != version:
                    raise self._changed(key, version, after)
            return n
        except OSError as exc:
            raise self._error(exc, "read", key) from None
        finally:
            os.close(fd)

    def _open_read(self, key: str, version: str | None) -> int:
        try:
            # O_NONBLOCK: a FIFO put in a file's place must not hang the reader.
            return os.open(self._path(key), os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            if version is not None:
                raise self._changed(key, version, "deleted") from None
            raise self._error(FileNotFoundError(errno.ENOENT, "no such key"), "read", key) from None
        except OSError as exc:
            raise self._error(exc, "read", key) from None

    def _check_read(self, fd: int, key: str, version: str | None) -> os.stat_result:
        """A regular file, of the pinned version when one is given."""
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file")
        if version is not None and file_version(before) != version:
            raise self._changed(key, version, file_version(before))
        return before

    def _read_link(
        self, key: str, link: str, start: int, length: int | None, version: str | None
    ) -> bytes:
        """A stored link's content is its target (``links=store``)."""
        try:
            st = os.lstat(link)
            if version is not None and file_version(st) != version:
                raise self._changed(key, version, file_version(st))
            target = os.fsencode(os.readlink(link))
        except OSError as exc:
            raise self._error(exc, "read", key) from None
        return target[start:] if length is None else target[start : start + length]

    def head_meta(self, key: str, version: str | None = None) -> Meta:
        """The file's metadata (``local.meta``): its mtime, a Content-Type from its extension
        and its ``user.*`` extended attributes. With ``version`` (this store's own, as listed
        and read: it holds the mtime) no ``stat`` is needed. A ``NAME.rclonelink`` object
        (``links=store``) has its link's time and nothing else: a link holds no attributes."""
        link = self._link_path(key)
        try:
            if link is not None and os.path.islink(link):
                mtime = version_mtime_ns(version) if version else None
                return {"mtime_ns": mtime if mtime is not None else os.lstat(link).st_mtime_ns}
        except OSError as exc:
            raise self._error(exc, "head", key) from None
        path = self._path(key)
        try:
            mtime_ns = version_mtime_ns(version) if version else None
            if mtime_ns is None:
                mtime_ns = os.stat(path).st_mtime_ns
            return read_meta(path, key, mtime_ns)
        except OSError as exc:
            raise self._error(exc, "head", key) from None

    def write_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent: a filled temporary file (hidden name) is hard-linked
        to the key's name, which fails when the name exists. False when it existed."""
        dest = self._path(key)
        folder = os.path.dirname(dest)
        make_folder(folder)
        tmp = tmp_name(folder)
        try:
            with open(tmp, "xb") as fh:
                fh.write(data)
            os.link(tmp, dest)
            return True
        except FileExistsError:
            return False
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def write(self, key: str, data: bytes, meta: Mapping[str, Any] | None = None) -> ObjectInfo:
        link = self._link_path(key)
        if link is not None:
            return self._write_link(key, link, bytes(data))
        dest = self._path(key)

        def fill(fd: int) -> None:
            write_all(fd, data)
            if meta:
                apply_meta(fd, meta, key, f"write {self.uri}{_short(key)!r}")

        try:
            st = create_file(dest, fill, fsync=self.fsync)
        except OSError as exc:
            raise self._error(exc, "write", key) from None
        return written_info(key, st)

    def write_batch(
        self,
        items: Sequence[tuple[str, bytes | memoryview]],
        metas: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> builtins.list[StoreError | None]:
        """Write several objects (a sink's batch of small ones), each as :meth:`write` would
        (with ``metas[i]`` when given), with fewer calls per object (:mod:`.batch`); per item
        None or its error."""
        results: builtins.list[StoreError | None] = [None] * len(items)
        plain: builtins.list[tuple[str, bytes | memoryview]] = []
        plain_metas: builtins.list[tuple[Mapping[str, Any], str] | None] = []
        where: builtins.list[int] = []
        for i, (key, data) in enumerate(items):
            meta = metas[i] if metas else None
            try:
                if self._link_path(key) is not None:
                    self.write(key, bytes(data), meta)
                    continue
                plain.append((self._path(key), data))
                plain_metas.append((meta, key) if meta else None)
                where.append(i)
            except StoreError as exc:
                results[i] = exc
        made = create_many(plain, fsync=self.fsync, metas=plain_metas if metas else None)
        for i, err in zip(where, made, strict=True):
            if isinstance(err, StoreError):
                results[i] = err
            elif err is not None:
                results[i] = self._error(cast(OSError, err), "write", items[i][0])
        return results

    def _write_link(self, key: str, link: str, target: bytes) -> ObjectInfo:
        """``links=store``: a ``NAME.rclonelink`` object becomes the symbolic link NAME."""
        if not target or b"\x00" in target:
            raise KeyNotSupportedError(f"{self.uri}{key!r}: not a symbolic link target")
        tmp = tmp_name(os.path.dirname(link))
        try:
            for _ in range(2):
                try:
                    os.symlink(os.fsdecode(target), tmp)
                    break
                except FileNotFoundError:
                    make_folder(os.path.dirname(link))
            rename_into(tmp, link)
            st = os.lstat(link)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._error(exc, "write", key) from None
        return file_info(key, st, len(target))

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Copy within the root (in the kernel; the destination appears atomically)."""
        dest = self._path(dst_key)
        try:
            with open(self._path(src_key), "rb", buffering=0) as src:

                def fill(fd: int) -> None:
                    copy_into(src.fileno(), fd)

                st = create_file(dest, fill, fsync=self.fsync)
        except OSError as exc:
            raise self._error(exc, "copy", src_key) from None
        return written_info(dst_key, st)

    def create_multipart(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        return self._parts.create(key, meta)

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        self._parts.upload_part(key, upload_id, part_number, data)

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        return self._parts.complete(key, upload_id, part_numbers)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self._parts.abort(key, upload_id)

    def delete(self, key: str) -> None:
        link = self._link_path(key)
        path = link if link is not None and os.path.islink(link) else self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._error(exc, "delete", key) from None
        parent = os.path.dirname(path)
        while len(parent) > len(self._root) and parent.startswith(self._root + "/"):
            try:
                os.rmdir(parent)  # prune folders the key left empty, like object stores do
            except OSError:
                break
            parent = os.path.dirname(parent)
