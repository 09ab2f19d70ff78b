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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway_agent.stores._common import check_common_options
from gateway_agent.stores.errors import StoreError
from gateway_agent.stores.objmeta import set_pairs
from gateway_agent.stores.uri import parse_uri
from gateway_agent.stores.writeopts import WRITE_OPTIONS, check_write_options, portable
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.bwlimit import check_frame_time, parse_rate
from skyplane_ops.transfer.checks import check_int, check_transfer_options
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.journal import default_journal_dir, transfer_key
from skyplane_ops.transfer.manifest import DEFAULT_PART_SIZE
from skyplane_ops.transfer.overlap import check_disjoint
from skyplane_ops.transfer.selection import Window, age_seconds, check_window, key_list, timestamp
from skyplane_ops.transfer.selection import window as time_window

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
    # The schedule (planner.schedule): VMs only when they pay ("auto"), never, or only them.
    vms: str = "auto"
    worker_region: str | None = None
    worker_gbps: float | None = None

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
        _number("worker_gbps", self.worker_gbps, positive=True)
        if self.vms not in ("auto", "none", "only"):
            raise TransferError(f"vms must be 'auto', 'none' or 'only', not {self.vms!r}")
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
    route. ``destinations``/``dst_regions``: several destinations (one source, many
    replicas), in order, the first being ``dst``/``dst_region``; empty for one destination
    (``per_destination`` gives one request per destination).

    Selection beyond globs (``selection``): ``max_age``/``min_age`` (durations: ``2h`` or
    seconds) and ``changed_since``/``changed_before`` (ISO 8601 timestamps) select by
    modification time; ``files_from`` (keys relative to the source) names the objects, which
    are then looked up by key, never listed. Overwrite policy: ``ignore_existing`` never
    replaces a destination object, ``update`` skips one newer than the source. ``move``
    deletes each source object once its copy is committed and verified (``transfer.move``),
    at most ``max_delete`` of them. ``bwlimit`` caps the transfer's rate over all paths (a
    rate with its unit, per second: ``200Mbit``, ``25MiB``; ``transfer.bwlimit``).

    ``report_uri`` (with ``report_options``, store options as for the ends) is the
    folder of any store the run's report goes to (``<report_uri>/<transfer id>/<job id>/``: every
    object's outcome as Parquet and a JSON summary; default ``$SKYPLANE_OPS_HOME/reports``).
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
    max_age: float | None = None
    min_age: float | None = None
    changed_since: str | None = None
    changed_before: str | None = None
    files_from: tuple[str, ...] | None = None
    ignore_existing: bool = False
    update: bool = False
    move: bool = False
    bwlimit: str | None = None
    report_uri: str | None = None
    report_options: Mapping[str, Any] = field(default_factory=dict)
    destinations: tuple[StoreLocation, ...] = ()
    dst_regions: tuple[str, ...] = ()
    # Objects keep their metadata (``docs/metadata.md``): False copies bytes only
    # (``--no-metadata``); ``metadata_set`` adds or overrides keys (``--metadata-set k=v``:
    # ``key=value`` strings or a mapping).
    metadata: bool = True
    metadata_set: Mapping[str, str] = field(default_factory=dict)
    # Warm fleets (``docs/vmless.md``): after the run its fleet is parked this long (a
    # duration: ``15m`` or seconds) for the next run to claim instead of booting; None: deleted.
    keep_warm: float | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "src", StoreLocation.of(self.src))
        put(self, "dst", StoreLocation.of(self.dst))
        put(self, "destinations", tuple(StoreLocation.of(d) for d in self.destinations or ()))
        put(self, "dst_regions", tuple(str(r) for r in self.dst_regions or ()))
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
        if self.max_delete is not None and not (self.delete or self.move):
            raise TransferError(
                "max_delete (--max-delete) only applies with delete (--delete) or move (mv)"
            )
        if self.move and self.delete:
            raise TransferError("give move (mv) or delete (--delete), not both")
        if self.report_uri is not None:
            put(self, "report_uri", StoreLocation(self.report_uri).uri)
        put(self, "report_options", dict(self.report_options or {}))
        if self.delete:
            put(self, "sync", True)
        for name in ("max_age", "min_age"):
            put(
                self, name, age_seconds(f"{name} (--{name.replace('_', '-')})", getattr(self, name))
            )
        for name in ("changed_since", "changed_before"):
            put(self, name, timestamp(f"{name} (--{name.replace('_', '-')})", getattr(self, name)))
        put(self, "files_from", key_list(self.files_from))
        put(self, "keep_warm", age_seconds("keep_warm (--keep-warm)", self.keep_warm))
        if self.keep_warm is not None and not 0 < self.keep_warm <= 86400:
            raise TransferError(
                f"keep_warm (--keep-warm) must be above 0 and at most 24h, got {self.keep_warm:g} s"
            )
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
        self._check_selection()
        if self.destinations or self.dst_regions:
            self._check_destinations()

    def _check_selection(self) -> None:
        if self.bwlimit is not None:
            check_frame_time(parse_rate(self.bwlimit), self.part_size)
        check_window(self.max_age, self.min_age, self.changed_since, self.changed_before)
        if self.ignore_existing and self.update:
            raise TransferError(
                "give ignore_existing (--ignore-existing) or update (--update), not both"
            )
        if self.delete and self.selects_part:
            raise TransferError(
                "delete (--delete) cannot be combined with --max-age, --min-age, "
                "--changed-since, --changed-before or --files-from: it would remove every "
                "destination object they leave out"
            )
        if self.files_from is not None and not self.files_from:
            raise TransferError("files_from (--files-from) names no key")
        if self.report_uri is not None:
            report = StoreLocation(self.report_uri, self.report_options)
            report.check("report")
            for side, where in (("source", self.src), ("destination", self.dst)):
                if _inside(report.uri, where.uri):
                    raise TransferError(
                        f"report_uri {report.uri} is inside the {side} {where.uri}: a report "
                        "there would be copied or mirror-deleted; name a folder outside it"
                    )

    def _check_destinations(self) -> None:
        """Several destinations: at least two, the first is ``dst``, regions one each (or
        none), each disjoint from the source and from the others."""
        dsts, regions = self.destinations, self.dst_regions
        if self.move:
            raise TransferError(
                "move (mv) takes one destination: copy to several, then move or delete the source"
            )
        if len(dsts) < 2:
            raise TransferError("destinations: give two or more (one destination is dst)")
        if dsts[0] != self.dst:
            raise TransferError(f"destinations: the first must be dst ({self.dst.uri})")
        if regions and len(regions) != len(dsts):
            raise TransferError(
                f"dst_regions: one per destination ({len(dsts)}), in order, not {len(regions)}"
            )
        if regions and regions[0] != self.dst_region:
            raise TransferError(f"dst_regions: the first must be dst_region ({self.dst_region})")
        if len(set(regions)) != len(regions):
            raise TransferError(f"dst_regions: each destination in its own region: {regions}")
        for i, d in enumerate(dsts[1:], 1):
            d.check(f"destination {i + 1}")
            check_disjoint(self.src.uri, d.uri, self.src.options, d.options)
            if self.report_uri is not None and _inside(to_uri(self.report_uri), d.uri):
                raise TransferError(
                    f"report_uri {self.report_uri} is inside the destination {d.uri}: name a "
                    "folder outside it"
                )
            for other in dsts[:i]:
                try:
                    check_disjoint(other.uri, d.uri, other.options, d.options)
                except TransferError as exc:
                    raise TransferError(
                        f"destinations {other.uri} and {d.uri} overlap: give each replica "
                        "its own place"
                    ) from exc

    @property
    def multi(self) -> bool:
        """Whether this request names several destinations."""
        return len(self.destinations) > 1

    def per_destination(self) -> list[TransferRequest]:
        """One single-destination request per destination, in order (its own journal, lock,
        commit and verification); ``[self]`` for one destination."""
        if not self.multi:
            return [self]
        regions = self.dst_regions or (None,) * len(self.destinations)
        return [
            dataclasses.replace(self, dst=d, dst_region=r, destinations=(), dst_regions=())
            for d, r in zip(self.destinations, regions, strict=True)
        ]

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

    @property
    def bwlimit_bps(self) -> float | None:
        """The bandwidth cap in bytes per second (None: none)."""
        return None if self.bwlimit is None else parse_rate(self.bwlimit)

    @property
    def bwlimit_gbps(self) -> float | None:
        """The bandwidth cap in Gbit/s, the planner's bound (None: none)."""
        bps = self.bwlimit_bps
        return None if bps is None else bps * 8 / 1e9

    @property
    def selects_part(self) -> bool:
        """Whether time or a key list selects a part of the source (not only globs)."""
        timed = (self.max_age, self.min_age, self.changed_since, self.changed_before)
        return self.files_from is not None or any(v is not None for v in timed)

    @property
    def lists_destination(self) -> bool:
        """Whether the destination's objects are looked at before copying (sync, or an
        overwrite policy that skips some)."""
        return self.sync or self.ignore_existing or self.update

    def window(self, now: float | None = None) -> Window:
        """The modification times selected, ages counted back from ``now``."""
        return time_window(self.max_age, self.min_age, self.changed_since, self.changed_before, now)

    def dispatch_options(self, tuning: DispatchOptions | None = None) -> DispatchOptions:
        """The data path's knobs: this request's connections, encryption and compression over
        the engine ``tuning`` (attempts, timeouts, threads, test hooks) a caller passes."""
        return dataclasses.replace(
            tuning or DispatchOptions(),
            connections=self.connections_per_hop,
            encrypt=self.encrypt,
            compress_level=self.compress_level,
            bwlimit=self.bwlimit_bps,
            worker_rate=self.planning.worker_gbps * 1e9 / 8 if self.planning.worker_gbps else None,
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
        dst: StoreLocation | str | Sequence[StoreLocation | str],
        *,
        src_options: Mapping[str, Any] | None = None,
        dst_options: Mapping[str, Any] | None = None,
        dispatch: DispatchOptions | None = None,
        plan_options: Mapping[str, Any] | PlanOptions | None = None,
        **fields: Any,
    ) -> TransferRequest:
        """A request from the loose keyword arguments the API has always taken.

        ``dispatch`` gives its connections, encryption and compression (its other knobs are
        engine tuning, passed to the run, not part of the request). ``dst`` may be a list of
        destinations, with ``dst_region`` a list of their regions (one each, in order)."""
        first: StoreLocation | str | Mapping[str, Any]
        if isinstance(dst, str | StoreLocation | Mapping):
            first = dst
        else:
            many = tuple(StoreLocation.of(d, dst_options) for d in dst)
            if not many:
                raise TransferError("a destination is required")
            fields["destinations"] = many if len(many) > 1 else ()
            region = fields.get("dst_region")
            if region is not None and not isinstance(region, str):
                regions = tuple(region)
                fields["dst_region"] = regions[0] if regions else None
                fields["dst_regions"] = regions if len(many) > 1 else ()
            first, dst_options = many[0], None
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
            dst=StoreLocation.of(first, dst_options),
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (no secret is ever in a request)."""
        out = dataclasses.asdict(self)
        out["src"], out["dst"] = self.src.to_dict(), self.dst.to_dict()
        out["destinations"] = [d.to_dict() for d in self.destinations]
        out["dst_regions"] = list(self.dst_regions)
        out["include"], out["exclude"] = list(self.include), list(self.exclude)
        out["planning"] = self.planning.kwargs()
        if self.files_from is not None:
            out["files_from"] = list(self.files_from)
        out["report_options"] = dict(self.report_options)
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


def _inside(uri: str, folder: str) -> bool:
    """``uri`` is ``folder`` or under it (same scheme, bucket and prefix)."""
    a, b = uri.rstrip("/") + "/", folder.rstrip("/") + "/"
    return a.startswith(b)


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
    src: TransferRequest | str, dst: str | Sequence[str] | None = None, **fields: Any
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
