"""Local filesystem store (``file:///abs/path``): keys are files under the root directory.

The root behaves like a prefix in a bucket, not like a bucket: a missing root lists as empty
and is created (``mkdir -p``) by the first write, so this backend never raises
:class:`BucketNotFoundError`; permission problems raise :class:`AccessDeniedError`.

Keys map to files under the root, one directory per ``/``-separated segment. Segments the
filesystem cannot hold verbatim are escaped so every key round-trips through ``list``: ``%``
becomes ``%25``, an empty segment (from ``//`` or a trailing ``/``) becomes ``%00``, and ``.``/
``..`` become ``%2E``/``%2E%2E``. A key cannot be both an object and a "folder" of other keys
(``a`` and ``a/b``): the filesystem refuses that and the store raises :class:`StoreError`.

Writes go to a temporary file in the hidden staging folder ``<root>/.%staging`` (a name the
escaping can never produce, and which ``list`` skips) and are atomically renamed into place.
Multipart parts are files ``.%staging/<upload_id>/<part>``, written by any process in any order;
completion appends parts 2..N to part 1 (``copy_file_range``, in-kernel) and renames the result
into place, abort removes the folder. Nothing stays behind: an upload's folder is removed on
completion or abort, and ``.%staging`` itself once it is empty (so a replica tree is identical
to its source). Other processes may be creating their own uploads at that moment, so creating a
staging folder retries when ``.%staging`` vanishes under it, and removing ``.%staging`` only
succeeds when it is empty. The extra copy at completion is the price of atomic
visibility: the layer writes about 2x the bytes a plain ``open().write()`` does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from gateway_agent.stores._common import (
    check_key,
    check_options,
    check_part_number,
    check_range,
    check_upload_id,
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


def _append(part: Path, out_fd: int) -> None:
    """Append a part file at ``out_fd``'s offset with an in-kernel copy (no trip through Python).

    ``out_fd`` must not be O_APPEND (copy_file_range refuses that); both offsets advance, so the
    buffered fallback (other filesystems, old kernels) continues exactly where it stopped.
    """
    with open(part, "rb", buffering=0) as src:
        remaining = os.fstat(src.fileno()).st_size
        while remaining > 0:
            try:
                sent = os.copy_file_range(src.fileno(), out_fd, min(remaining, 1 << 30))
            except OSError:
                chunk = memoryview(src.read(min(remaining, _COPY_BUFFER)))
                sent = len(chunk)
                while chunk:
                    chunk = chunk[os.write(out_fd, chunk) :]
            if sent == 0:
                return
            remaining -= sent


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
        self._staging = self.root / STAGING

    # -- paths and errors ---------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.root.joinpath(*(encode_segment(s) for s in check_key(key).split("/")))

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

    def _info(self, key: str, path: Path) -> ObjectInfo:
        st = path.stat()
        modified = datetime.fromtimestamp(st.st_mtime, UTC)
        return ObjectInfo(key, st.st_size, f"{st.st_mtime_ns:x}-{st.st_size:x}", {}, modified)

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

    def _tmp(self) -> Path:
        def create(staging: Path) -> Path:
            path = staging / f"tmp-{uuid.uuid4().hex}"
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
            return path

        return self._in_staging(create)

    def _drop_staging(self, folder: Path | None = None) -> None:
        """Remove an upload's folder, then ``.%staging`` if nothing else is in it.

        Best effort and race-safe: ``rmdir`` refuses a non-empty folder (ENOTEMPTY: another
        upload or write is in flight) and a folder someone else already removed (ENOENT).
        """
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self._staging)

    def _install(self, tmp: Path, key: str) -> Path:
        """Atomically move a finished temp file to the key's path (creating folders)."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        return dest

    def _write_file(self, path: Path, chunks: Iterator[bytes] | Sequence[bytes]) -> None:
        with open(path, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
            if self._fsync:
                fh.flush()
                os.fsync(fh.fileno())

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
            if directory == self.root and entry.name == STAGING:
                continue
            key = base + decode_segment(entry.name)
            if entry.is_dir(follow_symlinks=False):
                if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                    yield from self._walk(Path(entry.path), key + "/", prefix)
            elif key.startswith(prefix):
                try:
                    yield self._info(key, Path(entry.path))
                except FileNotFoundError:
                    continue  # deleted while listing

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            if path.is_dir():
                raise FileNotFoundError(errno.ENOENT, "is a folder")
            return self._info(key, path)
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
        check_key(key)
        try:
            tmp = self._tmp()
            try:
                self._write_file(tmp, [data])
                return self._info(key, self._install(tmp, key))
            finally:
                tmp.unlink(missing_ok=True)
                self._drop_staging()
        except OSError as exc:
            raise self._error(exc, "write", key) from None

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Copy within the root (through a temp file, so the destination appears atomically)."""
        check_key(dst_key)
        try:
            tmp = self._tmp()
            try:
                shutil.copyfile(self._path(src_key), tmp)
                return self._info(dst_key, self._install(tmp, dst_key))
            finally:
                tmp.unlink(missing_ok=True)
                self._drop_staging()
        except OSError as exc:
            raise self._error(exc, "copy", src_key) from None

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
        folder = self._upload_dir(key, upload_id)
        tmp = folder / f"tmp-{uuid.uuid4().hex}"
        try:
            self._write_file(tmp, [data])
            os.replace(tmp, folder / f"{part_number:05d}")
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise self._error(exc, "upload_part", key) from None

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        folder = self._upload_dir(key, upload_id)
        parts = [folder / f"{n:05d}" for n in sorted(set(part_numbers))]
        missing = [p.name for p in parts if not p.is_file()]
        if missing or not parts:
            raise UploadNotFoundError(f"{self.uri}: upload {upload_id} misses parts {missing}")
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
            finally:
                os.close(out_fd)
            info = self._info(key, self._install(assembled, key))
        except OSError as exc:
            with contextlib.suppress(OSError):  # put part 1 back so completion can be retried
                os.truncate(assembled, first_size)
                os.replace(assembled, parts[0])
            raise self._error(exc, "complete_multipart", key) from None
        self._drop_staging(folder)
        return info

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self._drop_staging(self._staging / check_upload_id(upload_id))

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._error(exc, "delete", key) from None
        parent = path.parent
        while parent != self.root and self.root in parent.parents:
            try:
                parent.rmdir()  # prune folders the key left empty, like object stores do
            except OSError:
                break
            parent = parent.parent
