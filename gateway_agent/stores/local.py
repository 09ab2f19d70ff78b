"""Local filesystem store (``file:///abs/path``): keys are files under the root directory.

The root behaves like a prefix in a bucket, not like a bucket: a missing root lists as empty
and is created (``mkdir -p``) by the first write, so this backend never raises
:class:`BucketNotFoundError`; permission problems raise :class:`AccessDeniedError`.

Keys map to files under the root, one directory per ``/``-separated segment. Segments the
filesystem cannot hold verbatim are escaped so every key round-trips through ``list``: ``%``
becomes ``%25``, an empty segment (from ``//`` or a trailing ``/``) becomes ``%00``, and ``.``/
``..`` become ``%2E``/``%2E%2E``. A key cannot be both an object and a "folder" of other keys
(``a`` and ``a/b``): the filesystem refuses that and the store raises :class:`StoreError`.

Writes and copies create the file atomically in its own folder (:mod:`._atomic`: an unnamed
``O_TMPFILE`` linked into place, or a hidden ``.%tmp-*`` file renamed into place), so nothing
half-written is ever visible and a small write costs a handful of system calls.
Multipart parts are files ``.%staging/<upload_id>/<part>``, written by any process in any order;
completion appends parts 2..N to part 1 (``copy_file_range``, in-kernel) and renames the result
into place, abort removes the folder. Nothing stays behind: an upload's folder is removed on
completion or abort, and ``.%staging`` itself once it is empty (so a replica tree is identical
to its source). Other processes may be creating their own uploads at that moment, so creating a
staging folder retries when ``.%staging`` vanishes under it, and removing ``.%staging`` only
succeeds when it is empty. ``.%staging`` and ``.%tmp-*`` are names the escaping never produces,
and ``list`` skips them. The extra copy at completion is the price of atomic visibility: a
multipart object costs about 2x the bytes a plain ``open().write()`` does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from gateway_agent.stores._atomic import TMP_PREFIX, create_file, rename_into, write_all
from gateway_agent.stores._common import (
    check_key,
    check_options,
    check_part_number,
    check_range,
    check_upload_id,
    require_parts,
)
from gateway_agent.stores.base import Capabilities, ObjectInfo
from gateway_agent.stores.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    StoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.uri import StoreURI

T = TypeVar("T")
STAGING = ".%staging"
_STAGING_ATTEMPTS = 16
_COPY_BUFFER = 8 * 1024 * 1024


def encode_segment(segment: str) -> str:
    """One key segment -> one file name that round-trips through :func:`decode_segment`."""
    if segment == "":
        return "%00"
    escaped = segment.replace("%", "%25")
    return escaped.replace(".", "%2E") if escaped in (".", "..") else escaped


def decode_segment(name: str) -> str:
    """Inverse of :func:`encode_segment`."""
    return "" if name == "%00" else unquote(name)


def _copy_into(src_fd: int, out_fd: int) -> None:
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


def _append(part: Path, out_fd: int) -> None:
    """Append a whole part file at ``out_fd``'s offset."""
    with open(part, "rb", buffering=0) as src:
        _copy_into(src.fileno(), out_fd)


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    modified = datetime.fromtimestamp(st.st_mtime, UTC)
    return ObjectInfo(key, st.st_size, f"{st.st_mtime_ns:x}-{st.st_size:x}", {}, modified)


