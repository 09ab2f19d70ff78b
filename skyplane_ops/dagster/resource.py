"""``SkyplaneResource``: the one Dagster resource every replica asset, check and sensor uses.

It holds configuration only (backend, limits, cost ceiling, grid store, store options) and
forwards to :mod:`skyplane_ops.api`, so the Dagster face never grows its own transfer logic.
Secrets go in ``backend_secrets`` as ``dg.EnvVar(...)``: Dagster resolves them at run time and
never stores their values in run config; they are merged into the backend options only at the
moment of the API call, and :meth:`redact` scrubs them from anything we log or raise. Object
store credentials never pass through here: the stores take them from their SDK's own chain
(``AWS_*``, ``AZURE_*``/``DefaultAzureCredential``, ``GOOGLE_APPLICATION_CREDENTIALS``), which
a Dagster deployment sets as environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import dagster as dg
from pydantic import Field

from skyplane_ops import api
from skyplane_ops.api import GatewayFleet, PlanningError, TransferPlan, parse_rate
from skyplane_ops.dagster.journal_store import StoredJournal
from skyplane_ops.dagster.spec import spec_for
from skyplane_ops.dagster.steps import replicate


def _default_home() -> str:
    return os.environ.get("SKYPLANE_OPS_HOME") or os.path.join(
        os.path.expanduser("~"), ".skyplane-ops"
    )


class SkyplaneResource(dg.ConfigurableResource):  # type: ignore[misc]
    """Where gateways run, how big a transfer may get and where plans and journals are kept."""

    backend: str = Field(
        default="local", description="Provisioning backend: local, ssh, aws or netns."
    )
    backend_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Non-secret backend options (inventory file, instance type, ...).",
    )
    backend_secrets: dict[str, str] = Field(
        default_factory=dict,
        description="Secret backend options; give each value as dg.EnvVar('NAME').",
    )
    store_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "Object-store options by URI scheme ('s3', 'gs', 'az', 'file') or by URI prefix "
            "('s3://bucket/'); the longest matching prefix wins over the scheme."
        ),
    )
    max_vms_per_region: int | None = Field(default=None, description="Planner VM limit.")
    max_connections_per_vm: int | None = Field(default=None, description="TCP conns per VM.")
    max_cost_usd: float | None = Field(
        default=None,
        description="Cost ceiling: plan for maximum throughput within this many dollars.",
    )
    min_throughput_gbps: float | None = Field(
        default=None, description="Plan for minimum cost at or above this throughput."
    )
    deadline_seconds: float | None = Field(default=None, description="Finish within this time.")
    grid_store: str | None = Field(
        default=None,
        description=(
            "Grid store URI the profiler publishes to (see build_grid_refresh); plans use its "
            "latest version laid over the modelled grid."
        ),
    )
    measured_grid: str | None = Field(
        default=None, description="A measured grid file (CSV/Parquet); wins over grid_store."
    )
    profile_overrides: str | None = Field(default=None, description="Profile overrides file.")
    gcp_tier: str = Field(default="premium", description="GCP network tier for pricing.")
    artifacts_uri: str | None = Field(
        default=None,
        description="Store URI where plans are written (default file://$SKYPLANE_OPS_HOME/dagster).",
    )
    journal_root: str | None = Field(
        default=None,
        description="Directory for resume journals (default $SKYPLANE_OPS_HOME/dagster/journals).",
    )
    state_store: str | None = Field(
        default=None,
        description=(
            "Store URI every run worker reaches (s3://bucket/prefix, ...; options from "
            "store_options): journals are snapshotted there as they grow, so a re-execution "
            "on any machine resumes. Default: none (journals stay on the step's disk)."
        ),
    )
    max_age: str | None = Field(
        default=None,
        description="Copy only objects changed within this duration (90s, 30m, 2h, 3d, 1w).",
    )
    min_age: str | None = Field(
        default=None, description="Copy only objects unchanged for at least this duration."
    )
    changed_since: str | None = Field(
        default=None, description="Copy only objects changed at or after this ISO 8601 time."
    )
    changed_before: str | None = Field(
        default=None, description="Copy only objects changed before this ISO 8601 time."
    )
    files_from: list[str] | None = Field(
        default=None,
        description="Copy only these keys (relative to the source or partition prefix), "
        "each looked up by key: nothing is listed.",
    )
    partition_window: bool = Field(
        default=False,
        description="Time-window partitions: copy only objects changed within the "
        "partition's window (changed_since/changed_before from its start and end).",
    )
    ignore_existing: bool = Field(
        default=False, description="Never replace an object that exists at the destination."
    )
    update: bool = Field(
        default=False, description="Skip objects that are newer at the destination."
    )
    move: bool = Field(
        default=False,
        description="Delete each source object once its copy is committed and verified.",
    )
    bwlimit: str | None = Field(
        default=None,
        description="Bandwidth cap per second over all paths, with its unit: 200Mbit, 25MiB.",
    )
    keep_warm: str | None = Field(
        default=None,
        description="Park the step's fleet this long (15m) for the next step with the same "
        "regions to claim instead of booting (found through state_store; docs/vmless.md).",
    )
    max_delete: int | None = Field(
        default=None, description="With move: refuse a move that would delete more objects."
    )
    report_uri: str | None = Field(
        default=None,
        description="Folder (any store) of the transfer reports: every object's outcome as "
        "Parquet and a JSON summary (default $SKYPLANE_OPS_HOME/reports).",
    )
    report_options: dict[str, Any] = Field(
        default_factory=dict, description="Store options of report_uri (no credentials)."
    )
    metadata: bool = Field(
        default=True,
        description=(
            "Replicas keep content type/encoding, cache control, user metadata, tags and times "
            "(docs/metadata.md); false copies bytes only. Destination storage_class and "
            "encryption are store_options (storage_class, kms_key_id, kms_key_name, ...)."
        ),
    )
    metadata_set: dict[str, str] = Field(
        default_factory=dict, description="Metadata added to or overriding every replica's."
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Serve Prometheus metrics of each step's copies on this port while it "
        "runs (0: any free port, logged), as the CLI's --metrics-port (docs/metrics.md).",
    )
    metrics_addr: str = Field(
        default="127.0.0.1", description="Address the metrics server binds to."
    )
    metrics_textfile: str | None = Field(
        default=None,
        description="Write each step's final metrics to this file (node_exporter textfile "
        "collector; '{transfer_id}' in it is replaced), as the CLI's --metrics-textfile.",
    )
    check_checksums: str = Field(
        default="auto",
        description=(
            "Replica check: 'auto' compares native checksums where both stores have one and "
            "CRC32C of the bytes otherwise; 'native' only native ones; 'off' sizes only."
        ),
    )

    # -- secrets ---------------------------------------------------------------------------
    def secret_values(self) -> list[str]:
        """Every configured secret value, longest first (for :meth:`redact`)."""
        values = list(self.backend_secrets.values())
        return sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every configured secret replaced by ``***``."""
        for value in self.secret_values():
            text = text.replace(value, "***")
        return text

    # -- options ---------------------------------------------------------------------------
    def _backend_options(self) -> dict[str, Any]:
        return {**self.backend_options, **self.backend_secrets}

    def store_options_for(self, uri: str) -> dict[str, Any]:
        """Options for the store at ``uri``: the scheme's entry, then matching URI prefixes."""
        scheme = uri.split("://", 1)[0].lower()
        merged: dict[str, Any] = dict(self.store_options.get(scheme, {}))
        prefixes = sorted(
            (p for p in self.store_options if "://" in p and uri.startswith(p)), key=len
        )
        for prefix in prefixes:
            merged.update(self.store_options[prefix])
        return merged

    def open_store(self, uri: str) -> Any:
        """An ``ObjectStore`` for ``uri``, with this resource's options for it."""
        return api.open_store(uri, self.store_options_for(uri))

    # -- the API, configured ---------------------------------------------------------------
    def plan(
        self, src_region: str, dst_regions: str | Sequence[str], volume_gb: float
    ) -> TransferPlan:
        """Plan with this resource's bound, limits and grid store (its latest version, named
        in ``plan.details["grid"]``)."""
        bounds = [self.min_throughput_gbps, self.max_cost_usd, self.deadline_seconds]
        if sum(b is not None for b in bounds) > 1:
            raise PlanningError(
                "SkyplaneResource: set at most one of min_throughput_gbps, max_cost_usd, "
                "deadline_seconds"
            )
        return api.plan(
            src_region,
            dst_regions,
            volume_gb,
            min_throughput_gbps=self.min_throughput_gbps,
            max_cost_usd=self.max_cost_usd,
            deadline_seconds=self.deadline_seconds,
            max_vms_per_region=self.max_vms_per_region,
            max_connections_per_vm=self.max_connections_per_vm,
            profile_overrides=self.profile_overrides,
            measured_grid=self.measured_grid,
            grid_store=None if self.measured_grid else self.grid_store,
            grid_store_options=self.store_options_for(self.grid_store or ""),
            gcp_tier=self.gcp_tier,
            bwlimit_gbps=None if self.bwlimit is None else parse_rate(self.bwlimit) * 8 / 1e9,
        )

    def provision(
        self,
        plan_or_vms: TransferPlan | Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
    ) -> GatewayFleet:
        """A parked fleet that fits (``keep_warm``), or a new one."""
        warm = api.claim_warm(
            plan_or_vms,
            backend=self.backend,
            backend_options=self._backend_options(),
            claimant=transfer_id,
            **self._warm_store(),
        )
        if warm is not None:
            return warm[0]
        return api.provision(
            plan_or_vms,
            backend=self.backend,
            backend_options=self._backend_options(),
            transfer_id=transfer_id,
            tags=tags,
        )

    def request(
        self,
        src_uri: str,
        dst_uri: str,
        *,
        journal_dir: str,
        transfer_id: str,
        window: tuple[Any, Any] | None = None,
    ) -> api.TransferRequest:
        """The ``TransferRequest`` of one replica unit, with this resource's store options and
        selection; ``window``: a time-window partition's (start, end), used with
        ``partition_window``."""
        since, before = self.changed_since, self.changed_before
        if self.partition_window and window is not None:
            since, before = window
        return api.TransferRequest.build(
            src_uri,
            dst_uri,
            src_options=self.store_options_for(src_uri),
            dst_options=self.store_options_for(dst_uri),
            journal_dir=journal_dir,
            transfer_id=transfer_id,
            max_age=self.max_age,
            min_age=self.min_age,
            changed_since=since,
            changed_before=before,
            files_from=self.files_from,
            ignore_existing=self.ignore_existing,
            update=self.update,
            move=self.move,
            max_delete=self.max_delete,
            bwlimit=self.bwlimit,
            keep_warm=self.keep_warm,
            report_uri=self.report_uri,
            report_options=self.report_options,
            metadata=self.metadata,
            metadata_set=dict(self.metadata_set),
        )

    def gateways(self, *, fleet: GatewayFleet, plan: TransferPlan) -> api.Gateways:
        """A run's gateways: the step's shared fleet (deleted by the step) and a plan."""
        return api.Gateways(
            backend=fleet.backend, backend_options=self._backend_options(), fleet=fleet, plan=plan
        )

    def deprovision(
        self,
        fleet: GatewayFleet | None = None,
        *,
        transfer_id: str | None = None,
        succeeded: bool = True,
        usd_per_hour: float = 0.0,
    ) -> list[str]:
        """Delete ``fleet`` (or, after a step that ``succeeded``, park it for ``keep_warm``
        at ``usd_per_hour``, the plan's VM price) or, without one, every leftover tagged with
        ``transfer_id``."""
        store = self._warm_store()
        if fleet is not None and self.keep_warm and succeeded:
            keep = api.parse_duration(self.keep_warm)
            if api.park_warm(fleet, keep_warm_s=keep, backend_options=self._backend_options(),
                             usd_per_hour=usd_per_hour, **store) is not None:  # fmt: skip
                return []
        deleted = api.deprovision(
            fleet,
            backend=self.backend,
            backend_options=self._backend_options(),
            transfer_id=transfer_id,
        )
        if fleet is not None:
            api.forget_warm(fleet, **store)  # a claimed fleet's records (no-op for others)
        return deleted

    def _warm_store(self) -> dict[str, Any]:
        """Where warm fleets are found: ``state_store`` (every run worker), else this host."""
        if not self.state_store:
            return {}
        return {
            "state_uri": self.state_store,
            "state_options": self.store_options_for(self.state_store),
        }

    def replicate(self, context: Any) -> Iterator[Any]:
        """Plan, provision and transfer the replicas of the running ``@skyplane_assets`` op
        (one ``MaterializeResult`` per replica); the fleet is always deleted."""
        yield from replicate(context, self, spec_for(context))

    def refresh_grid(
        self, regions: Sequence[str], *, store_uri: str | None = None, **options: Any
    ) -> Any:
        """``api.refresh_grid`` on this resource's backend, publishing to ``store_uri`` (default:
        ``grid_store``, which :meth:`plan` reads); ``options`` as ``api.refresh_grid`` takes."""
        target = store_uri or self.grid_store
        if not target:
            raise PlanningError("no grid store: pass store_uri or set grid_store")
        return api.refresh_grid(
            regions,
            store_uri=target,
            store_options=self.store_options_for(target),
            backend=self.backend,
            backend_options=self._backend_options(),
            **options,
        )

    # -- where things are kept ---------------------------------------------------------------
    def home(self) -> str:
        return os.path.join(_default_home(), "dagster")

    def journal_dir(self, *parts: str) -> str:
        root = self.journal_root or os.path.join(self.home(), "journals")
        path = os.path.join(root, *parts)
        os.makedirs(path, exist_ok=True)
        return path

    def stored_journal(self, key: str, journal_dir: str, log: Any) -> StoredJournal | None:
        """The unit ``key``'s journal in ``state_store`` (None without a state store)."""
        if not self.state_store:
            return None
        state = api.TransferState(self.state_store, key, self.store_options_for(self.state_store))
        return StoredJournal(state, journal_dir, log)

    def set_bwlimit(self, transfer_id: str, rate: str) -> float:
        """Change the cap of the running transfer ``transfer_id`` (``transfer_id_for(run id,
        dataset)``) to ``rate``: through ``state_store`` when set (a step on any machine
        follows it), else this host's live file. Bytes per second."""
        if not self.state_store:
            return api.set_bwlimit(transfer_id, rate)
        options = self.store_options_for(self.state_store)
        return api.set_bwlimit(transfer_id, rate, state_uri=self.state_store, state_options=options)

    def follow_bwlimit(self, transfer_id: str) -> AbstractContextManager[Any]:
        """While a step runs ``transfer_id``: a cap set through ``state_store`` reaches it."""
        if not self.state_store:
            return nullcontext()
        options = self.store_options_for(self.state_store)
        state = api.TransferState(self.state_store, transfer_id, options)
        return api.CapFollower(state, api.live_path(transfer_id))

    def write_artifact(self, name: str, text: str) -> str:
        """Store a small artifact (a plan) and return its URI, for metadata links."""
        base = self.artifacts_uri
        if base is None:
            os.makedirs(self.home(), exist_ok=True)
            base = "file://" + self.home()
        store = self.open_store(base)
        store.write(name, text.encode("utf-8"))
        return base.rstrip("/") + "/" + name
