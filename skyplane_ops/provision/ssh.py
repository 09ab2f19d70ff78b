"""The ``ssh`` backend ("bring your own VMs"): bootstrap gateway agents on hosts over SSH.

Host keys are verified (paramiko ``RejectPolicy``) against the key given in the inventory or a
known_hosts file; unknown keys are accepted only when the user opts in. Each gateway gets its own
remote directory ``<remote_root>/<transfer_id>/<gateway_id>`` holding the agent bundle, the
0600 secret, a ``meta.json`` (for the sweeper), the ready file and the agent's log. Tear-down
stops the agent and removes that directory. The AWS backend reuses ``bootstrap_gateways``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import posixpath
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.bundle import (
    AgentBundle,
    build_bundle,
    deps_check_command,
    serve_args,
    unpack_wheels_command,
)
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.inventory import RegionAttrs, load_document, parse_regions
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    read_secret,
    secret_bytes,
)

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


@dataclass(frozen=True)
class BootstrapOptions:
    """How agents are started; shared by the ssh and aws backends."""

    accept_unknown_host_keys: bool = False
    wheelhouse: str | None = None
    # Called (once per host that needs it) to obtain a wheelhouse when none was given.
    wheelhouse_builder: Callable[[], str] | None = None
    idle_timeout: float = 900.0
    poweroff_on_idle: bool = False
    connect_timeout: float = 10.0
    ready_timeout: float = 60.0


def _remote_dir(home: str, host: SSHHost, transfer_id: str, gw_id: str) -> str:
    root = host.remote_root if posixpath.isabs(host.remote_root) else f"{home}/{host.remote_root}"
    return posixpath.join(root, transfer_id, gw_id)


def _serve_command(
    host: SSHHost, remote_dir: str, gw_id: str, pythonpath: str, opts: BootstrapOptions
) -> str:
    q = shlex.quote
    args = serve_args(
        host=host.bind_host,
        secret_file=f"{remote_dir}/secret",
        ready_file=f"{remote_dir}/ready.json",
        gateway_id=gw_id,
        region=host.region,
        idle_timeout=opts.idle_timeout,
        control_port=host.control_port,
        data_port=host.data_port,
    )
    if opts.poweroff_on_idle:
        args.append("--poweroff-on-idle")
    # ``python`` is a shell word list on purpose ("python3 -X utf8"); the rest is quoted.
    agent = host.python + " " + " ".join(q(a) for a in args)
    return (
        f"cd {q(remote_dir)} || exit 1; PYTHONPATH={q(pythonpath)} setsid nohup {agent} "
        f"> {q(remote_dir + '/agent.log')} 2>&1 < /dev/null & echo $!"
    )


def _make_available_deps(
    client: paramiko.SSHClient,
    sftp: paramiko.SFTPClient,
    host: SSHHost,
    remote_dir: str,
    opts: BootstrapOptions,
) -> str:
    """Return the PYTHONPATH suffix that makes the agent's dependencies import on the host."""
    status, _, err = run(client, deps_check_command(host.python))
    if status == 0:
        return ""
    wheelhouse = opts.wheelhouse
    if not wheelhouse and opts.wheelhouse_builder is not None:
        wheelhouse = opts.wheelhouse_builder()
    if not wheelhouse:
        raise GatewayStartError(
            f"{host.python} on {host.label} lacks the agent's dependencies "
            f"({err.strip().splitlines()[-1] if err.strip() else 'import failed'}); "
            "install them there or pass a wheelhouse (see bundle.build_wheelhouse)"
        )
    wheels = sorted(Path(wheelhouse).glob("*.whl"))
    if not wheels:
        raise GatewayStartError(f"wheelhouse {wheelhouse} has no wheels")
    run(client, f"mkdir -p {shlex.quote(remote_dir + '/wheels')}")
    for wheel in wheels:
        sftp.put(str(wheel), f"{remote_dir}/wheels/{wheel.name}")
    deps = f"{remote_dir}/deps"
    status, _, err = run(
        client, unpack_wheels_command(host.python, f"{remote_dir}/wheels", deps), timeout=300
    )
    if status == 0:
        status, _, err = run(
            client, f"PYTHONPATH={shlex.quote(deps)} {deps_check_command(host.python)}"
        )
    if status != 0:
        raise GatewayStartError(
            f"agent dependencies from {wheelhouse} do not import with {host.python} on "
            f"{host.label}: {err.strip()[-300:]}"
        )
    return ":" + deps


