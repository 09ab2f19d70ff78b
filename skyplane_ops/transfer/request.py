"""``TransferRequest``: what a user asked to move, as one frozen, validated, JSON-able value.

Every face builds one (the CLI from its options, ``api.copy`` from keyword arguments, the
Airflow operators from their templated fields, Dagster from its resource and partition) and
hands it to the one run sequence (``skyplane_ops.sequence``). So a new control is one field
here: parsed and checked once, on construction, with the one-line errors the faces show, and
carried as it is through XCom, the state store, the Airflow driver's pipe and ``--dry-run``.

A request never holds a secret: store options are plain settings (endpoint, region, project,
retry budget: the stores refuse any other key), and credentials stay where they are
referenced (the SDK chain, ``AWS_PROFILE``, an Airflow connection id), resolved by the face
that runs it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway_agent.stores._common import check_common_options
from gateway_agent.stores.errors import StoreError
from gateway_agent.stores.objmeta import set_pairs
from gateway_agent.stores.uri import parse_uri
from gateway_agent.stores.writeopts import WRITE_OPTIONS, check_write_options, portable
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.checks import check_int, check_transfer_options
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.journal import default_journal_dir, transfer_key
from skyplane_ops.transfer.manifest import DEFAULT_PART_SIZE
from skyplane_ops.transfer.overlap import check_disjoint

# ``encrypt``: "auto" (AES-GCM on every hop that leaves a network the user owns, see
# ``dispatch.spec.encrypt_hop``), "all" or "none" (clear frames, each chunk still tagged end to
# end: no hop is ever unauthenticated). Older spellings are read as: True -> "all",
# False -> "none", "cross-cloud" -> "auto" (which encrypts every hop "cross-cloud" did).
ENCRYPT_MODES = ("all", "auto", "none")
_ENCRYPT_ALIASES: dict[object, str] = {True: "all", False: "none", "cross-cloud": "auto"}


def to_uri(path_or_uri: str) -> str:
    """A path without a scheme is a local path (``./data`` -> ``file:///abs/data``)."""
    if "://" in path_or_uri:
        return path_or_uri
    return Path(path_or_uri).expanduser().absolute().as_uri()


@dataclass(frozen=True)
class StoreLocation:
    """One end of a transfer: its URI (a plain path becomes ``file://``) and store options."""

    uri: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri:
            raise TransferError(f"a store URI must be a non-empty string, not {self.uri!r}")
        if not isinstance(self.options, Mapping):
            raise TransferError(
                f"store options of {self.uri} must be a mapping, not {type(self.options).__name__}"
            )
        object.__setattr__(self, "uri", to_uri(self.uri))
        object.__setattr__(self, "options", dict(self.options))

    @classmethod
    def of(cls, value: StoreLocation | str | Mapping[str, Any], options: Any = None) -> Any:
        """A location from a URI (with ``options``), a ``{"uri", "options"}`` dict or itself."""
        if isinstance(value, StoreLocation):
            return value if options is None else cls(value.uri, options)
        if isinstance(value, Mapping):
            return cls(str(value.get("uri", "")), value.get("options") or {})
        return cls(value, options or {})

    def check(self, side: str) -> None:
        """The URI parses and the options are plain JSON (the stores check their names when
        opened, before anything is listed); cheap: no SDK is loaded."""
        if self.uri.split("://", 1)[0] not in ("synthetic", "null"):
            try:
                parse_uri(self.uri)
            except StoreError as exc:
                raise TransferError(f"bad {side} {self.uri}: {exc}") from exc
        try:
            json.dumps(self.options, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TransferError(f"{side} options must be plain JSON values: {exc}") from exc
        try:
            check_common_options(self.options, self.uri)
            scheme = self.uri.split("://", 1)[0]
            if scheme in WRITE_OPTIONS:  # a value the provider lacks: refused before any work
                check_write_options(scheme, self.options, self.uri)
        except StoreError as exc:
            raise TransferError(f"bad {side} option: {exc}") from exc

    def open(self, side: str) -> Any:
        """The store (cheap: no network call); a bad URI or option is a ``TransferError``."""
        from gateway_agent.stores import open_store

        try:
            return open_store(self.uri, dict(self.options))
        except (StoreError, ValueError) as exc:
            raise TransferError(f"cannot open {side} {self.uri}: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "options": dict(self.options)}


def _number(name: str, value: Any, *, positive: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TransferError(f"{name} must be a number, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise TransferError(f"{name} must be {'above' if positive else 'at least'} 0, got {value}")
    return float(value)


@dataclass(frozen=True)
class PlanOptions:
    """How the route is chosen: at most one bound, the planner's limits and its grid.

    The keyword arguments of ``api.plan`` (``kwargs()``), minus the regions, the volume and
    the fleet, which the run supplies."""

    min_throughput_gbps: float | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None
    max_vms_per_region: int | None = None
    max_connections_per_vm: int | None = None
    max_relays: int = 1
    profile_overrides: str | None = None
    measured_grid: str | None = None
    grid_store: str | None = None
    grid_store_options: Mapping[str, Any] | None = None
    gcp_tier: str = "premium"
    provisioning_seconds: float | None = None
    lp: bool = False
    exact_floor: bool = False
    frontier_points: int = 0
    relays_allow: tuple[str, ...] | None = None
    relays_deny: tuple[str, ...] | None = None
    measured_only: bool = False
    mip_gap: float | None = None
    completion_tolerance: float | None = None

    def __post_init__(self) -> None:
        given = [
            name
            for name in ("min_throughput_gbps", "max_cost_usd", "deadline_seconds")
            if getattr(self, name) is not None
        ]
        if len(given) > 1:
            raise TransferError(f"give at most one bound, not {' and '.join(given)}")
        _number("min_throughput_gbps", self.min_throughput_gbps, positive=True)
        _number("max_cost_usd", self.max_cost_usd)
        _number("deadline_seconds", self.deadline_seconds, positive=True)
        _number("provisioning_seconds", self.provisioning_seconds)
        _number("mip_gap", self.mip_gap)
        _number("completion_tolerance", self.completion_tolerance)
        for name in ("max_vms_per_region", "max_connections_per_vm"):
            if getattr(self, name) is not None:  # named as the API and the CLI spell it
                check_int(f"{name} (--{name.replace('_', '-')})", getattr(self, name), 1)
        check_int("max_relays", self.max_relays, 0)
        for name in ("relays_allow", "relays_deny"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(str(v) for v in value))
        if self.grid_store_options is not None:
            object.__setattr__(self, "grid_store_options", dict(self.grid_store_options))

    def kwargs(self) -> dict[str, Any]:
        """``api.plan`` keyword arguments."""
        out = dataclasses.asdict(self)
        for name in ("relays_allow", "relays_deny"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PlanOptions:
        return _from_dict(cls, data or {}, "plan option")


def _from_dict(cls: Any, data: Mapping[str, Any], what: str) -> Any:
    """``cls(**data)``, with unknown keys refused by name (a typo must not be ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise TransferError(f"unknown {what}(s) {unknown}; known: {sorted(names)}")
    return cls(**dict(data))


@dataclass(frozen=True)
class TransferRequest:
    """What to move and how the copy must end up; validated on construction.

    ``src``/``dst`` are store locations (URIs parsed once, with their options); ``include`` /
    ``exclude`` select keys by glob; ``sync`` copies only what is missing or different,
    ``delete`` (implies ``sync``) mirrors, refusing every delete when more than ``max_delete``
    would go; ``verify`` is the end check (``full``, ``read-back`` or ``size``); ``part_size``
    the chunk and multipart part size in bytes; ``connections_per_hop``, ``encrypt``
    (``"auto"``, the default, ``"all"`` or ``"none"``) and ``compress_level`` (zstd) shape the data
    path; ``journal_dir`` is where resume journals live (default ``$SKYPLANE_OPS_HOME``);
    ``transfer_id`` tags every resource; ``wait_lock`` waits for another run of the same
    transfer instead of failing; ``src_region``/``dst_region`` and ``planning`` choose the
    route.
    """

    src: StoreLocation
    dst: StoreLocation
    src_region: str | None = None
    dst_region: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sync: bool = False
    delete: bool = False
    max_delete: int | None = None
    verify: str = "full"
    part_size: int = DEFAULT_PART_SIZE
    connections_per_hop: int | None = None
    encrypt: str = "auto"
    compress_level: int = 0
    journal_dir: str | None = None
    transfer_id: str | None = None
    wait_lock: bool = False
    planning: PlanOptions = field(default_factory=PlanOptions)
    # Objects keep their metadata (``docs/metadata.md``): False copies bytes only
    # (``--no-metadata``); ``metadata_set`` adds or overrides keys (``--metadata-set k=v``:
    # ``key=value`` strings or a mapping).
    metadata: bool = True
    metadata_set: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "src", StoreLocation.of(self.src))
        put(self, "dst", StoreLocation.of(self.dst))
        for name in ("include", "exclude"):
            value = getattr(self, name)
            put(self, name, (value,) if isinstance(value, str) else tuple(map(str, value or ())))
        if isinstance(self.planning, Mapping):
            put(self, "planning", PlanOptions.from_dict(self.planning))
        if self.journal_dir is not None:
            put(self, "journal_dir", str(self.journal_dir))
        if isinstance(self.encrypt, bool | str):
            put(self, "encrypt", _ENCRYPT_ALIASES.get(self.encrypt, self.encrypt))
        if self.encrypt not in ENCRYPT_MODES:
            raise TransferError(f"encrypt must be 'auto', 'all' or 'none', not {self.encrypt!r}")
        if self.max_delete is not None and not self.delete:
            raise TransferError("max_delete (--max-delete) only applies with delete (--delete)")
        if self.delete:
            put(self, "sync", True)
        if not isinstance(self.metadata, bool):
            raise TransferError(f"metadata must be true or false, not {self.metadata!r}")
        try:
            put(self, "metadata_set", set_pairs(self.metadata_set))
        except ValueError as exc:
            raise TransferError(f"bad metadata_set (--metadata-set): {exc}") from None
        self.check()

    def check(self) -> None:
        """Every check that needs no listing: option ranges, store options, and that source
        and destination do not overlap (one line each, before anything is listed or started)."""
        if self.max_delete is not None:
            check_int("max_delete (--max-delete)", self.max_delete, 0)
        check_transfer_options(
            part_size=self.part_size,
            verify=self.verify,
            dispatch=DispatchOptions(
                connections=self.connections_per_hop, compress_level=self.compress_level
            ),
        )
        for side, where in (("source", self.src), ("destination", self.dst)):
            where.check(side)
        check_disjoint(self.src.uri, self.dst.uri, self.src.options, self.dst.options)

    # -- derived ---------------------------------------------------------------------------

    @property
    def src_uri(self) -> str:
        return self.src.uri

    @property
    def dst_uri(self) -> str:
        return self.dst.uri

    @property
    def journal_path(self) -> Path:
        """The folder of this transfer's journal, lock and listing catalog."""
        return Path(self.journal_dir) if self.journal_dir else default_journal_dir()

    @functools.cached_property
    def key(self) -> str:
        """The journal key: what makes two runs the same transfer (resume, lock); computed
        once per request."""
        return transfer_key(self.src.uri, self.dst.uri, self.part_size, self.include, self.exclude)

    def dispatch_options(self, tuning: DispatchOptions | None = None) -> DispatchOptions:
        """The data path's knobs: this request's connections, encryption and compression over
        the engine ``tuning`` (attempts, timeouts, threads, test hooks) a caller passes."""
        return dataclasses.replace(
            tuning or DispatchOptions(),
            connections=self.connections_per_hop,
            encrypt=self.encrypt,
            compress_level=self.compress_level,
            metadata=self.metadata,
            metadata_set=dict(self.metadata_set),
        )

    def replace(self, **changes: Any) -> TransferRequest:
        """A copy with ``changes``, validated again."""
        return dataclasses.replace(self, **changes)

    # -- construction and JSON -------------------------------------------------------------

    @classmethod
    def build(
        cls,
        src: StoreLocation | str,
        dst: StoreLocation | str,
        *,
        src_options: Mapping[str, Any] | None = None,
        dst_options: Mapping[str, Any] | None = None,
        dispatch: DispatchOptions | None = None,
        plan_options: Mapping[str, Any] | PlanOptions | None = None,
        **fields: Any,
    ) -> TransferRequest:
        """A request from the loose keyword arguments the API has always taken.

        ``dispatch`` gives its connections, encryption and compression (its other knobs are
        engine tuning, passed to the run, not part of the request)."""
        if dispatch is not None:
            check_transfer_options(part_size=DEFAULT_PART_SIZE, verify="full", dispatch=dispatch)
            fields.setdefault("connections_per_hop", dispatch.connections)
            encrypt = dispatch.encrypt
            fields.setdefault("encrypt", encrypt if isinstance(encrypt, bool | str) else "all")
            fields.setdefault("compress_level", dispatch.compress_level)
        if plan_options is not None:
            fields["planning"] = (
                plan_options
                if isinstance(plan_options, PlanOptions)
                else PlanOptions.from_dict(plan_options)
            )
        return cls(
            src=StoreLocation.of(src, src_options),
            dst=StoreLocation.of(dst, dst_options),
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (no secret is ever in a request)."""
        out = dataclasses.asdict(self)
        out["src"], out["dst"] = self.src.to_dict(), self.dst.to_dict()
        out["include"], out["exclude"] = list(self.include), list(self.exclude)
        out["planning"] = self.planning.kwargs()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TransferRequest:
        if not isinstance(data, Mapping):
            raise TransferError(f"a transfer request must be a JSON object, not {data!r}")
        return _from_dict(cls, data, "transfer request field")

    @classmethod
    def from_json(cls, text: str) -> TransferRequest:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TransferError(f"a transfer request must be JSON: {exc}") from exc
        return cls.from_dict(data)


def portable_dst_options(
    dst: str, storage_class: str | None = None, kms_key: str | None = None
) -> dict[str, Any]:
    """The destination store options of the portable ``--storage-class`` / ``--kms-key``: the
    provider's ``storage_class`` and its key option (S3 ``kms_key_id``, GCS ``kms_key_name``,
    Azure ``encryption_scope``); a one-line error where the provider has no such value."""
    uri = to_uri(dst)
    try:
        return portable(uri.split("://", 1)[0], storage_class, kms_key, uri)
    except StoreError as exc:
        raise TransferError(f"bad destination option: {exc}") from None


def store_write_options(scheme: str) -> frozenset[str]:
    """The destination write options a store of ``scheme`` (``s3``, ``gs``, ``az``) takes
    (``docs/metadata.md``): the names a face carries from its connection into store options."""
    return WRITE_OPTIONS.get(scheme, frozenset())


def as_request(value: TransferRequest | Mapping[str, Any] | str) -> TransferRequest:
    """A request from itself, its dict or its JSON (XCom, config, a file)."""
    if isinstance(value, TransferRequest):
        return value
    if isinstance(value, str):
        return TransferRequest.from_json(value)
    return TransferRequest.from_dict(value)


def request_from(
    src: TransferRequest | str, dst: str | None = None, **fields: Any
) -> TransferRequest:
    """The convenience every entry point shares: a request as given, or built from the loose
    arguments ``(src, dst, **fields)`` (``TransferRequest.build``)."""
    if isinstance(src, TransferRequest):
        if dst is not None or fields:
            extra = sorted(fields) + (["dst"] if dst is not None else [])
            raise TransferError(f"give a TransferRequest or loose arguments, not both ({extra})")
        return src
    if dst is None:
        raise TransferError("a destination is required")
    return TransferRequest.build(src, dst, **fields)
