"""The in-memory fake backend (``mem://name/prefix``) for tests: :class:`MemoryStore` and the
bucket registry it reads (:func:`create_bucket`, :func:`delete_bucket`), in ``store``."""

from __future__ import annotations

from gateway_agent.stores.memory.store import MemoryStore, create_bucket, delete_bucket

__all__ = ["MemoryStore", "create_bucket", "delete_bucket"]
