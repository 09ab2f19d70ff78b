"""The S3 backend (``s3://bucket/prefix``): :class:`S3Store` and its parts.

``store`` (the store, over boto3), ``answers`` (what S3's answers mean: errors, checksums,
times), ``fast`` (small PutObject, GetObject and ListObjectsV2 requests without botocore's
pipeline) and ``rawhttp`` (the fast path's kept-alive connections, parsed by httptools).
"""

from __future__ import annotations

from gateway_agent.stores.s3.store import S3Store

__all__ = ["S3Store"]
