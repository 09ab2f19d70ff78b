"""Typed store errors: callers branch on the class, never on an SDK's exception or its text.

Messages name the operation, the store URI and the key plus the backend's error code; they never
carry credentials, signed URLs or connection strings (backends raise these ``from None`` so an
SDK exception that might hold such text is not chained into tracebacks either).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error an object store raises.

    ``code`` is the backend's short error code (e.g. ``NoSuchKey``, ``ContainerNotFound``) and
    ``status`` its HTTP status when there was one; both are safe to log.
    """

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.status = status


class InvalidURIError(StoreError, ValueError):
    """The URI (or an option/key) is malformed or names an unsupported scheme."""


class BucketNotFoundError(StoreError):
    """The bucket, container or local root directory does not exist."""


class ObjectNotFoundError(StoreError):
    """The key does not exist (or is not visible yet, e.g. an uncompleted multipart upload)."""


class UploadNotFoundError(StoreError):
    """The multipart upload id is unknown, already completed or aborted, or misses a part."""


class AccessDeniedError(StoreError):
    """Credentials are missing, wrong or lack permission; retrying cannot fix it."""


class TransientStoreError(StoreError):
    """Throttling, timeouts, 5xx or a dropped connection: retried with backoff, raised when the
    retry budget is spent."""
