"""Per-transfer store credentials: minted by the control plane from the user's own identity,
scoped to one end of one transfer (its bucket or container, and prefix where the cloud can
scope one) and short-lived; the dispatcher mints them again and sends the fresh set to the
running jobs before the old set expires (``refresh.CredentialRefresher``).

* **AWS** -- STS session credentials with an inline session policy (the session can do only
  what both the caller's own policies and the session policy allow): read and list on the
  source prefix, write and multipart on the destination prefix (``aws_session_policy``).
  ``AssumeRole`` into the store option ``role_arn`` when it is given (a session that already
  is one is *role chaining*, capped by AWS at 1 h), else ``GetFederationToken``, which works
  from an IAM user's long-lived keys (not from a session: give ``role_arn`` then). AWS takes
  15 min .. 12 h; a shorter lifetime asked for is kept by the control plane, which refreshes
  that often and tells the gateways so (their SDK refuses the set after it).
* **GCP** -- a downscoped access token (Credential Access Boundary, ``gcp_access_boundary``):
  ``storage.objectViewer`` on the source bucket, conditioned on the prefix (objects and list
  prefix); ``storage.objectAdmin`` on the destination prefix (overwriting an object needs
  ``storage.objects.delete``) and ``storage.objectCreator`` on the store's staging folder for
  parts. It lives as long as the source token (<= 1 h) and is minted again from the source
  credential, refreshed.
* **Azure** -- a SAS on the container (Blob SAS cannot name a prefix without hierarchical
  namespace; a directory SAS needs HNS, so the scope is the container): ``rlt`` on the source,
  ``cwt`` on the destination (``t``: the blob index tags that travel with an object),
  ``https`` only unless the endpoint is plain HTTP (Azurite), with an expiry. A *user
  delegation SAS* (a key from Entra ID, ``Get User Delegation Key``) when the control plane
  has no account key; with an account key (a connection string, as with Azurite) a *service
  SAS* signed with it. A connection string that carries a SAS already is
  sent as it is (a SAS cannot be narrowed).

A destination that copies server-side from the source on its own service (S3 CopyObject and
UploadPartCopy, GCS rewrite: the store reads the source with the caller's credentials) gets,
on such a route only, one more grant in its set: the source's object reads on the source's
bucket and prefix (``Scope.copy_from``), no listing, nothing else of the source.

Nothing here is written anywhere: a minted set lives in this process's memory and is sealed
at once for the gateways that open its store.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlparse

from gateway_agent.stores.credentials import StoreCredentials
from gateway_agent.stores.uri import parse_uri
from skyplane_ops.errors import TransferError

log = logging.getLogger(__name__)

DEFAULT_LIFETIME_S = 3600.0
AWS_MIN_DURATION_S = 900  # STS refuses less
AWS_MAX_DURATION_S = 12 * 3600
AWS_CHAINED_MAX_S = 3600  # a role session assumed from a session (role chaining)
SAS_START_SKEW_S = 300  # a SAS starts a little in the past: clocks differ
AZURE_DELEGATION_MAX_S = 7 * 24 * 3600
AZURE_CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
GCP_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)

# What a gateway does to each end (see gateway_agent.job.source / sink): reads ranges of
# pinned versions with their tags on the source; puts objects and multipart parts (and
# aborts a straggling upload) on the destination. Listing stays within the prefix.
AWS_READ_ACTIONS = (
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectTagging",
    "s3:GetObjectVersionTagging",
)
AWS_WRITE_ACTIONS = (
    "s3:PutObject",
    "s3:PutObjectTagging",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
AWS_LIST_ACTIONS = ("s3:ListBucket",)
# ``t``: blob index tags travel with the object (read on the source, set with the write on the
# destination), as the AWS sets grant GetObjectTagging / PutObjectTagging.
SAS_READ = "rlt"
SAS_WRITE = "cwt"
GCP_READ_ROLE = "inRole:roles/storage.objectViewer"
GCP_WRITE_ROLE = "inRole:roles/storage.objectAdmin"
GCP_STAGING_ROLE = "inRole:roles/storage.objectCreator"
MODES = ("minted", "forward", "instance")


@dataclass(frozen=True)
class Scope:
    """One end of a transfer as a credential sees it: the store, and read or write.

    ``copy_from``: the source a destination's store copies from server-side (S3 CopyObject
    and UploadPartCopy, GCS rewrite read it with the destination's credentials), whose
    objects the set may then also read; None on every other route."""

    uri: str
    write: bool
    copy_from: str | None = None

    @property
    def copy_source(self) -> tuple[str, str] | None:
        """The bucket and prefix of ``copy_from``, read by this end's copies."""
        if not self.write or not self.copy_from:
            return None
        src = parse_uri(self.copy_from)
        return src.bucket, src.prefix

    @property
    def bucket(self) -> str:
        return parse_uri(self.uri).bucket

    @property
    def prefix(self) -> str:
        return parse_uri(self.uri).prefix

    @property
    def account(self) -> str:
        return parse_uri(self.uri).account or ""


