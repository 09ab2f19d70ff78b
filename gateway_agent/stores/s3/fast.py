"""PutObject and GetObject of small bodies, HeadObject and ListObjectsV2 pages without botocore.

Why: a boto3 ``put_object`` of 1 KiB costs about 1 ms of CPU (parameter validation,
serialization, ~20 event handlers, endpoint rules, signing, response parsing); against an
object store 20 ms away a gateway on 2 cores then runs out of CPU before it runs out of
requests in flight. This path builds the same request by hand and costs about 0.4 ms: the
URL from a template that botocore itself resolved once (endpoint, region, path-style or
virtual-hosted addressing), the same headers the boto3 path sends (``x-amz-checksum-crc32c``
and ``x-amz-sdk-checksum-algorithm``), signed by botocore's own :class:`S3SigV4Auth` with the
client's credentials (session tokens and refreshes included), sent over a pooled keep-alive
urllib3 connection without ``Expect: 100-continue``.

Listing is the same story: botocore parses a page of 1,000 objects through its shape model in
about 70 ms (a verification listing of 10k objects: 0.7 s of one core). ``list_page`` sends
the ListObjectsV2 request botocore would (``encoding-type=url``, keys decoded the way botocore
decodes them) and reads the answer with ElementTree: about 5 ms a page.

A small GetObject is the same story again (boto3: ~1.5 ms of CPU per 1 KiB object, read through
its streaming body): ``get`` sends the ranged GET (``If-Match`` when a version is pinned) and
returns the body.

It covers what the S3 store's ``write`` does with a small body, what its ``read`` does with a
small range and what its listing reads of a page, nothing else. Errors come back the way the
boto3 path reports them (a botocore ``ClientError`` with S3's code and HTTP status, a
:class:`TransientStoreError` for a dropped connection or timeout), so the store's retry policy
and error mapping apply unchanged.
:func:`fast_path_for` answers None where the path does not apply (no credentials, another
signature version, access point ARNs, S3 Express buckets, an HTTP proxy from the environment),
and :class:`Unsupported` is raised when S3 answers with a redirect (a bucket in another region
than the client's): the caller then turns the path off and lets boto3, which follows region
redirects, do the rest.
"""

from __future__ import annotations

import os
import ssl
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from gateway_agent.stores.errors import TransientStoreError
from gateway_agent.stores.s3 import rawhttp

# Bodies at or above this size go through boto3 (its 100-continue handshake and streaming body
# are worth it there, and its CPU per request is small next to the bytes).
FAST_BODY_MAX = 1024 * 1024
# What S3 answers when the bucket lives in another region than the request was signed for.
_REDIRECT_CODES = {"PermanentRedirect", "TemporaryRedirect", "AuthorizationHeaderMalformed"}
_SIGNED = ("x-amz-sdk-checksum-algorithm", "x-amz-checksum-crc32c")


class Unsupported(Exception):
    """S3 wants this request elsewhere (another region): boto3 must take over."""


