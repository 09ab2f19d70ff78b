"""Refuse a copy whose source and destination are the same place, or one inside the other.

Copying a folder into itself either never ends (the destination grows while it is listed) or,
worse, writes over (and a mirror deletes) the very objects being read. Places are compared by
what they are, not by how they are named:

- ``file://`` roots by device and inode: the source's and the destination's folder and every
  ancestor of each, either way round, so a symlink, a bind mount or a second mount of the
  same file system is the same folder. A folder that does not exist yet is compared through
  its nearest existing ancestor (plus the names below it).
- Object stores by the provider's bucket identity: scheme, canonical endpoint (scheme, host
  and port normalised; every AWS S3 endpoint - ``s3.amazonaws.com``, ``s3.<region>``,
  ``s3-<region>``, dualstack, the virtual-host ``bucket.s3...`` form - is one namespace, as
  are ``*.googleapis.com`` for GCS and ``<account>.blob.core.windows.net`` for Azure),
  account, bucket/container, then the prefix (``s3://b/data/`` contains ``s3://b/data/x/``,
  not ``s3://b/data2/``).

``check_disjoint`` makes no network call (it runs when a request is built).
``check_access_points`` is the run's step that needs one: an S3 access-point alias
(``...-s3alias``) names some bucket only S3 Control can tell, so it is resolved before the
listing (``CopyRun.locked`` and the dry run); when the API cannot answer, it says what it
assumes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway_agent.stores.errors import InvalidURIError
from gateway_agent.stores.uri import StoreURI, parse_uri
from skyplane_ops.errors import TransferError

_LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "ip6-localhost"}
_AWS_S3_HOST = re.compile(r"^(?:[a-z0-9.\-]+\.)?s3(?:[.\-][a-z0-9\-]+)*\.amazonaws\.com(\.cn)?$")
_AZ_BLOB_HOST = re.compile(r"^([a-z0-9]{3,24})\.blob\.core\.windows\.net$")
ALIAS_SUFFIX = "-s3alias"


@dataclass(frozen=True)
class _Place:
    """Where a URI's objects live: a store (``ident``) and a path of names inside it."""

    ident: tuple[str, ...]
    names: tuple[str, ...]
    shown: str  # how the store is named in a message


# ---- endpoints --------------------------------------------------------------------------------


