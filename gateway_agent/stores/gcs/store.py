"""Google Cloud Storage (google-cloud-storage), imported lazily so other gateways skip the SDK.

Credentials: the access token of explicit ``gcp`` :class:`StoreCredentials` (a gateway's,
sealed by its control plane), otherwise Application Default Credentials; when
``STORAGE_EMULATOR_HOST`` is set (the emulator) or ``anonymous`` is true the client is
anonymous (a gateway reaches the emulator through ``endpoint_url`` and ``anonymous``: its
environment has no ``STORAGE_EMULATOR_HOST``). Options: ``project``, ``endpoint_url``,
``anonymous``, ``timeout``, ``max_pool_connections`` (default 64), ``list_page_size`` (default 1000;
gcp-storage-emulator ignores it and returns every key in one page), ``requester_pays`` (a
requester-pays bucket: every request names ``project`` as the billed one, ``userProject``), and
the destination write options (``writeopts``).

Multipart is built from what every GCS implementation (including gcp-storage-emulator)
supports: each part is a temporary object ``.%staging/<upload_id>/<part>`` at the bucket root,
written by any process in any order; ``complete_multipart`` composes them (GCS composes at most
32 sources per call, so larger uploads compose in a tree of intermediate objects) into the
destination in one final compose — the object appears atomically — then deletes the temporaries.
``list`` never shows the staging folder. Composite objects carry a CRC32C but no MD5. A part
uploaded after ``abort_multipart`` (a straggler) lands in the staging folder again, invisible;
aborting once more removes it.
"""

from __future__ import annotations

import base64
import builtins
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from gateway_agent.stores._common import (
    CloudStore,
    check_key,
    check_part_number,
    check_range,
    check_upload_id,
    error_for_status,
    info_row,
    paginate,
)
from gateway_agent.stores.base import Capabilities, Copied, ListRow, ObjectInfo
from gateway_agent.stores.credentials import CREDENTIAL_OPTIONS, Credentials, google_credentials
from gateway_agent.stores.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    CopyNotSupportedError,
    ObjectNotFoundError,
    StoreError,
    TransientStoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.gcs.meta import blob_to_meta, prepare, write_options
from gateway_agent.stores.objmeta import gcs_user
from gateway_agent.stores.uri import StoreURI
from gateway_agent.stores.writeopts import WRITE_OPTIONS, user_project

STAGING = ".%staging/"
COMPOSE_LIMIT = 32
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_OPTIONS = (
    frozenset(
        {
            "project",
            "endpoint_url",
            "anonymous",
            "timeout",
            "list_page_size",
            "max_pool_connections",
        }
    )
    | CREDENTIAL_OPTIONS["gs"]
    | WRITE_OPTIONS["gs"]
)


