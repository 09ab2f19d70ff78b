"""The Google Cloud Storage backend (``gs://bucket/prefix``): :class:`GCSStore` (in ``store``;
the SDK is imported on first use)."""

from __future__ import annotations

from gateway_agent.stores.gcs.store import GCSStore

__all__ = ["GCSStore"]