class LocalStore:
    """An ObjectStore over a directory tree; safe across threads and processes."""

    capabilities = Capabilities(
        native_checksums=frozenset(), server_side_copy=True, min_part_size=0
    )

    def __init__(self, parsed: StoreURI, options: Mapping[str, Any] | None = None):
        self.uri = str(parsed)
        opts = check_options(options, frozenset({"fsync"}), self.uri)
        self._fsync = bool(opts.get("fsync", False))
        self.root = Path(parsed.bucket)
        self._root = os.fspath(self.root).rstrip("/")
        self._staging = self.root / STAGING

    # -- paths and errors ---------------------------------------------------------------------
    def _path(self, key: str) -> str:
        """The file of a key (a plain string: this is on every small write's hot path)."""
        segments = check_key(key).split("/")
        return self._root + "/" + "/".join([encode_segment(s) for s in segments])

    def _error(self, exc: OSError, op: str, key: str = "") -> StoreError:
        where = f"{op} {self.uri}{key}"
        code = errno.errorcode.get(exc.errno or 0, "OSError")
        if isinstance(exc, PermissionError) or exc.errno in (
            errno.EROFS,
            errno.EPERM,
            errno.EACCES,
        ):
            return AccessDeniedError(f"{where}: permission denied", code=code)
        if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError):
            return ObjectNotFoundError(f"{where}: no such key", code=code)
        return StoreError(f"{where}: {code}", code=code)

    # -- staging (multipart only) --------------------------------------------------------------
    def _in_staging(self, make: Callable[[Path], T]) -> T:
        """Run ``make(staging)`` (it creates one entry there), creating ``.%staging`` first.

        Another process may remove the empty ``.%staging`` between our ``mkdir`` and ``make``
        (see :meth:`_drop_staging`), so a vanished folder is recreated and ``make`` retried.
        """
        for _ in range(_STAGING_ATTEMPTS):
            try:
                os.mkdir(self._staging)  # not mkdir(exist_ok=True): its is_dir() check races
            except FileExistsError:
                pass
            except FileNotFoundError:
                self.root.mkdir(parents=True, exist_ok=True)
                continue
            with contextlib.suppress(FileNotFoundError):
                return make(self._staging)
        raise StoreError(f"{self.uri}: staging folder keeps vanishing", code="ENOENT")

    def _drop_staging(self, folder: Path) -> None:
        """Remove an upload's folder, then ``.%staging`` if nothing else is in it.

        Best effort and race-safe: ``rmdir`` refuses a non-empty folder (ENOTEMPTY: another
        upload is in flight) and a folder someone else already removed (ENOENT).
        """
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self._staging)

    # -- protocol ------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        folder, _, _ = prefix.rpartition("/")
        start = (
            self.root.joinpath(*(encode_segment(s) for s in folder.split("/")))
            if folder
            else self.root
        )
        base = folder + "/" if folder else ""
        yield from self._walk(start, base, prefix)

    def _walk(self, directory: Path, base: str, prefix: str) -> Iterator[ObjectInfo]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: decode_segment(e.name))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise self._error(exc, "list", base) from None
        for entry in entries:
            if entry.name.startswith(TMP_PREFIX) or (
                directory == self.root and entry.name == STAGING
            ):
                continue
            key = base + decode_segment(entry.name)
            if entry.is_dir(follow_symlinks=False):
                if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                    yield from self._walk(Path(entry.path), key + "/", prefix)
            elif key.startswith(prefix):
                try:
                    yield _info(key, os.stat(entry.path))
                except FileNotFoundError:
                    continue  # deleted while listing

    def head(self, key: str) -> ObjectInfo:
        try:
            st = os.stat(self._path(key))
            if stat.S_ISDIR(st.st_mode):
                raise FileNotFoundError(errno.ENOENT, "is a folder")
            return _info(key, st)
        except OSError as exc:
            raise self._error(exc, "head", key) from None

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        check_range(start, length)
        try:
            with open(self._path(key), "rb") as fh:
                fh.seek(start)
                return fh.read() if length is None else fh.read(length)
        except OSError as exc:
            raise self._error(exc, "read", key) from None

    def write(self, key: str, data: bytes) -> ObjectInfo:
        dest = self._path(key)
        try:
            st = create_file(dest, lambda fd: write_all(fd, data), fsync=self._fsync)
        except OSError as exc:
            raise self._error(exc, "write", key) from None
        return _info(key, st)

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Copy within the root (in the kernel; the destination appears atomically)."""
        dest = self._path(dst_key)
        try:
            with open(self._path(src_key), "rb", buffering=0) as src:

                def fill(fd: int) -> None:
                    _copy_into(src.fileno(), fd)

                st = create_file(dest, fill, fsync=self._fsync)
        except OSError as exc:
            raise self._error(exc, "copy", src_key) from None
        return _info(dst_key, st)

    def _upload_dir(self, key: str, upload_id: str) -> Path:
        folder = self._staging / check_upload_id(upload_id)
        try:
            owner = (folder / "key").read_text("utf-8")
        except FileNotFoundError:
            owner = None
        except OSError as exc:
            raise self._error(exc, "multipart", key) from None
        if owner != key:
            raise UploadNotFoundError(f"{self.uri}: no upload {upload_id} for key {key!r}")
        return folder

    def create_multipart(self, key: str) -> str:
        check_key(key)
        upload_id = uuid.uuid4().hex

        def create(staging: Path) -> None:
            (staging / upload_id).mkdir()

        try:
            self._in_staging(create)
            (self._staging / upload_id / "key").write_text(key, "utf-8")
        except OSError as exc:
            raise self._error(exc, "create_multipart", key) from None
        return upload_id

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.capabilities.max_parts)
        part = os.path.join(self._upload_dir(key, upload_id), f"{part_number:05d}")
        try:  # an aborted upload's folder must not come back: no parent folders are created
            create_file(part, lambda fd: write_all(fd, data), fsync=self._fsync, make_parents=False)
        except OSError as exc:
            raise self._error(exc, "upload_part", key) from None

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        folder = self._upload_dir(key, upload_id)
        present = {n for n in part_numbers if (folder / f"{n:05d}").is_file()}
        wanted = require_parts(f"{self.uri}: upload {upload_id}", part_numbers, present)
        parts = [folder / f"{n:05d}" for n in wanted]
        assembled = folder / f"assembled-{uuid.uuid4().hex}"
        first_size = parts[0].stat().st_size
        try:
            os.replace(parts[0], assembled)  # the first part becomes the file: one copy less
            out_fd = os.open(assembled, os.O_WRONLY)
            try:
                os.lseek(out_fd, 0, os.SEEK_END)
                for part in parts[1:]:
                    _append(part, out_fd)
                if self._fsync:
                    os.fsync(out_fd)
                st = os.fstat(out_fd)
            finally:
                os.close(out_fd)
            rename_into(os.fspath(assembled), self._path(key))
        except OSError as exc:
            with contextlib.suppress(OSError):  # put part 1 back so completion can be retried
                os.truncate(assembled, first_size)
                os.replace(assembled, parts[0])
            raise self._error(exc, "complete_multipart", key) from None
        self._drop_staging(folder)
        return _info(key, st)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self._drop_staging(self._staging / check_upload_id(upload_id))

    def delete(self, key: str) -> None:
        path = self._path(key)
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
