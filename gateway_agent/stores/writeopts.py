"""Destination write options every provider names the same way (``storage_class``, and its
encryption key), checked without the provider's SDK, so a wrong value is a one-line error
before any work (``TransferRequest.check``, and again when the store is opened).

Per provider: S3 ``storage_class``, ``sse`` (``s3``/``AES256`` or ``kms``/``aws:kms``),
``kms_key_id``, ``bucket_key``, ``acl`` (canned), ``requester_pays`` (a source bucket whose
reads the requester pays for); GCS ``storage_class``, ``kms_key_name`` (CMEK),
``requester_pays`` (every request of that end names the store's ``project`` as the one billed:
``userProject``); Azure
``storage_class`` (the access tier), ``encryption_scope``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway_agent.stores.errors import InvalidURIError

STORAGE_CLASSES: dict[str, tuple[str, ...]] = {
    "s3": (
        "STANDARD",
        "REDUCED_REDUNDANCY",
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER",
        "DEEP_ARCHIVE",
        "GLACIER_IR",
        "EXPRESS_ONEZONE",
    ),
    "gs": ("STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"),
    "az": ("Hot", "Cool", "Cold", "Archive"),
}
# Each provider's option for "encrypt with this key" (the CLI's portable ``--kms-key``).
KEY_OPTION = {"s3": "kms_key_id", "gs": "kms_key_name", "az": "encryption_scope"}
WRITE_OPTIONS: dict[str, frozenset[str]] = {
    "s3": frozenset({"storage_class", "sse", "kms_key_id", "bucket_key", "acl", "requester_pays"}),
    "gs": frozenset({"storage_class", "kms_key_name", "requester_pays"}),
    "az": frozenset({"storage_class", "encryption_scope"}),
}


def storage_class(scheme: str, value: Any, uri: str) -> str:
    """``value`` as the provider spells it (``standard_ia`` -> ``STANDARD_IA``, ``cool`` ->
    ``Cool``); a one-line error for a class the provider does not have."""
    known = STORAGE_CLASSES.get(scheme)
    if known is None:
        raise InvalidURIError(f"{uri}: this store has no storage classes (storage_class)")
    if isinstance(value, str):
        for name in known:
            if name.lower() == value.lower().replace("-", "_"):
                return name
    raise InvalidURIError(
        f"{uri}: storage_class {value!r} is not one this provider has ({', '.join(known)})"
    )


def check_write_options(scheme: str, options: Mapping[str, Any], uri: str) -> None:
    """The write options among ``options`` have values their provider takes."""
    if "storage_class" in options:
        storage_class(scheme, options["storage_class"], uri)
    for name in ("kms_key_id", "kms_key_name", "encryption_scope", "sse", "acl"):
        if name in options and (not isinstance(options[name], str) or not options[name]):
            raise InvalidURIError(f"{uri}: {name} must be a non-empty string")
    for name in ("bucket_key", "requester_pays"):
        if name in options and not isinstance(options[name], bool):
            raise InvalidURIError(f"{uri}: {name} must be true or false")
    if scheme == "s3":
        s3_write_args(options, uri)
    if scheme == "gs":
        user_project(options, uri)


def user_project(options: Mapping[str, Any], uri: str) -> str | None:
    """The project GCS bills for a requester-pays bucket's requests (``userProject``): the
    store's ``project`` when ``requester_pays`` is true; a one-line error without one."""
    if not options.get("requester_pays"):
        return None
    project = options.get("project")
    if not isinstance(project, str) or not project:
        raise InvalidURIError(
            f"{uri}: requester_pays needs the store option project (the project billed)"
        )
    return project


def portable(scheme: str, storage: str | None, kms_key: str | None, uri: str) -> dict[str, Any]:
    """The store options of the CLI's ``--storage-class`` / ``--kms-key`` for a destination of
    ``scheme`` (refused where the provider has no such thing)."""
    out: dict[str, Any] = {}
    if storage is not None:
        out["storage_class"] = storage_class(scheme, storage, uri)
    if kms_key is not None:
        if scheme not in KEY_OPTION:
            raise InvalidURIError(f"{uri}: this store has no server-side encryption keys")
        out[KEY_OPTION[scheme]] = kms_key
    return out


# ---- S3 ----------------------------------------------------------------------------------------

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


def _pick(value: Any, allowed: frozenset[str] | Mapping[str, str], what: str, uri: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidURIError(
            f"{uri}: {what} {value!r} is not one S3 has ({', '.join(sorted(allowed))})"
        )
    return value


def s3_write_args(opts: Mapping[str, Any], uri: str) -> dict[str, Any]:
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
