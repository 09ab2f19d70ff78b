"""Azure Blob Storage (azure-storage-blob), imported lazily so other gateways skip the SDK.

Credentials: the connection string of explicit ``azure`` :class:`StoreCredentials` (a
gateway's, sealed by its control plane) or, without them, ``AZURE_STORAGE_CONNECTION_STRING``
from the environment, when it names this account (that is also how Azurite is reached);
otherwise ``DefaultAzureCredential`` from
azure-identity (env, managed identity, CLI login) against ``https://ACCOUNT.blob.core.windows.net``
or the ``endpoint_url`` option. Option ``anonymous`` reads public containers without credentials;
``list_page_size`` (default 5000), ``timeout`` and ``max_single_put_mib`` tune the client.

Multipart maps to staged blocks: ``create_multipart`` mints an id, each part is staged with a
block id derived from ``(upload_id, part_number)`` (fixed length, as Azure requires), and
``complete_multipart`` commits the block list in part order, which is when the blob appears.
Abort cannot delete staged blocks (Azure has no call for that): they stay invisible to list and
head and the service discards them after 7 days or at the next commit on the same name.

Checksums (option ``checksums``: "md5", the default, or "off"). Azure keeps no CRC32C of a blob
and no checksum at all of a block list, but it checks a transactional ``Content-MD5`` against
the body it received on every Put Blob and Put Block and refuses the request when they differ.
So every write sends the MD5 of its exact bytes, and the CRC32C of those same bytes goes with
them: in the blob's metadata (``skyplane_crc32c``) on Put Blob, in the block id on Put Block.
The commit folds the staged blocks' CRC32Cs (ids and sizes as the service lists them) into the
whole blob's CRC32C and stores it in the metadata of the same Put Block List. Any later rewrite
of the content (Put Blob, Put Block List) replaces that metadata, so a blob whose metadata
carries it holds the bytes it describes; ``list``/``head`` report it as ``crc32c``, which lets
verification skip the read-back. Blobs written otherwise carry none and are read back.
"""

from __future__ import annotations

import base64
import builtins
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway_agent.stores._common import (
    CloudStore,
    check_key,
    check_part_number,
    check_range,
    check_upload_id,
    error_for_status,
    info_row,
    paginate,
    require_parts,
)
from gateway_agent.stores.azure import copy as azcopy
from gateway_agent.stores.azure.meta import meta_args, props_to_meta, write_args
from gateway_agent.stores.base import Capabilities, Copied, ListRow, ObjectInfo
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.crc32c_math import combine_ranges, crc32c_b64
from gateway_agent.stores.credentials import (
    CREDENTIAL_OPTIONS,
    Credentials,
    azure_sas_credential,
    current,
)
from gateway_agent.stores.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    CopyNotSupportedError,
    InvalidURIError,
    ObjectNotFoundError,
    StoreError,
    TransientStoreError,
    UploadNotFoundError,
)
from gateway_agent.stores.uri import StoreURI
from gateway_agent.stores.writeopts import WRITE_OPTIONS

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
_OPTIONS = (
    frozenset(
        {
            "endpoint_url",
            "anonymous",
            "max_single_put_mib",
            "timeout",
            "list_page_size",
            "checksums",
        }
    )
    | CREDENTIAL_OPTIONS["az"]
    | WRITE_OPTIONS["az"]
)
CRC_METADATA = "skyplane_crc32c"  # the blob's CRC32C, written with its bytes (module doc)
_BUCKET_CODES = {"ContainerNotFound", "ContainerBeingDeleted"}
_KEY_CODES = {"BlobNotFound"}
_DENIED_CODES = {
    "AuthorizationFailure",
    "AuthenticationFailed",
    "AuthorizationPermissionMismatch",
    "AuthorizationResourceTypeMismatch",
    "InsufficientAccountPermissions",
    "AccountIsDisabled",
}
_TRANSIENT_CODES = {"ServerBusy", "OperationTimedOut", "InternalError"}


def block_id(upload_id: str, part_number: int, crc: int) -> str:
    """The staged-block id of a part, naming the CRC32C of its bytes: same length for every
    part, as Azure requires."""
    return base64.b64encode(f"{upload_id}-{part_number:05d}-{crc:08x}".encode()).decode()


