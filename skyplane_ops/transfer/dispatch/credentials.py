"""The store credentials a transfer's gateways are handed: minted by the control plane.

Gateways start with a clean environment (see ``provision.bundle.agent_env``): nothing of the
control plane's ``AWS_*``, ``AZURE_*``, ``GOOGLE_*`` or ``STORAGE_EMULATOR_HOST`` reaches them
by inheritance. Instead the control plane, from its own SDK chains and environment, mints for
each cloud end of the job credentials scoped to that end and short-lived (``minting``), and
the dispatcher seals them into the job spec of every gateway that opens that end
(``JobSpecs.job_spec``) and sends fresh ones before they expire (``refresh``). The store
option ``credentials`` chooses, per end:

* ``"minted"`` (the default): per transfer and end, scoped and short-lived --
  ``s3://``: STS session credentials with a session policy on the bucket and prefix
  (``AssumeRole`` into ``role_arn`` when given, else ``GetFederationToken``);
  ``gs://``: a downscoped token (Credential Access Boundary on the bucket and prefix);
  ``az://``: a container SAS (user delegation, or service SAS with an account key).
  Where this process has no identity of that cloud at all, nothing is sent (as with
  ``"instance"``); where it has one and minting fails, the transfer fails and says why.
  On a server-side route within one service (S3 -> S3, GCS -> GCS) the destination's set
  also reads the source's objects under its prefix: the store reads the source with it.
* ``"instance"``: nothing is sent; the gateways use their own identity (an instance role,
  a managed identity or a service account on the VM), which the user then grants.
* ``"forward"``: this process's own credentials as they are (a frozen AWS set, the Azure
  connection string, a Google access token): only for stores that cannot mint (an
  S3-compatible service without STS).

``gs://`` with ``STORAGE_EMULATOR_HOST`` set: a store setting, not a secret; it becomes the
``endpoint_url`` and ``anonymous`` options. Settings the control plane's store reads from its
environment and a gateway could not (the S3 region, the GCP project) are added to the
gateways' options when the options lack them; the credential options themselves
(``credentials``, ``role_arn``, ``sts_endpoint_url``) are the control plane's and are not sent.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from gateway_agent.stores.credentials import CREDENTIAL_OPTIONS, SCHEME_KIND, StoreCredentials
from gateway_agent.stores.uri import parse_uri
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.dispatch.minting import (
    DEFAULT_LIFETIME_S,
    Mint,
    Minted,
    Scope,
    aws_minter,
    azure_minter,
    gcp_minter,
    mode_of,
)

log = logging.getLogger(__name__)

AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
GCS_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)


@dataclass(frozen=True)
class EndAccess:
    """How gateways open one end of a job: options (JSON, no secrets), the credentials as
    minted first, and how to mint the next set (None: they do not expire)."""

    options: dict[str, Any] = field(default_factory=dict)
    credentials: StoreCredentials | None = None
    minted: Minted | None = None
    mint: Mint | None = None


# Stores whose server-side copy reads the source with the destination's credentials (the
# destination's client makes the call): S3 CopyObject/UploadPartCopy, GCS rewrite. Azure
# copies from a presigned URL, signed with the source's own.
COPY_READS_WITH_DESTINATION = frozenset({"s3", "gs"})


def copy_source(src_uri: str, dst_uri: str, server_side: bool) -> str | None:
    """The source a route's destination copies from with its own credentials (to mint
    them with the source's read too): only on a server-side route within one service."""
    src, dst = urlparse(src_uri).scheme, urlparse(dst_uri).scheme
    if server_side and src == dst and dst in COPY_READS_WITH_DESTINATION:
        return src_uri
    return None