class GCSStore(CloudStore):
    """An ObjectStore over one GCS bucket (and optional prefix)."""

    OPTIONS = _OPTIONS
    LINE_BREAKS = False  # GCS refuses CR and LF in object names
    COPY_VOUCHES = True  # a rewrite's CRC32C is the one GCS computed over the stored bytes
    capabilities = Capabilities(
        native_checksums=frozenset({"crc32c", "md5"}), server_side_copy=True, min_part_size=0
    )

    def __init__(
        self,
        parsed: StoreURI,
        options: Mapping[str, Any] | None = None,
        credentials: Credentials | None = None,
    ):

        import os

        from google.cloud import storage

        super().__init__(parsed, options)
        opts = self._opts
        self._timeout = float(opts.get("timeout", 120))
        self._write_opts = write_options(opts, self.uri)  # checked before any work
        self._payer = user_project(opts, self.uri)
        self._page_size = int(opts.get("list_page_size", 1000))
        kwargs: dict[str, Any] = {"project": opts.get("project")}
        if opts.get("endpoint_url"):
            kwargs["client_options"] = {"api_endpoint": opts["endpoint_url"]}
        if opts.get("anonymous") or os.environ.get(EMULATOR_ENV):
            from google.auth.credentials import AnonymousCredentials

            kwargs["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
            kwargs["project"] = kwargs["project"] or "test"
        elif credentials is not None:  # a token from the control plane, swapped when renewed
            kwargs["credentials"] = google_credentials(credentials)
        self._client: Any = storage.Client(**kwargs)
        # Recent google-cloud-storage releases fetch each bucket's resource in a background
        # thread for their tracing spans: a request we do not need, sent without
        # ``userProject`` (refused by a requester-pays bucket). Without the cache it is skipped.
        if getattr(self._client, "_bucket_metadata_cache", None) is not None:
            self._client._bucket_metadata_cache = None
        # requests keeps 10 connections per host by default; gateways run many more threads.
        from requests.adapters import HTTPAdapter

        pool = int(opts.get("max_pool_connections", 64))
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool)
        self._client._http.mount("https://", adapter)
        self._client._http.mount("http://", adapter)
        # Requester-pays: the bucket object names the billed project on every request made
        # through it (list, get, download, upload, compose, rewrite, delete: ``userProject``).
        self._bucket: Any = self._client.bucket(parsed.bucket, user_project=self._payer)

    # -- errors --------------------------------------------------------------------------------
    def _classify(self, exc: Exception, where: str, op: str) -> StoreError | None:
        import requests
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            return TransientStoreError(f"{where}: connection failed", code=type(exc).__name__)
        if isinstance(exc, auth_exc.GoogleAuthError):
            return AccessDeniedError(
                f"{where}: no usable Google credentials", code=type(exc).__name__
            )
        if isinstance(exc, gexc.GoogleAPICallError):
            status = int(exc.code) if exc.code else None
            code = type(exc).__name__
            msg = f"{where}: {code} ({status})"
            if status == 404:
                return ObjectNotFoundError(msg, code=code, status=status)
            return error_for_status(msg, code, status)
        return None

    def _bucket_missing(self) -> bool:
        return not self._call(
            "head_bucket", "", self._bucket.exists, timeout=self._timeout, retry=None
        )

    def _not_found(self, op: str, key: str, exc: ObjectNotFoundError) -> StoreError:
        """GCS answers 404 for a missing bucket and a missing object alike; ask which."""
        if self._bucket_missing():
            return BucketNotFoundError(
                f"{op} {self.uri}: bucket does not exist", code="NoSuchBucket", status=404
            )
        return exc

    def _info(self, key: str, blob: Any) -> ObjectInfo:
        checksums: dict[str, str] = {}
        if blob.crc32c:
            checksums["crc32c"] = str(blob.crc32c)
        if blob.md5_hash:
            checksums["md5"] = base64.b64decode(blob.md5_hash).hex()
        version = str(blob.generation) if blob.generation else None
        return ObjectInfo(
            key,
            int(blob.size or 0),
            blob.etag,
            checksums,
            blob.updated,
            version,
            version_id=version,
        )

    # -- protocol ------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)

        def fetch(token: str | None) -> tuple[list[Any], str | None]:
            it = self._client.list_blobs(
                self._bucket,
                prefix=full,
                page_token=token,
                page_size=self._page_size,
                timeout=self._timeout,
                retry=None,
            )
            items = list(next(it.pages))
            return items, it.next_page_token

        def fetch_page(token: str | None) -> tuple[list[Any], str | None]:
            try:
                return self._call("list", prefix, fetch, token)
            except ObjectNotFoundError as exc:
                raise self._not_found("list", prefix, exc) from None

        for blob in paginate(fetch_page):
            if not blob.name.startswith(STAGING):
                yield self._info(blob.name[skip:], blob)

    def list_level(self, prefix: str = "") -> tuple[builtins.list[ListRow], builtins.list[str]]:
        """``ListsLevels``: a delimiter (``/``) listing under ``prefix``: the blobs right there
        as rows, and the sub-prefixes (relative, ending with ``/``; never the staging area)."""
        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)

        def fetch(
            token: str | None,
        ) -> tuple[tuple[builtins.list[Any], builtins.list[str]], str | None]:
            it = self._client.list_blobs(
                self._bucket,
                prefix=full,
                delimiter="/",
                page_token=token,
                page_size=self._page_size,
                timeout=self._timeout,
                retry=None,
            )
            page = next(it.pages)
            return (list(page), sorted(page.prefixes)), it.next_page_token

        rows: builtins.list[ListRow] = []
        subs: builtins.list[str] = []
        token: str | None = None
        while True:
            try:
                (blobs, prefixes), token = self._call("list", prefix, fetch, token)
            except ObjectNotFoundError as exc:
                raise self._not_found("list", prefix, exc) from None
            rows += [info_row(self._info(b.name[skip:], b)) for b in blobs]
            subs += [p[skip:] for p in prefixes if not p.startswith(STAGING)]
            if not token:
                return rows, sorted(subs)

    def head(self, key: str) -> ObjectInfo:
        blob = self._bucket.blob(self._name(key))
        try:
            self._call("head", key, blob.reload, timeout=self._timeout, retry=None)
        except ObjectNotFoundError as exc:
            raise self._not_found("head", key, exc) from None
        return self._info(key, blob)

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        check_range(start, length)
        if length == 0:
            self._check_version(key, version)
            return b""
        blob = self._bucket.blob(self._name(key))
        end = None if length is None else start + length - 1
        pinned = {"if_generation_match": int(version)} if version is not None else {}
        try:
            data = self._call(
                "read",
                key,
                blob.download_as_bytes,
                start=start or None,
                end=end,
                raw_download=True,
                checksum=None,
                timeout=self._timeout,
                retry=None,
                **pinned,
            )
        except ObjectNotFoundError as exc:
            err = self._not_found("read", key, exc)
            if version is not None and not isinstance(err, BucketNotFoundError):
                raise self._changed(key, version, "deleted", "it was deleted") from None
            raise err from None
        except StoreError as exc:
            if version is not None and exc.status == 412:
                raise self._changed(key, version, None) from None
            if exc.status == 416:
                self._check_version(key, version)
                return b""  # start at or past the end: nothing to read
            raise
        if version is not None:
            # GCS sends the generation it served; where it does not (gcp-storage-emulator, which
            # also ignores ifGenerationMatch), ask again now that the last byte was read.
            served = blob.generation
            if served is None:
                self._check_version(key, version)
            elif str(served) != version:
                raise self._changed(key, version, str(served))
        return bytes(data)

    def head_meta(self, key: str, version: str | None = None) -> dict[str, Any]:
        """System properties, custom metadata (tags kept in it, ``gcs.meta``), the kept source
        time (else ``updated``), storage class and KMS key."""
        blob = self._bucket.blob(self._name(key))
        try:
            self._call("head", key, blob.reload, timeout=self._timeout, retry=None)
        except ObjectNotFoundError as exc:
            raise self._not_found("head", key, exc) from None
        if version is not None and blob.generation and str(blob.generation) != version:
            raise self._changed(key, version, str(blob.generation))
        return blob_to_meta(blob)

    def metas_of(
        self, items: Sequence[tuple[str, str | None]]
    ) -> dict[str, dict[str, Any] | StoreError]:
        """``ListsMetadata``: one objects.list page from the first of the keys (``startOffset``,
        under their common prefix) gives their resources; a key whose listed generation is not
        the one read maps to its ``SourceChangedError``. Keys the page did not reach are left
        out (the caller asks ``head_meta``). gcp-storage-emulator ignores ``startOffset`` and
        the page size: it answers the whole prefix, of which the keys are picked alike."""
        if not items:
            return {}
        wanted = {self._name(key): (key, version) for key, version in items}
        names = sorted(wanted)
        first, last = names[0], names[-1]  # sorted: their common prefix is everyone's
        n = 0
        while n < min(len(first), len(last)) and first[n] == last[n]:
            n += 1
        prefix = first[:n]

        def fetch() -> builtins.list[Any]:
            it = self._client.list_blobs(
                self._bucket,
                prefix=prefix,
                start_offset=first,
                max_results=min(1000, 2 * len(names) + 8),
                page_size=min(1000, 2 * len(names) + 8),
                timeout=self._timeout,
                retry=None,
            )
            return builtins.list(next(it.pages))

        try:
            blobs = self._call("head", names[0], fetch)
        except ObjectNotFoundError as exc:
            raise self._not_found("head", items[0][0], exc) from None
        out: dict[str, dict[str, Any] | StoreError] = {}
        for blob in blobs:
            if blob.name not in wanted:
                continue
            key, version = wanted[blob.name]
            found = str(blob.generation) if blob.generation else None
            if version is not None and found is not None and found != version:
                out[key] = self._changed(key, version, found)
            else:
                out[key] = blob_to_meta(blob)
        return out

    def write(self, key: str, data: bytes, meta: Mapping[str, Any] | None = None) -> ObjectInfo:
        where = f"write {self.uri}{key}"
        blob = prepare(self._bucket.blob(self._name(key)), meta, self._write_opts, where)
        try:
            self._call(
                "write", key, blob.upload_from_string, data, timeout=self._timeout, retry=None
            )
        except ObjectNotFoundError as exc:
            raise self._not_found("write", key, exc) from None
        return self._info(key, blob)

    def write_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent (``ifGenerationMatch=0``): False when it existed."""
        blob = self._bucket.blob(self._name(key))
        try:
            self._call(
                "write",
                key,
                blob.upload_from_string,
                data,
                if_generation_match=0,
                timeout=self._timeout,
                retry=None,
            )
        except StoreError as exc:
            if exc.status == 412:
                return False
            raise
        return True

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Server-side copy within the bucket (one rewrite/copy call)."""
        src = self._bucket.blob(self._name(src_key))
        dst_name = self._name(dst_key)
        self._call("copy", src_key, self._bucket.copy_blob, src, self._bucket, dst_name, retry=None)
        return self.head(dst_key)

    # -- server-side copy from another GCS bucket (rewrite) -------------------------------------
    def can_copy_from(self, src: Any, part: bool = False) -> bool:
        """Whole objects from a GCS store on the same service: a rewrite has no byte range,
        so a staged part cannot be copied (large objects go through the caller's bytes)."""
        return (
            not part
            and isinstance(src, GCSStore)
            and src._opts.get("endpoint_url") == self._opts.get("endpoint_url")
        )

    def copy_from(
        self,
        src: Any,
        key: str,
        size: int,
        version: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Copied:
        """A rewrite of ``key`` (the listed generation) with its token loop (GCS answers a
        large or cross-location rewrite in steps); the copy's CRC32C as GCS reports it, and
        the generation it made."""
        source = src._bucket.blob(src._name(key))
        dest = prepare(self._bucket.blob(self._name(key)), meta, self._write_opts)
        if not meta:
            dest.metadata = None  # as a write: nothing of the source's unless it travels
        pinned = {"if_source_generation_match": int(version)} if version else {}
        token: str | None = None
        try:
            while True:
                token, _done, _total = self._call(
                    "copy", key, dest.rewrite, source, token=token,
                    timeout=self._timeout, retry=None, **pinned,
                )  # fmt: skip
                if token is None:
                    break
        except ObjectNotFoundError as exc:
            if version is not None:
                raise src._changed(key, version, "deleted", "it was deleted") from None
            raise self._not_found("copy", key, exc) from None
        except StoreError as exc:
            if version is not None and exc.status == 412:
                raise src._changed(key, version, None) from None
            raise
        generation = str(dest.generation) if dest.generation else None
        return Copied(str(dest.crc32c) if dest.crc32c else None, generation)

    def signed_url(self, key: str, seconds: int = 900) -> str:
        """A V4 signed GET URL of ``key`` for ``seconds`` (a credential: never logged)."""
        from datetime import timedelta

        blob = self._bucket.blob(self._name(key))
        try:
            url = blob.generate_signed_url(
                expiration=timedelta(seconds=seconds), method="GET", version="v4"
            )
        except (AttributeError, ValueError, TypeError):
            # A token without a private key (a minted, downscoped one; the emulator's
            # anonymous client) signs nothing: the caller moves the bytes itself.
            raise CopyNotSupportedError(
                f"sign {self.uri}{key}: these credentials cannot sign a URL"
            ) from None
        return str(url)

    # -- multipart via temporary objects + compose ---------------------------------------------
    def _stage(self, upload_id: str, name: str) -> Any:
        return self._bucket.blob(f"{STAGING}{upload_id}/{name}")

    def create_multipart(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        """A staging marker naming the key; ``meta`` (checked now: what GCS cannot hold fails
        before any part is sent) is kept in it, after the key's line (a custom metadata value
        holds 4 KiB, less than an object's metadata may take), and set on the destination by
        the final compose."""
        full = self._name(key)
        upload_id = uuid.uuid4().hex
        marker = self._stage(upload_id, "key")
        if meta:
            gcs_user(meta, f"create_multipart {self.uri}{key}")
        body = full + "\n" + json.dumps(dict(meta or {}))  # GCS names hold no line breaks
        try:
            self._call(
                "create_multipart", key, marker.upload_from_string, body.encode(), retry=None
            )
        except ObjectNotFoundError as exc:
            raise self._not_found("create_multipart", key, exc) from None
        return upload_id

    def _check_owner(self, key: str, upload_id: str) -> dict[str, Any] | None:
        """Refuse an upload that is not ``key``'s; the metadata it was created with."""
        marker = self._stage(check_upload_id(upload_id), "key")
        try:
            owner = self._call("complete_multipart", key, marker.download_as_bytes, retry=None)
        except ObjectNotFoundError:
            owner = None
        name, newline, kept = (owner or b"").decode().partition("\n")
        if owner is None or name != self._parsed.key(key):
            raise UploadNotFoundError(f"{self.uri}: no upload {upload_id} for key {key!r}")
        if not newline:  # an upload made by an earlier release kept it in the marker's metadata
            self._call("complete_multipart", key, marker.reload, retry=None)
            kept = (marker.metadata or {}).get("meta")
        return cast(dict[str, Any], json.loads(kept)) or None if kept else None

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_key(key)
        check_part_number(part_number, self.capabilities.max_parts)
        part = self._stage(check_upload_id(upload_id), f"{part_number:05d}")
        self._call(
            "upload_part", key, part.upload_from_string, data, timeout=self._timeout, retry=None
        )

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        part_numbers: Sequence[int],
        meta: Mapping[str, Any] | None = None,
    ) -> ObjectInfo:
        kept = self._check_owner(check_key(key), upload_id)
        meta = meta or kept
        wanted = sorted(set(part_numbers))  # a missing part fails the compose below
        if not wanted:
            raise UploadNotFoundError(f"complete {self.uri}{key}: no parts given")
        sources = [self._stage(upload_id, f"{n:05d}") for n in wanted]
        level = 0
        try:
            while len(sources) > COMPOSE_LIMIT:
                groups = [
                    sources[i : i + COMPOSE_LIMIT] for i in range(0, len(sources), COMPOSE_LIMIT)
                ]
                merged = [self._stage(upload_id, f"c{level}-{i:05d}") for i in range(len(groups))]
                for target, group in zip(merged, groups, strict=True):
                    self._call(
                        "compose", key, target.compose, group, timeout=self._timeout, retry=None
                    )
                sources, level = merged, level + 1
            dest = prepare(self._bucket.blob(self._name(key)), meta, self._write_opts)
            self._call(
                "complete_multipart", key, dest.compose, sources, timeout=self._timeout, retry=None
            )
        except ObjectNotFoundError:
            raise UploadNotFoundError(f"complete {self.uri}{key}: upload misses parts") from None
        self._drop_staging(upload_id)
        return self._info(key, dest)

    def _drop_staging(self, upload_id: str) -> None:
        prefix = f"{STAGING}{upload_id}/"
        blobs = list(
            self._call(
                "abort", "", lambda: list(self._client.list_blobs(self._bucket, prefix=prefix))
            )
        )

        def drop(blob: Any) -> None:
            try:
                self._call("abort", "", blob.delete, timeout=self._timeout, retry=None)
            except ObjectNotFoundError:
                pass

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(drop, blobs))

    def abort_multipart(self, key: str, upload_id: str) -> None:
        check_key(key)
        self._drop_staging(check_upload_id(upload_id))

    def delete(self, key: str) -> None:
        blob = self._bucket.blob(self._name(key))
        try:
            self._call("delete", key, blob.delete, timeout=self._timeout, retry=None)
        except ObjectNotFoundError as exc:
            err = self._not_found("delete", key, exc)
            if isinstance(err, BucketNotFoundError):
                raise err from None