def parse_block_id(upload_id: str, bid: str) -> tuple[int, int] | None:
    """``(part_number, crc32c)`` of a block staged by ``upload_id``; None for any other."""
    try:
        text = base64.b64decode(bid, validate=True).decode()
        owner, part, crc = text.rsplit("-", 2)
        if owner != upload_id or len(part) != 5 or len(crc) != 8:
            return None
        return int(part), int(crc, 16)
    except ValueError:
        return None


def _error_code(exc: Exception) -> str | None:
    """The service's error code where the SDK did not parse it (Azurite's answer to a call it
    does not implement): only the code is kept, never the text (it may quote the request)."""
    found = re.search(r"ErrorCode:(\w+)", str(getattr(exc, "message", "") or ""))
    return found.group(1) if found and found.group(1) != "None" else None


def _account_of(connection_string: str) -> str | None:
    fields = dict(item.split("=", 1) for item in connection_string.split(";") if "=" in item)
    return fields.get("AccountName")


class AzureBlobStore(CloudStore):
    """An ObjectStore over one Azure Blob container (and optional prefix)."""

    OPTIONS = _OPTIONS
    LIMIT_IN_CHARS = True  # Azure counts a blob name's 1024 in characters
    # A multipart blob's metadata goes with its commit (Azure keeps nothing until then).
    META_AT_COMPLETE = True
    capabilities = Capabilities(
        native_checksums=frozenset({"md5", "crc32c"}),  # crc32c: in the metadata we write
        server_side_copy=False,
        min_part_size=0,
        max_parts=50_000,
    )

    def __init__(
        self,
        parsed: StoreURI,
        options: Mapping[str, Any] | None = None,
        credentials: Credentials | None = None,
    ):
        import os

        from azure.storage.blob import BlobServiceClient

        super().__init__(parsed, options)
        opts = self._opts
        mode = opts.get("checksums", "md5")
        if mode not in ("md5", "off"):
            raise InvalidURIError(f"{self.uri}: option checksums must be 'md5' or 'off'")
        self._vouch = mode == "md5"
        if not self._vouch:
            self.capabilities = replace(self.capabilities, native_checksums=frozenset({"md5"}))
        self._timeout = int(opts.get("timeout", 120))
        self._write_args = write_args(opts, self.uri)  # checked before any work
        self._page_size = int(opts.get("list_page_size", 5000))
        common: dict[str, Any] = {
            "retry_total": 0,  # tenacity retries, not azure-core
            "max_single_put_size": int(opts.get("max_single_put_mib", 64)) * 1024 * 1024,
        }
        sas = azure_sas_credential(credentials) if credentials is not None else None
        if credentials is not None:
            conn = current(credentials).get("connection_string") if sas is None else None
        else:
            conn = os.environ.get(CONNECTION_STRING_ENV)
        account = parsed.account or ""
        if sas is not None:  # a SAS from the control plane, swapped in place when refreshed
            service = BlobServiceClient(sas[0], credential=sas[1], **common)
        elif conn and _account_of(conn) in (None, account) and "endpoint_url" not in opts:
            service = BlobServiceClient.from_connection_string(conn, **common)
        else:
            url = opts.get("endpoint_url") or f"https://{account}.blob.core.windows.net"
            credential: Any = None
            if not opts.get("anonymous"):
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            service = BlobServiceClient(url, credential=credential, **common)
        self._container: Any = service.get_container_client(parsed.bucket)

    # -- errors --------------------------------------------------------------------------------
    def _classify(self, exc: Exception, where: str, op: str) -> StoreError | None:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            return TransientStoreError(f"{where}: connection failed", code=type(exc).__name__)
        if isinstance(exc, HttpResponseError):
            code = str(getattr(exc, "error_code", None) or _error_code(exc) or "")
            status = exc.status_code
            msg = f"{where}: {code or status}"
            if code in _BUCKET_CODES:
                return BucketNotFoundError(msg, code=code, status=status)
            if code in _KEY_CODES or (status == 404 and op in ("head", "read")):
                return ObjectNotFoundError(msg, code=code, status=status)
            if status == 501 or code in ("APINotImplemented", "NotImplemented"):
                return CopyNotSupportedError(msg, code=code, status=status)
            if code == "InvalidBlockList":
                return UploadNotFoundError(msg, code=code, status=status)
            return error_for_status(msg, code, status, _DENIED_CODES, _TRANSIENT_CODES)
        if isinstance(exc, ClientAuthenticationError):
            return AccessDeniedError(f"{where}: authentication failed", code="ClientAuthentication")
        return None

    def _blob(self, key: str) -> Any:
        return self._container.get_blob_client(self._name(key))

    def _info(self, key: str, props: Any) -> ObjectInfo:
        md5 = props.content_settings.content_md5 if props.content_settings else None
        checksums = {"md5": bytes(md5).hex()} if md5 else {}
        crc = (props.metadata or {}).get(CRC_METADATA)
        if crc:
            checksums["crc32c"] = crc
        etag = str(props.etag).strip('"') if props.etag else None
        vid = getattr(props, "version_id", None)
        return ObjectInfo(
            key, int(props.size), etag, checksums, props.last_modified, etag, version_id=vid
        )

    def _container_missing(self) -> bool:
        try:
            self._call("head_container", "", self._container.get_container_properties)
        except BucketNotFoundError:
            return True
        except ObjectNotFoundError as exc:
            return exc.status == 404
        return False

    def _raise_not_found(self, op: str, key: str, exc: ObjectNotFoundError) -> None:
        """HEAD errors carry no body; tell a missing container from a missing blob."""
        if not exc.code and self._container_missing():
            raise BucketNotFoundError(
                f"{op} {self.uri}: container does not exist", code="ContainerNotFound"
            ) from None
        raise exc

    # -- protocol ------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)

        def fetch(token: str | None) -> tuple[list[Any], str | None]:
            pager = self._container.list_blobs(
                name_starts_with=full, include=["metadata"], timeout=self._timeout
            ).by_page(continuation_token=token)
            items = list(next(pager))
            return items, pager.continuation_token

        for props in paginate(lambda token: self._call("list", prefix, fetch, token)):
            yield self._info(props.name[skip:], props)

    def list_level(self, prefix: str = "") -> tuple[builtins.list[ListRow], builtins.list[str]]:
        """``ListsLevels``: a delimiter (``/``) listing under ``prefix`` (``walk_blobs``): the
        blobs right there as rows, and the sub-prefixes (relative, ending with ``/``)."""
        from azure.storage.blob import BlobPrefix

        full = self._parsed.key(prefix)
        skip = len(self._parsed.prefix)

        def fetch(token: str | None) -> tuple[builtins.list[Any], str | None]:
            pager = self._container.walk_blobs(
                name_starts_with=full,
                include=["metadata"],
                delimiter="/",
                results_per_page=self._page_size,
                timeout=self._timeout,
            ).by_page(continuation_token=token)
            items = list(next(pager))
            return items, pager.continuation_token

        rows: builtins.list[ListRow] = []
        subs: builtins.list[str] = []
        for item in paginate(lambda token: self._call("list", prefix, fetch, token)):
            if isinstance(item, BlobPrefix):
                subs.append(item.name[skip:])
            else:
                rows.append(info_row(self._info(item.name[skip:], item)))
        return rows, subs

    def head(self, key: str) -> ObjectInfo:
        blob = self._blob(key)
        try:
            props = self._call("head", key, blob.get_blob_properties, timeout=self._timeout)
        except ObjectNotFoundError as exc:
            self._raise_not_found("head", key, exc)
        return self._info(key, props)

    def read(
        self, key: str, start: int = 0, length: int | None = None, version: str | None = None
    ) -> bytes:
        check_range(start, length)
        if length == 0:
            self._check_version(key, version)
            return b""
        return self._get(key, start, length, version)[0]

    def read_meta(
        self, key: str, start: int, length: int, version: str | None = None
    ) -> tuple[bytes, dict[str, Any]]:
        """``ReadsWithMetadata``: the bytes and ``head_meta`` of the same Get Blob answer (its
        first range's, for a download in several): content settings, metadata and
        ``x-ms-tag-count`` (Get Blob Tags only when it counts any). An empty blob is one Get
        Blob of the whole blob (pinned alike)."""
        check_range(start, length)
        data, props = self._get(key, start, length or None, version)
        if length == 0 and data:
            raise self._changed(key, version or "", None, "it is no longer empty")
        if props is None:  # past the end: the caller finds the object shorter than listed
            return data, {}
        return data, self._meta_of(key, props)

    def _get(
        self, key: str, start: int, length: int | None, version: str | None
    ) -> tuple[bytes, Any]:
        """One download (pinned with If-Match): the bytes and the blob's properties as the
        first answer gave them (None past the end)."""
        blob = self._blob(key)
        pinned: dict[str, Any] = {}
        if version is not None:  # every request of the download carries If-Match
            from azure.core import MatchConditions

            pinned = {"etag": f'"{version}"', "match_condition": MatchConditions.IfNotModified}

        def get() -> tuple[bytes, Any]:
            stream = blob.download_blob(
                offset=start if (start or length is not None) else None,
                length=length,
                timeout=self._timeout,
                decompress=False,  # the stored bytes, whatever their Content-Encoding
                **pinned,
            )
            return bytes(stream.readall()), stream.properties

        try:
            return self._call("read", key, get)
        except ObjectNotFoundError as exc:
            if version is not None and exc.code == "BlobNotFound":
                raise self._changed(key, version, "deleted", "it was deleted") from None
            self._raise_not_found("read", key, exc)
            if version is not None:
                raise self._changed(key, version, "deleted", "it was deleted") from None
            raise
        except StoreError as exc:
            if version is not None and exc.status == 412:
                raise self._changed(key, version, None) from None
            if exc.code == "InvalidRange" or exc.status == 416:
                self._check_version(key, version)
                return b"", None  # start at or past the end: nothing to read
            raise

    def _meta_of(self, key: str, props: Any) -> dict[str, Any]:
        """``head_meta`` of a blob's properties: Get Blob Tags only when it has any."""
        tags: dict[str, str] = {}
        if getattr(props, "tag_count", None):
            tags = self._call("tags", key, self._blob(key).get_blob_tags, timeout=self._timeout)
        return props_to_meta(props, tags, frozenset({CRC_METADATA}))

    def head_meta(self, key: str, version: str | None = None) -> dict[str, Any]:
        """Content settings, metadata, blob index tags (one more call, only when the blob has
        any), the kept source time (else Last-Modified), tier and encryption scope."""
        blob = self._blob(key)
        try:
            props = self._call("head", key, blob.get_blob_properties, timeout=self._timeout)
        except ObjectNotFoundError as exc:
            self._raise_not_found("head", key, exc)
        return self._meta_of(key, props)

    def write(self, key: str, data: bytes, meta: Mapping[str, Any] | None = None) -> ObjectInfo:
        blob = self._blob(key)
        checks: dict[str, Any] = {}
        crc: dict[str, str] = {}
        if self._vouch:  # the service refuses a body whose MD5 differs (module doc)
            crc = {CRC_METADATA: crc32c_b64(crc32c(data))}
            checks = {"validate_content": "md5", "metadata": crc}
        if meta:
            checks.update(meta_args(meta, f"write {self.uri}{key}", crc))
        resp = self._call(
            "write",
            key,
            blob.upload_blob,
            data,
            overwrite=True,
            timeout=self._timeout,
            **checks,
            **self._write_args,
        )
        md5 = resp.get("content_md5")
        etag = str(resp.get("etag", "")).strip('"') or None
        checksums = {"md5": bytes(md5).hex()} if md5 else {}
        if crc:
            checksums["crc32c"] = crc[CRC_METADATA]
        return ObjectInfo(
            key,
            len(data),
            etag,
            checksums,
            resp.get("last_modified"),
            version_id=resp.get("version_id"),  # with versioning on (x-ms-version-id)
        )

    def write_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent (``If-None-Match: *``): False when it existed."""
        try:
            self._call(
                "write", key, self._blob(key).upload_blob, data, overwrite=False,
                timeout=self._timeout,
            )  # fmt: skip
        except StoreError as exc:
            if exc.status in (409, 412):  # BlobAlreadyExists / ConditionNotMet
                return False
            raise
        return True

    # -- server-side copy from a signed URL (``azure.copy``) --------------------------------------
    @property
    def vouches(self) -> bool:
        """Whether blobs carry their CRC32C in metadata (option ``checksums`` md5)."""
        return bool(self._vouch)

    @property
    def write_args(self) -> dict[str, Any]:
        return dict(self._write_args)

    @property
    def timeout(self) -> float:
        return float(self._timeout)

    def can_copy_from(self, src: Any, part: bool = False) -> bool:
        return azcopy.can_copy(self, src, part)

    def copy_from(
        self,
        src: Any,
        key: str,
        size: int,
        version: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Copied:
        return azcopy.copy_from_url(self, src, key, version, meta, CRC_METADATA)

    def copy_part_from(
        self,
        src: Any,
        key: str,
        upload_id: str,
        part_number: int,
        offset: int,
        length: int,
        version: str | None = None,
    ) -> Copied:
        raise CopyNotSupportedError(f"copy {self.uri}{key}: staged blocks are not copied by URL")

    def create_multipart(self, key: str, meta: Mapping[str, Any] | None = None) -> str:
        """An id only: Azure keeps nothing until the commit, which is given the metadata
        (``complete_multipart(meta=...)``); it is checked here, before any part moves."""
        self._name(key)
        if meta:
            meta_args(meta, f"create_multipart {self.uri}{key}", {})
        self._call("create_multipart", key, self._container.get_container_properties)
        return uuid.uuid4().hex

    def upload_part(self, key: str, upload_id: str, part_number: int, data: bytes) -> None:
        check_part_number(part_number, self.capabilities.max_parts)
        blob = self._blob(key)
        bid = block_id(check_upload_id(upload_id), part_number, crc32c(data))
        checks = {"validate_content": "md5"} if self._vouch else {}
        self._call(
            "upload_part",
            key,
            blob.stage_block,
            bid,
            data,
            length=len(data),
            timeout=self._timeout,
            **checks,
            **{k: v for k, v in self._write_args.items() if k == "encryption_scope"},
        )

    def complete_multipart(
        self,
        key: str,
        upload_id: str,
        part_numbers: Sequence[int],
        meta: Mapping[str, Any] | None = None,
    ) -> ObjectInfo:
        from azure.storage.blob import BlobBlock

        blob = self._blob(key)
        check_upload_id(upload_id)
        _, uncommitted = self._call(
            "complete_multipart", key, blob.get_block_list, "uncommitted", timeout=self._timeout
        )
        staged: dict[int, set[tuple[str, int, int]]] = {}
        for b in uncommitted or []:
            parsed = parse_block_id(upload_id, b.id)
            if parsed is not None:
                staged.setdefault(parsed[0], set()).add((b.id, parsed[1], int(b.size)))
        twice = sorted(n for n in part_numbers if len(staged.get(n, ())) > 1)
        if twice:  # two different contents staged for one part: neither can be trusted
            raise StoreError(f"complete {self.uri}{key}: parts {twice} staged with two contents")
        wanted = require_parts(f"complete {self.uri}{key}", part_numbers, set(staged))
        chosen = [next(iter(staged[n])) for n in wanted]
        blocks = [BlobBlock(block_id=bid) for bid, _crc, _size in chosen]
        checks: dict[str, Any] = {}
        crc: dict[str, str] = {}
        if self._vouch:
            crc = {CRC_METADATA: crc32c_b64(combine_ranges([(c, n) for _b, c, n in chosen]))}
            checks = {"metadata": crc}
        if meta:
            checks.update(meta_args(meta, f"complete {self.uri}{key}", crc))
        done = self._call(
            "complete_multipart",
            key,
            blob.commit_block_list,
            blocks,
            timeout=self._timeout,
            **checks,
            **self._write_args,
        )
        info = self.head(key)
        vid = (done or {}).get("version_id")  # the version this commit made
        return replace(info, version_id=vid) if vid else info

    def abort_multipart(self, key: str, upload_id: str) -> None:
        check_key(key)
        check_upload_id(upload_id)  # staged blocks stay invisible and expire (see module doc)

    def delete(self, key: str) -> None:
        blob = self._blob(key)
        try:
            self._call(
                "delete", key, blob.delete_blob, delete_snapshots="include", timeout=self._timeout
            )
        except ObjectNotFoundError:
            return
