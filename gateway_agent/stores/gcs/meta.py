"""A GCS object's metadata (``objmeta``) set on a blob before it is written, and back from
its resource: the system properties, custom metadata (GCS has no tags: a tag is kept as
``skyplane-tag-<key>`` custom metadata and read back as a tag; the source time as ``mtime``),
and the destination's write options (``storage_class``, ``kms_key_name``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gateway_agent.stores.objmeta import SYSTEM, Meta, gcs_user, mtime_from_user, split_gcs_user
from gateway_agent.stores.writeopts import storage_class


def write_options(opts: Mapping[str, Any], uri: str) -> dict[str, Any]:
    """Blob attributes of the store's write options (checked before any work)."""
    out: dict[str, Any] = {}
    if "storage_class" in opts:
        out["storage_class"] = storage_class("gs", opts["storage_class"], uri)
    if opts.get("kms_key_name"):
        out["kms_key_name"] = str(opts["kms_key_name"])
    return out


def prepare(
    blob: Any, meta: Mapping[str, Any] | None, options: Mapping[str, Any], where: str = "GCS"
) -> Any:
    """``blob`` with the attributes its upload or compose sends."""
    for name, value in options.items():
        setattr(blob, name, value)
    if meta:
        for name in SYSTEM:
            if meta.get(name):
                setattr(blob, name, meta[name])
        user = gcs_user(meta, where)
        if user:
            blob.metadata = user
    return blob


def blob_to_meta(blob: Any) -> Meta:
    """The portable metadata of a blob's resource; its class and key too (read only)."""
    meta: Meta = {name: getattr(blob, name, None) for name in SYSTEM}
    meta = {k: v for k, v in meta.items() if v}
    user, tags = split_gcs_user(dict(blob.metadata or {}))
    updated = blob.updated
    last = round(updated.timestamp() * 1e9) if isinstance(updated, datetime) else None
    mtime = mtime_from_user(user, last)
    if mtime is not None:
        meta["mtime_ns"] = mtime
    if user:
        meta["user"] = user
    if tags:
        meta["tags"] = tags
    if blob.storage_class:
        meta["storage_class"] = str(blob.storage_class)
    if blob.kms_key_name:
        meta["kms_key"] = str(blob.kms_key_name)
    return meta