def resolve(
    uri: str,
    options: Mapping[str, Any] | None = None,
    *,
    write: bool = False,
    lifetime_s: float = DEFAULT_LIFETIME_S,
    name: str = "skyplane-ops",
    copy_from: str | None = None,
) -> EndAccess:
    """The gateways' access to the store ``uri`` names (its source end unless ``write``),
    from this process's SDK chains; ``name`` names the session (AWS); ``copy_from``: the
    source a destination copies from server-side (``copy_source``), read by its minted set."""
    opts = dict(options or {})
    scheme = urlparse(uri).scheme
    if scheme not in SCHEME_KIND:
        return EndAccess(opts)
    mode = mode_of(opts)
    for key in CREDENTIAL_OPTIONS.get(scheme, ()):
        opts.pop(key, None)
    if mode == "minted":
        try:
            scope = Scope(uri, write, copy_from)
            return _minted(scope, scheme, opts, dict(options or {}), lifetime_s, name)
        except TransferError:
            raise
        except Exception as exc:  # never the message: it could quote a credential
            raise TransferError(
                f"minting credentials for {uri} failed ({type(exc).__name__}); set the store "
                "option credentials to 'instance' or 'forward' to do without"
            ) from None
    try:
        if scheme == "s3":
            return _aws(opts, mode)
        if scheme == "az":
            return _azure(uri, opts, mode)
        return _gcp(opts, mode)
    except TransferError:
        raise
    except Exception as exc:  # forwarding is best effort: the gateways then use their own
        log.warning("no %s credentials for the gateways: %s", scheme, type(exc).__name__)
    return EndAccess(opts)


def _minted(
    scope: Scope,
    scheme: str,
    opts: dict[str, Any],
    given: dict[str, Any],
    lifetime_s: float,
    name: str,
) -> EndAccess:
    uri = scope.uri
    mint: Mint | None = None
    if scheme == "s3":
        access = _aws(opts, "instance")  # the region, nothing else
        mint = aws_minter(scope, given, lifetime_s, name)
    elif scheme == "az":
        if opts.get("anonymous"):
            return EndAccess(opts)
        mint = azure_minter(scope, given, lifetime_s)
        access = EndAccess(opts)
    else:
        access = _gcp(opts, "instance")
        if access.options.get("anonymous"):
            return access  # the emulator, or a public bucket: no token to give
        found = gcp_minter(scope, lifetime_s)
        if found is not None:
            mint, project = found
            if not opts.get("project") and project:
                opts["project"] = project
    if mint is None:
        log.info("%s: no %s identity here; the gateways use their own", uri, scheme)
        return access
    first = mint()
    if first.expires_at == float("inf"):
        return EndAccess(opts, first.credentials)
    return EndAccess(opts, first.credentials, first, mint)


def _aws(opts: dict[str, Any], mode: str) -> EndAccess:
    from gateway_agent.stores.aws_session import new_session

    session = new_session()
    if not opts.get("region") and session.region_name:
        opts["region"] = session.region_name
    found = session.get_credentials() if mode == "forward" else None
    if found is None:
        return EndAccess(opts)
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        return EndAccess(opts)
    values = {"access_key_id": str(frozen.access_key), "secret_access_key": str(frozen.secret_key)}
    if frozen.token:
        values["session_token"] = str(frozen.token)
    return EndAccess(opts, StoreCredentials("aws", values))


def _azure(uri: str, opts: dict[str, Any], mode: str) -> EndAccess:
    conn = os.environ.get(AZURE_CONNECTION_ENV)
    if mode != "forward" or not conn or opts.get("anonymous") or "endpoint_url" in opts:
        return EndAccess(opts)
    fields = dict(item.split("=", 1) for item in conn.split(";") if "=" in item)
    if fields.get("AccountName") not in (None, parse_uri(uri).account or ""):
        return EndAccess(opts)  # it names another account: the store would not use it
    return EndAccess(opts, StoreCredentials("azure", {"connection_string": conn}))


def _gcp(opts: dict[str, Any], mode: str) -> EndAccess:
    emulator = os.environ.get(GCS_EMULATOR_ENV)
    if emulator:
        if not opts.get("endpoint_url"):
            host = emulator if "://" in emulator else f"http://{emulator}"
            opts["endpoint_url"] = host
        opts["anonymous"] = True
        return EndAccess(opts)
    if opts.get("anonymous") or mode != "forward":
        return EndAccess(opts)
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import Request

    try:
        creds, project = google.auth.default(scopes=list(GCS_SCOPES))  # type: ignore[no-untyped-call]
    except DefaultCredentialsError:
        return EndAccess(opts)  # none here: the gateways use their own
    creds.refresh(Request())
    if not opts.get("project") and project:
        opts["project"] = project
    token = getattr(creds, "token", None)
    if not token:
        return EndAccess(opts)
    return EndAccess(opts, StoreCredentials("gcp", {"token": str(token)}))
