"""The ``ssh`` backend ("bring your own VMs"): bootstrap gateway agents on hosts over SSH.

Host keys are verified (paramiko ``RejectPolicy``) against the key given in the inventory or a
known_hosts file; unknown keys are accepted only when the user opts in. Each gateway gets its own
remote directory ``<remote_root>/<transfer_id>/<gateway_id>`` holding the agent bundle, the
0600 secret, a ``meta.json`` (for the sweeper), the ready file and the agent's log. Tear-down
stops the agent and removes that directory. The AWS backend reuses ``bootstrap_gateways``. Hosts and
connections live in ``hosts``, the agent lifecycle over SSH in ``bootstrap``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import shlex
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    secret_bytes,
)
from skyplane_ops.provision.ssh.bootstrap import (
    BootstrapOptions,
    _parallel,
    _remote_dir,
    _stop_and_remove,
    bootstrap_gateways,
    teardown_gateways,
)
from skyplane_ops.provision.ssh.hosts import (
    SSHHost,
    SSHInventory,
    connect,
    run,
)

# The package's name, as when this was the module skyplane_ops.provision.ssh.
log = logging.getLogger("skyplane_ops.provision.ssh")


class SSHProvisioner:
    """Gateways on hosts you already have, bootstrapped over SSH."""

    name = "ssh"

    def __init__(
        self,
        inventory: SSHInventory | Mapping[str, Any] | str | Path,
        *,
        accept_unknown_host_keys: bool = False,
        wheelhouse: str | None = None,
        idle_timeout: float = 900.0,
        connect_timeout: float = 10.0,
        ready_timeout: float = 60.0,
    ) -> None:
        if isinstance(inventory, SSHInventory):
            self.inventory = inventory
        elif isinstance(inventory, Mapping):
            self.inventory = SSHInventory.from_dict(inventory)
        else:
            self.inventory = SSHInventory.load(inventory)
        self.options = BootstrapOptions(
            accept_unknown_host_keys=accept_unknown_host_keys,
            wheelhouse=wheelhouse,
            idle_timeout=idle_timeout,
            connect_timeout=connect_timeout,
            ready_timeout=ready_timeout,
        )

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Bootstrap agents on the inventory's hosts. ``cancel`` set (``provision.cancel``):
        the bootstraps stop and remove what they started."""
        check_transfer_id(transfer_id)
        assignments = self.inventory.assign({r: n for r, n in vms.items() if n > 0})
        secret_ref = create_secret(transfer_id)
        opts = dataclasses.replace(self.options, cancel=cancel)
        try:
            gateways = bootstrap_gateways(assignments, transfer_id, secret_ref, opts)
        except BaseException:
            delete_secret(secret_ref)
            raise
        fleet = GatewayFleet.create(transfer_id, self.name, gateways, secret_ref, tags)
        records.save_fleet(fleet)
        return fleet

    def deprovision(self, fleet: GatewayFleet) -> None:
        _graceful_shutdown(fleet)
        teardown_gateways(fleet.gateways, fleet.transfer_id, self.options)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Find agent directories (by ``meta.json``) on every inventory host and remove them."""
        results = _parallel(
            lambda host: self._sweep_host(host, transfer_id, older_than_seconds),
            [(h,) for h in self.inventory.all_hosts()],
        )
        errors = [f"{item[0].label}: {exc}" for item, _, exc in results if exc is not None]
        if errors:
            raise ProvisionError("SSH sweep incomplete: " + "; ".join(errors))
        return [path for _, found, _ in results for path in found]

    def _sweep_host(
        self, host: SSHHost, transfer_id: str | None, older_than_seconds: float | None
    ) -> list[str]:
        removed: list[str] = []
        client = connect(
            host,
            accept_unknown_host_keys=self.options.accept_unknown_host_keys,
            timeout=self.options.connect_timeout,
        )
        try:
            home = client.open_sftp().normalize(".")
            root = posixpath.dirname(posixpath.dirname(_remote_dir(home, host, "t", "g")))
            listing = (
                f"for f in {shlex.quote(root)}/*/*/meta.json; do "
                '[ -f "$f" ] && cat "$f" && echo; done; true'
            )
            _, out, _ = run(client, listing)
            for line in out.splitlines():
                try:
                    meta = json.loads(line)
                except ValueError:
                    continue
                if transfer_id is not None and meta.get("transfer_id") != transfer_id:
                    continue
                age = time.time() - float(meta.get("created_at", 0))
                if older_than_seconds is not None and age < older_than_seconds:
                    continue
                tid, gid = meta["transfer_id"], meta["gateway_id"]
                remote_dir = posixpath.join(root, tid, gid)
                _, pid_text, _ = run(
                    client,
                    "sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p' "
                    f"{shlex.quote(remote_dir + '/ready.json')} 2>/dev/null; true",
                )
                pid = int(pid_text.strip()) if pid_text.strip().isdigit() else 0
                _stop_and_remove(client, remote_dir, pid, tid, gid)
                removed.append(f"ssh:{host.label}:{remote_dir}")
        finally:
            client.close()
        return removed


def _graceful_shutdown(fleet: GatewayFleet) -> None:
    """Ask every agent to stop through its control API first (best effort; kill follows)."""
    try:
        from gateway_agent.client import GatewayClient

        secret = secret_bytes(fleet.secret_ref)
    except (ImportError, ProvisionError):
        return
    for gw in fleet.gateways:
        try:
            GatewayClient(gw.host, gw.control_port, secret).shutdown()
        except Exception as exc:  # already gone, unreachable: the SSH kill handles it
            log.debug("graceful shutdown of %s failed: %s", gw.gateway_id, exc)