def _host_port(url: str) -> tuple[str, int | None, str]:
    """(host, port, scheme) of an endpoint URL (a bare ``host:port`` is taken as http)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = (parts.scheme or "http").lower()
    host = (parts.hostname or "").lower().rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
    return host, port, scheme


def endpoint_identity(scheme: str, url: str | None, bucket: str = "") -> str:
    """The canonical name of the service an endpoint URL reaches (``aws``, ``gcp``,
    ``azure``, or ``host:port`` of an S3-compatible service or emulator)."""
    if not url:
        return {"s3": "aws", "gs": "gcp", "az": "azure"}.get(scheme, "")
    host, port, url_scheme = _host_port(url)
    if scheme == "s3":
        m = _AWS_S3_HOST.match(host)
        if m:
            return "aws-cn" if m.group(1) else "aws"
    if scheme == "gs" and (host == "googleapis.com" or host.endswith(".googleapis.com")):
        return "gcp"
    if scheme == "az" and _AZ_BLOB_HOST.match(host):
        return "azure"
    if bucket and host.startswith(bucket + "."):  # virtual-host style: bucket.endpoint
        host = host[len(bucket) + 1 :]
    if host in _LOOPBACK or host.startswith("127."):
        host = "localhost"
    port = port or (443 if url_scheme == "https" else 80)
    return f"{host}:{port}"


def _s3_default_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _azure_endpoint(account: str, options: Mapping[str, Any]) -> tuple[str | None, str]:
    """(endpoint URL, account) the Azure store uses: the option, else a connection string's
    blob endpoint for this account (Azurite), else the public one."""
    url = options.get("endpoint_url")
    if url:
        host, _port, _ = _host_port(str(url))
        m = _AZ_BLOB_HOST.match(host)
        if m:
            return None, m.group(1)
        path = urlsplit(str(url)).path.strip("/")
        return str(url), path.split("/")[0] if path else account
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or ""
    fields = dict(item.split("=", 1) for item in conn.split(";") if "=" in item)
    if conn and fields.get("AccountName") in (None, account) and fields.get("BlobEndpoint"):
        return fields["BlobEndpoint"], account
    return None, account


def _store_place(parsed: StoreURI, options: Mapping[str, Any]) -> _Place:
    names = tuple(n for n in parsed.prefix.split("/") if n)
    if parsed.scheme == "s3":
        url = options.get("endpoint_url") or _s3_default_endpoint()
        endpoint = endpoint_identity("s3", str(url) if url else None, parsed.bucket)
        return _Place(("s3", endpoint, parsed.bucket), names, f"bucket {parsed.bucket}")
    if parsed.scheme == "gs":
        url = options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
        endpoint = endpoint_identity("gs", str(url) if url else None, parsed.bucket)
        return _Place(("gs", endpoint, parsed.bucket), names, f"bucket {parsed.bucket}")
    if parsed.scheme == "az":
        url, account = _azure_endpoint(parsed.account or "", options)
        endpoint = endpoint_identity("az", url)
        shown = f"container {parsed.bucket} of account {account}"
        return _Place(("az", endpoint, account, parsed.bucket), names, shown)
    return _Place((parsed.scheme, parsed.bucket), names, f"{parsed.scheme}://{parsed.bucket}")


# ---- files ------------------------------------------------------------------------------------


def _file_chain(path: str) -> tuple[str, list[tuple[int, int]], tuple[str, ...]]:
    """(nearest existing folder, (device, inode) of it and of each ancestor up to ``/``,
    the names below it that do not exist yet)."""
    missing: list[str] = []
    here = os.path.abspath(path)
    while not os.path.lexists(here) and here != "/":
        missing.insert(0, os.path.basename(here))
        here = os.path.dirname(here)
    real = os.path.realpath(here)
    if not os.path.exists(real):  # a dangling link: its target's nearest existing ancestor
        real, chain, more = _file_chain(real)
        return real, chain, (*more, *missing)
    chain = []
    walk = real
    while True:
        st = os.stat(walk)
        chain.append((st.st_dev, st.st_ino))
        if walk == "/":
            break
        walk = os.path.dirname(walk)
    return real, chain, tuple(missing)


def _names(real: str) -> tuple[str, ...]:
    return tuple(n for n in real.split("/") if n)


def _file_relation(src_root: str, dst_root: str) -> tuple[str, str] | None:
    """(why, detail) when the two folders overlap, compared by device and inode."""
    s_real, s_chain, s_missing = _file_chain(src_root)
    d_real, d_chain, d_missing = _file_chain(dst_root)
    s_names, d_names = _names(s_real), _names(d_real)
    # Express both as names below one common folder: the existing folder of one side that is
    # (by identity) the other side's folder or one of its ancestors.
    if s_chain[0] in d_chain:
        k = d_chain.index(s_chain[0])
        common = s_real
        s_rel = s_missing
        d_rel = (*d_names[len(d_names) - k :], *d_missing) if k else d_missing
        same_as = d_real if k == 0 else "/" + "/".join(d_names[: len(d_names) - k])
    elif d_chain[0] in s_chain:
        k = s_chain.index(d_chain[0])
        common = d_real
        d_rel = d_missing
        s_rel = (*s_names[len(s_names) - k :], *s_missing) if k else s_missing
        same_as = s_real if k == 0 else "/" + "/".join(s_names[: len(s_names) - k])
    else:
        return None
    why = _why(s_rel, d_rel)
    if why is None:
        return None
    dev, ino = os.stat(common).st_dev, os.stat(common).st_ino
    if same_as == common:
        detail = f"both resolve to {common}"
    else:
        detail = (
            f"{same_as} and {common} are one folder reached by two paths: device "
            f"{os.major(dev)}:{os.minor(dev)}, inode {ino}, as through a bind mount, a second "
            "mount or a link"
        )
    return why, detail


def _why(src: tuple[str, ...], dst: tuple[str, ...]) -> str | None:
    if src == dst:
        return "are the same place"
    if dst[: len(src)] == src:
        return "overlap: the destination is inside the source"
    if src[: len(dst)] == dst:
        return "overlap: the source is inside the destination"
    return None


# ---- the checks -------------------------------------------------------------------------------


def _parsed(uri: str) -> StoreURI | None:
    try:
        return parse_uri(uri)
    except InvalidURIError:
        return None  # synthetic:// and null:// benchmark endpoints hold no user data


def _refuse(src_uri: str, dst_uri: str, why: str, detail: str) -> TransferError:
    return TransferError(
        f"source {src_uri} and destination {dst_uri} {why} ({detail}); nothing was copied: "
        "choose a destination outside the source"
    )


def check_disjoint(
    src_uri: str,
    dst_uri: str,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
) -> None:
    """Raise ``TransferError`` (one line) when source and destination overlap. No network
    call; for ``file://`` it stats the two folders and their ancestors."""
    src, dst = _parsed(src_uri), _parsed(dst_uri)
    if src is None or dst is None or src.scheme != dst.scheme:
        return
    if src.scheme == "file":
        try:
            found = _file_relation(src.bucket, dst.bucket)
        except OSError as exc:
            raise TransferError(
                f"cannot tell whether source {src_uri} and destination {dst_uri} overlap: "
                f"{exc.strerror or exc}: {exc.filename}"
            ) from None
        if found is not None:
            raise _refuse(src_uri, dst_uri, *found)
        return
    s = _store_place(src, src_options or {})
    d = _store_place(dst, dst_options or {})
    if s.ident != d.ident:
        return
    why = _why(s.names, d.names)
    if why is not None:
        raise _refuse(src_uri, dst_uri, why, f"both are {s.shown} at endpoint {s.ident[1]}")


