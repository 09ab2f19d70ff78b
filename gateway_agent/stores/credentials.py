"""Explicit store credentials: the secret values a store is opened with when they are given.

A gateway starts with a clean environment (no ``AWS_*``, ``AZURE_*``, ``GOOGLE_*``): the
credentials of its stores come from its control plane, sealed in the job spec, and reach the
store constructors only as a :class:`StoreCredentials` (or a :class:`CredentialCell` holding
the current one) passed to ``open_store(..., credentials=...)``. They are never store
*options*: options are JSON that travels through requests, XCom, logs and the state store;
credentials stay in memory and are never printed (``repr`` shows the kind only).

The control plane mints them per transfer, scoped to the transfer's buckets and prefixes and
short-lived (``skyplane_ops.transfer.dispatch.minting``), and sends fresh ones to running jobs
before they expire (``POST /v1/jobs/ID/credentials``): a job keeps each store's credentials in
a :class:`CredentialCell` and the store's SDK object reads the cell, so a swap needs no new
store and interrupts no request.

Kinds and their fields (``expires_at``, optional everywhere, is ISO 8601 UTC):

* ``aws``: ``access_key_id``, ``secret_access_key`` and optional ``session_token`` (STS
  session credentials, or a frozen ``botocore`` credential set);
* ``azure``: either ``sas`` (a SAS token, without the leading ``?``) with ``account_url``
  (the blob endpoint it is valid for), or ``connection_string`` (used when it names the store's
  account, as the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable is);
* ``gcp``: ``token``, an OAuth2 access token (a downscoped one from the control plane; it is
  not refreshed here: the control plane sends the next one).

Without explicit credentials a store uses its SDK's own default chain: on a cloud VM, its
instance role or managed identity.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

KINDS: dict[str, tuple[tuple[frozenset[str], ...], frozenset[str]]] = {
    # kind: (the field sets one of which is required, optional fields)
    "aws": (
        (frozenset({"access_key_id", "secret_access_key"}),),
        frozenset({"session_token", "expires_at"}),
    ),
    "azure": (
        (frozenset({"connection_string"}), frozenset({"sas", "account_url"})),
        frozenset({"expires_at"}),
    ),
    "gcp": ((frozenset({"token"}),), frozenset({"expires_at"})),
}
# The credential kind each store scheme takes.
SCHEME_KIND = {"s3": "aws", "az": "azure", "gs": "gcp"}
# Store options about credentials: read by the control plane (how it mints a transfer's
# credentials), accepted and ignored by the stores, never sent to a gateway.
CREDENTIAL_OPTIONS: dict[str, frozenset[str]] = {
    "s3": frozenset({"credentials", "role_arn", "sts_endpoint_url"}),
    "az": frozenset({"credentials"}),
    "gs": frozenset({"credentials"}),
}


@dataclass(frozen=True, repr=False, eq=False)
class StoreCredentials:
    """Credentials for one store, held in memory only."""

    kind: str
    values: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown credential kind {self.kind!r}")
        alternatives, optional = KINDS[self.kind]
        names = set(self.values)
        if not any(need <= names and not names - need - optional for need in alternatives):
            wanted = " or ".join(str(sorted(need)) for need in alternatives)
            raise ValueError(f"{self.kind} credentials need {wanted}")
        if not all(isinstance(v, str) and v for v in self.values.values()):
            raise ValueError(f"{self.kind} credentials must be non-empty strings")
        if "expires_at" in names:
            parse_time(self.values["expires_at"])

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    @property
    def expires_at(self) -> datetime | None:
        """When these credentials stop working (None: not known to expire)."""
        raw = self.values.get("expires_at")
        return parse_time(raw) if raw else None

    def to_dict(self) -> dict[str, Any]:
        """The plaintext form, to be sealed at once (never logged, never stored)."""
        return {"kind": self.kind, **self.values}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreCredentials:
        values = {str(k): str(v) for k, v in data.items() if k != "kind" and v is not None}
        return cls(str(data.get("kind", "")), values)

    def __repr__(self) -> str:
        return f"StoreCredentials({self.kind}, <redacted>)"

    __str__ = __repr__


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime (a naive one is taken as UTC)."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


class CredentialCell:
    """The current credentials of one store, swapped in place when fresh ones arrive.

    ``update`` replaces them (same kind only) and tells the store's SDK objects that follow
    the cell (``follow``); ``updates`` counts the swaps, ``taken`` the times a store's SDK took
    a newer generation than it had (both reported in the job's counters)."""

    def __init__(self, credentials: StoreCredentials) -> None:
        self._lock = threading.Lock()
        self._current = credentials
        self.generation = 0
        self.updates = 0
        self.taken = 0
        self._followers: list[Callable[[StoreCredentials], None]] = []

    @property
    def kind(self) -> str:
        return self._current.kind

    def current(self) -> StoreCredentials:
        with self._lock:
            return self._current

    def current_with_generation(self) -> tuple[StoreCredentials, int]:
        with self._lock:
            return self._current, self.generation

    def update(self, credentials: StoreCredentials) -> None:
        if credentials.kind != self.kind:
            raise ValueError(f"{self.kind} credentials cannot be replaced by {credentials.kind}")
        with self._lock:
            self._current = credentials
            self.generation += 1
            self.updates += 1
            followers = list(self._followers)
        for follow in followers:
            follow(credentials)
            self.took()

    def follow(self, callback: Callable[[StoreCredentials], None]) -> None:
        """Call ``callback`` with every new credential set (a store's SDK object swaps it)."""
        with self._lock:
            self._followers.append(callback)

    def took(self) -> None:
        with self._lock:
            self.taken += 1

    def __repr__(self) -> str:
        return f"CredentialCell({self.kind}, generation {self.generation}, <redacted>)"


Credentials = StoreCredentials | CredentialCell


def as_cell(credentials: Credentials | None) -> CredentialCell | None:
    if credentials is None or isinstance(credentials, CredentialCell):
        return credentials
    return CredentialCell(credentials)


def current(credentials: Credentials) -> StoreCredentials:
    """The credential set in use now."""
    return credentials.current() if isinstance(credentials, CredentialCell) else credentials


def for_store(scheme: str, credentials: Credentials | None) -> Credentials | None:
    """``credentials`` when they are of the kind a ``scheme`` store takes; a mismatch is an
    error (a store must never be opened with another cloud's credentials by mistake)."""
    if credentials is None:
        return None
    want = SCHEME_KIND.get(scheme)
    if want != credentials.kind:
        raise ValueError(f"{scheme}:// stores take no {credentials.kind} credentials")
    return credentials


# ---- what each SDK is given ---------------------------------------------------------------------


def boto3_session(credentials: Credentials) -> Any:
    """A boto3 session signing with ``credentials``. Credentials that expire are botocore
    ``RefreshableCredentials`` reading the cell: near their expiry (botocore's own windows)
    each request takes the cell's newest set, and one already expired is refused here as the
    service would refuse it (so a control plane that stopped refreshing stops its gateways)."""
    import boto3
    from botocore.credentials import RefreshableCredentials

    from gateway_agent.stores.aws_session import core_session, new_session

    cell = as_cell(credentials)
    assert cell is not None
    first = cell.current()
    if first.expires_at is None:
        return new_session(
            aws_access_key_id=first.get("access_key_id"),
            aws_secret_access_key=first.get("secret_access_key"),
            aws_session_token=first.get("session_token"),
        )
    seen = [cell.generation]

    def metadata(creds: StoreCredentials) -> dict[str, Any]:
        expires = creds.expires_at
        assert expires is not None
        return {
            "access_key": creds.get("access_key_id"),
            "secret_key": creds.get("secret_access_key"),
            "token": creds.get("session_token"),
            "expiry_time": expires.isoformat(),
        }

    def refresh() -> dict[str, Any]:
        creds, generation = cell.current_with_generation()
        if generation != seen[0]:
            seen[0] = generation
            cell.took()
        return metadata(creds)

    refreshable = RefreshableCredentials.create_from_metadata(
        metadata(first), refresh_using=refresh, method="skyplane-ops-control-plane"
    )
    core = core_session()
    core._credentials = refreshable  # type: ignore[attr-defined]  # botocore has no setter
    return boto3.session.Session(botocore_session=core)


def azure_sas_credential(credentials: Credentials) -> tuple[str, Any] | None:
    """(account URL, ``AzureSasCredential``) for SAS credentials, swapped in place when the
    cell gets a new SAS; None for a connection string."""
    from azure.core.credentials import AzureSasCredential

    cell = as_cell(credentials)
    assert cell is not None
    first = cell.current()
    sas, url = first.get("sas"), first.get("account_url")
    if not sas or not url:
        return None
    credential = AzureSasCredential(sas)

    def swap(creds: StoreCredentials) -> None:
        new = creds.get("sas")
        if new:
            credential.update(new)

    cell.follow(swap)
    return url, credential


def google_credentials(credentials: Credentials) -> Any:
    """OAuth2 credentials carrying the cell's access token, replaced in place (one reference
    assignment) when the control plane sends the next token."""
    from google.oauth2.credentials import Credentials as OAuth2Credentials

    cell = as_cell(credentials)
    assert cell is not None
    oauth: Any = OAuth2Credentials(token=cell.current().get("token"))  # type: ignore[no-untyped-call]

    def swap(creds: StoreCredentials) -> None:
        oauth.token = creds.get("token")

    cell.follow(swap)
    return oauth
