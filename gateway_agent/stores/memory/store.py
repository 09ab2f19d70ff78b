"""In-memory fake store (``mem://name/prefix``) for unit tests: a process-wide registry by name.

Buckets must be created with :func:`create_bucket` first, so a missing-bucket error behaves like
the clouds'. The fake follows the same contract as the real backends (multipart parts invisible
until completion, ranged reads clamped at the end) and can inject transient failures
(``{"inject_transient_failures": N}``: the first N calls of this store instance fail) so retry
paths are testable without a network.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

from gateway_agent.stores._common import (
    check_cloud_name,
    check_key,
    check_options,
    check_part_number,
    check_range,
    check_upload_id,
    require_parts,
    retry_policy,
    slice_range,
)
from gateway_agent.stores.base import Capabilities, ObjectInfo
from gateway_agent.stores.errors import (
    BucketNotFoundError,
    ObjectNotFoundError,
    SourceChangedError,
    TransientStoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.retry import call_with_retry
from gateway_agent.stores.uri import StoreURI


@dataclass
class _Bucket:
    objects: dict[str, tuple[bytes, ObjectInfo]] = field(default_factory=dict)
    uploads: dict[str, tuple[str, dict[int, bytes]]] = field(default_factory=dict)
    # Full name (or upload id) -> the object's metadata (``objmeta``), when it has any.
    metas: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_REGISTRY: dict[str, _Bucket] = {}
_REGISTRY_LOCK = threading.Lock()
_WRITES = itertools.count(1)  # every write is a new version, like a GCS generation


def create_bucket(name: str) -> None:
    """Create (or keep) the named in-memory bucket."""
    with _REGISTRY_LOCK:
        _REGISTRY.setdefault(name, _Bucket())


def delete_bucket(name: str) -> None:
    """Drop the named bucket and everything in it (no error if it does not exist)."""
    with _REGISTRY_LOCK:
        _REGISTRY.pop(name, None)


class MemoryStore:
    """An ObjectStore over a dict; thread-safe, one lock per bucket."""

    capabilities = Capabilities(
        native_checksums=frozenset({"md5"}), server_side_copy=True, min_part_size=0
    )

    def __init__(self, parsed: StoreURI, options: Mapping[str, Any] | None = None):
        self.uri = str(parsed)
        self._parsed = parsed
        opts = check_options(options, frozenset({"inject_transient_failures"}), self.uri)
        self._failures_left = int(opts.get("inject_transient_failures", 0))
        self._retry = retry_policy({"backoff_seconds": 0.01, **opts})

    def check_name(self, key: str) -> None:
        """Raise :class:`KeyNotSupportedError` if this (cloud-like) store cannot hold ``key``."""
        check_cloud_name(key, self._parsed.key(key), self.uri)

    def _bucket(self) -> _Bucket:
        with _REGISTRY_LOCK:
            bucket = _REGISTRY.get(self._parsed.bucket)
        if bucket is None:
            raise BucketNotFoundError(f"no in-memory bucket {self._parsed.bucket!r}")
        return bucket

    def _call(self, fn: Any, *args: Any) -> Any:
        def run(*a: Any) -> Any:
            if self._failures_left > 0:
                self._failures_left -= 1
                raise TransientStoreError(f"injected transient failure on {self.uri}")
            return fn(*a)

        return call_with_retry(self._retry, lambda exc: exc, run, *args)

    def _info(self, name: str, data: bytes) -> ObjectInfo:
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        version = str(next(_WRITES))
        return ObjectInfo(name, len(data), md5, {"md5": md5}, datetime.now(UTC), version)

    def _relative(self, info: ObjectInfo) -> ObjectInfo:
        """Stored infos carry the full name; callers see keys relative to this store's prefix."""
        return replace(info, key=info.key[len(self._parsed.prefix) :])

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        bucket = self._call(self._bucket)
        full = self._parsed.key(prefix)
        with bucket.lock:
            infos = [info for name, (_, info) in bucket.objects.items() if name.startswith(full)]
        for info in sorted(infos, key=lambda info: info.key.encode("utf-8")):
            yield self._relative(info)

    def head(self, key: str) -> ObjectInfo:
        return self._relative(self._get(check_key(key))[1])

    def _get(self, key: str) -> tuple[bytes, ObjectInfo]:
        def get() -> tuple[bytes, ObjectInfo]:
            bucket = self._bucket()
            with bucket.lock:
                found = bucket.objects.get(self._parsed.key(key))
            if found is None:
                raise ObjectNotFoundError(f"{self.uri}: no such key {key!r}")
            return found

        result: tuple[bytes, ObjectInfo] = self._call(get)
        return result

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        check_range(start, length)
        try:
            data, info = self._get(check_key(key))
        except ObjectNotFoundError:
            if version is None:
                raise
            data, info = b"", replace(ObjectInfo(key, 0), version="deleted")
        if version is not None and info.version != version:
            raise SourceChangedError(
                f"read {self.uri}{key!r}: version {info.version} is not the listed {version}",
                key=key,
                expected=version,
                found=info.version,
            )
        lo, hi = slice_range(len(data), start, length)
        return data[lo:hi]

    def head_meta(self, key: str, version: str | None = None) -> dict[str, Any]:
        """The metadata the object was written with (its write time as ``mtime_ns`` otherwise)."""
        _data, info = self._get(check_key(key))
        bucket = self._call(self._bucket)
        with bucket.lock:
            meta = json.loads(json.dumps(bucket.metas.get(self._parsed.key(key), {})))
        if "mtime_ns" not in meta and info.modified is not None:
            meta["mtime_ns"] = round(info.modified.timestamp() * 1e9)
        return cast(dict[str, Any], meta)

    def write(self, key: str, data: bytes, meta: Mapping[str, Any] | None = None) -> ObjectInfo:
        name = check_cloud_name(key, self._parsed.key(key), self.uri)

        def put() -> ObjectInfo:
            bucket = self._bucket()
            info = self._info(name, bytes(data))
            with bucket.lock:
                bucket.objects[name] = (bytes(data), info)
                bucket.metas.pop(name, None)
                if meta:
                    bucket.metas[name] = dict(meta)
            return self._relative(info)

        result: ObjectInfo = self._call(put)
        return result

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Server-side copy within the bucket."""
        return self.write(dst_key, self._get(check_key(src_key))[0])

    def create_multipart(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        bucket = self._call(self._bucket)
        upload_id = uuid.uuid4().hex
        with bucket.lock:
            bucket.uploads[upload_id] = (check_cloud_name(key, self._parsed.key(key), self.uri), {})
            if meta:
                bucket.metas[upload_id] = dict(meta)
        return upload_id

    def _upload(self, bucket: _Bucket, key: str, upload_id: str) -> dict[int, bytes]:
        found = bucket.uploads.get(check_upload_id(upload_id))
        if found is None or found[0] != self._parsed.key(key):
            raise UploadNotFoundError(f"{self.uri}: no upload {upload_id} for key {key!r}")
        return found[1]

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.capabilities.max_parts)

        def put() -> None:
            bucket = self._bucket()
            with bucket.lock:
                self._upload(bucket, key, upload_id)[part_number] = bytes(data)

        self._call(put)

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        bucket = self._call(self._bucket)
        with bucket.lock:
            parts = self._upload(bucket, key, upload_id)
            wanted = require_parts(f"{self.uri}: upload {upload_id}", part_numbers, parts)
            data = b"".join(parts[n] for n in wanted)
            name = self._parsed.key(key)
            info = self._info(name, data)
            bucket.objects[name] = (data, info)
            bucket.metas.pop(name, None)
            if upload_id in bucket.metas:
                bucket.metas[name] = bucket.metas.pop(upload_id)
            del bucket.uploads[upload_id]
        return self._relative(info)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        bucket = self._call(self._bucket)
        with bucket.lock:
            bucket.uploads.pop(check_upload_id(upload_id), None)

    def delete(self, key: str) -> None:
        name = self._parsed.key(check_key(key))

        def drop() -> None:
            bucket = self._bucket()
            with bucket.lock:
                bucket.objects.pop(name, None)
                bucket.metas.pop(name, None)

        self._call(drop)
