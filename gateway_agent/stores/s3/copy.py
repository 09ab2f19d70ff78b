"""S3 -> S3 server-side copy (``SupportsCopyFrom``): CopyObject for a whole object,
UploadPartCopy of a byte range into a staged multipart upload, and presigned GETs
(``SignsURLs``) for a destination that copies from a URL (Azure).

The destination's client makes the calls, so S3 reads the source with the destination's
credentials (both ends on one service: same endpoint). Every copy is pinned to the listed
version (``CopySourceIfMatch``: S3 answers 412 once the source changed) and written with the
destination's write options and the object's metadata stated explicitly
(``MetadataDirective`` ``REPLACE``), as a PutObject would write them; its tags copied by S3
(``TaggingDirective`` ``COPY``) when the caller keeps the source's (``copy_keeping``: the
source's HEAD and the copy, two calls per object, whatever it carries).
With CRC32C on (the store's default) S3 computes the copy's CRC32C from the bytes it copied
and returns it: that is the checksum verification then compares with the stored object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from gateway_agent.stores.base import Copied
from gateway_agent.stores.errors import CopyMismatchError, StoreError
from gateway_agent.stores.objmeta import policy, travelling
from gateway_agent.stores.s3.writeopts import head_to_meta, meta_args

# The functions take the ``S3Store`` (typed ``Any``: that module imports this one).
S3Store = Any

_MD5 = re.compile(r"^[0-9a-f]{32}$")
# CopyObject copies objects up to 5 GiB in one call; larger ones go in parts.
COPY_OBJECT_MAX = 5 * 1024**3


def same_service(dst: S3Store, src: Any) -> bool:
    """Whether ``dst`` can copy from ``src`` itself: both S3 stores on one endpoint."""
    return type(src) is type(dst) and src.endpoint == dst.endpoint


def _source(src: S3Store, key: str, version: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {"CopySource": {"Bucket": src.bucket, "Key": src._name(key)}}
    if version is not None:
        args["CopySourceIfMatch"] = f'"{version}"'
    if src.requester_pays:
        args["RequestPayer"] = "requester"
    return args


def _pinned(src: S3Store, key: str, version: str | None, exc: StoreError) -> StoreError:
    """A 412 of ``CopySourceIfMatch``: the source changed after the listing."""
    if version is not None and (exc.status == 412 or exc.code == "PreconditionFailed"):
        return cast(StoreError, src._changed(key, version, None))
    return exc


def copy_keeping(
    dst: S3Store,
    src: S3Store,
    key: str,
    size: int,
    version: str | None,
    overrides: Mapping[str, str],
) -> Copied:
    """CopyObject of ``key`` with its metadata, in two calls whatever it carries: the source's
    HEAD (its properties, user metadata and modification time: S3 cannot add the time to
    metadata it copies, nor restate metadata it was not told) and the copy, whose tags S3
    copies itself (``TaggingDirective=COPY``: no GetObjectTagging, which a HEAD that counts
    tags would need)."""
    resp = src._on_key("head", key, src._client.head_object, **src._payer)
    meta = policy(travelling(head_to_meta(resp, {})), True, overrides)
    return copy_object(dst, src, key, size, version, meta, source_tags=True)


def copy_object(
    dst: S3Store,
    src: S3Store,
    key: str,
    size: int,
    version: str | None,
    meta: dict[str, Any] | None,
    source_tags: bool = False,
) -> Copied:
    """CopyObject of ``key`` (the listed ``version``); the copy's CRC32C where S3 gives it
    and the version it made (VersionId in a versioned bucket, else its ETag).
    Metadata is ``meta``, stated (``MetadataDirective=REPLACE``); tags those of ``meta``, or
    with ``source_tags`` the source's as S3 holds them (``TaggingDirective=COPY``).

    A single-part source's ETag is its MD5 and so is the copy's (unless the destination
    encrypts with KMS): a copy whose ETag is not the listed one copied other bytes (an
    emulator that ignores ``CopySourceIfMatch``) and is reported as a changed source."""
    if size > COPY_OBJECT_MAX:
        raise StoreError(f"copy {dst.uri}{key}: {size} bytes is more than one CopyObject copies")
    where = f"copy {dst.uri}{key}"
    stated = {k: v for k, v in (meta or {}).items() if not (source_tags and k == "tags")}
    args = {**dst.write_args, **meta_args(stated, where)}
    args["MetadataDirective"] = "REPLACE"
    args["TaggingDirective"] = "COPY" if source_tags else "REPLACE"
    try:
        resp = dst._on_key(
            "copy",
            key,
            dst._client.copy_object,
            **_source(src, key, version),
            **dst._crc_kind(ChecksumAlgorithm="CRC32C"),
            **args,
        )
    except StoreError as exc:
        raise _pinned(src, key, version, exc) from None
    result = resp.get("CopyObjectResult") or {}
    etag = str(result.get("ETag") or "").strip('"')
    kms = "SSEKMSKeyId" in args or args.get("ServerSideEncryption") == "aws:kms"
    if version and _MD5.match(version) and etag and not kms and etag != version:
        raise src._changed(key, version, etag)
    crc = result.get("ChecksumCRC32C")
    if crc and version and not _MD5.match(version):
        # A multipart source's ETag is no MD5: its full-object CRC32C, where it has one (an
        # object this tool wrote has), is the source's checksum the copy must match.
        theirs = src.head(key).checksums.get("crc32c")
        if theirs and theirs != crc:
            raise CopyMismatchError(
                f"{where}: the copy's CRC32C {crc} is not the source's {theirs}",
                code="ChecksumMismatch",
            )
    return Copied(str(crc) if crc else None, str(resp.get("VersionId") or "") or etag or None)


def copy_part(
    dst: S3Store,
    src: S3Store,
    key: str,
    upload_id: str,
    part_number: int,
    offset: int,
    length: int,
    version: str | None,
) -> Copied:
    """UploadPartCopy of ``[offset, offset + length)`` into the staged ``upload_id``; the
    part's CRC32C where S3 gives it (an upload created with CRC32C: real S3 does, moto does
    not)."""
    from gateway_agent.stores._common import check_part_number

    check_part_number(part_number, dst.capabilities.max_parts)
    try:
        resp = dst._on_key(
            "upload_part_copy",
            key,
            dst._client.upload_part_copy,
            UploadId=upload_id,
            PartNumber=part_number,
            CopySourceRange=f"bytes={offset}-{offset + length - 1}",
            **_source(src, key, version),
        )
    except StoreError as exc:
        raise _pinned(src, key, version, exc) from None
    crc = (resp.get("CopyPartResult") or {}).get("ChecksumCRC32C")
    return Copied(str(crc) if crc else None)  # a part: the commit makes the version


def presigned_get(store: S3Store, key: str, seconds: int) -> str:
    """A GET URL of ``key`` valid for ``seconds`` (a credential: never logged)."""
    params: dict[str, Any] = {"Bucket": store.bucket, "Key": store._name(key)}
    if store.requester_pays:
        params["RequestPayer"] = "requester"
    return str(store._client.generate_presigned_url("get_object", Params=params, ExpiresIn=seconds))
