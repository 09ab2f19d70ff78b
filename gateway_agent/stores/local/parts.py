"""Multipart uploads of the local store, written in place: every part goes straight to its
offset in one hidden sparse file that completion renames into place, so the data is written
once (joining separate part files at completion wrote it twice: a second of every 512 MB).

Layout of an upload, ``.%staging/<upload_id>/`` under the root:

- ``key``: the key the upload is for; also the upload's lock (see below).
- ``slots-<L>``: a sparse file holding every part of ``L`` bytes at ``(n - 1) * L``. Parts of
  equal size (all but the last, as the transfer engine and S3 clients cut them) land at their
  final offsets in one file; a shorter last part sits in its own file until completion copies
  its few bytes over (in the kernel).
- ``<n:05d>``: part ``n``'s marker, its size in decimal, written atomically *after* its data:
  a part without a marker was never (or only half) written and counts as missing.

Any process may write parts, in any order. Completion (one copy of the last part at most, then
a rename) only takes the fast path when parts ``1..N`` are listed and all but the last have the
first one's size; any other shape (gaps, unequal sizes) is assembled into a fresh file from the
slots. Nothing is visible under the key before the rename.

Lock: a part write holds a shared ``flock`` on ``key`` and completion an exclusive one, so
completion never renames a file a writer is still filling, and a writer that waited for
completion finds ``key`` unlinked (``st_nlink == 0``) and fails instead of writing into the
object now visible. The upload's folder (and ``.%staging`` once empty) goes on completion and
abort.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gateway_agent.stores._common import check_part_number, check_upload_id, require_parts
from gateway_agent.stores.base import ObjectInfo
from gateway_agent.stores.errors import StoreError, UploadNotFoundError
from gateway_agent.stores.local.atomic import create_file, pwrite_all, rename_into, write_all
from gateway_agent.stores.local.files import STAGING, copy_range, written_info
from gateway_agent.stores.local.meta import apply_meta

T = TypeVar("T")
_STAGING_ATTEMPTS = 16
OWNER = "key"
# The object's metadata (JSON), when it has any: written onto the file at completion.
META = "meta.json"
_SLOT_LOCKS = [threading.Lock() for _ in range(64)]


def _slot(folder: Path, size: int) -> str:
    return os.path.join(folder, f"slots-{size}")


def _slot_lock(folder: Path, size: int) -> threading.Lock:
    """This process's lock for writing into one slot file.

    The kernel lets one write into a file at a time anyway (ext4 holds the inode's lock for a
    buffered write), and the sink's threads writing parts of one object waited for it by
    spinning: a fifth of a 4 GiB copy's CPU went to ``rwsem_spin_on_owner``. Waiting here
    sleeps instead. Striped, so nothing needs cleaning up; two slots sharing a stripe only
    write one after the other.
    """
    return _SLOT_LOCKS[hash((folder, size)) % len(_SLOT_LOCKS)]


def _marker(folder: Path, part_number: int) -> str:
    return os.path.join(folder, f"{part_number:05d}")


class StagedUploads:
    """The multipart side of one :class:`~gateway_agent.stores.local.store.LocalStore`."""

    def __init__(
        self,
        root: Path,
        uri: str,
        *,
        fsync: bool,
        path: Callable[[str], str],
        error: Callable[[OSError, str, str], StoreError],
        max_parts: int,
    ) -> None:
        self.root = root
        self.uri = uri
        self.staging = root / STAGING
        self.fsync = fsync
        self.path = path  # key -> file (refuses names the folder cannot hold)
        self.error = error
        self.max_parts = max_parts

    # -- staging ---------------------------------------------------------------------------------
    def in_staging(self, make: Callable[[Path], T]) -> T:
        """Run ``make(staging)`` (it creates one entry there), creating ``.%staging`` first.

        Another process may remove the empty ``.%staging`` between our ``mkdir`` and ``make``
        (see :meth:`drop`), so a vanished folder is recreated and ``make`` retried.
        """
        for _ in range(_STAGING_ATTEMPTS):
            try:
                os.mkdir(self.staging)  # not mkdir(exist_ok=True): its is_dir() check races
            except FileExistsError:
                pass
            except FileNotFoundError:
                self.root.mkdir(parents=True, exist_ok=True)
                continue
            with contextlib.suppress(FileNotFoundError):
                return make(self.staging)
        raise StoreError(f"{self.uri}: staging folder keeps vanishing", code="ENOENT")

    def drop(self, folder: Path) -> None:
        """Remove an upload's folder, then ``.%staging`` if nothing else is in it.

        Best effort and race-safe: ``rmdir`` refuses a non-empty folder (ENOTEMPTY: another
        upload is in flight) and a folder someone else already removed (ENOENT).
        """
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.staging)

    @contextlib.contextmanager
    def locked(self, key: str, upload_id: str, op: str, exclusive: bool) -> Iterator[Path]:
        """The upload's folder, with its lock held (shared: writing a part; exclusive:
        completing); ``UploadNotFoundError`` if the upload is unknown, for another key, or was
        completed while we waited for the lock."""
        folder = self.staging / check_upload_id(upload_id)
        missing = UploadNotFoundError(f"{self.uri}: no upload {upload_id} for key {key!r}")
        try:
            fd = os.open(folder / OWNER, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise missing from None
        except OSError as exc:
            raise self.error(exc, op, key) from None
        try:
            owner = os.read(fd, 1 << 16).decode("utf-8", "surrogateescape")
            if owner != key:
                raise missing
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink == 0:  # completed (or aborted) while we waited
                raise missing
            yield folder
        finally:
            os.close(fd)  # releases the lock

    def create(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        """A new upload; ``meta`` (see ``objmeta``) is kept beside its parts and written onto
        the file at completion, before it is named."""
        self.path(key)  # a name this folder cannot hold is refused before anything is staged
        upload_id = uuid.uuid4().hex

        def create(staging: Path) -> None:
            (staging / upload_id).mkdir()

        try:
            self.in_staging(create)
            if meta:
                (self.staging / upload_id / META).write_text(json.dumps(dict(meta)))
            (self.staging / upload_id / OWNER).write_bytes(key.encode("utf-8", "surrogateescape"))
        except OSError as exc:
            raise self.error(exc, "create_multipart", key) from None
        return upload_id

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.max_parts)
        size = len(memoryview(data).cast("B"))
        with self.locked(key, upload_id, "upload_part", exclusive=False) as folder:
            try:  # an aborted upload's folder must not come back: O_CREAT makes no folders
                fd = os.open(_slot(folder, size), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
                try:
                    with _slot_lock(folder, size):
                        pwrite_all(fd, data, (part_number - 1) * size)
                    if self.fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                create_file(
                    _marker(folder, part_number),
                    lambda mfd: write_all(mfd, str(size).encode()),
                    fsync=self.fsync,
                    make_parents=False,
                )
            except OSError as exc:
                raise self.error(exc, "upload_part", key) from None

    def complete(self, key: str, upload_id: str, part_numbers: Sequence[int]) -> ObjectInfo:
        with self.locked(key, upload_id, "complete_multipart", exclusive=True) as folder:
            sizes: dict[int, int] = {}
            for n in set(part_numbers):
                with contextlib.suppress(FileNotFoundError, ValueError):
                    sizes[n] = int(Path(_marker(folder, n)).read_bytes())
            wanted = require_parts(f"{self.uri}: upload {upload_id}", part_numbers, sizes)
            try:
                st, done = self._assemble(folder, wanted, sizes)
                if (folder / META).exists():
                    meta = json.loads((folder / META).read_text())
                    apply_meta(done, meta, key, f"complete {self.uri}{key!r}")
                    st = os.stat(done)
                rename_into(done, self.path(key))
                os.unlink(folder / OWNER)  # writers waiting for the lock now fail
            except FileNotFoundError:  # a slot gone: an earlier completion renamed it
                raise UploadNotFoundError(
                    f"{self.uri}: upload {upload_id} misses its data (completed before?)"
                ) from None
            except OSError as exc:
                raise self.error(exc, "complete_multipart", key) from None
        self.drop(folder)
        return written_info(key, st)

    def _assemble(
        self, folder: Path, wanted: list[int], sizes: dict[int, int]
    ) -> tuple[os.stat_result, str]:
        """The object's file (stat, path): the first part's slot file, put in shape, when the
        parts are 1..N with all but the last of one size; else a fresh file built from the
        slots. Either way it can be retried: nothing a later completion needs is lost."""
        first = sizes[wanted[0]]
        total = sum(sizes[n] for n in wanted)
        uniform = wanted == list(range(1, len(wanted) + 1)) and all(
            sizes[n] == first for n in wanted[:-1]
        )
        if uniform:
            target = _slot(folder, first)
            fd = os.open(target, os.O_RDWR | os.O_CLOEXEC)
            try:
                last = wanted[-1]
                if sizes[last] != first:  # the short last part: copy it to its place
                    self._copy_part(folder, last, sizes[last], fd, (last - 1) * first)
                if os.fstat(fd).st_size > total:
                    # Unlisted parts beyond the end are cut off: forget them, so a later
                    # completion that lists them fails instead of joining zeros.
                    self._forget_parts_beyond(folder, last, first)
                    os.ftruncate(fd, total)
                if self.fsync:
                    os.fsync(fd)
                return os.fstat(fd), target
            finally:
                os.close(fd)
        target = os.path.join(folder, f"assembled-{uuid.uuid4().hex}")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            offset = 0
            for n in wanted:
                self._copy_part(folder, n, sizes[n], fd, offset)
                offset += sizes[n]
            if self.fsync:
                os.fsync(fd)
            return os.fstat(fd), target
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise
        finally:
            os.close(fd)

    @staticmethod
    def _forget_parts_beyond(folder: Path, last: int, size: int) -> None:
        """Remove the markers of parts of ``size`` bytes numbered above ``last`` (their bytes
        in the slot file are about to be cut off)."""
        for name in os.listdir(folder):
            if name.isdigit() and int(name) > last:
                marker = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError, ValueError):
                    if int(Path(marker).read_bytes()) == size:
                        os.unlink(marker)

    @staticmethod
    def _copy_part(folder: Path, n: int, size: int, out_fd: int, offset: int) -> None:
        src = os.open(_slot(folder, size), os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(src).st_size < n * size:
                raise FileNotFoundError(errno.ENOENT, f"part {n} is not in its slot file")
            copy_range(src, (n - 1) * size, out_fd, offset, size)
        finally:
            os.close(src)

    def abort(self, key: str, upload_id: str) -> None:
        self.drop(self.staging / check_upload_id(upload_id))
