"""The local backend: every gateway is a ``python -m gateway_agent serve`` process on this host.

It makes ``skyplane-ops cp`` and the tests work with no cloud account: each region of the plan
gets its VM count of agent processes on loopback, with the per-transfer secret in a 0600 file.
Processes run in their own session, carry the transfer id on their command line (so ``sweep``
can find them after the control plane died) and stop themselves when their lease lapses
(see ``lease.py``) or after ``idle_timeout``.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.boot_delay import delayed
from skyplane_ops.provision.bundle import agent_env, serve_args
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.local_options import check_local_options
from skyplane_ops.provision.records import forget_fleet, load_fleets, save_fleet
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    private_dir,
    secret_bytes,
)

log = logging.getLogger(__name__)


def gateway_id(region: str, index: int) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in region).strip("-")
    return f"gw-{slug}-{index}"


def _alive(pid: int, marker: str) -> bool:
    """True if ``pid`` runs and is one of our agents (its command line has ``marker``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return marker.encode() in fh.read()
    except OSError:
        return False


def _exiting(pid: int) -> bool:
    """True if ``pid`` exists with an empty command line: a process that is exiting or has
    exited and waits to be reaped (an agent that obeyed a shutdown request)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read() == b""
    except OSError:
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its own parent reaps it


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    """Wait until ``pid`` has exited and, if it is our child, is reaped (True), or ``timeout``
    passes (False). On a pidfd, which wakes the moment that very process exits (no polling
    interval per gateway, no confusion with a later process of the same pid); a kernel without
    pidfds (before 5.3) is polled until the pid is no longer our agent."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            exited = bool(select.select([fd], [], [], max(0.0, timeout))[0])
        finally:
            os.close(fd)
        if exited:
            _reap(pid)
        return exited
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        if not _alive(pid, marker):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _kill(pid: int, marker: str, grace: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after ``grace``; only if the pid is still our agent."""
    if not _alive(pid, marker):
        if _exiting(pid):  # ours, on its way out after a shutdown request: reap it
            _wait_gone(pid, marker, grace)
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if _wait_gone(pid, marker, grace):
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _stop(proc: subprocess.Popen[bytes], grace: float = 3.0) -> None:
    """Stop an agent this process started, by its ``Popen`` (no command-line check: a child
    that has not reached ``exec`` yet still shows ours): SIGTERM, SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        fd = -1
    try:
        if fd >= 0:
            select.select([fd], [], [], grace)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        else:
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        if fd >= 0:
            os.close(fd)


class EarlyStart:
    """Agents started before the plan exists, while the source is listed: one in each region
    every plan of the transfer uses (its source and destination: every path starts and ends
    there), so the plan is the same whether they run or not. ``provision`` with the same
    transfer id adopts them (and starts what else the plan needs); ``cancel`` stops what no
    plan took (and, if none did, removes the files and the secret)."""

    def __init__(
        self, provisioner: LocalProvisioner, regions: Sequence[str], transfer_id: str
    ) -> None:
        check_transfer_id(transfer_id)
        self.transfer_id = transfer_id
        self.workdir = private_dir("local", transfer_id)
        self.secret_ref = create_secret(transfer_id)
        self.adopted = False
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.regions = {gateway_id(region, 0): region for region in regions}
        try:
            for gid, region in self.regions.items():
                self.procs[gid] = provisioner._start(
                    self.workdir, gid, region, self.secret_ref, transfer_id
                )
            # Recorded at once: if this process dies while listing, ``sweep`` finds the agents
            # (by pid; they have no ports yet) as it finds any fleet's.
            save_fleet(self.record(provisioner.host))
        except BaseException:
            self.cancel()
            raise

    def record(self, host: str) -> GatewayFleet:
        gateways = [
            Gateway(gid, self.regions[gid], host, 0, 0, {"pid": proc.pid})
            for gid, proc in self.procs.items()
        ]
        return GatewayFleet(
            transfer_id=self.transfer_id,
            backend="local",
            gateways=gateways,
            secret_ref=self.secret_ref,
            tags={"skyplane-ops:transfer-id": self.transfer_id, "skyplane-ops:early": "1"},
            created_at=datetime.now(UTC).isoformat(),
            resources={"workdir": str(self.workdir)},
        )

    def take(self, gid: str) -> subprocess.Popen[bytes] | None:
        return self.procs.pop(gid, None)

    def cancel(self) -> None:
        """Stop the agents not taken; idempotent."""
        for proc in self.procs.values():
            _stop(proc)
        self.procs.clear()
        if not self.adopted:
            self.adopted = True  # nothing left to own: a second cancel does nothing
            shutil.rmtree(self.workdir, ignore_errors=True)
            delete_secret(self.secret_ref)
            forget_fleet(self.record(""))


class LocalProvisioner:
    """Gateways as local processes (loopback by default)."""

    name = "local"

    def __init__(
        self,
        host: str = "127.0.0.1",
        idle_timeout: float = 600.0,
        buffer_mib: int = 1024,
        start_timeout: float = 30.0,
        python: str | None = None,
        extra_args: Sequence[str] = (),
        log_level: str = "WARNING",
        initial_lease_s: float | None = None,
        lease_s: float | None = None,
        boot_delay: float = 0.0,
    ) -> None:
        check_local_options(
            {
                "host": host,
                "idle_timeout": idle_timeout,
                "buffer_mib": buffer_mib,
                "start_timeout": start_timeout,
                "extra_args": list(extra_args),
                "log_level": log_level,
                "initial_lease_s": initial_lease_s,
                "lease_s": lease_s,
                "boot_delay": boot_delay,
            }
        )
        self.boot_delay = float(boot_delay)  # emulated VM start-up (``boot_delay.py``)
        self.host = host
        self.initial_lease_s = initial_lease_s  # None: bundle.INITIAL_LEASE_S
        self.lease_s = lease_s  # None: lease.LEASE_S
        self.idle_timeout = idle_timeout
        self.buffer_mib = buffer_mib
        self.start_timeout = start_timeout
        self.python = python or sys.executable
        self.extra_args = list(extra_args)
        self.log_level = log_level

    def _start(
        self, workdir: Path, gid: str, region: str, secret_ref: str, transfer_id: str
    ) -> subprocess.Popen[bytes]:
        ready = workdir / f"{gid}.ready"
        ready.unlink(missing_ok=True)
        agent = [
            self.python,
            *serve_args(
                host=self.host,
                secret_file=secret_ref,
                ready_file=str(ready),
                gateway_id=gid,
                region=region,
                idle_timeout=self.idle_timeout,
                lease_s=self.initial_lease_s,
            ),
            "--buffer-mib",
            str(self.buffer_mib),
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]
        cmd = delayed(agent, self.boot_delay, self.python)
        # An allow-list environment with a private home: the agent inherits none of this
        # process's credentials (its store credentials come sealed in the job spec). The
        # agent package must be importable from the child even if cwd differs; the rest of
        # PYTHONPATH is where this interpreter may find the agent's dependencies.
        root = str(Path(__file__).resolve().parents[2])
        inherited = os.environ.get("PYTHONPATH", "")
        home = workdir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        env = agent_env(
            home=str(home), pythonpath=root + (os.pathsep + inherited if inherited else "")
        )
        with open(workdir / f"{gid}.log", "ab") as logf:
            return subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def start_early(self, regions: Sequence[str], *, transfer_id: str) -> EarlyStart:
        """Start one agent per region now, for ``provision(..., early=...)`` to adopt."""
        return EarlyStart(self, regions, transfer_id)

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        early: EarlyStart | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Start the gateways and wait until each is up. ``cancel``: set, the wait ends and
        everything started is stopped and removed (a provision abandoned because its work
        was done before its gateways were up)."""
        check_transfer_id(transfer_id)
        if not vms or any(n < 0 for n in vms.values()):
            raise ProvisionError(f"nothing to provision: {dict(vms)}")
        if early is not None and (early.adopted or early.transfer_id != transfer_id):
            early.cancel()
            early = None
        if early is not None:  # its files, secret and agents are this fleet's from here on
            workdir, secret_ref, early.adopted = early.workdir, early.secret_ref, True
        else:
            workdir = private_dir("local", transfer_id)
            secret_ref = create_secret(transfer_id)
        started: list[tuple[str, str, subprocess.Popen[bytes]]] = []
        fleet = GatewayFleet(
            transfer_id=transfer_id,
            backend=self.name,
            gateways=[],
            secret_ref=secret_ref,
            tags={"skyplane-ops:transfer-id": transfer_id, **dict(tags or {})},
            created_at=datetime.now(UTC).isoformat(),
            resources={"workdir": str(workdir)}
            | ({"lease_s": self.lease_s} if self.lease_s else {}),
        )
        try:
            for region, count in sorted(vms.items()):
                for i in range(count):
                    gid = gateway_id(region, i)
                    proc = early.take(gid) if early is not None else None
                    if proc is not None and proc.poll() is not None:
                        proc = None  # it stopped (idle while a very long listing ran): anew
                    if proc is None:
                        proc = self._start(workdir, gid, region, secret_ref, transfer_id)
                    started.append((gid, region, proc))
            if early is not None:
                early.cancel()  # agents of regions this plan has no gateway in
            secret = secret_bytes(secret_ref)
            for gid, region, proc in started:
                info = self._wait_ready(workdir / f"{gid}.ready", proc, gid, cancel)
                gw = Gateway(
                    gateway_id=gid,
                    region=region,
                    host=self.host,
                    control_port=int(info["control_port"]),
                    data_port=int(info["data_port"]),
                    resources={"pid": int(info["pid"]), "log": str(workdir / f"{gid}.log")},
                )
                GatewayClient(gw.host, gw.control_port, secret, timeout=10).health()
                fleet.gateways.append(gw)
            save_fleet(fleet)
        except BaseException as exc:
            for gid, _, proc in started:
                _kill(proc.pid, str(workdir / f"{gid}.ready"))
            shutil.rmtree(workdir, ignore_errors=True)
            delete_secret(secret_ref)
            forget_fleet(fleet)  # an early start's record, if any
            if isinstance(exc, (ProvisionError, KeyboardInterrupt)):
                raise
            raise ProvisionError(f"starting local gateways failed: {exc}") from exc
        return fleet

    def _wait_ready(
        self,
        path: Path,
        proc: subprocess.Popen[bytes],
        gid: str,
        cancel: threading.Event | None = None,
    ) -> dict[str, int]:
        deadline = time.monotonic() + self.start_timeout + self.boot_delay
        while time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                raise ProvisionError(f"gateway {gid}: provisioning cancelled")
            if path.exists():
                data: dict[str, int] = json.loads(path.read_text())
                return data
            if proc.poll() is not None:
                tail = ""
                log_path = path.with_suffix(".log")
                if log_path.exists():
                    tail = log_path.read_text(errors="replace")[-800:]
                raise ProvisionError(
                    f"gateway {gid} exited with status {proc.returncode} before it was ready: "
                    f"{tail.strip()}"
                )
            time.sleep(0.02)
        waited = self.start_timeout + self.boot_delay
        raise ProvisionError(f"gateway {gid} not ready after {waited:.0f}s")

    def deprovision(self, fleet: GatewayFleet) -> None:
        """Stop every agent (politely, then by pid) and remove its files; idempotent."""
        try:
            secret: bytes | None = secret_bytes(fleet.secret_ref)
        except ProvisionError:
            secret = None
        workdir = fleet.resources.get("workdir")
        agents = [
            (g, int(g.resources.get("pid", 0)), str(Path(workdir or ".") / f"{g.gateway_id}.ready"))
            for g in fleet.gateways
        ]
        # Every agent is asked to stop first, then each is waited for: they wind down at once.
        for g, pid, marker in agents:
            if secret is not None and g.control_port and _alive(pid, marker):
                try:
                    GatewayClient(g.host, g.control_port, secret, timeout=2).shutdown()
                except GatewayError:
                    pass
        for _, pid, marker in agents:
            if pid:
                _kill(pid, marker)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        delete_secret(fleet.secret_ref)
        forget_fleet(fleet)

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Deprovision recorded local fleets (by transfer id and/or age); returns gateway ids."""
        removed: list[str] = []
        now = datetime.now(UTC)
        from skyplane_ops.provision.warm import claimed_elsewhere

        for fleet in load_fleets(transfer_id=transfer_id, backend=self.name):
            if claimed_elsewhere(fleet):  # parked here, claimed since: the claimant's
                forget_fleet(fleet)
                continue
            if older_than_seconds is not None and fleet.created_at:
                age = (now - datetime.fromisoformat(fleet.created_at)).total_seconds()
                if age < older_than_seconds:
                    continue
            self.deprovision(fleet)
            removed.extend(g.gateway_id for g in fleet.gateways)
        return removed