@dataclass(frozen=True, repr=False)
class Minted:
    """One minted credential set and when it stops working (as the control plane counts;
    the cloud's own expiry is never earlier)."""

    credentials: StoreCredentials
    issued_at: float
    expires_at: float
    # What was minted, without secrets (method, policy or boundary, permissions): for logs
    # and tests.
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def refresh_at(self) -> float:
        """When to mint the next set: half-way through this one's life."""
        return self.issued_at + (self.expires_at - self.issued_at) / 2

    def __repr__(self) -> str:
        return f"Minted({self.credentials.kind}, expires {self.expires_at:.0f}, <redacted>)"


Mint = Callable[[], Minted]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def mode_of(options: Mapping[str, Any]) -> str:
    mode = options.get("credentials", "minted")
    if mode not in MODES:
        raise TransferError(f"store option credentials must be one of {', '.join(MODES)}: {mode!r}")
    return str(mode)


# ---- AWS ----------------------------------------------------------------------------------------


def _iam_literal(text: str) -> str:
    """``text`` as literal characters in an IAM resource or ``StringLike`` value (``*``, ``?``
    and ``$`` are special there; ``${*}``, ``${?}``, ``${$}`` are their literal forms)."""
    return re.sub(r"[*?$]", lambda m: "${" + m.group(0) + "}", text)


