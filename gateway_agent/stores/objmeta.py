"""An object's metadata in one portable form, and the rules that map it onto each store.

A replica is the object, not only its bytes. Every store reads its objects' metadata into one
plain, JSON-able dict (``Meta``) and writes that dict back in its own terms, so metadata can
travel in a chunk's segment (the wire header) from the source gateway to the sink, and any
pair of stores needs only these rules (``docs/metadata.md`` is the table a user reads):

``content_type``, ``content_encoding``, ``content_disposition``, ``content_language``,
``cache_control``: the system properties (str); ``user``: user metadata (str -> str);
``tags``: object tags (str -> str); ``mtime_ns``: the source's modification time (integer
nanoseconds since the epoch: exact through JSON). Absent fields are simply left out: an
object without metadata is ``{}`` and costs nothing on the wire (no empty dicts per object).

What a store cannot hold is never dropped silently: it is kept under a documented rename
(``azure_key``, ``TAG_PREFIX``, RFC 2047 for values a header cannot carry) or the object fails
with :class:`MetadataNotSupportedError`, naming what and why.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gateway_agent.stores.errors import KeyNotSupportedError

Meta = dict[str, Any]

# The system properties every cloud store has, in the portable form's names.
SYSTEM = (
    "content_type",
    "content_encoding",
    "content_disposition",
    "content_language",
    "cache_control",
)
# Where a store has no settable modification time, the source's is kept in user metadata under
# this key (RFC 3339, as rclone does), and read back from it.
MTIME_KEY = "mtime"
# GCS has no object tags: a tag is kept as custom metadata ``skyplane-tag-<key>`` and read back
# as a tag (so S3 -> GCS -> S3 keeps it).
TAG_PREFIX = "skyplane-tag-"

# S3: user metadata (keys and values, UTF-8) at most 2 KB; at most 10 tags, keys 128 and values
# 256 characters. Azure blob index tags: the same 10 / 128 / 256.
S3_USER_LIMIT = 2048
# GCS: custom metadata (names and values) at most 8 KiB per object.
GCS_USER_LIMIT = 8192
TAG_COUNT_LIMIT, TAG_KEY_LIMIT, TAG_VALUE_LIMIT = 10, 128, 256

_CSHARP_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RFC2047 = re.compile(r"^=\?UTF-8\?B\?([A-Za-z0-9+/=]*)\?=$")


class MetadataNotSupportedError(KeyNotSupportedError):
    """The destination cannot hold this object's metadata (the object fails, never its
    metadata silently)."""


def policy(meta: Mapping[str, Any], keep: bool, overrides: Mapping[str, str] | None) -> Meta:
    """What is written: ``meta`` (or nothing with ``keep=False``), then ``overrides``
    (``--metadata-set``: a system property by its name, ``content-type`` or ``content_type``,
    anything else a user metadata key)."""
    out: Meta = (
        {k: (dict(v) if isinstance(v, dict) else v) for k, v in meta.items()} if keep else {}
    )
    for key, value in (overrides or {}).items():
        name = key.lower().replace("-", "_")
        if name in SYSTEM:
            out[name] = value
        else:
            out.setdefault("user", {})[key] = value
    return out


def set_pairs(pairs: Any) -> dict[str, str]:
    """``key=value`` strings (``--metadata-set``) or a mapping as a dict; a one-line error for
    anything else."""
    if isinstance(pairs, Mapping):
        items = list(pairs.items())
    else:
        items = []
        for pair in pairs or ():
            if not isinstance(pair, str) or "=" not in pair or pair.startswith("="):
                raise ValueError(f"metadata_set entries are key=value, got {pair!r}")
            k, v = pair.split("=", 1)
            items.append((k, v))
    out: dict[str, str] = {}
    for k, v in items:
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise ValueError(f"metadata_set needs a non-empty key and a text value: {k!r}={v!r}")
        out[k] = v
    return out


# ---- header values: S3 and Azure carry user metadata in HTTP headers (ASCII) -------------------


def header_value(value: str) -> str:
    """``value`` as an HTTP header can carry it: as is when printable ASCII, else RFC 2047
    (``=?UTF-8?B?...?=``, what S3 itself answers for such values)."""
    if value.isascii() and value.isprintable():
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8")).decode() + "?="


def from_header(value: str) -> str:
    """The value :func:`header_value` encoded."""
    m = _RFC2047.match(value)
    if not m:
        return value
    try:
        return base64.b64decode(m.group(1)).decode("utf-8")
    except ValueError:
        return value


def _check_tags(tags: Mapping[str, str], where: str) -> None:
    if len(tags) > TAG_COUNT_LIMIT:
        raise MetadataNotSupportedError(f"{where}: {len(tags)} tags (limit {TAG_COUNT_LIMIT})")
    for k, v in tags.items():
        if len(k) > TAG_KEY_LIMIT or len(v) > TAG_VALUE_LIMIT:
            raise MetadataNotSupportedError(
                f"{where}: tag {k[:40]!r} is longer than {TAG_KEY_LIMIT}/{TAG_VALUE_LIMIT}"
            )


def rfc3339(mtime_ns: int) -> str:
    """RFC 3339 with nanoseconds, in UTC (rclone's ``mtime`` metadata)."""
    seconds, ns = divmod(int(mtime_ns), 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def parse_mtime(text: str | None) -> int | None:
    """Nanoseconds of a time kept under :data:`MTIME_KEY` (RFC 3339 or seconds), or None."""
    if not text:
        return None
    try:
        return round(float(text) * 1e9)
    except ValueError:
        pass
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        whole = datetime.fromisoformat(m.group(1) + zone)
    except ValueError:
        return None
    return int(whole.timestamp()) * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))


