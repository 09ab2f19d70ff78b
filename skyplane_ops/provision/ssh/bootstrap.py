"""Gateway agents over SSH: upload the bundle and secret, start the agent, wait until it is
healthy, and stop and remove it again; in parallel over a fleet, cleaning up on failure."""

from __future__ import annotations

import json
import logging
import posixpath
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.bundle import (
    AgentBundle,
    agent_env_command,
    build_bundle,
    deps_check_command,
    serve_args,
    unpack_wheels_command,
)
from skyplane_ops.provision.cancel import check as check_cancel
from skyplane_ops.provision.cancel import pause
from skyplane_ops.provision.fleet import Gateway
from skyplane_ops.provision.secrets import (
    read_secret,
    secret_bytes,
)
from skyplane_ops.provision.ssh.hosts import (
    GatewayStartError,
    SSHHost,
    connect,
    run,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BootstrapOptions:
    """How agents are started; shared by the ssh and aws backends."""

    accept_unknown_host_keys: bool = False
    wheelhouse: str | None = None
    # Called (once per host that needs it) to obtain a wheelhouse when none was given.
    wheelhouse_builder: Callable[[], str] | None = None
    idle_timeout: float = 900.0
    poweroff_on_idle: bool = False
    # The VM's root deadline helper (cloud VMs): lease renewals extend it, a lapse powers off.
    deadline_command: str = ""
    connect_timeout: float = 10.0
    ready_timeout: float = 60.0
    # A run of both's ``provision.cancel``: set, a bootstrap stops before its upload and in
    # its ready wait, and removes what it started (as on any failure).
    cancel: threading.Event | None = field(default=None, compare=False)


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
    if opts.deadline_command:
        args += ["--deadline-command", opts.deadline_command]
    # ``python`` is a shell word list on purpose ("python3 -X utf8"); the rest is quoted.
    agent = host.python + " " + " ".join(q(a) for a in args)
    # ``env -i``: an allow-list environment; nothing of the login's credentials reaches it.
    return (
        f"cd {q(remote_dir)} || exit 1; {agent_env_command(pythonpath)} setsid nohup {agent} "
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
    cancel: threading.Event | None = None,
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
        pause(cancel, 0.1, f"agent on {host.label}")
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
        check_cancel(opts.cancel, f"agent on {host.label}")
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
        ready = _wait_ready(client, sftp, host, remote_dir, pid, opts.ready_timeout, opts.cancel)
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