class FastPath:
    """Signs and sends PutObject, GetObject and ListObjectsV2 requests for one bucket;
    thread-safe."""

    def __init__(
        self,
        base_url: str,
        credentials: Any,
        region: str,
        *,
        max_pool: int,
        connect_timeout: float,
        read_timeout: float,
        user_agent: str,
    ) -> None:
        from botocore.httpsession import get_cert_path

        self.base_url = base_url
        origin = urlsplit(base_url)
        self._origin = len(f"{origin.scheme}://{origin.netloc}")
        # The bucket's own URL for bucket-level requests: ``/bucket`` path-style (no trailing
        # slash, as botocore sends it), ``/`` on a virtual-hosted name.
        path = origin.path.rstrip("/") or "/"
        self.bucket_url = f"{origin.scheme}://{origin.netloc}{path}"
        # The Host header as http.client sends it (no default port); signed as sent.
        default = ":443" if origin.scheme == "https" else ":80"
        self._host = origin.netloc.removesuffix(default)
        self._credentials = credentials
        self._region = region
        self._user_agent = f"{user_agent} skyplane-ops/fast-put"
        bundle = None
        if base_url.startswith("https:"):
            bundle = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
        self._raw: rawhttp.Connections | None = None
        self._pool: Any = None
        if rawhttp.available:
            self._raw = rawhttp.Connections(
                origin.hostname or "",
                origin.port or (443 if origin.scheme == "https" else 80),
                tls=ssl.create_default_context(cafile=bundle) if bundle else None,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_idle=max_pool,
            )
        else:
            self._pool = _urllib3_pool(base_url, bundle, max_pool, connect_timeout, read_timeout)
        self._lock = threading.Lock()
        # HEADs go over urllib3 (httptools cannot be told an answer to HEAD has no body),
        # a pool made on the first one.
        self._head_pool: Any = None
        self._head_args = (base_url, bundle, max_pool, connect_timeout, read_timeout)
        self.heads = 0  # HEADs sent this way
        self.sent = 0  # PUTs sent this way (a test shows the path is taken)
        self.pages = 0  # listing pages fetched this way
        self.gets = 0  # GETs sent this way

    def url(self, name: str) -> str:
        """The object's URL, its name encoded as botocore's serializer encodes ``Key``."""
        from botocore.utils import percent_encode

        return self.base_url + str(percent_encode(name, safe="/~"))

    def _send(
        self,
        method: str,
        url: str,
        data: bytes,
        headers: dict[str, str],
        operation: str,
        ok: tuple[int, ...] = (200,),
        pool: Any = None,
    ) -> rawhttp.Answer:
        """``url`` signed (SigV4, the client's credentials) and sent; the answer when its
        status is in ``ok``, else the error boto3 would raise for ``operation``."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        headers = {"Host": self._host, "User-Agent": self._user_agent, **headers}
        request = AWSRequest(method, url, data=data, headers=headers)
        # As botocore marks a PutObject: over TLS with a checksum header the payload is not
        # hashed again for the signature (UNSIGNED-PAYLOAD); over plain HTTP it is.
        request.context["has_streaming_input"] = method == "PUT"
        S3SigV4Auth(self._credentials.get_frozen_credentials(), "s3", self._region).add_auth(
            request
        )
        signed = dict(request.headers.items())
        try:
            if self._raw is not None and pool is None:
                answer = self._raw.request(method, url[self._origin :], signed, data)
            else:
                target = url[self._origin :]
                answer = _urllib3_send(pool or self._pool, method, target, signed, data)
        except OSError as exc:
            raise TransientStoreError(
                f"{method} {urlsplit(url).netloc}: connection failed", code=type(exc).__name__
            ) from None
        if answer.status in ok:
            return answer
        raise _client_error(answer.status, answer.data, answer.headers, operation)

    def put(
        self,
        name: str,
        data: bytes,
        crc32c_b64: str | None,
        extra: Mapping[str, str] | None = None,
    ) -> dict[str, str | None]:
        """One PutObject (``extra``: more headers, signed too: the object's metadata and the
        store's write options); returns what the store reads of the answer (ETag, checksum)."""
        headers = dict(extra or {})
        if crc32c_b64 is not None:
            headers.update(zip(_SIGNED, ("CRC32C", crc32c_b64), strict=True))
        with self._lock:
            self.sent += 1
        got = self._send("PUT", self.url(name), data, headers, "PutObject").headers
        return {
            "ETag": got.get("etag"),
            "ChecksumCRC32C": got.get("x-amz-checksum-crc32c"),
            "ChecksumType": got.get("x-amz-checksum-type"),
            "VersionId": got.get("x-amz-version-id"),
        }

    def get(self, name: str, start: int, length: int, if_match: str | None) -> bytes:
        """One GetObject of ``length`` (> 0) bytes from ``start``: a Range request, with
        ``If-Match`` (a quoted ETag) when the caller pins the version it listed. S3 answers
        416 for a start past the end and 412 for another version, as through boto3."""
        return self.get_answer(name, start, length, if_match).data

    def get_answer(
        self, name: str, start: int, length: int, if_match: str | None
    ) -> rawhttp.Answer:
        """``get`` with the answer's headers too (the object's metadata: ``get_fields``)."""
        headers = {"Range": f"bytes={start}-{start + length - 1}"}
        if if_match is not None:
            headers["If-Match"] = if_match
        with self._lock:
            self.gets += 1
        return self._send("GET", self.url(name), b"", headers, "GetObject", ok=(200, 206))

    def head(self, name: str) -> dict[str, Any]:
        """One HeadObject with the full-object checksum asked for (``x-amz-checksum-mode``):
        the answer's fields as boto3 names them (``ContentLength``, ``ETag``,
        ``LastModified``, ``ChecksumCRC32C``, ``ChecksumType``). A control plane looking up a
        list of keys sends one per key: through boto3 each cost ~2 ms of CPU."""
        with self._lock:
            self.heads += 1
            if self._head_pool is None:
                self._head_pool = _urllib3_pool(*self._head_args)
            pool = self._head_pool
        headers = {"x-amz-checksum-mode": "ENABLED"}
        got = self._send("HEAD", self.url(name), b"", headers, "HeadObject", pool=pool).headers
        modified = got.get("last-modified")
        return {
            "ContentLength": int(got.get("content-length", 0)),
            "ETag": got.get("etag"),
            "LastModified": parsedate_to_datetime(modified) if modified else None,
            "ChecksumCRC32C": got.get("x-amz-checksum-crc32c"),
            "ChecksumType": got.get("x-amz-checksum-type"),
            "VersionId": got.get("x-amz-version-id"),
        }

    def list_page(
        self, prefix: str, token: str | None, max_keys: int
    ) -> tuple[list[Listed], str | None]:
        """One ListObjectsV2 page of names under ``prefix`` (the full name prefix) after
        ``token``: (name, size, ETag, LastModified) per object, and the next page's token (None
        after the last page)."""
        from botocore.utils import percent_encode

        query = {"list-type": "2", "encoding-type": "url", "max-keys": str(max_keys)}
        query["prefix"] = prefix
        if token:
            query["continuation-token"] = token
        # Encoded and sorted as SigV4's canonical query string wants it (botocore signs the
        # query of the URL as it stands).
        url = (
            self.bucket_url
            + "?"
            + "&".join(f"{k}={percent_encode(v)}" for k, v in sorted(query.items()))
        )
        with self._lock:
            self.pages += 1
        return parse_list_page(self._send("GET", url, b"", {}, "ListObjectsV2").data)


Listed = tuple[str, int, str | None, datetime | None]


def parse_list_page(body: bytes) -> tuple[list[Listed], str | None]:
    """A ListObjectsV2 answer (``encoding-type=url``): its objects and the next token."""
    from botocore.compat import unquote_str

    root = ET.fromstring(body)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    key_tag, size_tag, etag_tag, time_tag = (
        ns + t for t in ("Key", "Size", "ETag", "LastModified")
    )
    # Keys come URL-encoded only where the server says so (as botocore decodes): a service
    # that ignores ``encoding-type`` sends them as they are, '%' and '+' included.
    decode = unquote_str if root.findtext(ns + "EncodingType") == "url" else str
    items: list[Listed] = []
    for entry in root.iter(ns + "Contents"):
        fields = {child.tag: child.text for child in entry}
        modified = fields.get(time_tag)
        items.append(
            (
                decode(fields[key_tag] or ""),
                int(fields[size_tag] or 0),
                fields.get(etag_tag),
                datetime.fromisoformat(modified) if modified else None,
            )
        )
    truncated = (root.findtext(ns + "IsTruncated") or "").lower() == "true"
    token = root.findtext(ns + "NextContinuationToken") if truncated else None
    return items, token or None


def _urllib3_pool(
    base_url: str, bundle: str | None, max_pool: int, connect_timeout: float, read_timeout: float
) -> Any:
    """Without httptools: a urllib3 pool, its connections writing head and body at once."""
    import urllib3

    tls = {"cert_reqs": "CERT_REQUIRED", "ca_certs": bundle} if bundle else {}
    pool = urllib3.connection_from_url(
        base_url,
        maxsize=max_pool,
        retries=False,
        timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
        **tls,
    )
    pool.ConnectionCls = one_write_connection(base_url.startswith("https:"))
    return pool


def _urllib3_send(
    pool: Any, method: str, target: str, headers: dict[str, str], data: bytes
) -> rawhttp.Answer:
    import urllib3

    try:
        resp = pool.urlopen(method, target, body=data or None, headers=headers, retries=False)
    except urllib3.exceptions.HTTPError as exc:
        raise ConnectionError(str(exc)) from None
    got = {k.lower(): v for k, v in resp.headers.items()}
    return rawhttp.Answer(resp.status, got, resp.data)


def one_write_connection(tls: bool) -> type[Any]:
    """urllib3's connection class that sends a small request's head and body in one write.

    http.client writes the head, then the body: two TCP segments, and on the other side (a
    proxy, the server) two reads and wake-ups per request. For a 1 KiB object that doubles the
    per-request work of everything between the gateway and the store."""
    from urllib3.connection import HTTPConnection, HTTPSConnection

    base: Any = HTTPSConnection if tls else HTTPConnection

    class OneWrite(base):  # type: ignore[misc]
        _held: list[bytes] | None = None

        def request(self, method: str, url: str, body: Any = None, *a: Any, **kw: Any) -> None:
            small = isinstance(body, bytes) and len(body) < FAST_BODY_MAX
            self._held = [] if small else None
            try:
                super().request(method, url, body, *a, **kw)
                held = self._held
            finally:
                self._held = None
            if held:
                super().send(b"".join(held))

        def send(self, data: Any) -> None:
            if self._held is not None and isinstance(data, bytes | bytearray | memoryview):
                self._held.append(bytes(data))
            else:
                super().send(data)

    return OneWrite


def _client_error(status: int, body: bytes, headers: Any, operation: str) -> Exception:
    """S3's error answer as the ``ClientError`` boto3 would raise (code from the XML body)."""
    from botocore.exceptions import ClientError

    code, message = str(status), ""
    try:
        root = ET.fromstring(body) if body else None
    except ET.ParseError:
        root = None
    if root is not None:
        code = root.findtext("Code") or code
        message = root.findtext("Message") or ""
    if status in (301, 307) or code in _REDIRECT_CODES:
        return Unsupported(f"{code} (region {headers.get('x-amz-bucket-region')})")
    answer: Any = {"Error": {"Code": code, "Message": message}}
    answer["ResponseMetadata"] = {"HTTPStatusCode": status}
    return ClientError(answer, operation)


def fast_path_for(client: Any, session: Any, bucket: str, opts: dict[str, Any]) -> FastPath | None:
    """The fast path for ``bucket`` as ``client`` would address it, or None where it does
    not apply (then every PutObject goes through boto3)."""
    from botocore.utils import get_environ_proxies

    config = client.meta.config
    credentials = session.get_credentials()
    if credentials is None or config.signature_version not in (None, "s3v4"):
        return None
    if ":" in bucket or bucket.endswith("--x-s3"):
        return None  # access point / Outposts ARNs, S3 Express: other endpoints and auth
    # botocore resolves the endpoint (region, addressing style, dualstack, FIPS ...) for a
    # presigned URL the same way as for a call; the key "k" marks where names go.
    presigned = client.generate_presigned_url(
        "put_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=60
    )
    parts = urlsplit(presigned)
    if not parts.path.endswith("/k") or get_environ_proxies(presigned):
        return None
    # The region boto3 signs for; a bucket elsewhere answers a redirect and boto3 takes over.
    region = client.meta.region_name or "us-east-1"
    return FastPath(
        f"{parts.scheme}://{parts.netloc}{parts.path[:-1]}",
        credentials,
        region,
        max_pool=int(opts.get("max_pool_connections", 64)),
        connect_timeout=float(opts.get("connect_timeout", 10)),
        read_timeout=float(opts.get("read_timeout", 120)),
        user_agent=str(config.user_agent or "Botocore"),
    )