def _wait_ready(
    client: paramiko.SSHClient,
    sftp: paramiko.SFTPClient,
    host: SSHHost,
    remote_dir: str,
    pid: int,
    timeout: float,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    ready = f"{remote_dir}/ready.json"
    while time.monotonic() < deadline:
        try:
            with sftp.open(ready) as fh:
                return dict(json.loads(fh.read()))
        except (OSError, ValueError):
            pass
        status, _, _ = run(client, f"kill -0 {pid}")
        if status != 0:
            _, logtail, _ = run(client, f"tail -c 2000 {shlex.quote(remote_dir + '/agent.log')}")
            raise GatewayStartError(f"agent on {host.label} exited during start:\n{logtail}")
        time.sleep(0.1)
    raise GatewayStartError(f"agent on {host.label} wrote no ready file within {timeout:.0f}s")


def wait_healthy(host: str, control_port: int, secret: bytes, timeout: float = 20.0) -> None:
    """Poll the agent's authenticated health endpoint until it answers."""
    from gateway_agent.client import GatewayClient  # the agent's own client (data plane API)

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            GatewayClient(host, control_port, secret).health()
            return
        except Exception as exc:  # any failure means "not yet"; reported after the deadline
            last = exc
            time.sleep(0.2)
    raise GatewayStartError(
        f"agent at {host}:{control_port} not healthy after {timeout:.0f}s: {last}"
    )


def bootstrap_gateway(
    host: SSHHost,
    gw_id: str,
    transfer_id: str,
    bundle: AgentBundle,
    secret_ref: str,
    opts: BootstrapOptions,
) -> Gateway:
    """Upload, start and health-check one agent; on failure it removes what it did, then raises."""
    client = connect(
        host, accept_unknown_host_keys=opts.accept_unknown_host_keys, timeout=opts.connect_timeout
    )
    remote_dir = ""
    pid = 0
    try:
        sftp = client.open_sftp()
        remote_dir = _remote_dir(sftp.normalize("."), host, transfer_id, gw_id)
        status, _, err = run(client, f"mkdir -p -m 700 {shlex.quote(remote_dir)}")
        if status != 0:
            raise GatewayStartError(f"cannot create {remote_dir} on {host.label}: {err.strip()}")
        sftp.put(str(bundle.path), f"{remote_dir}/{bundle.remote_name}")
        with sftp.open(f"{remote_dir}/secret", "w") as fh:
            sftp.chmod(f"{remote_dir}/secret", 0o600)
            fh.write(read_secret(secret_ref))
        meta = {
            "transfer_id": transfer_id,
            "gateway_id": gw_id,
            "region": host.region,
            "created_at": time.time(),
        }
        with sftp.open(f"{remote_dir}/meta.json", "w") as fh:
            fh.write(json.dumps(meta))
        extra = _make_available_deps(client, sftp, host, remote_dir, opts)
        pythonpath = f"{remote_dir}/{bundle.remote_name}{extra}"
        status, out, err = run(client, _serve_command(host, remote_dir, gw_id, pythonpath, opts))
        if status != 0 or not out.strip().isdigit():
            raise GatewayStartError(f"cannot start the agent on {host.label}: {err.strip()}")
        pid = int(out.strip())
        ready = _wait_ready(client, sftp, host, remote_dir, pid, opts.ready_timeout)
        pid = int(ready.get("pid", pid))
        gateway = Gateway(
            gateway_id=gw_id,
            region=host.region,
            host=host.control_host,
            control_port=int(ready["control_port"]),
            data_port=int(ready["data_port"]),
            resources={
                "ssh": host.to_dict(),
                "remote_dir": remote_dir,
                "pid": pid,
                "data_addresses": host.data_addresses(),
            },
        )
        wait_healthy(gateway.host, gateway.control_port, secret_bytes(secret_ref))
        return gateway
    except BaseException:
        if remote_dir:
            _stop_and_remove(client, remote_dir, pid, transfer_id, gw_id)
        raise
    finally:
        client.close()


def _gone(pid: int) -> str:
    """Shell test: the process has exited (a zombie nobody reaps counts as exited)."""
    return (
        f"{{ ! kill -0 {pid} 2>/dev/null || "
        f"[ \"$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1)\" = Z ]; }}"
    )


def _stop_and_remove(
    client: paramiko.SSHClient, remote_dir: str, pid: int, transfer_id: str, gw_id: str
) -> None:
    """Kill the agent (only if its command line names our directory) and delete the directory."""
    if not remote_dir.rstrip("/").endswith(f"/{transfer_id}/{gw_id}"):
        raise ProvisionError(f"refusing to remove unexpected remote path {remote_dir!r}")
    q = shlex.quote(remote_dir)
    if pid:
        # The pid may have been reused: only signal a process started from our directory.
        script = (
            f"if grep -qa {q} /proc/{pid}/cmdline 2>/dev/null || "
            f"grep -qa {q} /proc/{pid}/environ 2>/dev/null; then kill -TERM {pid}; "
            f"for i in $(seq 50); do {_gone(pid)} && break; sleep 0.1; done; "
            f"kill -KILL {pid} 2>/dev/null; fi; true"
        )
        run(client, script)
    parent = shlex.quote(posixpath.dirname(remote_dir))
    run(client, f"rm -rf {q}; rmdir {parent} 2>/dev/null; true")


def teardown_gateway(gateway: Gateway, transfer_id: str, opts: BootstrapOptions) -> None:
    """Stop one agent and remove its remote directory (idempotent)."""
    res = gateway.resources
    host = SSHHost(**res["ssh"])
    client = connect(
        host, accept_unknown_host_keys=opts.accept_unknown_host_keys, timeout=opts.connect_timeout
    )
    try:
        _stop_and_remove(
            client, res["remote_dir"], int(res.get("pid", 0)), transfer_id, gateway.gateway_id
        )
    finally:
        client.close()


def _parallel(
    fn: Callable[..., Any], items: Sequence[Any]
) -> list[tuple[Any, Any, BaseException | None]]:
    """Run ``fn(*item)`` for every item in threads: (item, result, error) per item, in order.

    An interrupt (Ctrl-C) while waiting cancels what has not started, lets running calls
    finish, and is raised as ``InterruptedDuringBatch`` carrying the finished results, so the
    caller can undo them before the interrupt propagates.
    """
    if not items:
        return []
    pool = ThreadPoolExecutor(max_workers=min(16, len(items)))
    futures = [pool.submit(fn, *item) for item in items]
    interrupted: BaseException | None = None
    try:
        wait(futures)
    except BaseException as exc:
        interrupted = exc
        for fut in futures:
            fut.cancel()
    pool.shutdown(wait=True)
    out: list[tuple[Any, Any, BaseException | None]] = []
    for item, fut in zip(items, futures, strict=True):
        if fut.cancelled():
            out.append((item, None, CancelledError()))
            continue
        error = fut.exception()
        out.append((item, None if error else fut.result(), error))
    if interrupted is not None:
        raise InterruptedDuringBatch(out) from interrupted
    return out


class InterruptedDuringBatch(KeyboardInterrupt):
    """A KeyboardInterrupt that still carries the results of the calls that finished."""

    def __init__(self, results: list[tuple[Any, Any, BaseException | None]]) -> None:
        super().__init__("interrupted")
        self.results = results


def bootstrap_gateways(
    assignments: Sequence[tuple[str, SSHHost]],
    transfer_id: str,
    secret_ref: str,
    opts: BootstrapOptions,
    bundle: AgentBundle | None = None,
) -> list[Gateway]:
    """Bootstrap every (gateway_id, host) in parallel; all-or-nothing."""
    bundle = bundle or build_bundle()
    try:
        results = _parallel(
            lambda gw_id, host: bootstrap_gateway(
                host, gw_id, transfer_id, bundle, secret_ref, opts
            ),
            list(assignments),
        )
    except InterruptedDuringBatch as interrupt:
        # Ctrl-C: undo the gateways that did start, then let the interrupt through.
        teardown_gateways(
            [res for _, res, exc in interrupt.results if exc is None], transfer_id, opts
        )
        raise
    started = [res for _, res, exc in results if exc is None]
    failures = [(item, exc) for item, _, exc in results if exc is not None]
    if failures:
        teardown_gateways(started, transfer_id, opts)
        (gw_id, host), first = failures[0]
        if isinstance(first, ProvisionError):
            raise type(first)(
                f"{first} [{len(failures)} of {len(results)} gateway(s) failed; "
                "the others were torn down]"
            ) from first
        raise ProvisionError(f"bootstrap of {gw_id} on {host.label} failed: {first!r}") from first
    return started


def teardown_gateways(
    gateways: Iterable[Gateway], transfer_id: str, opts: BootstrapOptions
) -> None:
    """Tear down every gateway, trying all of them before reporting what could not be cleaned."""
    results = _parallel(
        lambda gw: teardown_gateway(gw, transfer_id, opts), [(g,) for g in gateways]
    )
    failed = [f"{item[0].gateway_id}: {exc}" for item, _, exc in results if exc is not None]
    if failed:
        raise ProvisionError("could not tear down: " + "; ".join(failed))


# --------------------------------------------------------------------------- the backend


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
        self, vms: Mapping[str, int], *, transfer_id: str, tags: Mapping[str, str] | None = None
    ) -> GatewayFleet:
        check_transfer_id(transfer_id)
        assignments = self.inventory.assign({r: n for r, n in vms.items() if n > 0})
        secret_ref = create_secret(transfer_id)
        try:
            gateways = bootstrap_gateways(assignments, transfer_id, secret_ref, self.options)
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
