"""The store credentials a transfer's gateways are handed, resolved by the control plane.

Gateways start with a clean environment (see ``provision.bundle.agent_env``): nothing of the
control plane's ``AWS_*``, ``AZURE_*``, ``GOOGLE_*`` or ``STORAGE_EMULATOR_HOST`` reaches them
by inheritance. Instead the control plane resolves, from its own SDK chains and environment,
the credentials of each cloud end of the job, and the dispatcher seals them into the job spec
of every gateway that opens that end (``JobSpecs.job_spec``):

* ``s3://``: ``boto3.Session().get_credentials()``, frozen (access key, secret, session token);
* ``az://``: ``AZURE_STORAGE_CONNECTION_STRING`` when it is set and the store would use it (it
  names the account and no ``endpoint_url`` is given); otherwise nothing, and the gateway uses
  its own identity;
* ``gs://``: ``STORAGE_EMULATOR_HOST`` is a store setting, not a secret: it becomes the
  ``endpoint_url`` and ``anonymous`` options; otherwise an access token from
  ``google.auth.default()``, refreshed, when there are default credentials.

Settings the control plane's store reads from its environment and a gateway could not (the
S3 region, the GCP project) are added to the gateways' options when the options lack them.
Where nothing resolves, gateways use their SDK's default chain (an instance role on a VM).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from gateway_agent.stores.credentials import StoreCredentials

log = logging.getLogger(__name__)

AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
GCS_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
GCS_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)


@dataclass(frozen=True)
class EndAccess:
    """How gateways open one end of a job: options (JSON, no secrets) and credentials."""

    options: dict[str, Any] = field(default_factory=dict)
    credentials: StoreCredentials | None = None


def resolve(uri: str, options: Mapping[str, Any] | None = None) -> EndAccess:
    """The gateways' access to the store ``uri`` names, from this process's SDK chains."""
    opts = dict(options or {})
    scheme = urlparse(uri).scheme
    try:
        if scheme == "s3":
            return _aws(opts)
        if scheme == "az":
            return _azure(uri, opts)
        if scheme == "gs":
            return _gcp(opts)
    except Exception as exc:  # resolving is best effort: the gateways then use their own
        log.warning("no %s credentials for the gateways: %s", scheme, type(exc).__name__)
    return EndAccess(opts)


def _aws(opts: dict[str, Any]) -> EndAccess:
    import boto3

    session = boto3.Session()
    if not opts.get("region") and session.region_name:
        opts["region"] = session.region_name
    found = session.get_credentials()
    if found is None:
        return EndAccess(opts)
    frozen = found.get_frozen_credentials()
    if not frozen.access_key or not frozen.secret_key:
        return EndAccess(opts)
    values = {"access_key_id": str(frozen.access_key), "secret_access_key": str(frozen.secret_key)}
    if frozen.token:
        values["session_token"] = str(frozen.token)
    return EndAccess(opts, StoreCredentials("aws", values))


def _azure(uri: str, opts: dict[str, Any]) -> EndAccess:
    from gateway_agent.stores.uri import parse_uri

    conn = os.environ.get(AZURE_CONNECTION_ENV)
    if not conn or opts.get("anonymous") or "endpoint_url" in opts:
        return EndAccess(opts)
    fields = dict(item.split("=", 1) for item in conn.split(";") if "=" in item)
    if fields.get("AccountName") not in (None, parse_uri(uri).account or ""):
        return EndAccess(opts)  # it names another account: the store would not use it
    return EndAccess(opts, StoreCredentials("azure", {"connection_string": conn}))


def _gcp(opts: dict[str, Any]) -> EndAccess:
    emulator = os.environ.get(GCS_EMULATOR_ENV)
    if emulator:
        if not opts.get("endpoint_url"):
            host = emulator if "://" in emulator else f"http://{emulator}"
            opts["endpoint_url"] = host
        opts["anonymous"] = True
        return EndAccess(opts)
    if opts.get("anonymous"):
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