def aws_partition(region: str | None) -> str:
    if region and region.startswith("cn-"):
        return "aws-cn"
    if region and region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def aws_session_policy(
    bucket: str,
    prefix: str,
    write: bool,
    region: str | None = None,
    copy_source: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The session policy of one end: its objects under ``prefix`` (read, or write and
    multipart) and a listing of the bucket limited to that prefix (``s3:prefix``); with
    ``copy_source`` (a destination that copies server-side) also the source's reads on its
    objects under its prefix, which CopyObject and UploadPartCopy need (no listing)."""
    partition = aws_partition(region)
    arn = f"arn:{partition}:s3:::{bucket}"
    literal = _iam_literal(prefix)
    copy: list[dict[str, Any]] = []
    if write and copy_source is not None:
        src_bucket, src_prefix = copy_source
        copy.append(
            {
                "Sid": "ReadCopySource",
                "Effect": "Allow",
                "Action": list(AWS_READ_ACTIONS),
                "Resource": [f"arn:{partition}:s3:::{src_bucket}/{_iam_literal(src_prefix)}*"],
            }
        )
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "WriteObjects" if write else "ReadObjects",
                "Effect": "Allow",
                "Action": list(AWS_WRITE_ACTIONS if write else AWS_READ_ACTIONS),
                "Resource": [f"{arn}/{literal}*"],
            },
            {
                "Sid": "ListPrefix",
                "Effect": "Allow",
                "Action": list(AWS_LIST_ACTIONS),
                "Resource": [arn],
                "Condition": {"StringLike": {"s3:prefix": [f"{literal}*"]}},
            },
            *copy,
        ],
    }


def _sts_endpoint(options: Mapping[str, Any]) -> str | None:
    """Where STS is: ``sts_endpoint_url``, else an S3-compatible ``endpoint_url`` that is not
    AWS's own (moto, MinIO serve STS there), else AWS's regional endpoint (None)."""
    if options.get("sts_endpoint_url"):
        return str(options["sts_endpoint_url"])
    endpoint = options.get("endpoint_url")
    host = urlparse(str(endpoint)).hostname or "" if endpoint else ""
    if endpoint and not host.endswith((".amazonaws.com", ".amazonaws.com.cn")):
        return str(endpoint)
    return None


def _aws_duration(lifetime_s: float, cap: int) -> int:
    return int(min(max(lifetime_s, AWS_MIN_DURATION_S), cap))


def aws_minter(
    scope: Scope, options: Mapping[str, Any], lifetime_s: float, name: str
) -> Mint | None:
    """A minter of STS session credentials for ``scope`` from this process's AWS identity;
    None when it has none (the gateways then use their own)."""
    from gateway_agent.stores.aws_session import new_session

    session = new_session()
    found = session.get_credentials()
    if found is None:
        return None
    caller = found.get_frozen_credentials()
    if not caller.access_key or not caller.secret_key:
        return None
    region = options.get("region") or session.region_name or "us-east-1"
    sts = session.client("sts", region_name=region, endpoint_url=_sts_endpoint(options))
    policy = aws_session_policy(scope.bucket, scope.prefix, scope.write, region, scope.copy_source)
    packed = json.dumps(policy, separators=(",", ":"))
    role = options.get("role_arn")
    session_name = re.sub(r"[^\w+=,.@-]", "-", name)[:32]

    def mint() -> Minted:
        now = time.time()
        try:
            if role:
                cap = AWS_CHAINED_MAX_S if caller.token else AWS_MAX_DURATION_S
                method = "AssumeRole"
                answer = sts.assume_role(
                    RoleArn=str(role),
                    RoleSessionName=session_name,
                    Policy=packed,
                    DurationSeconds=_aws_duration(lifetime_s, cap),
                )
            else:
                method = "GetFederationToken"
                answer = sts.get_federation_token(
                    Name=session_name,
                    Policy=packed,
                    DurationSeconds=_aws_duration(lifetime_s, AWS_MAX_DURATION_S),
                )
        except Exception as exc:
            raise TransferError(
                f"minting scoped credentials for {scope.uri} failed ({method}: "
                f"{_aws_error(exc)}); from session credentials give the store option "
                "role_arn, or set the store option credentials to 'instance' (the gateways' "
                "own identity) or 'forward' (send the control plane's own)"
            ) from None
        got = answer["Credentials"]
        expires = min(got["Expiration"].timestamp(), now + lifetime_s)
        values = {
            "access_key_id": str(got["AccessKeyId"]),
            "secret_access_key": str(got["SecretAccessKey"]),
            "session_token": str(got["SessionToken"]),
            "expires_at": _iso(expires),
        }
        detail = {"method": method, "policy": policy}
        return Minted(StoreCredentials("aws", values), now, expires, detail)

    return mint


def _aws_error(exc: Exception) -> str:
    """An STS error's code and message (they carry no secret), else the exception's type."""
    error = getattr(exc, "response", {}).get("Error", {}) if hasattr(exc, "response") else {}
    if error:
        return f"{error.get('Code')}: {error.get('Message')}"
    return type(exc).__name__


# ---- GCP ----------------------------------------------------------------------------------------


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def gcp_access_boundary(
    bucket: str, prefix: str, write: bool, copy_source: tuple[str, str] | None = None
) -> Any:
    """The Credential Access Boundary of one end (``google.auth.downscoped``); with
    ``copy_source`` (a destination that rewrites server-side) a further rule: the source's
    objects under its prefix viewed, which a rewrite reads with this token (no listing)."""
    from google.auth import downscoped

    from gateway_agent.stores.gcs.store import STAGING

    def starts(name: str, on: str = bucket) -> str:
        objects = f"projects/_/buckets/{on}/objects/"
        return f"resource.name.startsWith({_cel_string(objects + name)})"

    def rule(role: str, expression: str | None, title: str, on: str = bucket) -> Any:
        resource = f"//storage.googleapis.com/projects/_/buckets/{on}"
        condition = None
        if expression:
            condition = downscoped.AvailabilityCondition(expression, title=title)  # type: ignore[no-untyped-call]
        return downscoped.AccessBoundaryRule(resource, [role], condition)  # type: ignore[no-untyped-call]

    if not write:
        expression = None
        if prefix:
            listed = "api.getAttribute('storage.googleapis.com/objectListPrefix', '')"
            expression = f"{starts(prefix)} || {listed}.startsWith({_cel_string(prefix)})"
        rules = [rule(GCP_READ_ROLE, expression, "source prefix")]
    else:
        rules = [
            rule(GCP_WRITE_ROLE, starts(prefix) if prefix else None, "destination prefix"),
            rule(GCP_STAGING_ROLE, starts(STAGING), "staged parts"),
        ]
        if copy_source is not None:
            src_bucket, src_prefix = copy_source
            expression = starts(src_prefix, src_bucket) if src_prefix else None
            rules.append(rule(GCP_READ_ROLE, expression, "copy source prefix", src_bucket))
    return downscoped.CredentialAccessBoundary(rules)  # type: ignore[no-untyped-call]


def gcp_minter(scope: Scope, lifetime_s: float) -> tuple[Mint, str | None] | None:
    """A minter of downscoped tokens for ``scope`` from this process's Google default
    credentials, and their project; None when there are none."""
    import google.auth
    from google.auth import downscoped
    from google.auth.exceptions import DefaultCredentialsError
    from google.auth.transport.requests import Request

    try:
        source, project = google.auth.default(scopes=list(GCP_SCOPES))  # type: ignore[no-untyped-call]
    except DefaultCredentialsError:
        return None
    boundary = gcp_access_boundary(scope.bucket, scope.prefix, scope.write, scope.copy_source)
    down: Any = downscoped.Credentials(source, boundary)  # type: ignore[no-untyped-call]

    def mint() -> Minted:
        now = time.time()
        try:
            down.refresh(Request())
        except Exception as exc:
            raise TransferError(
                f"minting a downscoped token for {scope.uri} failed ({type(exc).__name__}); "
                "set the store option credentials to 'instance' or 'forward' to do without"
            ) from None
        expiry = down.expiry
        expires = now + lifetime_s
        if expiry is not None:
            expires = min(expires, expiry.replace(tzinfo=UTC).timestamp())
        values = {"token": str(down.token), "expires_at": _iso(expires)}
        detail = {"method": "downscoped", "boundary": boundary.to_json()}
        return Minted(StoreCredentials("gcp", values), now, expires, detail)

    return mint, project


# ---- Azure --------------------------------------------------------------------------------------


def connection_fields(conn: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in conn.split(";") if "=" in item)


def azure_account_url(account: str, options: Mapping[str, Any], fields: Mapping[str, str]) -> str:
    if options.get("endpoint_url"):
        return str(options["endpoint_url"])
    if fields.get("BlobEndpoint"):
        return fields["BlobEndpoint"]
    protocol = fields.get("DefaultEndpointsProtocol", "https")
    return f"{protocol}://{account}.blob.{fields.get('EndpointSuffix', 'core.windows.net')}"


def azure_container_sas(
    scope: Scope,
    expiry: datetime,
    *,
    https_only: bool,
    account_key: str | None = None,
    user_delegation_key: Any = None,
) -> str:
    """A container SAS for ``scope`` (service SAS with ``account_key``, user delegation SAS
    with ``user_delegation_key``): ``rlt`` on a source, ``cwt`` on a destination."""
    from azure.storage.blob import generate_container_sas

    start = datetime.now(UTC) - timedelta(seconds=SAS_START_SKEW_S)
    extra: dict[str, Any] = {"protocol": "https"} if https_only else {}
    return str(
        generate_container_sas(
            scope.account,
            scope.bucket,
            account_key=account_key,
            user_delegation_key=user_delegation_key,
            permission=SAS_WRITE if scope.write else SAS_READ,
            expiry=expiry,
            start=start,
            **extra,
        )
    )


def azure_minter(scope: Scope, options: Mapping[str, Any], lifetime_s: float) -> Mint | None:
    """A minter of container SAS tokens for ``scope``: a service SAS when this process has
    the account key (a connection string naming the account), else a user delegation SAS
    from its Entra ID identity; None when it has neither."""
    conn = os.environ.get(AZURE_CONNECTION_ENV)
    fields = connection_fields(conn) if conn else {}
    mine = bool(conn) and fields.get("AccountName") in (None, scope.account)
    url = azure_account_url(scope.account, options, fields if mine else {})
    https_only = urlparse(url).scheme == "https"
    if mine and conn and not fields.get("AccountKey"):
        if fields.get("SharedAccessSignature"):
            log.warning("%s: the connection string carries a SAS; it is sent as it is", scope.uri)
            forwarded = StoreCredentials("azure", {"connection_string": conn})
            return lambda: Minted(forwarded, time.time(), float("inf"), {"method": "forward"})
        return None
    key = fields.get("AccountKey") if mine else None

    def mint() -> Minted:
        now = time.time()
        expiry = datetime.fromtimestamp(now + lifetime_s, UTC)
        if key:
            method = "service SAS"
            sas = azure_container_sas(scope, expiry, https_only=https_only, account_key=key)
        else:
            method = "user delegation SAS"
            delegation = _user_delegation_key(url, now, lifetime_s)
            sas = azure_container_sas(
                scope, expiry, https_only=https_only, user_delegation_key=delegation
            )
        values = {"sas": sas, "account_url": url, "expires_at": _iso(expiry.timestamp())}
        detail = {"method": method, "permission": SAS_WRITE if scope.write else SAS_READ}
        return Minted(StoreCredentials("azure", values), now, expiry.timestamp(), detail)

    if key:
        return mint
    try:  # a user delegation key needs an Entra ID identity: is there one?
        first = mint()
    except _NoIdentity:
        return None
    pending = [first]

    def mint_next() -> Minted:
        return pending.pop() if pending else mint()

    return mint_next


class _NoIdentity(Exception):
    """This process has no Entra ID identity to ask for a user delegation key with."""


def _user_delegation_key(url: str, now: float, lifetime_s: float) -> Any:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError, DefaultAzureCredential
    from azure.storage.blob import BlobServiceClient

    start = datetime.fromtimestamp(now - SAS_START_SKEW_S, UTC)
    end = datetime.fromtimestamp(now + min(lifetime_s, AZURE_DELEGATION_MAX_S - 600), UTC)
    service = BlobServiceClient(url, credential=DefaultAzureCredential())
    try:
        return service.get_user_delegation_key(start, end)
    except (CredentialUnavailableError, ClientAuthenticationError):
        raise _NoIdentity() from None
    except Exception as exc:
        raise TransferError(
            f"asking {url} for a user delegation key failed ({type(exc).__name__}); the "
            "identity needs Microsoft.Storage/storageAccounts/blobServices/"
            "generateUserDelegationKey/action, or set the store option credentials"
        ) from None
