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

from gateway_agent.stores.errors import InvalidURIError
from gateway_agent.stores.objmeta import Meta, from_header, mtime_from_user, s3_user
from gateway_agent.stores.writeopts import WRITE_OPTIONS as ALL_WRITE_OPTIONS
from gateway_agent.stores.writeopts import storage_class

WRITE_OPTIONS = ALL_WRITE_OPTIONS["s3"]
SSE_MODES = {"s3": "AES256", "AES256": "AES256", "kms": "aws:kms", "aws:kms": "aws:kms"}
CANNED_ACLS = frozenset(
    {
        "private",
        "public-read",
        "public-read-write",
        "authenticated-read",
        "aws-exec-read",
        "bucket-owner-read",
        "bucket-owner-full-control",
    }
)
# HEAD answer field <-> portable name (``objmeta.SYSTEM``).
_SYSTEM = {
    "content_type": "ContentType",
    "content_encoding": "ContentEncoding",
    "content_disposition": "ContentDisposition",
    "content_language": "ContentLanguage",
    "cache_control": "CacheControl",
}


def _pick(value: Any, allowed: frozenset[str] | Mapping[str, str], what: str, uri: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidURIError(
            f"{uri}: {what} {value!r} is not one S3 has ({', '.join(sorted(allowed))})"
        )
    return value


def write_args(opts: Mapping[str, Any], uri: str) -> dict[str, Any]:
    """PutObject / CreateMultipartUpload arguments of the store options; a one-line error for a
    value S3 does not have."""
    args: dict[str, Any] = {}
    if "storage_class" in opts:
        args["StorageClass"] = storage_class("s3", opts["storage_class"], uri)
    sse = opts.get("sse")
    if sse is None and opts.get("kms_key_id"):
        sse = "aws:kms"
    if sse is not None:
        args["ServerSideEncryption"] = SSE_MODES[_pick(sse, SSE_MODES, "sse", uri)]
    if opts.get("kms_key_id"):
        if args.get("ServerSideEncryption") != "aws:kms":
            raise InvalidURIError(f"{uri}: kms_key_id needs sse 'aws:kms'")
        args["SSEKMSKeyId"] = str(opts["kms_key_id"])
    if "bucket_key" in opts:
        if not isinstance(opts["bucket_key"], bool) or "ServerSideEncryption" not in args:
            raise InvalidURIError(f"{uri}: bucket_key is true or false, with sse 'aws:kms'")
        args["BucketKeyEnabled"] = opts["bucket_key"]
    if "acl" in opts:
        args["ACL"] = _pick(opts["acl"], CANNED_ACLS, "acl", uri)
    if "requester_pays" in opts and not isinstance(opts["requester_pays"], bool):
        raise InvalidURIError(f"{uri}: requester_pays is true or false")
    return args


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
