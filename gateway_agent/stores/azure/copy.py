"""Azure <- any store that signs URLs: Put Blob From URL (``SupportsCopyFrom`` of
``AzureBlobStore``). Azure reads the source itself from a short-lived presigned S3 GET or
signed GCS URL (a credential while it lives: passed to the SDK only, never logged).

Azure carries no metadata from such a source by itself, so the copy states it: the object's
metadata (``meta_args``) and the CRC32C the store keeps of every blob (``CRC_METADATA``),
taken from the source's own checksum (a HEAD before the copy). The source's MD5 (an S3
single-part ETag, GCS's md5Hash) goes as ``x-ms-source-content-md5``: Azure refuses the copy
when the bytes it read have another MD5, so a source changed since its listing never lands.
Staged parts (Put Block From URL) are not copied this way: a block id names the CRC32C of its
bytes (``block_id``), which no store reports for a byte range, so large objects go through
the caller's bytes. Azurite implements neither call (it answers 501, ``APINotImplemented``, or
with a SAS a bare 500): ``CopyNotSupportedError`` then sends the run back to moving the bytes
itself, as it does after the retries of any 5xx on this call.
"""

from __future__ import annotations

from typing import Any, cast

from gateway_agent.stores.azure.meta import meta_args
from gateway_agent.stores.base import Copied, ObjectStore, SignsURLs
from gateway_agent.stores.errors import CopyNotSupportedError, StoreError, TransientStoreError

# How long a source URL is valid: one object's copy, with room for a slow service.
URL_SECONDS = 900

# The functions take the ``AzureBlobStore`` (typed ``Any``: that module imports this one).
AzureStore = Any


def can_copy(dst: AzureStore, src: ObjectStore, part: bool) -> bool:
    """Whole objects from a store that signs URLs (S3, GCS)."""
    return not part and isinstance(src, SignsURLs) and src is not dst


def copy_from_url(
    dst: AzureStore,
    src: ObjectStore,
    key: str,
    version: str | None,
    meta: dict[str, Any] | None,
    crc_key: str,
) -> Copied:
    """Put Blob From URL of ``key``; the source's CRC32C (base64) where it has one, and the
    version the copy made (its version id with versioning on, else its ETag)."""
    info = src.head(key)
    if version is not None and info.version is not None and info.version != version:
        raise cast(StoreError, cast(Any, src)._changed(key, version, info.version))
    crc = info.checksums.get("crc32c")
    own = {crc_key: crc} if crc and dst.vouches else {}
    args: dict[str, Any] = {"metadata": own, **dst.write_args}
    if meta or own:
        args.update(meta_args(meta or {}, f"copy {dst.uri}{key}", own))
    md5 = info.checksums.get("md5")
    if md5:
        args["source_content_md5"] = bytes.fromhex(md5)
    url = cast(SignsURLs, src).signed_url(key, URL_SECONDS)
    blob = dst._blob(key)
    try:
        resp = dst._call(
            "copy", key, blob.upload_blob_from_url, url, overwrite=True,
            include_source_blob_properties=False, timeout=dst.timeout, **args,
        )  # fmt: skip
    except TransientStoreError as exc:
        # Retries spent on a copy from a URL (Azurite answers it with a SAS by a bare 500):
        # the caller moves the bytes itself, which fails in turn, clearly, on a real outage.
        raise CopyNotSupportedError(str(exc), code=exc.code, status=exc.status) from None
    made = (resp or {}).get("version_id") or str((resp or {}).get("etag") or "").strip('"')
    return Copied(crc, made or None)
