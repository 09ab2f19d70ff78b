"""What S3's answers mean to ``S3Store``: its error codes as ``StoreError``s, the checksums
and times it reports, and the ``Expect`` header botocore sends it."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway_agent.stores._common import error_for_status
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ObjectNotFoundError,
    StoreError,
    TransientStoreError,
    UploadNotFoundError,
)

MIB = 1024 * 1024
# Bodies below this go without ``Expect: 100-continue`` (see ``no_continue_when_small``).
EXPECT_CONTINUE_MIN = MIB
_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "RequestLimitExceeded",
    "503",
    "500",
}
_DENIED_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "AllAccessDisabled",
    "AccountProblem",
    "403",
}
_NOT_FOUND_KEY = {"NoSuchKey", "404", "NotFound"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def classify(exc: Exception, where: str, op: str) -> StoreError | None:
    """The ``StoreError`` for a boto3/botocore exception of ``op`` (None: not S3's)."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectionError,
        HTTPClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AccessDeniedError(f"{where}: no AWS credentials found", code="NoCredentials")
    if isinstance(exc, ConnectionError | HTTPClientError):
        return TransientStoreError(f"{where}: connection failed", code=type(exc).__name__)
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        msg = f"{where}: {code or status}"
        if code == "NoSuchBucket":
            return BucketNotFoundError(msg, code=code, status=status)
        if code == "NoSuchUpload":
            return UploadNotFoundError(msg, code=code, status=status)
        if code in _NOT_FOUND_KEY or (status == 404 and op in ("head", "read")):
            return ObjectNotFoundError(msg, code=code, status=status)
        return error_for_status(msg, code, status, _DENIED_CODES, _TRANSIENT_CODES)
    if isinstance(exc, BotoCoreError):
        return StoreError(f"{where}: {type(exc).__name__}", code=type(exc).__name__)
    return None


def micros(modified: datetime | None) -> int | None:
    """Microseconds since the epoch, as the catalog keeps listing times."""
    if modified is None:
        return None
    return (modified - _EPOCH) // _US


def no_continue_when_small(request: Any, **_: Any) -> None:
    """botocore sends every PutObject/UploadPart with ``Expect: 100-continue``: headers, wait
    for the server's go-ahead, then the body. That is one more round trip per request (a small
    object costs two RTTs instead of one); worth it only for bodies large enough that sending
    one in vain would cost more than the wait."""
    body = request.body
    size = len(body) if isinstance(body, bytes | bytearray) else getattr(body, "len", None)
    if size is None and hasattr(body, "getbuffer"):
        size = body.getbuffer().nbytes
    if size is not None and size < EXPECT_CONTINUE_MIN and "Expect" in request.headers:
        del request.headers["Expect"]


def crc32c_b64(data: bytes) -> str:
    """CRC32C as S3 (and GCS) write it: the 4 big-endian bytes, base64."""
    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode("ascii")


def full_object_crc32c(resp: Mapping[str, Any]) -> str | None:
    """The object's CRC32C from a HEAD with ``ChecksumMode=ENABLED``, if it covers the whole
    object: a composite checksum (CRC of the part CRCs, ``"...-N"``) is not comparable."""
    crc = resp.get("ChecksumCRC32C")
    kind = resp.get("ChecksumType")
    if not crc or kind == "COMPOSITE" or (kind is None and "-" in str(crc)):
        return None
    return str(crc)


def requester_pays(params: dict[str, Any], model: Any, **_: Any) -> None:
    """``before-parameter-build.s3``: every operation that can say the requester pays says so
    (a requester-pays bucket refuses any other request: the listing, HEADs, reads, writes,
    multipart and tag calls alike)."""
    if "RequestPayer" in model.input_shape.members:
        params.setdefault("RequestPayer", "requester")
