"""An Azure blob's metadata (``objmeta``) as the SDK's arguments, and back from its
properties: content settings, metadata (keys renamed to C# identifiers by
``objmeta.azure_key``; the source time as ``mtime``), blob index tags; and the destination's
write options (``storage_class`` as the access tier, ``encryption_scope``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gateway_agent.stores.objmeta import Meta, azure_user, from_header, mtime_from_user
from gateway_agent.stores.writeopts import storage_class

# ContentSettings attribute <-> portable name (``objmeta.SYSTEM``).
_SYSTEM = {
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "content_disposition": "content_disposition",
    "content_language": "content_language",
    "cache_control": "cache_control",
}


def write_args(opts: Mapping[str, Any], uri: str) -> dict[str, Any]:
    """upload_blob / commit_block_list arguments of the store's write options."""
    args: dict[str, Any] = {}
    if "storage_class" in opts:
        from azure.storage.blob import StandardBlobTier

        args["standard_blob_tier"] = StandardBlobTier(
            storage_class("az", opts["storage_class"], uri)
        )
    if opts.get("encryption_scope"):
        args["encryption_scope"] = str(opts["encryption_scope"])
    return args


def meta_args(meta: Mapping[str, Any], where: str, crc: Mapping[str, str]) -> dict[str, Any]:
    """upload_blob / commit_block_list arguments of an object's metadata (``crc``: the
    store's own checksum entry, kept beside the user's)."""
    from azure.storage.blob import ContentSettings

    args: dict[str, Any] = {}
    user = azure_user(meta, where) if meta else {}
    if user or crc:
        args["metadata"] = {**user, **crc}
    system = {attr: meta[name] for name, attr in _SYSTEM.items() if meta.get(name)}
    if system:
        args["content_settings"] = ContentSettings(**system)
    if meta.get("tags"):
        args["tags"] = dict(meta["tags"])
    return args


def props_to_meta(props: Any, tags: Mapping[str, str], own: frozenset[str]) -> Meta:
    """The portable metadata of a blob's properties (``own``: the store's metadata keys,
    left out); its tier and encryption scope too (read only)."""
    settings = props.content_settings
    meta: Meta = {}
    if settings is not None:
        meta = {name: getattr(settings, attr) for name, attr in _SYSTEM.items()}
        meta = {k: v for k, v in meta.items() if v}
    user = {k: from_header(v) for k, v in (props.metadata or {}).items() if k not in own}
    last = props.last_modified
    mtime = mtime_from_user(
        user, round(last.timestamp() * 1e9) if isinstance(last, datetime) else None
    )
    if mtime is not None:
        meta["mtime_ns"] = mtime
    if user:
        meta["user"] = user
    if tags:
        meta["tags"] = dict(tags)
    if getattr(props, "blob_tier", None):
        meta["storage_class"] = str(props.blob_tier)
    if getattr(props, "encryption_scope", None):
        meta["kms_key"] = str(props.encryption_scope)
    if getattr(props, "server_encrypted", None):
        meta["encryption"] = "AES256"
    return meta
