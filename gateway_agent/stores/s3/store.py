"""Amazon S3 and S3-compatible stores (boto3), imported lazily so other gateways skip boto3.

Options: ``endpoint_url`` (S3-compatible services and emulators), ``region``,
``addressing_style`` ("path"/"virtual"/"auto"; path is used whenever an endpoint is given),
``max_pool_connections`` (default 64), ``connect_timeout``/``read_timeout`` (seconds),
``list_page_size`` (keys per ListObjectsV2 page, default 1000), ``checksums`` ("crc32c", the
default, or "off" for S3-compatible services that refuse S3's additional checksums),
``fast_put`` (default true: PutObject of bodies under 1 MiB skips boto3's request pipeline,
see ``fast``; false sends every PutObject through boto3), ``fast_get`` (the same for
GetObject of ranges under 1 MiB and for HeadObject, default true), ``fast_list`` (the same
for ListObjectsV2 pages, default true).
Credentials: explicit ``aws`` :class:`StoreCredentials` when given (a gateway's, sealed by
its control plane), otherwise boto3's normal chain (env, profile, instance role).

Multipart is S3's native one: ``upload_id`` is S3's UploadId; parts are uploaded by any process;
``complete_multipart`` looks their ETags up with ListParts, so workers need not report them.
Parts except the last must be >= 5 MiB. ``md5`` is reported for single-part objects only (the
ETag of a multipart object is not an MD5).

Native checksums: every PutObject and UploadPart carries ``ChecksumCRC32C`` of the bytes sent,
so S3 refuses a body damaged in transit and stores the CRC32C; multipart uploads are created
with ``ChecksumType=FULL_OBJECT``, so the completed object's CRC32C is that of the whole object
(not the composite CRC-of-CRCs), comparable with the CRC32C the engine folds from its sources.
``head`` asks for it (``ChecksumMode=ENABLED``) and reports ``crc32c`` (base64, as GCS does)
only when it is a full-object checksum; ``write`` reports the CRC32C of PutObject's answer (the
one S3 checked the body against; the sink reports such writes as ``vouched`` in its ``done``
events, and verification skips the HEAD of such objects). Listings do not carry checksum values
(ListObjectsV2 gives only the algorithm), so verification HEADs objects instead of reading
them back. Bodies under 1 MiB go without ``Expect: 100-continue``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC
from typing import Any

from gateway_agent.stores._common import (
    CloudStore,
    check_part_number,
    check_range,
    require_parts,
)
from gateway_agent.stores.base import Capabilities, Copied, ListRow, ObjectInfo
from gateway_agent.stores.credentials import CREDENTIAL_OPTIONS, Credentials, boto3_session
from gateway_agent.stores.errors import (
    BucketNotFoundError,
    InvalidURIError,
    ObjectNotFoundError,
    StoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.s3 import copy as s3copy
from gateway_agent.stores.s3.answers import (
    classify,
    crc32c_b64,
    full_object_crc32c,
    micros,
    no_continue_when_small,
    requester_pays,
)
from gateway_agent.stores.s3.fast import FAST_BODY_MAX, FastPath, Listed, Unsupported, fast_path_for
from gateway_agent.stores.s3.writeopts import (
    WRITE_OPTIONS,
    get_fields,
    head_to_meta,
    meta_args,
    put_headers,
    write_args,
)
from gateway_agent.stores.uri import StoreURI

MIB = 1024 * 1024
_MD5 = re.compile(r"^[0-9a-f]{32}$")
# What S3 answers a conditional create whose name exists (or is being written by another).
_NOT_ABSENT = ("PreconditionFailed", "ConditionalRequestConflict")
_OPTIONS = (
    frozenset(
        {
            "endpoint_url",
            "region",
            "addressing_style",
            "max_pool_connections",
            "connect_timeout",
            "read_timeout",
            "list_page_size",
            "checksums",
            "fast_put",
            "fast_get",
            "fast_list",
            # Destination write options (``s3/writeopts``) and requester-pays on a source.
            *WRITE_OPTIONS,
        }
    )
    | CREDENTIAL_OPTIONS["s3"]
)


class S3Store(CloudStore):
    """An ObjectStore over one S3 bucket (and optional prefix)."""

    OPTIONS = _OPTIONS
    # A copy's CRC32C (CopyObject, UploadPartCopy) is the one S3 computed and stored.
    COPY_VOUCHES = True
    capabilities = Capabilities(
        native_checksums=frozenset({"md5", "crc32c"}),
        server_side_copy=True,
        min_part_size=5 * MIB,
    )

    def __init__(
        self,
        parsed: StoreURI,
        options: Mapping[str, Any] | None = None,
        credentials: Credentials | None = None,
    ):
        from botocore.config import Config

        from gateway_agent.stores.aws_session import new_session

        super().__init__(parsed, options)
        opts = self._opts
        self._bucket = parsed.bucket
        self._page_size = int(opts.get("list_page_size", 1000))
        mode = opts.get("checksums", "crc32c")
        if mode not in ("crc32c", "off"):
            raise InvalidURIError(f"{self.uri}: option checksums must be 'crc32c' or 'off'")
        self._crc = mode == "crc32c"
        # What every PutObject / CreateMultipartUpload adds (storage class, encryption, ACL);
        # checked here, before any work. Requester-pays: every request says who pays.
        self._write_args = write_args(opts, self.uri)
        self._payer = {"RequestPayer": "requester"} if opts.get("requester_pays") else {}
        self.bucket, self.endpoint = parsed.bucket, opts.get("endpoint_url")
        self.requester_pays = bool(opts.get("requester_pays"))
        if not self._crc:
            self.capabilities = Capabilities(
                native_checksums=frozenset({"md5"}), server_side_copy=True, min_part_size=5 * MIB
            )
        endpoint = opts.get("endpoint_url")
        style = opts.get("addressing_style", "path" if endpoint else "auto")
        config = Config(
            region_name=opts.get("region"),
            retries={
                "max_attempts": 1,
                "mode": "standard",
            },  # tenacity retries, not botocore
            max_pool_connections=int(opts.get("max_pool_connections", 64)),
            connect_timeout=float(opts.get("connect_timeout", 10)),
            read_timeout=float(opts.get("read_timeout", 120)),
            s3={"addressing_style": style},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # Credentials sealed by the control plane (refreshed in place), else the SDK's chain.
        session = boto3_session(credentials) if credentials else new_session()
        self._client: Any = session.client("s3", endpoint_url=endpoint, config=config)
        for op in ("PutObject", "UploadPart"):
            self._client.meta.events.register(f"before-sign.s3.{op}", no_continue_when_small)
        fast = {name: opts.get(name, True) for name in ("fast_put", "fast_get", "fast_list")}
        for name, on in fast.items():
            if not isinstance(on, bool):
                raise InvalidURIError(f"{self.uri}: option {name} must be true or false")
        if self._payer:  # every request says the requester pays: through boto3 only
            self._client.meta.events.register("before-parameter-build.s3", requester_pays)
            fast = dict.fromkeys(fast, False)
        path = None
        if any(fast.values()):
            path = fast_path_for(self._client, session, self._bucket, opts)
        self._fast: FastPath | None = path if fast["fast_put"] else None
        self._fast_get: FastPath | None = path if fast["fast_get"] else None
        self._fast_list: FastPath | None = path if fast["fast_list"] else None

    def _crc_args(self, data: bytes) -> dict[str, str]:
        """What PutObject/UploadPart send so S3 checks the body and keeps its CRC32C."""
        if not self._crc:
            return {}
        return {"ChecksumAlgorithm": "CRC32C", "ChecksumCRC32C": crc32c_b64(data)}

    def _crc_kind(self, **kw: str) -> dict[str, str]:
        return kw if self._crc else {}

    def _classify(self, exc: Exception, where: str, op: str) -> StoreError | None:
        return classify(exc, where, op)

    def _on_key(self, op: str, key: str, fn: Callable[..., Any], **params: Any) -> Any:
        """``fn(Bucket=..., Key=<full name of key>, **params)`` with retries and typed errors."""
        name = self._name(key)
        return self._call(op, key, fn, Bucket=self._bucket, Key=name, **params)

    def _info(
        self,
        key: str,
        size: int,
        etag: str | None,
        modified: Any,
        crc: str | None = None,
        version_id: str | None = None,
    ) -> ObjectInfo:
        etag = etag.strip('"') if etag else None
        if version_id == "null":  # an unversioned or suspended bucket's only version
            version_id = None
        if modified is not None:
            modified = modified.astimezone(UTC)  # list and head parse to different tzinfos
        checksums = {"md5": etag} if etag and _MD5.match(etag) else {}
        if crc:
            checksums["crc32c"] = crc
        return ObjectInfo(key, int(size), etag, checksums, modified, etag, version_id=version_id)

    def _bucket_missing(self, key: str) -> bool:
        """HEAD answers 404 without a code; tell a missing bucket from a missing key."""
        try:
            self._call("head_bucket", "", self._client.head_bucket, Bucket=self._bucket)
        except (StoreError, ObjectNotFoundError) as exc:
            return exc.status == 404 or isinstance(exc, BucketNotFoundError)
        return False

    # -- protocol ------------------------------------------------------------------------------
    def _pages(self, prefix: str) -> Iterator[list[Listed]]:
        """The listing under ``prefix``, a page at a time: (key, size, ETag, LastModified)."""
        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)
        token: str | None = None
        while True:
            fast = self._fast_list
            if fast is not None:
                try:
                    items, token = self._call(
                        "list", prefix, fast.list_page, full, token, self._page_size
                    )
                except Unsupported:
                    self._fast_list = None  # another region: boto3 follows, from this page on
                    continue
            else:
                items, token = self._boto3_page(prefix, full, token)
            yield [(name[skip:], size, etag, modified) for name, size, etag, modified in items]
            if not token:
                return

    def _boto3_page(
        self, prefix: str, full: str, token: str | None
    ) -> tuple[list[Listed], str | None]:
        more = {"ContinuationToken": token} if token else {}
        page = self._call(
            "list",
            prefix,
            self._client.list_objects_v2,
            Bucket=self._bucket,
            Prefix=full,
            MaxKeys=self._page_size,
            **more,
        )
        items = [
            (i["Key"], int(i["Size"]), i.get("ETag"), i.get("LastModified"))
            for i in page.get("Contents", [])
        ]
        return items, page.get("NextContinuationToken") if page.get("IsTruncated") else None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for page in self._pages(prefix):
            for key, size, etag, modified in page:
                yield self._info(key, size, etag, modified)

    def list_rows(
        self, prefix: str = "", *, versions: bool = True
    ) -> Iterator[builtins.list[ListRow]]:
        """``list`` as plain tuples, a page at a time (no ``ObjectInfo`` per object): the
        version is the ETag, the checksums an MD5 ETag, as ``list`` reports them."""
        for page in self._pages(prefix):
            rows: builtins.list[ListRow] = []
            for key, size, etag, modified in page:
                tag = etag.strip('"') if etag else None
                sums = f'{{"md5": "{tag}"}}' if tag and _MD5.match(tag) else None
                rows.append((key, size, micros(modified), sums, tag, tag))
            yield rows

    def list_level(self, prefix: str = "") -> tuple[builtins.list[ListRow], builtins.list[str]]:
        """``ListsLevels``: a delimiter (``/``) listing under ``prefix``: the objects right
        there as ``list_rows`` gives them, and the sub-prefixes (relative, ending with ``/``)."""
        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)
        rows: builtins.list[ListRow] = []
        subs: builtins.list[str] = []
        token: str | None = None
        while True:
            more = {"ContinuationToken": token} if token else {}
            page = self._call(
                "list", prefix, self._client.list_objects_v2, Bucket=self._bucket,
                Prefix=full, Delimiter="/", MaxKeys=self._page_size, **more,
            )  # fmt: skip
            for i in page.get("Contents", []):
                tag = i["ETag"].strip('"') if i.get("ETag") else None
                sums = f'{{"md5": "{tag}"}}' if tag and _MD5.match(tag) else None
                when = micros(i.get("LastModified"))
                rows.append((i["Key"][skip:], int(i["Size"]), when, sums, tag, tag))
            subs += [p["Prefix"][skip:] for p in page.get("CommonPrefixes", [])]
            token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
            if not token:
                return rows, subs

    def head(self, key: str) -> ObjectInfo:
        def fast_or_boto3(**kw: Any) -> Any:
            fast = self._fast_get if self._crc else None  # the fast HEAD asks for the CRC
            if fast is not None:
                try:
                    return fast.head(kw["Key"])
                except Unsupported:
                    self._fast_get = None  # another region: boto3 follows, from now on
            return self._client.head_object(**kw)

        try:
            resp = self._on_key(
                "head", key, fast_or_boto3, **self._crc_kind(ChecksumMode="ENABLED")
            )
        except ObjectNotFoundError:
            if self._bucket_missing(key):
                raise BucketNotFoundError(
                    f"head {self.uri}: bucket does not exist", code="NoSuchBucket"
                ) from None
            raise
        return self._info(
            key,
            resp["ContentLength"],
            resp.get("ETag"),
            resp.get("LastModified"),
            full_object_crc32c(resp),
            resp.get("VersionId"),
        )

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        check_range(start, length)
        if length == 0:
            self._check_version(key, version)
            return b""
        return self._get(key, start, length, version, False)[0]

    def read_meta(
        self, key: str, start: int, length: int, version: str | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """``ReadsWithMetadata``: the bytes and ``head_meta`` of the same GetObject answer
        (Content-*, ``x-amz-meta-*``, storage class, SSE; GetObjectTagging only when the answer
        counts tags). An empty object is one GET of the whole object (pinned alike)."""
        check_range(start, length)
        data, fields = self._get(key, start, length or None, version, True)
        if length == 0 and data:
            raise self._changed(key, version or "", None, "it is no longer empty")
        return data, self._meta_of(key, fields)

    def _get(
        self, key: str, start: int, length: int | None, version: str | None, fields: bool
    ) -> tuple[bytes, dict[str, Any]]:
        """One GetObject (fast path or boto3): the bytes, and with ``fields`` the answer's
        fields as boto3 names them (``get_fields``)."""
        name = self._name(key)
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Key": name, **self._payer}
        if version is not None:
            kwargs["IfMatch"] = f'"{version}"'  # S3 answers 412 once the object was rewritten
        if start or length is not None:
            end = "" if length is None else str(start + length - 1)
            kwargs["Range"] = f"bytes={start}-{end}"

        def get(**kw: Any) -> tuple[bytes, dict[str, Any]]:
            fast = None if self._payer else self._fast_get
            if fast is not None and length is not None and length < FAST_BODY_MAX:
                try:
                    if not fields:
                        return fast.get(name, start, length, kw.get("IfMatch")), {}
                    answer = fast.get_answer(name, start, length, kw.get("IfMatch"))
                    return answer.data, get_fields(answer.headers)
                except Unsupported:
                    self._fast_get = None  # another region: boto3 follows, from now on
            resp = self._client.get_object(**kw)
            body = resp.pop("Body")
            try:
                return bytes(body.read()), resp
            finally:
                body.close()

        try:
            return self._call("read", key, get, **kwargs)  # type: ignore[no-any-return]
        except ObjectNotFoundError:
            if version is None:
                raise
            raise self._changed(key, version, "deleted", "it was deleted") from None
        except StoreError as exc:
            if version is not None and (exc.status == 412 or exc.code == "PreconditionFailed"):
                raise self._changed(key, version, None) from None
            if exc.code == "InvalidRange" or exc.status == 416:
                self._check_version(key, version)
                return b"", {}  # start at or past the end: nothing to read
            raise

    def _meta_of(self, key: str, resp: Mapping[str, Any]) -> dict[str, Any]:
        """``head_meta`` of a HeadObject or GetObject answer: one GetObjectTagging when the
        answer counts any tags."""
        tags: dict[str, str] = {}
        headers = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        if int(resp.get("TagCount") or headers.get("x-amz-tagging-count") or 0):
            got = self._on_key("tags", key, self._client.get_object_tagging, **self._payer)
            tags = {t["Key"]: t["Value"] for t in got.get("TagSet", [])}
        return head_to_meta(resp, tags)

    def head_meta(self, key: str, version: str | None = None) -> dict[str, Any]:
        """System properties, ``x-amz-meta-*``, tags (one GetObjectTagging, only when HEAD
        counts any), the kept source time (else LastModified), storage class, encryption."""
        resp = self._on_key("head", key, self._client.head_object, **self._payer)
        return self._meta_of(key, resp)

    def write(self, key: str, data: bytes, meta: Mapping[str, Any] | None = None) -> ObjectInfo:
        crc = self._crc_args(data)
        extra = {**self._write_args, **meta_args(meta or {}, f"write {self.uri}{key}")}
        fast = self._fast
        resp: Mapping[str, Any] | None = None
        if fast is not None and len(data) < FAST_BODY_MAX:
            name = self._name(key)
            headers = put_headers(extra) if extra else None
            try:
                resp = self._call(
                    "write", key, fast.put, name, data, crc.get("ChecksumCRC32C"), headers
                )
            except Unsupported:
                self._fast = None  # S3 redirects (another region): boto3 follows, from now on
        if resp is None:
            resp = self._on_key("write", key, self._client.put_object, Body=data, **crc, **extra)
        # The CRC32C S3 answers with is the one it checked the body against and stored.
        stored = full_object_crc32c(resp) if crc else None
        return self._info(key, len(data), resp.get("ETag"), None, stored, resp.get("VersionId"))

    def write_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent (``If-None-Match: *``): False when it existed."""
        try:
            self._on_key("write", key, self._client.put_object, Body=data, IfNoneMatch="*")
        except StoreError as exc:
            if exc.status in (409, 412) or exc.code in _NOT_ABSENT:
                return False
            raise
        return True

    def copy(self, src_key: str, dst_key: str) -> ObjectInfo:
        """Server-side copy within the bucket (single CopyObject, objects up to 5 GiB)."""
        src = {"Bucket": self._bucket, "Key": self._name(src_key)}
        dst = self._name(dst_key)
        self._call(
            "copy",
            src_key,
            self._client.copy_object,
            Bucket=self._bucket,
            Key=dst,
            CopySource=src,
            **self._crc_kind(ChecksumAlgorithm="CRC32C"),
        )
        return self.head(dst_key)

    # -- server-side copy from another S3 store (``s3.copy``) -------------------------------------
    @property
    def write_args(self) -> dict[str, Any]:
        """What every write adds (storage class, encryption, ACL)."""
        return dict(self._write_args)

    def can_copy_from(self, src: Any, part: bool = False) -> bool:
        return s3copy.same_service(self, src)

    def copy_from(
        self,
        src: Any,
        key: str,
        size: int,
        version: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Copied:
        return s3copy.copy_object(self, src, key, size, version, meta)

    def copy_keeping_metadata(
        self, src: Any, key: str, size: int, version: str | None, overrides: Mapping[str, str]
    ) -> Copied:
        return s3copy.copy_keeping(self, src, key, size, version, overrides)

    def copy_part_from(
        self,
        src: Any,
        key: str,
        upload_id: str,
        part_number: int,
        offset: int,
        length: int,
        version: str | None = None,
    ) -> Copied:
        return s3copy.copy_part(self, src, key, upload_id, part_number, offset, length, version)

    def signed_url(self, key: str, seconds: int = 900) -> str:
        return s3copy.presigned_get(self, key, seconds)

    def create_multipart(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        resp = self._on_key(
            "create_multipart",
            key,
            self._client.create_multipart_upload,
            **self._crc_kind(ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT"),
            **self._write_args,
            **meta_args(meta or {}, f"create_multipart {self.uri}{key}"),
        )
        return str(resp["UploadId"])

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.capabilities.max_parts)
        self._on_key(
            "upload_part",
            key,
            self._client.upload_part,
            UploadId=upload_id,
            PartNumber=part_number,
            Body=data,
            **self._crc_args(data),
        )

    def _etags(self, key: str, upload_id: str) -> dict[int, dict[str, str]]:
        """Part number -> what CompleteMultipartUpload needs of it (ETag, and the part's CRC32C
        where ListParts reports it: S3 wants it back for an upload created with a checksum)."""
        etags: dict[int, dict[str, str]] = {}
        marker = 0
        while True:
            page = self._on_key(
                "list_parts",
                key,
                self._client.list_parts,
                UploadId=upload_id,
                PartNumberMarker=marker,
            )
            for part in page.get("Parts", []):
                entry = {"ETag": str(part["ETag"])}
                if part.get("ChecksumCRC32C"):
                    entry["ChecksumCRC32C"] = str(part["ChecksumCRC32C"])
                etags[int(part["PartNumber"])] = entry
            if not page.get("IsTruncated"):
                return etags
            marker = int(page["NextPartNumberMarker"])

    def complete_multipart(
        self, key: str, upload_id: str, part_numbers: Sequence[int]
    ) -> ObjectInfo:
        etags = self._etags(key, upload_id)
        wanted = require_parts(f"complete {self.uri}{key}", part_numbers, etags)
        parts = [{"PartNumber": n, **etags[n]} for n in wanted]
        done = self._on_key(
            "complete_multipart",
            key,
            self._client.complete_multipart_upload,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
            **self._crc_kind(ChecksumType="FULL_OBJECT"),
        )
        info = self.head(key)
        vid = done.get("VersionId")  # the version this completion made, whatever came after
        return replace(info, version_id=vid) if vid and vid != "null" else info

    def abort_multipart(self, key: str, upload_id: str) -> None:
        try:
            self._on_key(
                "abort_multipart",
                key,
                self._client.abort_multipart_upload,
                UploadId=upload_id,
            )
        except UploadNotFoundError:
            return  # already aborted or completed: abort is idempotent

    def delete(self, key: str) -> None:
        self._on_key("delete", key, self._client.delete_object)