def user_with_mtime(meta: Mapping[str, Any]) -> dict[str, str]:
    """User metadata plus the source's time under :data:`MTIME_KEY` (stores without a settable
    modification time)."""
    user = dict(meta.get("user") or {})
    if meta.get("mtime_ns") is not None and MTIME_KEY not in user:
        user[MTIME_KEY] = rfc3339(int(meta["mtime_ns"]))
    return user


def mtime_from_user(user: dict[str, str], fallback: int | None) -> int | None:
    """Pop :data:`MTIME_KEY` from ``user``: the kept source time, else ``fallback`` (the
    store's own last-modified time)."""
    kept = parse_mtime(user.pop(MTIME_KEY, None))
    return kept if kept is not None else fallback


# ---- per store ---------------------------------------------------------------------------------


def s3_user(meta: Mapping[str, Any], where: str) -> dict[str, str]:
    """S3 ``x-amz-meta-*``: keys are case-insensitive ASCII header names (kept lowercased),
    values RFC 2047 when not ASCII; at most 2 KB in all, else the object fails."""
    out: dict[str, str] = {}
    for k, v in user_with_mtime(meta).items():
        if not k.isascii() or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k):
            raise MetadataNotSupportedError(
                f"{where}: S3 cannot hold user metadata key {k!r} (not an HTTP header name)"
            )
        out[k.lower()] = header_value(v)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in out.items())
    if size > S3_USER_LIMIT:
        raise MetadataNotSupportedError(
            f"{where}: user metadata is {size} bytes, S3 holds {S3_USER_LIMIT}"
        )
    _check_tags(meta.get("tags") or {}, where)
    return out


def azure_key(key: str) -> str:
    """Azure metadata keys are C# identifiers: every other character becomes ``_``, and a key
    that starts with a digit gets a leading ``_`` (``run-id`` -> ``run_id``)."""
    if _CSHARP_IDENT.match(key):
        return key
    name = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "_" + name if not name or name[0].isdigit() else name


def azure_user(meta: Mapping[str, Any], where: str) -> dict[str, str]:
    """Azure metadata: keys renamed by :func:`azure_key` (two keys that become one fail the
    object), values RFC 2047 when not ASCII."""
    out: dict[str, str] = {}
    for k, v in user_with_mtime(meta).items():
        name = azure_key(k).lower()
        if name in out:
            raise MetadataNotSupportedError(
                f"{where}: user metadata keys {k!r} and another both become {name!r} on Azure"
            )
        out[name] = header_value(v)
    _check_tags(meta.get("tags") or {}, where)
    return out


def gcs_user(meta: Mapping[str, Any], where: str = "GCS") -> dict[str, str]:
    """GCS custom metadata: user metadata as is, tags as ``skyplane-tag-<key>``; at most 8 KiB
    in all, else the object fails (GCS would refuse the write)."""
    out = user_with_mtime(meta)
    for k, v in (meta.get("tags") or {}).items():
        out[TAG_PREFIX + k] = v
    size = sum(len(k.encode()) + len(v.encode()) for k, v in out.items())
    if size > GCS_USER_LIMIT:
        raise MetadataNotSupportedError(
            f"{where}: custom metadata is {size} bytes, GCS holds {GCS_USER_LIMIT}"
        )
    return out


def split_gcs_user(user: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(user metadata, tags) of GCS custom metadata (see :func:`gcs_user`)."""
    plain = {k: v for k, v in user.items() if not k.startswith(TAG_PREFIX)}
    tags = {k[len(TAG_PREFIX) :]: v for k, v in user.items() if k.startswith(TAG_PREFIX)}
    return plain, tags


def compact(meta: Mapping[str, Any]) -> Meta:
    """``meta`` without empty fields (what travels and what is compared)."""
    return {k: v for k, v in meta.items() if v not in (None, "", {})}


def differs(want: Mapping[str, Any], have: Mapping[str, Any], mtime: bool = True) -> list[str]:
    """The fields of ``want`` that ``have`` does not match (a sync's or a verify's view):
    system properties, user metadata, tags and (``mtime``) the time to the second (stores
    keep it to the second, the millisecond or the nanosecond)."""
    out: list[str] = []
    for name in SYSTEM:
        if want.get(name) and want.get(name) != have.get(name):
            out.append(name)
    for name in ("user", "tags"):
        w = {k.lower(): v for k, v in (want.get(name) or {}).items()}
        h = {k.lower(): v for k, v in (have.get(name) or {}).items()}
        if w != h:
            out.append(name)
    w_ns, h_ns = want.get("mtime_ns"), have.get("mtime_ns")
    if mtime and w_ns is not None and h_ns is not None and abs(w_ns - h_ns) >= 1_000_000_000:
        out.append("mtime_ns")
    return out


# What a HEAD tells about where the object is kept (not copied: the destination's own store
# options decide them); ``--verify full`` compares them.
READ_ONLY = ("storage_class", "encryption", "kms_key")


def travelling(meta: Mapping[str, Any]) -> Meta:
    """What of ``meta`` goes to the destination (not the read-only fields)."""
    return {k: v for k, v in meta.items() if k not in READ_ONLY and v not in (None, "", {})}