# ---- S3 access-point aliases (a network call: a step of the run) ------------------------------

Resolver = Callable[[str, Mapping[str, Any]], str | None]


def resolve_access_point_alias(alias: str, options: Mapping[str, Any]) -> str | None:
    """The bucket behind an S3 access-point alias (S3 Control ``ListAccessPoints`` of the
    caller's account, at the store's endpoint); None when it is not one of the account's."""
    import boto3
    from botocore.config import Config

    endpoint = options.get("endpoint_url") or _s3_default_endpoint()
    region = str(options.get("region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    config = Config(inject_host_prefix=False, retries={"max_attempts": 2}, connect_timeout=10)
    session = boto3.session.Session()
    account = session.client(
        "sts", endpoint_url=endpoint, region_name=region, config=config
    ).get_caller_identity()["Account"]
    control = session.client("s3control", endpoint_url=endpoint, region_name=region, config=config)
    if endpoint:  # an S3-compatible service: the account is not a host name there
        prefix = f"://{account}."

        def _no_account_host(request: Any, **_: Any) -> None:
            request.url = request.url.replace(prefix, "://", 1)

        control.meta.events.register("before-sign.s3-control", _no_account_host)
    token: str | None = None
    while True:
        page = control.list_access_points(
            AccountId=account, **({"NextToken": token} if token else {})
        )
        for point in page.get("AccessPointList", []):
            if point.get("Alias") == alias:
                return str(point["Bucket"])
        token = page.get("NextToken")
        if not token:
            return None


def check_access_points(
    src_uri: str,
    dst_uri: str,
    src_options: Mapping[str, Any] | None = None,
    dst_options: Mapping[str, Any] | None = None,
    *,
    resolve: Resolver = resolve_access_point_alias,
) -> str | None:
    """``check_disjoint`` with S3 access-point aliases resolved to their buckets. Raises the
    same one-line ``TransferError``; returns a one-line note of what it assumed when S3 Control
    could not tell, else None."""
    src, dst = _parsed(src_uri), _parsed(dst_uri)
    if src is None or dst is None or src.scheme != "s3" or dst.scheme != "s3":
        return None
    sides = [(src, dict(src_options or {})), (dst, dict(dst_options or {}))]
    if not any(p.bucket.endswith(ALIAS_SUFFIX) for p, _ in sides):
        return None
    places: list[_Place] = []
    for parsed, options in sides:
        bucket = parsed.bucket
        if bucket.endswith(ALIAS_SUFFIX):
            try:
                found = resolve(bucket, options)
            except Exception as exc:  # any SDK failure means "cannot tell"
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                return (
                    f"cannot tell which bucket access point alias {bucket} serves ({reason}); "
                    "assuming it is not the other end's bucket"
                )
            if found is None:
                return (
                    f"access point alias {bucket} is not one of this account's access points; "
                    "assuming it is not the other end's bucket"
                )
            bucket = found
        places.append(_store_place(StoreURI("s3", bucket, parsed.prefix), options))
    s, d = places
    why = _why(s.names, d.names) if s.ident == d.ident else None
    if why is not None:
        detail = (
            f"{src.bucket} and {dst.bucket} reach one bucket, {s.ident[2]}, through an access point"
        )
        raise _refuse(src_uri, dst_uri, why, detail)
    return None
