"""The control plane's side of metadata (``gateway_agent.stores.objmeta``): what a multipart
upload is created with. Whole objects carry theirs through the gateways (the source reads it,
the sink writes it); a multipart object's parts are written by many sinks, so its metadata is
given once, when the control plane creates its upload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from gateway_agent.stores.base import ObjectStore, SupportsMetadata
from gateway_agent.stores.objmeta import policy, travelling


def upload_meta(
    src: ObjectStore, dst: ObjectStore, metadata: bool, metadata_set: Mapping[str, str]
) -> Callable[[str], Mapping[str, Any] | None] | None:
    """``key -> metadata`` for new uploads under the request's policy (``metadata``,
    ``metadata_set``), or None when nothing is written (bytes only, or a destination that
    holds no metadata)."""
    if not isinstance(dst, SupportsMetadata):
        return None
    keep = metadata and isinstance(src, SupportsMetadata)
    if not keep and not metadata_set:
        return None

    def meta_of(key: str) -> Mapping[str, Any] | None:
        found = travelling(cast(SupportsMetadata, src).head_meta(key)) if keep else {}
        return policy(found, True, metadata_set) or None

    return meta_of
