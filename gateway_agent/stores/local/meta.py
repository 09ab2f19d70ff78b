"""A local file's metadata (see :mod:`gateway_agent.stores.objmeta`): read from its name, its
mtime and its ``user.*`` extended attributes; written onto the open file before it is named,
so a file lands with its metadata or not at all.

Mapping: ``content_type`` is guessed from the extension (as ``aws s3 cp`` and rclone do) unless
a ``user.skyplane.content_type`` attribute holds another one; the other system properties live
in ``user.skyplane.<name>``, tags in ``user.skyplane.tag.<key>``, user metadata in
``user.<key>``; ``mtime_ns`` is the file's modification time. A file system without user extended
attributes fails an object that has any of those (never drops them).
"""

from __future__ import annotations

import errno
import functools
import mimetypes
import os
from collections.abc import Mapping
from typing import Any

from gateway_agent.stores.objmeta import SYSTEM, Meta, MetadataNotSupportedError

_OURS = "user.skyplane."
_TAG = "user.skyplane.tag."
_NO_XATTRS = (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def guess_type(key: str) -> str | None:
    """The Content-Type of a file named ``key``, from its extension (looked up once per
    extension: this runs for every small file a gateway reads or writes)."""
    dot = key.rfind(".")
    if dot <= key.rfind("/") + 1:  # no extension (or a dot file)
        return None
    return _type_of(key[dot:].lower())


@functools.lru_cache(maxsize=1024)
def _type_of(ext: str) -> str | None:
    return mimetypes.guess_type("x" + ext, strict=False)[0]


def read_meta(path: str, key: str, mtime_ns: int) -> Meta:
    """The metadata of the file at ``path`` whose mtime is ``mtime_ns`` (one ``listxattr``
    call when it has no attributes)."""
    meta: Meta = {"mtime_ns": mtime_ns}
    ctype = guess_type(key)
    if ctype:
        meta["content_type"] = ctype
    try:
        names = os.listxattr(path)
    except OSError as exc:
        if exc.errno in _NO_XATTRS:
            return meta
        raise
    for name in names:
        if not name.startswith("user."):
            continue
        value = os.getxattr(path, name).decode("utf-8", "surrogateescape")
        if name.startswith(_TAG):
            meta.setdefault("tags", {})[name[len(_TAG) :]] = value
        elif name.startswith(_OURS) and name[len(_OURS) :] in SYSTEM:
            meta[name[len(_OURS) :]] = value
        else:
            meta.setdefault("user", {})[name[len("user.") :]] = value
    return meta


def _xattrs(meta: Mapping[str, Any], key: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for name in SYSTEM:
        value = meta.get(name)
        if value and not (name == "content_type" and value == guess_type(key)):
            pairs.append((_OURS + name, value))
    pairs += [(_TAG + k, v) for k, v in (meta.get("tags") or {}).items()]
    pairs += [("user." + k, v) for k, v in (meta.get("user") or {}).items()]
    return pairs


def apply_meta(target: int | str, meta: Mapping[str, Any], key: str, where: str) -> None:
    """Write ``meta`` onto ``target`` (an open file, or a path not yet under its name)."""
    for name, value in _xattrs(meta, key):
        try:
            os.setxattr(target, name, value.encode("utf-8", "surrogateescape"))
        except OSError as exc:
            if exc.errno in _NO_XATTRS or exc.errno in (errno.E2BIG, errno.ENOSPC, errno.ERANGE):
                raise MetadataNotSupportedError(
                    f"{where}: the file system cannot hold metadata {name!r}: {exc.strerror}"
                ) from None
            raise
    if meta.get("mtime_ns") is not None:
        ns = int(meta["mtime_ns"])
        os.utime(target, ns=(ns, ns))
