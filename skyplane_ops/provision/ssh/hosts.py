"""SSH hosts and connections: the host record and inventory, host-key checking (paramiko
``RejectPolicy`` unless the user opts in) and running one remote command."""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.inventory import RegionAttrs, load_document, parse_regions

log = logging.getLogger(__name__)

DEFAULT_REMOTE_ROOT = ".skyplane-ops/gateways"  # relative to the remote user's home


class HostKeyError(ProvisionError):
    """The host presented an unknown or a different host key; we refused to talk to it."""


class HostUnreachableError(ProvisionError):
    """No SSH connection could be opened to the host."""


class SSHAuthError(ProvisionError):
    """The host refused our credentials."""


class GatewayStartError(ProvisionError):
    """The agent was uploaded but did not start or did not become healthy."""


@dataclass(frozen=True)
class SSHHost:
    """One host of the inventory and how to reach it; ``host_key`` is ``"TYPE BASE64"``."""

    address: str
    region: str
    port: int = 22
    user: str = "root"
    key_path: str | None = None
    host_key: str | None = None
    known_hosts: str | None = None
    python: str = "python3"
    # Address the agent listens on, and fixed ports (0 = any free port, fine without firewalls).
    bind_host: str = "0.0.0.0"
    control_port: int = 0
    data_port: int = 0
    remote_root: str = DEFAULT_REMOTE_ROOT
    # Several networks: SSH uses ``address``, the control plane ``control_address``, peers
    # ``data_address``, and a peer region listed in ``peer_addresses`` the address given there.
    control_address: str | None = None
    data_address: str | None = None
    peer_addresses: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not self.address:
            raise ProvisionError(f"host in region {self.region!r} has no 'address'")
        peers = self.peer_addresses
        if not isinstance(peers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in peers.items()
        ):
            raise ProvisionError(
                f"host {self.address}: 'peer_addresses' must map peer region ids to addresses"
            )
        object.__setattr__(self, "peer_addresses", dict(peers))

    @property
    def label(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"

    @property
    def control_host(self) -> str:
        """Where the control plane reaches the agent."""
        return self.control_address or self.address

    def data_addresses(self) -> dict[str, str]:
        """Peer region (or ``*`` for any other) -> the address a peer there dials."""
        return {"*": self.data_address or self.control_host, **self.peer_addresses}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SSHInventory:
    """Hosts per region, and each region's attributes (see ``provision.inventory``)."""

    hosts: dict[str, list[SSHHost]] = field(default_factory=dict)
    regions: dict[str, RegionAttrs] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SSHInventory:
        entries, attrs = parse_regions(data)
        hosts: dict[str, list[SSHHost]] = {}
        for region, listed in entries.items():
            try:
                hosts[region] = [SSHHost(**{**entry, "region": region}) for entry in listed]
            except TypeError as exc:
                raise ProvisionError(f"bad inventory entry for region {region!r}: {exc}") from exc
        return cls(hosts, attrs)

    @classmethod
    def load(cls, path: str | Path) -> SSHInventory:
        return cls.from_dict(load_document(path))

    def all_hosts(self) -> list[SSHHost]:
        return [h for hosts in self.hosts.values() for h in hosts]

    def assign(self, vms: Mapping[str, int]) -> list[tuple[str, SSHHost]]:
        """(gateway_id, host) for every VM of the plan; raises before touching any host."""
        problems = []
        for region, count in sorted(vms.items()):
            have = len(self.hosts.get(region, []))
            if count > have:
                problems.append(
                    f"region {region!r} needs {count} host(s), the inventory has {have}"
                )
        if problems:
            known = ", ".join(sorted(self.hosts)) or "none"
            raise ProvisionError(
                "SSH inventory too small: " + "; ".join(problems) + f" (inventory regions: {known})"
            )
        return [
            (gateway_id(region, i), self.hosts[region][i])
            for region, count in sorted(vms.items())
            for i in range(count)
        ]


def gateway_id(region: str, index: int) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in region).strip("-")
    return f"gw-{slug}-{index}"


# --------------------------------------------------------------------------- connections


def _parse_host_key(text: str) -> paramiko.PKey:
    parts = text.split()
    if len(parts) < 2:
        raise ProvisionError(f"host key {text!r} is not 'TYPE BASE64'")
    try:
        return paramiko.PKey.from_type_string(parts[0], base64.b64decode(parts[1]))
    except Exception as exc:  # paramiko raises several types for a bad key
        raise ProvisionError(f"host key {text[:40]!r}... cannot be parsed: {exc}") from exc


def _known_name(host: SSHHost) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def connect(
    host: SSHHost, *, accept_unknown_host_keys: bool = False, timeout: float = 10.0
) -> paramiko.SSHClient:
    """An authenticated SSH client, or a typed error that says what went wrong."""
    client = paramiko.SSHClient()
    if host.host_key:
        key = _parse_host_key(host.host_key)
        client.get_host_keys().add(_known_name(host), key.get_name(), key)
    elif host.known_hosts:
        try:
            client.load_host_keys(os.path.expanduser(host.known_hosts))
        except OSError as exc:
            raise HostKeyError(f"cannot read known_hosts {host.known_hosts}: {exc}") from exc
    else:
        client.load_system_host_keys()
    client.set_missing_host_key_policy(
        paramiko.AutoAddPolicy() if accept_unknown_host_keys else paramiko.RejectPolicy()
    )
    try:
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=os.path.expanduser(host.key_path) if host.key_path else None,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            allow_agent=False,
            look_for_keys=host.key_path is None,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyError(
            f"host key of {host.label} does not match the expected one "
            f"(got {exc.key.get_name()} {exc.key.fingerprint}, expected "
            f"{exc.expected_key.fingerprint}); refusing to connect"
        ) from exc
    except paramiko.AuthenticationException as exc:
        client.close()
        raise SSHAuthError(
            f"{host.label} refused our credentials (key {host.key_path or 'default keys'}): {exc}"
        ) from exc
    except (TimeoutError, paramiko.ssh_exception.NoValidConnectionsError, OSError) as exc:
        client.close()
        raise HostUnreachableError(f"cannot reach {host.label}: {exc}") from exc
    except paramiko.SSHException as exc:
        client.close()
        if "not found in known_hosts" in str(exc):
            raise HostKeyError(
                f"host key of {host.label} is unknown; put it in the inventory ('host_key') or "
                "a known_hosts file, or opt in with accept_unknown_host_keys=True"
            ) from exc
        raise HostUnreachableError(f"SSH handshake with {host.label} failed: {exc}") from exc
    return client


def run(client: paramiko.SSHClient, command: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """Run a remote command to completion: (exit status, stdout, stderr)."""
    _, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err


# --------------------------------------------------------------------------- bootstrap
