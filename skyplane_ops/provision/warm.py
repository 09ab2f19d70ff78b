"""Warm fleets: parked fleets recorded in the state store, claimed by one run at a time.

A run with ``keep_warm`` parks its fleet instead of deleting it (``sequence.warm``); the next
run that fits claims it. The pool lives under ``<state_uri>/.warm/<fleet_id>/`` in the store
every host of a pipeline shares (``file://`` on one host or a shared volume, ``s3://``,
``gs://``, ``az://``):

- ``parked-<n>.json``: the n-th parking (``WarmRecord``: backend, gateways per region, the
  fleet record, expiry, $/h); a fleet's newest parking is the one that counts;
- ``claim-<n>``: written *create-only* by the run that takes parking n, so exactly one wins
  (``O_EXCL``-style ``link`` on a file system, ``If-None-Match: *`` on S3 and Azure,
  ``ifGenerationMatch=0`` on GCS: the store's ``write_if_absent``);
- ``secret``: the secret the parked gateways answer to (a fresh one, not a transfer's), for a
  claimant on another host; give the state store the access control of credentials.

Nothing here starts or stops a gateway: this is the record, ``sequence.warm`` the acts.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.fleet import GatewayFleet

WARM = ".warm"  # a transfer id (letters, digits, - and _) can never be this name
MAX_KEEP_WARM_S = 86400.0  # a gateway's lease is at most a day
# In a parked fleet's record on the parking host (``sequence.warm.park``): its state, the
# pool it was parked in and the parking's generation (``claimed_elsewhere`` reads them).
TAG_WARM = "skyplane-ops:warm"
TAG_WARM_POOL = "skyplane-ops:warm-pool"
TAG_WARM_GENERATION = "skyplane-ops:warm-generation"
POOL_SCHEMES = ("file", "s3", "gs", "az")  # the stores with an atomic create-only write


@dataclass(frozen=True)
class WarmRecord:
    """One parking of a fleet: what a claimant needs to judge and take it (no secret)."""

    fleet_id: str
    generation: int
    backend: str
    gateways: dict[str, int]  # region -> gateways
    options_key: str  # digest of the backend options: a claim needs the same
    parked_at: float
    expires_at: float
    vm_usd_per_hour: float  # the whole fleet's
    host: str  # the parking host: loopback gateways serve no other
    fleet: dict[str, Any] = field(default_factory=dict)
    buffer_mib: int | None = None  # the smallest gateway byte budget (the fleet's capacity)

    def fits(self, needed: Mapping[str, int]) -> bool:
        """Every region the run needs, with at least its gateways."""
        return all(self.gateways.get(r, 0) >= n for r, n in needed.items())

    def gateway_fleet(self) -> GatewayFleet:
        return GatewayFleet.from_dict(self.fleet)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> WarmRecord:
        return cls(**json.loads(raw))


def default_state_uri() -> str:
    """``file://$SKYPLANE_OPS_HOME/state`` (as ``transfer.state.default_state_uri``)."""
    from skyplane_ops.provision.secrets import ops_home

    return (ops_home() / "state").resolve().as_uri()


