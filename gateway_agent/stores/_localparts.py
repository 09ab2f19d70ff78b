"""Multipart uploads of the local store: part files in ``.%staging/<upload_id>/`` under the
root, written by any process in any order, joined in the kernel at completion and renamed into
place; the upload's folder (and ``.%staging`` once empty) goes on completion and abort."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from gateway_agent.stores._atomic import create_file, rename_into, write_all
from gateway_agent.stores._common import check_part_number, check_upload_id, require_parts
from gateway_agent.stores._localfiles import STAGING, append_file, written_info
from gateway_agent.stores.base import ObjectInfo
from gateway_agent.stores.errors import StoreError, UploadNotFoundError

T = TypeVar("T")
_STAGING_ATTEMPTS = 16


class StagedUploads:
    """The multipart side of one :class:`~gateway_agent.stores.local.LocalStore`."""

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

    def upload_dir(self, key: str, upload_id: str) -> Path:
        folder = self.staging / check_upload_id(upload_id)
        try:
            owner = (folder / "key").read_text("utf-8")
        except FileNotFoundError:
            owner = None
        except OSError as exc:
            raise self.error(exc, "multipart", key) from None
        if owner != key:
            raise UploadNotFoundError(f"{self.uri}: no upload {upload_id} for key {key!r}")
        return folder

    def create(self, key: str) -> str:
        self.path(key)  # a name this folder cannot hold is refused before anything is staged
        upload_id = uuid.uuid4().hex

        def create(staging: Path) -> None:
            (staging / upload_id).mkdir()

        try:
            self.in_staging(create)
            (self.staging / upload_id / "key").write_text(key, "utf-8")
        except OSError as exc:
            raise self.error(exc, "create_multipart", key) from None
        return upload_id

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.max_parts)
        part = os.path.join(self.upload_dir(key, upload_id), f"{part_number:05d}")
        try:  # an aborted upload's folder must not come back: no parent folders are created
            create_file(part, lambda fd: write_all(fd, data), fsync=self.fsync, make_parents=False)
        except OSError as exc:
            raise self.error(exc, "upload_part", key) from None

    def complete(self, key: str, upload_id: str, part_numbers: Sequence[int]) -> ObjectInfo:
        folder = self.upload_dir(key, upload_id)
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
                    append_file(part, out_fd)
                if self.fsync:
                    os.fsync(out_fd)
                st = os.fstat(out_fd)
            finally:
                os.close(out_fd)
            rename_into(os.fspath(assembled), self.path(key))
        except OSError as exc:
            with contextlib.suppress(OSError):  # put part 1 back so completion can be retried
                os.truncate(assembled, first_size)
                os.replace(assembled, parts[0])
            raise self.error(exc, "complete_multipart", key) from None
        self.drop(folder)
        return written_info(key, st)

    def abort(self, key: str, upload_id: str) -> None:
        self.drop(self.staging / check_upload_id(upload_id))
