"""The SSH side the azure and gcp backends share: options, bootstrap, agent stop, failure path."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudhosts import (
    Bootstrap,
    InstanceHost,
    cached_wheelhouse,
    save_cloud_fleet,
)
from skyplane_ops.provision.cloudvm.common import AGENT_USER, DEADLINE_COMMAND
from skyplane_ops.provision.cloudvm.prelude import FleetStart, S, start_fleet
from skyplane_ops.provision.control_cidrs import detect_client_cidr, parse_cidrs
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.records import PendingRecord
from skyplane_ops.provision.secrets import delete_secret
from skyplane_ops.provision.ssh.bootstrap import (
    BootstrapOptions,
    bootstrap_gateways,
    teardown_gateways,
)
from skyplane_ops.provision.ssh.hosts import SSHHost, gateway_id

log = logging.getLogger(__name__)


class CloudBoot:
    """Options and steps common to cloud VM backends whose host keys come from custom data."""

    name = "cloud"
    # The record of the fleet being provisioned (``creating``): region steps save it again
    # before each create call.
    _pending: PendingRecord | None = None
    # Set by a run of both whose copy outran this provisioning (``provision.cancel``): checked
    # before each create call (``record``) and in the boot waits.
    _cancel: threading.Event | None = None
    creator: str  # the creator tag (each backend sets it from its option)

    def __init__(
        self,
        *,
        client_cidr: str | Sequence[str] | None = None,
        ssh_user: str = AGENT_USER,
        ssh_port: int = 22,
        remote_python: str = "python3",
        remote_python_version: str = "3.10",
        control_port: int = 8701,
        data_port: int = 8702,
        probe_port: int = 8703,
        bind_host: str = "0.0.0.0",
        ttl_seconds: float = 6 * 3600,
        idle_timeout: float = 900.0,
        poweroff_on_idle: bool = True,
        wheelhouse: str | None = None,
        bootstrap: Bootstrap | None = None,
        deadline_command: str = DEADLINE_COMMAND,
    ) -> None:
        # The control plane's address(es) the firewalls admit; validated now (one-line errors).
        self.client_cidrs = parse_cidrs(client_cidr)
        self.ssh_user = ssh_user
        self.ssh_port = ssh_port
        self.remote_python = remote_python
        self.remote_python_version = remote_python_version
        self.control_port = control_port
        self.data_port = data_port
        self.probe_port = probe_port
        # "0.0.0.0" on real VMs; "public" binds the VM's own address (fakes sharing one host).
        self.bind_host = bind_host
        self.ttl_seconds = ttl_seconds
        self.idle_timeout = idle_timeout
        self.poweroff_on_idle = poweroff_on_idle
        self.wheelhouse = wheelhouse
        # How the agent reaches the VM's root deadline (cloud-init's helper, through sudo).
        self.deadline_command = deadline_command
        self._bootstrap: Bootstrap = bootstrap or self._ssh_bootstrap
        self._wheel_lock = threading.Lock()

    def resolve_client_cidr(self) -> tuple[str, ...]:
        """The control plane's address(es) the firewalls admit: as configured, else detected
        (the logged fallback of ``control_cidrs.detect_client_cidr``)."""
        if self.client_cidrs is None:
            self.client_cidrs = detect_client_cidr()
        return self.client_cidrs

    def gateway_ports(self) -> list[int]:
        return sorted({self.control_port, self.data_port, self.probe_port})

    def ports_text(self) -> str:
        return ",".join(map(str, self.gateway_ports()))

    def ssh_host(self, region: str, address: str, key_path: str | None, host_key: str) -> SSHHost:
        return SSHHost(
            address=address,
            region=region,
            port=self.ssh_port,
            user=self.ssh_user,
            key_path=key_path,
            host_key=host_key,
            python=self.remote_python,
            bind_host=address if self.bind_host == "public" else self.bind_host,
            control_port=self.control_port,
            data_port=self.data_port,
        )

    def launched_hosts(
        self,
        states: Sequence[Any],
        by_name: Mapping[str, str],
        names: Callable[[Any], Iterable[str]],
    ) -> list[InstanceHost]:
        """One host per launched VM (``names(state)`` in launch order), keyed from its own
        custom data; ``by_name`` maps the cloud's region name back to the plan's."""
        return [
            InstanceHost(
                gateway_id=gateway_id(by_name[s.region], i),
                region=by_name[s.region],
                instance_id=name,
                ssh=self.ssh_host(
                    by_name[s.region], s.public_ips[name], s.key_path, s.host_keys[name]
                ),
            )
            for s in states
            for i, name in enumerate(names(s))
        ]

    def _default_wheelhouse(self) -> str:
        return cached_wheelhouse(self._wheel_lock, self.remote_python_version)

    def bootstrap_options(self) -> BootstrapOptions:
        return BootstrapOptions(
            accept_unknown_host_keys=False,  # the host key is ours: we generated it
            wheelhouse=self.wheelhouse,
            wheelhouse_builder=self._default_wheelhouse,
            idle_timeout=self.idle_timeout,
            poweroff_on_idle=self.poweroff_on_idle,
            deadline_command=self.deadline_command,
            connect_timeout=20.0,
            ready_timeout=120.0,
            cancel=self._cancel,
        )

    def _ssh_bootstrap(
        self, hosts: Sequence[InstanceHost], transfer_id: str, secret_ref: str
    ) -> list[Gateway]:
        pairs = [(h.gateway_id, h.ssh) for h in hosts]
        return bootstrap_gateways(pairs, transfer_id, secret_ref, self.bootstrap_options())

    def stop_agents(self, fleet: GatewayFleet) -> None:
        """Stop the agents before their VMs go (best effort: the VMs are deleted next anyway)."""
        try:
            teardown_gateways(fleet.gateways, fleet.transfer_id, self.bootstrap_options())
        except ProvisionError as exc:
            log.info("agent tear-down before deletion failed: %s", exc)

    @staticmethod
    def forget_key(key_path: str | None) -> None:
        if key_path:
            Path(key_path).unlink(missing_ok=True)

    def open_fleet(
        self,
        transfer_id: str,
        regions: tuple[dict[str, int], dict[str, str]],
        tags: Mapping[str, str] | None,
        make_state: Callable[[str, int], S],
        snapshot: Callable[[FleetStart[S]], dict[str, Any]],
    ) -> FleetStart[S]:
        """``prelude.start_fleet`` with this backend's name, time to live and creator;
        ``regions`` as ``prelude.requested`` gives them."""
        wanted, by_name = regions
        return start_fleet(
            backend=self.name,
            transfer_id=transfer_id,
            wanted=wanted,
            by_name=by_name,
            tags=tags,
            ttl_seconds=self.ttl_seconds,
            creator=self.creator,
            make_state=make_state,
            snapshot=snapshot,
        )

    @contextmanager
    def creating(self, start: FleetStart[Any], cleanup: Callable[[], Any]) -> Iterator[None]:
        """Around the create calls of ``start``: its pending record is saved first; on any
        failure everything created is deleted (``cleanup``) and the error re-raised, saying so."""
        self._pending = start.pending
        try:
            start.pending.save()  # before the first create call
            yield
        except BaseException as exc:
            self._pending = None
            self.fail_cleanly(exc, start.transfer_id, cleanup, start.secret_ref, start.pending)
        self._pending = None

    def save_fleet(
        self,
        start: FleetStart[Any],
        hosts: Sequence[InstanceHost],
        gateways: Sequence[Gateway],
        per_gateway: Callable[[InstanceHost], Mapping[str, Any]],
        resources: Mapping[str, Any],
    ) -> GatewayFleet:
        """The bootstrapped fleet's record (``resources`` with the regions' states and the
        probe port), saved before it is returned."""
        return save_cloud_fleet(
            backend=self.name,
            transfer_id=start.transfer_id,
            hosts=hosts,
            gateways=gateways,
            per_gateway=per_gateway,
            secret_ref=start.secret_ref,
            tags=start.tags,
            resources={**resources, "regions": start.regions(), "probe_port": self.probe_port},
        )

    def fail_cleanly(
        self,
        exc: BaseException,
        transfer_id: str,
        cleanup: Callable[[], Any],
        secret_ref: str,
        pending: PendingRecord | None = None,
    ) -> NoReturn:
        """Delete everything created so far, then re-raise ``exc`` saying so. The pending
        record goes only once everything is deleted (else it is what the sweeper works from)."""
        log.warning("provisioning %s failed (%s); deleting what was created", transfer_id, exc)
        try:
            cleanup()
        finally:
            delete_secret(secret_ref)
        if pending is not None:
            pending.forget()
        if isinstance(exc, ProvisionError):
            raise type(exc)(f"{exc} (everything created was deleted)") from exc
        if isinstance(exc, Exception):
            raise ProvisionError(
                f"{self.name} provisioning failed: {exc!r} (everything created was deleted)"
            ) from exc
        raise exc
