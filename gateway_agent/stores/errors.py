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


class KeyNotSupportedError(InvalidURIError):
    """This store cannot hold this name: an empty, ``.`` or ``..`` path segment or a segment
    longer than 255 bytes on a local disk, bytes that are not UTF-8 (a local file name) on a
    cloud store, a name longer than the cloud's limit, or a line break in a GCS name.

    A per-object problem of the *destination* (the source is fine): the object cannot be copied
    there under its name, everything else can."""


class KeyBlockedError(StoreError):
    """The destination holds something of another kind under this name: a file where one of
    the key's folders must be, or a folder where its file goes (a local disk).

    A per-object problem of the *destination*, like :class:`KeyNotSupportedError`: this object
    cannot be written until the user moves what is in the way (nothing is ever removed to make
    room), everything else can."""


class SourceChangedError(StoreError):
    """A read pinned to a listed version found another version (or no object): the object was
    rewritten or deleted after it was listed.

    Raised by ``read(..., version=...)`` before any byte of another version is returned, or
    after the last byte was read when the store cannot read conditionally (local files), so a
    torn mix of two versions never leaves the store. ``key`` is the key relative to the store,
    ``expected`` the listed version, ``found`` what the store has now (``None`` if unknown,
    ``"deleted"`` if the object is gone). Retrying cannot help: the caller copies the object
    again from a fresh listing.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        expected: str | None = None,
        found: str | None = None,
        code: str | None = "SourceChanged",
        status: int | None = None,
    ):
        super().__init__(message, code=code, status=status)
        self.key = key
        self.expected = expected
        self.found = found


class CopyNotSupportedError(StoreError):
    """The destination does not do this server-side copy after all (an emulator or service
    answering "not implemented"): the caller moves the bytes itself instead."""


class CopyMismatchError(StoreError):
    """A server-side copy's checksum differs from the source's: that object failed."""
