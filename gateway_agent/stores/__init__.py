"""Object stores for the gateways and the control plane: one protocol, five backends.

``open_store(uri, options)`` picks the backend from the URI scheme and imports its SDK only
then, so a gateway that only has boto3 can still serve ``s3://`` and ``file://`` URIs. It is
the one store opener: the benchmark endpoints ``synthetic://COUNTxSIZE`` and ``null://``
(``synthetic``) open through it too.
``options`` are JSON values without secrets (endpoint, region, project, retry budget).
Credentials are never options: a store uses its SDK's own chain (env, profile, instance role)
unless ``credentials`` (a :class:`~gateway_agent.stores.credentials.StoreCredentials`, held in
memory only) are passed explicitly, as a gateway does with those its control plane sealed into
the job spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlparse

from gateway_agent.stores.base import (
    Capabilities,
    ObjectInfo,
    ObjectStore,
    ReportsSkips,
    SkippedEntry,
    SupportsCopy,
)
from gateway_agent.stores.credentials import (
    CredentialCell,
    Credentials,
    StoreCredentials,
    for_store,
)
from gateway_agent.stores.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    InvalidURIError,
    KeyBlockedError,
    KeyNotSupportedError,
    ObjectNotFoundError,
    SourceChangedError,
    StoreError,
    TransientStoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.uri import StoreURI, parse_uri

__all__ = [
    "AccessDeniedError",
    "BucketNotFoundError",
    "Capabilities",
    "CredentialCell",
    "InvalidURIError",
    "KeyBlockedError",
    "KeyNotSupportedError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "ReportsSkips",
    "SkippedEntry",
    "SourceChangedError",
    "StoreCredentials",
    "StoreError",
    "StoreURI",
    "SupportsCopy",
    "TransientStoreError",
    "UploadNotFoundError",
    "open_store",
    "parse_uri",
]


def open_store(
    uri: str,
    options: Mapping[str, Any] | None = None,
    credentials: Credentials | None = None,
) -> ObjectStore:
    """Open the store a URI names. Cheap: no network call happens until the first operation.

    ``credentials``: explicit credentials of the store's cloud (never part of ``options``);
    None means the SDK's own default chain. A ``CredentialCell`` is followed: the store signs
    with whatever set the cell holds (a gateway's job swaps it when fresh ones arrive)."""
    scheme = urlparse(uri).scheme
    credentials = for_store(scheme, credentials)
    if scheme in ("synthetic", "null"):
        from gateway_agent.stores.synthetic import NullStore, SyntheticStore

        store = SyntheticStore(uri) if scheme == "synthetic" else NullStore(uri)
        return cast(ObjectStore, store)
    parsed = parse_uri(uri)
    if parsed.scheme == "s3":
        from gateway_agent.stores.s3 import S3Store

        return S3Store(parsed, options, credentials)
    if parsed.scheme == "az":
        from gateway_agent.stores.azure import AzureBlobStore

        return AzureBlobStore(parsed, options, credentials)
    if parsed.scheme == "gs":
        from gateway_agent.stores.gcs import GCSStore

        return GCSStore(parsed, options, credentials)
    if parsed.scheme == "file":
        from gateway_agent.stores.local import LocalStore

        return LocalStore(parsed, options)
    from gateway_agent.stores.memory import MemoryStore

    return MemoryStore(parsed, options)