class WarmPool:
    """The parked fleets under ``<state_uri>/.warm/``."""

    def __init__(self, state_uri: str, options: Mapping[str, Any] | None = None) -> None:
        from gateway_agent.stores import open_store
        from gateway_agent.stores.uri import parse_uri

        self.state_uri = state_uri.rstrip("/")
        self.uri = f"{self.state_uri}/{WARM}"
        self.options = dict(options or {})
        self._parsed = parse_uri(self.uri)
        if self._parsed.scheme not in POOL_SCHEMES:
            raise ProvisionError(
                "warm fleets need a file://, s3://, gs:// or az:// state store (atomic claims),"
                f" not {self.uri}"
            )
        self._store = open_store(self.uri, self.options)

    # -- reading -----------------------------------------------------------------------------

    def _keys(self) -> list[str]:
        try:
            return [info.key for info in self._store.list("")]
        except Exception as exc:
            if _not_found(exc):
                return []
            raise ProvisionError(f"cannot list the warm fleets in {self.uri}: {exc}") from exc

    def records(self) -> list[WarmRecord]:
        """Every fleet's newest parking, claimed or not."""
        newest: dict[str, int] = {}
        for key in self._keys():
            fleet_id, _, name = key.partition("/")
            if name.startswith("parked-") and name.endswith(".json"):
                gen = int(name[len("parked-") : -len(".json")])
                newest[fleet_id] = max(gen, newest.get(fleet_id, 0))
        found = []
        for fleet_id, gen in sorted(newest.items()):
            try:
                found.append(WarmRecord.from_json(self._store.read(_parked(fleet_id, gen))))
            except Exception as exc:
                if not _not_found(exc):
                    raise ProvisionError(f"cannot read a warm fleet in {self.uri}: {exc}") from exc
        return found

    def claimed(self, record: WarmRecord) -> bool:
        return _claim(record.fleet_id, record.generation) in set(self._keys())

    def claimed_since(self, fleet_id: str, generation: int) -> bool:
        """Whether a run claimed the fleet's parking ``generation`` or a later one."""
        prefix = f"{fleet_id}/claim-"
        gens = [k[len(prefix) :] for k in self._keys() if k.startswith(prefix)]
        return any(g.isdigit() and int(g) >= generation for g in gens)

    def available(self, now: float | None = None) -> list[WarmRecord]:
        """Parkings nobody claimed that have not expired, the longest-lived first."""
        now = time.time() if now is None else now
        keys = set(self._keys())
        free = [
            r
            for r in self.records()
            if r.expires_at > now and _claim(r.fleet_id, r.generation) not in keys
        ]
        return sorted(free, key=lambda r: -r.expires_at)

    def secret(self, record: WarmRecord) -> bytes:
        try:
            return bytes.fromhex(self._store.read(f"{record.fleet_id}/secret").decode("ascii"))
        except Exception as exc:
            raise ProvisionError(f"no secret for warm fleet {record.fleet_id}: {exc}") from exc

    # -- writing -----------------------------------------------------------------------------

    def park(self, record: WarmRecord, secret: bytes) -> None:
        """Record a parking (its secret first: a record is claimable once it is written)."""
        key, text = f"{record.fleet_id}/secret", secret.hex().encode("ascii")
        if self._parsed.scheme == "file":  # 0600, as this host's own secret files
            from skyplane_ops.provision.secrets import write_private

            path = Path(self._parsed.bucket, key)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".secret.{uuid.uuid4().hex}")
            write_private(tmp, text)
            os.replace(tmp, path)
        else:
            self._store.write(key, text)
        self._store.write(_parked(record.fleet_id, record.generation), record.to_json())

    def claim(self, record: WarmRecord, claimant: str) -> bool:
        """Take ``record`` for ``claimant``: True for exactly one caller."""
        body = json.dumps({"claimant": claimant, "at": time.time()}).encode()
        return self._create_only(_claim(record.fleet_id, record.generation), body)

    def taken(self, record: WarmRecord) -> None:
        """A claimed and re-keyed fleet: its parking and secret go; the claim stays (a late
        claimant that read the parking finds the claim and leaves the fleet alone)."""
        for key in (f"{record.fleet_id}/secret", _parked(record.fleet_id, record.generation)):
            self._delete(key)

    def _delete(self, key: str) -> None:
        try:
            self._store.delete(key)
        except Exception as exc:
            if not _not_found(exc):
                raise ProvisionError(f"cannot delete {self.uri}/{key}: {exc}") from exc

    def forget(self, fleet_id: str) -> None:
        """Remove every object of a fleet (it was deleted, or claimed and rekeyed)."""
        for key in self._keys():
            if key.startswith(f"{fleet_id}/"):
                self._delete(key)

    def next_generation(self, fleet_id: str) -> int:
        gens = [
            int(k.rpartition("-")[2].removesuffix(".json"))
            for k in self._keys()
            if k.startswith(f"{fleet_id}/parked-") or k.startswith(f"{fleet_id}/claim-")
        ]
        return max(gens, default=0) + 1

    def _create_only(self, key: str, body: bytes) -> bool:
        """Write ``key`` only if it does not exist; False if it did (another claimant won)."""
        from gateway_agent.stores.base import WritesIfAbsent

        assert isinstance(self._store, WritesIfAbsent)  # every store of POOL_SCHEMES
        try:
            return self._store.write_if_absent(key, body)
        except Exception as exc:
            raise ProvisionError(f"cannot claim {self.uri}/{key}: {exc}") from exc


def _parked(fleet_id: str, generation: int) -> str:
    return f"{fleet_id}/parked-{generation}.json"


def _claim(fleet_id: str, generation: int) -> str:
    return f"{fleet_id}/claim-{generation}"


def _not_found(exc: Exception) -> bool:
    from gateway_agent.stores.errors import ObjectNotFoundError

    return isinstance(exc, ObjectNotFoundError | FileNotFoundError)


def claimed_elsewhere(fleet: GatewayFleet) -> bool:
    """Whether a fleet this host's record says it parked was claimed from its pool since (by
    a run of another host or ``SKYPLANE_OPS_HOME``): the pool is the shared truth, and a
    claimed fleet is not this host's to delete. An unreadable pool says no (as before)."""
    if fleet.tags.get(TAG_WARM) != "parked":
        return False
    try:
        pool = WarmPool(fleet.tags.get(TAG_WARM_POOL) or default_state_uri())
        return pool.claimed_since(fleet.transfer_id, int(fleet.tags.get(TAG_WARM_GENERATION, 0)))
    except Exception:
        return False
