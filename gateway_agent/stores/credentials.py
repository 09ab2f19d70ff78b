"""Explicit store credentials: the secret values a store is opened with when they are given.

A gateway starts with a clean environment (no ``AWS_*``, ``AZURE_*``, ``GOOGLE_*``): the
credentials of its stores come from its control plane, sealed in the job spec, and reach the
store constructors only as a :class:`StoreCredentials` passed to ``open_store(...,
credentials=...)``. They are never store *options*: options are JSON that travels through
requests, XCom, logs and the state store; credentials stay in memory and are never printed
(``repr`` shows the kind only).

Kinds and their fields:

* ``aws``: ``access_key_id``, ``secret_access_key`` and optional ``session_token`` (a frozen
  ``botocore`` credential set);
* ``azure``: ``connection_string`` (used when it names the store's account, as the
  ``AZURE_STORAGE_CONNECTION_STRING`` environment variable is);
* ``gcp``: ``token``, an OAuth2 access token (refreshed by the control plane before it was
  sent; it is not refreshed here).

Without explicit credentials a store uses its SDK's own default chain: on a cloud VM, its
instance role or managed identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # kind: (required fields, optional fields)
    "aws": (frozenset({"access_key_id", "secret_access_key"}), frozenset({"session_token"})),
    "azure": (frozenset({"connection_string"}), frozenset()),
    "gcp": (frozenset({"token"}), frozenset()),
}
# The credential kind each store scheme takes.
SCHEME_KIND = {"s3": "aws", "az": "azure", "gs": "gcp"}


@dataclass(frozen=True, repr=False, eq=False)
class StoreCredentials:
    """Credentials for one store, held in memory only."""

    kind: str
    values: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown credential kind {self.kind!r}")
        required, optional = KINDS[self.kind]
        names = set(self.values)
        if not required <= names or names - required - optional:
            raise ValueError(f"{self.kind} credentials need {sorted(required)}")
        if not all(isinstance(v, str) and v for v in self.values.values()):
            raise ValueError(f"{self.kind} credentials must be non-empty strings")

    def get(self, name: str) -> str | None:
        return self.values.get(name)

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


def for_store(scheme: str, credentials: StoreCredentials | None) -> StoreCredentials | None:
    """``credentials`` when they are of the kind a ``scheme`` store takes; a mismatch is an
    error (a store must never be opened with another cloud's credentials by mistake)."""
    if credentials is None:
        return None
    want = SCHEME_KIND.get(scheme)
    if want != credentials.kind:
        raise ValueError(f"{scheme}:// stores take no {credentials.kind} credentials")
    return credentials
