"""Store URIs: one parser for every scheme, so all layers agree on bucket and prefix.

Forms: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://account/container/prefix``,
``https://ACCOUNT.blob.core.windows.net/container/prefix``, ``file:///abs/path`` and
``mem://name/prefix`` (the in-memory fake). A non-empty prefix is a "folder": it is normalised
to end with ``/`` so ``s3://b/data`` and ``s3://b/data/`` address the same keys. Everything
after the bucket is kept verbatim (``//`` and unicode included), only the https form is
percent-decoded because it is a URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gateway_agent.stores.errors import InvalidURIError

SCHEMES = ("s3", "gs", "az", "file", "mem")

_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_GCS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]$")
_AZ_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_AZ_CONTAINER = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$|^\$root$")
_MEM_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,128}$")
_AZ_HOST = re.compile(r"^([a-z0-9]{3,24})\.blob\.core\.windows\.net$")


@dataclass(frozen=True)
class StoreURI:
    """A parsed store URI.

    ``bucket`` is the bucket (s3, gs), container (az), registry name (mem) or absolute root
    directory (file). ``prefix`` is "" or ends with "/". ``account`` is set for az only.
    """

    scheme: str
    bucket: str
    prefix: str = ""
    account: str | None = None

    def __str__(self) -> str:
        if self.scheme == "file":
            return "file://" + self.bucket.rstrip("/") + "/" + self.prefix
        if self.scheme == "az":
            return f"az://{self.account}/{self.bucket}/{self.prefix}"
        return f"{self.scheme}://{self.bucket}/{self.prefix}"

    def key(self, relative: str) -> str:
        """The full object name of a key given relative to the prefix."""
        return self.prefix + relative


def _safe(uri: str) -> str:
    """The URI without query or fragment: a signed URL's signature never reaches a message."""
    cut = min((i for i in (uri.find("?"), uri.find("#")) if i >= 0), default=-1)
    return uri if cut < 0 else uri[:cut] + "?<redacted>"


def _norm_prefix(prefix: str) -> str:
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def _split_bucket(rest: str) -> tuple[str, str]:
    bucket, _, prefix = rest.partition("/")
    return bucket, _norm_prefix(prefix)


def parse_uri(uri: str) -> StoreURI:
    """Parse and validate a store URI; raises :class:`InvalidURIError` with the reason."""
    if not isinstance(uri, str) or "://" not in uri:
        raise InvalidURIError(f"not a store URI (expected scheme://...): {_safe(str(uri))!r}")
    try:
        return _parse(uri)
    except InvalidURIError as exc:
        raise InvalidURIError(str(exc).replace(repr(uri), repr(_safe(uri)))) from None


def _parse(uri: str) -> StoreURI:
    scheme, _, rest = uri.partition("://")
    scheme = scheme.lower()
    if scheme == "https":
        return _parse_azure_https(uri)
    if scheme not in SCHEMES:
        raise InvalidURIError(f"unsupported scheme {scheme!r} in {uri!r}; use one of {SCHEMES}")
    if scheme == "file":
        return _parse_file(uri, rest)
    if scheme == "az":
        account, _, rest = rest.partition("/")
        if not _AZ_ACCOUNT.match(account):
            raise InvalidURIError(f"invalid Azure storage account name {account!r} in {uri!r}")
        container, prefix = _split_bucket(rest)
        if not _AZ_CONTAINER.match(container):
            raise InvalidURIError(f"invalid Azure container name {container!r} in {uri!r}")
        return StoreURI("az", container, prefix, account)
    bucket, prefix = _split_bucket(rest)
    pattern = {"s3": _S3_BUCKET, "gs": _GCS_BUCKET, "mem": _MEM_NAME}[scheme]
    if not pattern.match(bucket) or ".." in bucket:
        raise InvalidURIError(f"invalid bucket name {bucket!r} for {scheme}:// in {uri!r}")
    return StoreURI(scheme, bucket, prefix)


def _parse_file(uri: str, rest: str) -> StoreURI:
    host, sep, path = rest.partition("/")
    if host not in ("", "localhost") or not sep:
        raise InvalidURIError(f"file URIs must be absolute, file:///path: {uri!r}")
    root = "/" + path.strip("/")
    if any(part in (".", "..") for part in root.split("/")):
        raise InvalidURIError(f"file URI must not contain . or .. segments: {uri!r}")
    if "\x00" in root:
        raise InvalidURIError(f"file URI contains a NUL byte: {uri!r}")
    return StoreURI("file", root)


def _parse_azure_https(uri: str) -> StoreURI:
    parts = urlsplit(uri)
    match = _AZ_HOST.match((parts.hostname or "").lower())
    if not match or parts.query or parts.port:
        raise InvalidURIError(
            f"https URIs must be https://ACCOUNT.blob.core.windows.net/container/prefix: {uri!r}"
        )
    container, prefix = _split_bucket(unquote(parts.path.lstrip("/")))
    if not _AZ_CONTAINER.match(container):
        raise InvalidURIError(f"invalid Azure container name {container!r} in {uri!r}")
    return StoreURI("az", container, prefix, match.group(1))
