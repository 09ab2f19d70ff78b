"""The Azure Blob Storage backend (``az://account/container/prefix``): :class:`AzureBlobStore`
(in ``store``; the SDK is imported on first use)."""

from __future__ import annotations

from gateway_agent.stores.azure.store import AzureBlobStore

__all__ = ["AzureBlobStore"]
