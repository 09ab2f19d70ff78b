"""The local filesystem backend (``file:///abs/path``): :class:`LocalStore` and its parts.

``store`` (the store), ``atomic`` (files that appear whole or not at all), ``batch`` (batches
of small files), ``files`` (names, versions, reads and in-kernel copies), ``parts`` (multipart
uploads written in place) and ``walk`` (listing a folder tree).
"""

from __future__ import annotations

from gateway_agent.stores.local.files import STAGING, file_version, segment_problem
from gateway_agent.stores.local.store import LocalStore

__all__ = ["STAGING", "LocalStore", "file_version", "segment_problem"]
