"""``SkyplaneHook``: the ``skyplane`` connection type and the adapter onto ``skyplane_ops.api``.

Every operator goes through this hook so that connection parsing, secret handling and the
calls into the core live in one place. The hook adds no transfer logic of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk import BaseHook, ObjectStoragePath
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from skyplane_ops import api
from skyplane_ops.airflow.links import route_uri_for
from skyplane_ops.airflow.settings import (
    CONN_TYPE,
    DEFAULT_CONN_ID,
    SkyplaneSettings,
    backend_options_with_secret,
    parse_extra,
)
from skyplane_ops.api import GatewayFleet, TransferPlan, TransferState


def _extra_dict(conn: Any) -> dict[str, Any]:
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
    return dict(extra or {})


# Airflow connection type -> the store scheme it reaches.
_SCHEMES = {
    "aws": "s3",
    "google_cloud_platform": "gs",
    "gcp": "gs",
    "google": "gs",
    "wasb": "az",
    "azure": "az",
    "azure_blob_storage": "az",
}


@dataclass(frozen=True)
class StoreAccess:
    """How the control plane reaches a store named by an Airflow cloud connection.

    ``options`` are the non-secret store options the backends accept (endpoint, region,
    project); ``env`` holds SDK credential variables, exported only around the core call in
    the process that lists the source and completes uploads. Gateways use their own default
    chain (instance role, managed identity, or the environment they were started with).
    """

    options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def store_access_from_connection(conn: Any) -> StoreAccess:
    """Store options and SDK credentials from an aws / google_cloud_platform / wasb connection."""
    extra = _extra_dict(conn)
    conn_type = (conn.conn_type or "").lower()
    options: dict[str, Any] = {}
    env: dict[str, str] = {}
    if conn_type == "aws":
        endpoint = extra.get("endpoint_url") or (extra.get("service_config") or {}).get(
            "s3", {}
        ).get("endpoint_url")
        if endpoint:
            options["endpoint_url"] = endpoint
        if extra.get("region_name"):
            options["region"] = extra["region_name"]
        if conn.login and conn.password:
            env["AWS_ACCESS_KEY_ID"] = conn.login
            env["AWS_SECRET_ACCESS_KEY"] = conn.password
        if extra.get("aws_session_token"):
            env["AWS_SESSION_TOKEN"] = extra["aws_session_token"]
    elif conn_type in ("google_cloud_platform", "gcp", "google"):
        project = extra.get("project") or extra.get("extra__google_cloud_platform__project")
        if project:
            options["project"] = project
        if extra.get("endpoint_url"):
            options["endpoint_url"] = extra["endpoint_url"]
        key_path = extra.get("key_path") or extra.get("extra__google_cloud_platform__key_path")
        if key_path:
            env["GOOGLE_APPLICATION_CREDENTIALS"] = key_path
    elif conn_type in ("wasb", "azure", "azure_blob_storage"):
        endpoint = extra.get("account_url") or extra.get("endpoint_url")
        if endpoint:
            options["endpoint_url"] = endpoint
        if extra.get("connection_string"):
            env["AZURE_STORAGE_CONNECTION_STRING"] = extra["connection_string"]
        elif conn.login and conn.password:
            where = (
                f"BlobEndpoint={endpoint}"
                if endpoint
                else "DefaultEndpointsProtocol=https;EndpointSuffix=core.windows.net"
            )
            env["AZURE_STORAGE_CONNECTION_STRING"] = (
                f"{where};AccountName={conn.login};AccountKey={conn.password}"
            )
    else:
        raise ValueError(
            f"connection {conn.conn_id!r} has type {conn_type!r}; expected aws, "
            "google_cloud_platform or wasb"
        )
    # Destination write options (storage_class, kms_key_id, ...: docs/metadata.md) under the
    # store options' own names in the extra.
    scheme = _SCHEMES[conn_type]
    for name in sorted(api.store_write_options(scheme)):
        if name in extra:
            options[name] = extra[name]
    for value in env.values():
        mask_secret(value)
    return StoreAccess(options=options, env=env)


def merge_env(*accesses: StoreAccess) -> dict[str, str]:
    """One credential environment for a transfer; two different values for a name clash."""
    env: dict[str, str] = {}
    for access in accesses:
        for name, value in access.env.items():
            if name in env and env[name] != value:
                raise ValueError(
                    f"the source and destination connections both set {name} to different "
                    "values; one process cannot hold both (use an instance role for one side)"
                )
            env[name] = value
    return env


@contextmanager
def exported_env(env: Mapping[str, str]) -> Iterator[None]:
    """Export SDK credential variables for the duration of a core call, then restore."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class SkyplaneHook(BaseHook):
    """Reads a ``skyplane`` connection and calls ``skyplane_ops.api`` with its settings.

    The connection's extra holds the non-secret settings (see ``SkyplaneSettings``); the
    password field may hold one backend secret, passed as the backend option named by
    ``secret_option``. A missing ``skyplane_default`` connection means "local backend,
    defaults", so a first DAG runs with no setup.
    """

    conn_name_attr = "skyplane_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Skyplane"

    def __init__(self, skyplane_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.skyplane_conn_id = skyplane_conn_id
        self._settings: SkyplaneSettings | None = None
        self._password: str | None = None

    # -- connection -------------------------------------------------------------------------

    def _load(self) -> None:
        if self._settings is not None:
            return
        try:
            conn = self.get_connection(self.skyplane_conn_id)
        except AirflowNotFoundException:
            if self.skyplane_conn_id != DEFAULT_CONN_ID:
                raise
            self.log.info("no %r connection: local backend with defaults", DEFAULT_CONN_ID)
            self._settings = SkyplaneSettings()
            return
        if conn.conn_type and conn.conn_type != CONN_TYPE:
            raise ValueError(
                f"connection {conn.conn_id!r} has type {conn.conn_type!r}, expected {CONN_TYPE!r}"
            )
        self._settings = parse_extra(conn.extra or None)
        self._password = conn.password or None
        if self._password:
            mask_secret(self._password)

    @property
    def settings(self) -> SkyplaneSettings:
        """The connection's non-secret settings (safe to log)."""
        self._load()
        assert self._settings is not None
        return self._settings

    def get_conn(self) -> SkyplaneSettings:
        return self.settings

    def backend_options(self) -> dict[str, Any]:
        """Backend options including the secret; never log or return these."""
        self._load()
        return backend_options_with_secret(self.settings, self._password)

    def test_connection(self) -> tuple[bool, str]:
        """Used by the UI's Test button: checks that the extra parses."""
        try:
            settings = self.settings
        except Exception as exc:
            return False, str(exc)
        return True, f"backend {settings.backend!r}"

    @staticmethod
    def store_access(conn_id: str | None) -> StoreAccess:
        """Store options and credentials from a cloud connection (none: the SDK's chain)."""
        if not conn_id:
            return StoreAccess()
        return store_access_from_connection(BaseHook.get_connection(conn_id))

    def transfer_state(self, transfer_id: str) -> TransferState:
        """The transfer's shared state (status, journal snapshot, secret) in the connection's
        state store, which every worker and the triggerer must reach."""
        settings = self.settings
        return TransferState(settings.state_uri, transfer_id, settings.state_store_options)

    def set_bwlimit(self, transfer_id: str, rate: str) -> float:
        """Change the cap of the running transfer ``transfer_id`` to ``rate`` (``200Mbit``,
        ``25MiB``) through the connection's state store: the deferred driver, on whatever
        worker, applies it within a few seconds. Bytes per second."""
        settings = self.settings
        return api.set_bwlimit(
            transfer_id,
            rate,
            state_uri=settings.state_uri,
            state_options=settings.state_store_options,
        )

    # -- plans ------------------------------------------------------------------------------

    def plan_options(
        self,
        *,
        min_throughput_gbps: float | None = None,
        max_cost_usd: float | None = None,
        deadline_seconds: float | None = None,
    ) -> api.PlanOptions:
        """The connection's planner limits and grid store with the task's bound (an explicit
        bound wins over the connection's cost ceiling): a request's ``planning``."""
        settings = self.settings
        if min_throughput_gbps is None and max_cost_usd is None and deadline_seconds is None:
            max_cost_usd = settings.max_cost_usd
        return api.PlanOptions(
            min_throughput_gbps=min_throughput_gbps,
            max_cost_usd=max_cost_usd,
            deadline_seconds=deadline_seconds,
            max_vms_per_region=settings.max_vms_per_region,
            max_connections_per_vm=settings.max_connections_per_vm,
            profile_overrides=settings.profile_overrides,
            grid_store=self.grid_store_uri(),
        )

    def plan(
        self,
        src_region: str,
        dst_regions: str | Sequence[str],
        volume_gb: float,
        *,
        min_throughput_gbps: float | None = None,
        max_cost_usd: float | None = None,
        deadline_seconds: float | None = None,
    ) -> TransferPlan:
        """Plan with the connection's limits on its grid store's latest measured version (the
        modelled grid where nothing was published); see :meth:`plan_options`."""
        options = self.plan_options(
            min_throughput_gbps=min_throughput_gbps,
            max_cost_usd=max_cost_usd,
            deadline_seconds=deadline_seconds,
        )
        return api.plan(
            src_region, dst_regions, volume_gb, **options.kwargs(), backend=self.settings.backend
        )

    @staticmethod
    def source_volume_gb(
        src: str,
        *,
        src_options: Mapping[str, Any] | None = None,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> float:
        """Size of what would be copied, for plans made without a ``volume_gb``."""
        with exported_env(env or {}):
            return float(
                api.source_volume_gb(
                    src, src_options=src_options, include=list(include), exclude=list(exclude)
                )
            )

    @staticmethod
    def write_plan(plan: TransferPlan, uri: str, conn_id: str | None = None) -> str:
        """Store the full plan JSON at a local path or an object-store URI; returns the URI.

        The route picture (``api.route_svg``) goes next to it (``route_uri_for``): the
        "Skyplane route" extra link opens it."""
        _write_text(uri, plan.to_json(), conn_id)
        _write_text(route_uri_for(uri), api.route_svg(plan), conn_id)
        return uri if _core_uri(uri) else str(ObjectStoragePath(uri, conn_id=conn_id))

    @staticmethod
    def read_plan(uri: str, conn_id: str | None = None) -> TransferPlan:
        if _core_uri(uri):
            store, key, env = _core_store(uri, conn_id)
            with exported_env(env):
                return TransferPlan.from_json(store.read(key).decode())
        return TransferPlan.from_json(ObjectStoragePath(uri, conn_id=conn_id).read_text())

    @staticmethod
    def write_json(data: Mapping[str, Any], uri: str, conn_id: str | None = None) -> str:
        _write_text(uri, json.dumps(data, sort_keys=True, default=str), conn_id)
        return uri if _core_uri(uri) else str(ObjectStoragePath(uri, conn_id=conn_id))

    # -- fleets -----------------------------------------------------------------------------

    def tags(self, transfer_id: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        tags = {**self.settings.tags, **(extra or {})}
        tags.setdefault("skyplane-ops:transfer-id", transfer_id)
        tags.setdefault("skyplane-ops:launched-by", "airflow")
        return tags

    def provision(
        self, plan: TransferPlan, *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet:
        """The provision step (setup task): the plan's gateways, tagged for ``transfer_id``."""
        return api.provision(
            plan,
            backend=self.settings.backend,
            backend_options=self.backend_options(),
            transfer_id=transfer_id,
            tags=self.tags(transfer_id, tags),
        )

    def deprovision(
        self,
        fleet: GatewayFleet | None = None,
        *,
        transfer_id: str | None = None,
        regions: Sequence[str] = (),
    ) -> list[str]:
        """Delete a fleet, or every leftover of ``transfer_id`` (its recorded fleets, pending
        ones too, then a sweep by tag in ``regions`` and the recorded regions; idempotent)."""
        if fleet is not None:
            deleted = list(api.deprovision(fleet, backend_options=self.backend_options()))
            api.forget_warm(fleet, **self._warm_store())  # a claimed fleet's records, if any
            return deleted
        return list(
            api.deprovision(
                backend=self.settings.backend,
                backend_options=self.backend_options(),
                transfer_id=transfer_id,
                regions=regions,
            )
        )

    # -- warm fleets (``sequence.warm``: the same calls as every run) ---------------------------

    def _warm_store(self) -> dict[str, Any]:
        """The pool every worker reaches: the connection's state store."""
        settings = self.settings
        return {"state_uri": settings.state_uri, "state_options": settings.state_store_options}

    def claim_warm(
        self, plan: TransferPlan, *, transfer_id: str
    ) -> tuple[GatewayFleet, dict[str, Any]] | None:
        """A parked fleet that serves ``plan``, claimed for ``transfer_id``; None: boot."""
        return api.claim_warm(
            plan,
            backend=self.settings.backend,
            backend_options=self.backend_options(),
            claimant=transfer_id,
            **self._warm_store(),
        )

    def park_warm(
        self, fleet: GatewayFleet, *, keep_warm_s: float, usd_per_hour: float
    ) -> dict[str, Any] | None:
        """Park ``fleet`` for ``keep_warm_s``; None (logged): delete it instead."""
        return api.park_warm(
            fleet,
            keep_warm_s=keep_warm_s,
            backend_options=self.backend_options(),
            usd_per_hour=usd_per_hour,
            **self._warm_store(),
        )

    # -- throughput grid ----------------------------------------------------------------------

    def grid_store_uri(self) -> str:
        """Where measured grids are published: the connection's grid store or the work dir."""
        return self.settings.grid_store or os.path.join(self.settings.work_dir, "grid")

    def publish_target(self, *, allow_emulated: bool = False) -> api.PublishTarget:
        """The grid store for a backend that reaches real hosts, else ``<work_dir>/grid-scratch``
        (loopback figures must not reach the grid plans read)."""
        return api.publish_target(
            self.settings.backend,
            self.settings.backend_options,
            grid_store=self.grid_store_uri(),
            scratch_store=os.path.join(self.settings.work_dir, "grid-scratch"),
            allow_emulated=allow_emulated,
        )

    def refresh_grid(
        self,
        regions: Sequence[str],
        *,
        run_id: str,
        connections: int,
        duration_s: float,
        budget_usd: float | None,
        freshness_s: float,
        progress: Callable[[dict[str, Any]], None] | None = None,
        store_uri: str | None = None,
    ) -> Any:
        """``api.refresh_grid`` with the connection's backend, publishing to ``store_uri``
        (default: its grid store; see :meth:`publish_target`)."""
        return api.refresh_grid(
            regions,
            store_uri=store_uri or self.grid_store_uri(),
            backend=self.settings.backend,
            backend_options=self.backend_options(),
            connections=connections,
            duration_s=duration_s,
            budget_usd=budget_usd,
            freshness_s=freshness_s,
            run_id=run_id,
            progress=progress,
        )

    # -- transfers --------------------------------------------------------------------------

    def gateways(
        self,
        transfer_id: str,
        *,
        fleet: GatewayFleet | None = None,
        plan: TransferPlan | None = None,
    ) -> api.Gateways:
        """Where a run's gateways come from: ``fleet`` (another task's, left running) or the
        connection's backend, tagged for this transfer; ``plan`` is followed if given."""
        return api.Gateways(
            backend=fleet.backend if fleet is not None else self.settings.backend,
            backend_options=self.backend_options(),
            fleet=fleet,
            plan=plan,
            tags=self.tags(transfer_id),
            # Warm fleets are parked and found in the state store every worker reaches.
            state_uri=self.settings.state_uri,
            state_options=self.settings.state_store_options,
        )


# Object-store URIs the core opens itself (``api.open_store``): a plan written by one worker is
# read by another through them with no Airflow provider (``ObjectStoragePath`` needs the
# amazon/google/microsoft provider's filesystem for these schemes).
_CORE_SCHEMES = ("s3://", "gs://", "az://")


def _core_uri(uri: str) -> bool:
    return uri.startswith(_CORE_SCHEMES)


def _core_store(uri: str, conn_id: str | None) -> tuple[Any, str, dict[str, str]]:
    """The core store of ``uri``'s folder, the object's key and the connection's credentials."""
    folder, key = uri.rsplit("/", 1)
    access = SkyplaneHook.store_access(conn_id)
    with exported_env(access.env):
        return api.open_store(folder + "/", access.options), key, access.env


def _write_text(uri: str, text: str, conn_id: str | None) -> None:
    if _core_uri(uri):
        store, key, env = _core_store(uri, conn_id)
        with exported_env(env):
            store.write(key, text.encode())
        return
    path = ObjectStoragePath(uri, conn_id=conn_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
