"""What an S3 destination writes besides the bytes: the store's write options (storage class,
server-side encryption, canned ACL: checked when the store is opened, so a wrong value stops
the run before any work) and an object's metadata (``objmeta``) as PutObject /
CreateMultipartUpload arguments, and back from a HEAD answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from gateway_agent.stores.objmeta import Meta, from_header, mtime_from_user, s3_user
from gateway_agent.stores.writeopts import WRITE_OPTIONS as ALL_WRITE_OPTIONS
from gateway_agent.stores.writeopts import s3_write_args as write_args

WRITE_OPTIONS = ALL_WRITE_OPTIONS["s3"]
__all__ = [
    "WRITE_OPTIONS",
    "get_fields",
    "head_to_meta",
    "meta_args",
    "put_headers",
    "write_args",
]
# HEAD answer field <-> portable name (``objmeta.SYSTEM``).
_SYSTEM = {
    "content_type": "ContentType",
    "content_encoding": "ContentEncoding",
    "content_disposition": "ContentDisposition",
    "content_language": "ContentLanguage",
    "cache_control": "CacheControl",
}


def meta_args(meta: Mapping[str, Any], where: str) -> dict[str, Any]:
    """An object's metadata as PutObject / CreateMultipartUpload arguments (the object fails
    with ``MetadataNotSupportedError`` where S3 cannot hold it: ``objmeta.s3_user``)."""
    if not meta:
        return {}
    args: dict[str, Any] = {name: meta[field] for field, name in _SYSTEM.items() if meta.get(field)}
    user = s3_user(meta, where)
    if user:
        args["Metadata"] = user
    if meta.get("tags"):
        args["Tagging"] = urlencode(meta["tags"])
    return args


def head_to_meta(resp: Mapping[str, Any], tags: Mapping[str, str]) -> Meta:
    """The portable metadata of a HeadObject answer (and the object's tags); the storage class
    and encryption too (read only: what ``--verify full`` compares)."""
    meta: Meta = {field: resp[name] for field, name in _SYSTEM.items() if resp.get(name)}
    user = {k: from_header(v) for k, v in (resp.get("Metadata") or {}).items()}
    modified = resp.get("LastModified")
    last = round(modified.timestamp() * 1e9) if isinstance(modified, datetime) else None
    mtime = mtime_from_user(user, last)
    if mtime is not None:
        meta["mtime_ns"] = mtime
    if user:
        meta["user"] = user
    if tags:
        meta["tags"] = dict(tags)
    meta["storage_class"] = resp.get("StorageClass") or "STANDARD"
    if resp.get("ServerSideEncryption"):
        meta["encryption"] = resp["ServerSideEncryption"]
    if resp.get("SSEKMSKeyId"):
        meta["kms_key"] = resp["SSEKMSKeyId"]
    return meta


def get_fields(headers: Mapping[str, str]) -> dict[str, Any]:
    """The fields ``head_to_meta`` reads, from a GetObject answer's raw headers (names in lower
    case; the fast path's answer), as boto3 names them (``TagCount``: how many tags)."""
    from email.utils import parsedate_to_datetime

    out: dict[str, Any] = {
        name: headers[header.lower()]
        for name, header in _HEADERS.items()
        if header.lower() in headers and name in _SYSTEM.values()
    }
    out["Metadata"] = {
        k[len("x-amz-meta-") :]: v for k, v in headers.items() if k.startswith("x-amz-meta-")
    }
    for name, header in (
        ("StorageClass", "x-amz-storage-class"),
        ("ServerSideEncryption", "x-amz-server-side-encryption"),
        ("SSEKMSKeyId", "x-amz-server-side-encryption-aws-kms-key-id"),
        ("TagCount", "x-amz-tagging-count"),
        ("ETag", "etag"),
    ):
        if headers.get(header):
            out[name] = headers[header]
    if headers.get("last-modified"):
        out["LastModified"] = parsedate_to_datetime(headers["last-modified"])
    return out


# PutObject argument -> its HTTP header (the fast path sends the headers itself).
_HEADERS = {
    "ContentType": "Content-Type",
    "ContentEncoding": "Content-Encoding",
    "ContentDisposition": "Content-Disposition",
    "ContentLanguage": "Content-Language",
    "CacheControl": "Cache-Control",
    "Tagging": "x-amz-tagging",
    "StorageClass": "x-amz-storage-class",
    "ServerSideEncryption": "x-amz-server-side-encryption",
    "SSEKMSKeyId": "x-amz-server-side-encryption-aws-kms-key-id",
    "ACL": "x-amz-acl",
}


def put_headers(args: Mapping[str, Any]) -> dict[str, str]:
    """The headers of PutObject ``args`` (``write_args`` and ``meta_args``), as boto3 would
    send them, for the fast path; user metadata values are header-safe already."""
    headers = {_HEADERS[k]: str(v) for k, v in args.items() if k in _HEADERS}
    if "BucketKeyEnabled" in args:
        headers["x-amz-server-side-encryption-bucket-key-enabled"] = str(
            bool(args["BucketKeyEnabled"])
        ).lower()
    for key, value in (args.get("Metadata") or {}).items():
        headers[f"x-amz-meta-{key}"] = value
    unknown = set(args) - set(_HEADERS) - {"BucketKeyEnabled", "Metadata"}
    if unknown:  # a new argument nobody mapped: never sent without it
        raise ValueError(f"no header for PutObject argument(s) {sorted(unknown)}")
    return headers
