"""Store-less endpoints for benchmarks and probes: ``synthetic://COUNTxSIZE`` and ``null://``.

A synthetic source serves COUNT objects of SIZE bytes from one preallocated random block (no
disk, no copies); the null sink accepts and discards. They let the gateway data path be
measured on its own. ``gateway_agent.stores.open_store`` opens them like any other store.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from typing import cast
from urllib.parse import urlparse

from gateway_agent.stores.base import Capabilities, ObjectInfo

_BLOCK = 64 * 1024 * 1024
_block_lock = threading.Lock()
_block: bytearray | None = None


def _pattern() -> bytearray:
    global _block
    with _block_lock:
        if _block is None:
            _block = bytearray(os.urandom(2 * _BLOCK))
        return _block


class SyntheticStore:
    """Read-only source of COUNT objects named ``obj-000000`` ... of SIZE bytes each."""

    capabilities = Capabilities(ranged_read=True, multipart=False, local_calls=True)

    def __init__(self, uri: str) -> None:
        self.uri = uri
        spec = urlparse(uri).netloc or "1x1048576"
        count_s, _, size_s = spec.partition("x")
        self.count = int(count_s)
        self.size = int(size_s)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for i in range(self.count):
            key = f"obj-{i:06d}"
            if key.startswith(prefix):
                yield ObjectInfo(key=key, size=self.size, etag=f"synthetic-{self.size}")

    def head(self, key: str) -> ObjectInfo:
        return ObjectInfo(key=key, size=self.size, etag=f"synthetic-{self.size}")

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        if length is None:
            length = self.size - start
        block = _pattern()
        if length <= _BLOCK:
            off = start % _BLOCK
            # A zero-copy view; callers only need the buffer protocol.
            return cast(bytes, memoryview(block)[off : off + length])
        reps, rest = divmod(length, _BLOCK)
        return bytes(block[:_BLOCK] * reps + block[:rest])

    def write(self, key: str, data: bytes) -> ObjectInfo:
        raise PermissionError("synthetic:// is read-only")

    def create_multipart(self, key: str) -> str:
        raise PermissionError("synthetic:// is read-only")

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        raise PermissionError("synthetic:// is read-only")

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        raise PermissionError("synthetic:// is read-only")

    def abort_multipart(self, key: str, upload_id: str) -> None:
        raise PermissionError("synthetic:// is read-only")

    def delete(self, key: str) -> None:
        raise PermissionError("synthetic:// is read-only")


class NullStore:
    """A sink that accepts every write and keeps only byte counts."""

    capabilities = Capabilities(ranged_read=False, multipart=True, local_calls=True)

    def __init__(self, uri: str = "null://") -> None:
        self.uri = uri
        self.bytes_written = 0
        self._lock = threading.Lock()

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return iter(())

    def head(self, key: str) -> ObjectInfo:
        raise FileNotFoundError(key)

    def read(self, key: str, start: int = 0, length: int | None = None) -> bytes:
        raise FileNotFoundError(key)

    def write(self, key: str, data: bytes) -> ObjectInfo:
        with self._lock:
            self.bytes_written += len(data)
        return ObjectInfo(key=key, size=len(data))

    def create_multipart(self, key: str) -> str:
        return "null"

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        with self._lock:
            self.bytes_written += len(data)

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        return ObjectInfo(key=key, size=0)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        return None

    def delete(self, key: str) -> None:
        return None
