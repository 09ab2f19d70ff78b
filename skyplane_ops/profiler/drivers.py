"""How a probe gets run *from* one gateway *to* another.

``ProcessProbeDriver`` starts ``python -m gateway_agent.probe serve`` on every gateway's host
and runs ``python -m gateway_agent.probe run`` on the sending gateway's host, so the bytes
really travel between the two gateways' network locations. "On a gateway's host" means: as a
local process for the ``local`` backend, inside the gateway's network namespace (``ip netns
exec``) for ``netns``. The probe processes use a fresh per-run secret kept in a 0600 file.

``AgentProbeDriver`` asks the sending gateway's agent to probe over its control API (the agent
hosts the probe server beside its data listener), which is what remote backends (ssh, aws)
need because the control plane cannot start processes there itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any, Protocol

from gateway_agent.client import GatewayClient
from gateway_agent.probe import ProbeResult
from skyplane_ops.profiler.errors import ProfilerError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet, data_host

SERVER_START_TIMEOUT_S = 30.0


class ProbeDriver(Protocol):
    """Runs probes between the gateways of one fleet."""

    def start(self, fleet: GatewayFleet) -> None: ...

    def probe(
        self, src: Gateway, dst: Gateway, connections: int, seconds: float
    ) -> ProbeResult: ...

    def close(self) -> None: ...


def netns_of(gateway: Gateway) -> str | None:
    """The network namespace a netns-backend gateway lives in (None elsewhere)."""
    for key in ("netns", "namespace", "ns"):
        value = gateway.resources.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def default_prefix(gateway: Gateway) -> list[str]:
    """Command prefix that runs a process where ``gateway`` sits on the network."""
    ns = netns_of(gateway)
    return ["ip", "netns", "exec", ns] if ns else []


class ProcessProbeDriver:
    """Probe servers and senders as processes at each gateway's network location."""

    def __init__(
        self,
        prefix: Callable[[Gateway], list[str]] = default_prefix,
        python: str = sys.executable,
    ) -> None:
        self._prefix = prefix
        self._python = python
        self._servers: dict[str, tuple[subprocess.Popen[str], int]] = {}
        self._secret_dir: tempfile.TemporaryDirectory[str] | None = None
        self._secret_file = ""
        self._lock = threading.Lock()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.dirname(root), env.get("PYTHONPATH", "")) if p
        )
        return env

    def start(self, fleet: GatewayFleet) -> None:
        self._secret_dir = tempfile.TemporaryDirectory(prefix="skyplane-probe-")
        self._secret_file = os.path.join(self._secret_dir.name, "secret")
        fd = os.open(self._secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        try:
            for gw in fleet.gateways:
                self._servers[gw.gateway_id] = self._start_server(gw)
        except BaseException:
            self.close()
            raise

    def _start_server(self, gw: Gateway) -> tuple[subprocess.Popen[str], int]:
        cmd = [
            *self._prefix(gw),
            self._python,
            "-m",
            "gateway_agent.probe",
            "serve",
            "--host",
            gw.host,
            "--secret-file",
            self._secret_file,
            "--exit-on-stdin-eof",
        ]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(),
        )
        timer = threading.Timer(SERVER_START_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            line = proc.stdout.readline() if proc.stdout else ""
        finally:
            timer.cancel()
        try:
            port = int(json.loads(line)["port"])
        except (ValueError, KeyError, TypeError):
            proc.kill()
            err = proc.stderr.read() if proc.stderr else ""
            raise ProfilerError(
                f"probe server for gateway {gw.gateway_id} ({gw.region}) did not start: "
                f"{err.strip()[-500:] or line!r}"
            ) from None
        return proc, port

    def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> ProbeResult:
        try:
            _, port = self._servers[dst.gateway_id]
        except KeyError:
            raise ProfilerError(f"no probe server on gateway {dst.gateway_id}") from None
        cmd = [
            *self._prefix(src),
            self._python,
            "-m",
            "gateway_agent.probe",
            "run",
            "--peer",
            f"{dst.host}:{port}",
            "--secret-file",
            self._secret_file,
            "--connections",
            str(connections),
            "--seconds",
            str(seconds),
        ]
        try:
            out = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=self._env(),
                timeout=seconds + 60,
            )
        except subprocess.TimeoutExpired as exc:
            raise ProfilerError(f"probe {src.region} -> {dst.region} timed out") from exc
        try:
            data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ProfilerError(
                f"probe {src.region} -> {dst.region} failed: {out.stderr.strip()[-500:]}"
            ) from None
        if "error" in data:
            raise ProfilerError(f"probe {src.region} -> {dst.region} failed: {data['error']}")
        return ProbeResult.from_dict(data)

    def close(self) -> None:
        for proc, _ in self._servers.values():
            with contextlib.suppress(OSError):
                if proc.stdin:
                    proc.stdin.close()  # the server exits on EOF
            proc.terminate()
        for proc, _ in self._servers.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
        self._servers.clear()
        if self._secret_dir is not None:
            self._secret_dir.cleanup()
            self._secret_dir = None


class AgentProbeDriver:
    """Probes through each gateway agent's control API (``POST /v1/probe``).

    ``start`` asks every agent to open its probe server (on ``probe_port`` if given: a port
    the backend's firewall lets through, e.g. a cloud security group; any free port otherwise);
    ``probe`` asks the source agent to probe the destination's probe port. If the agents do
    not have the endpoint (HTTP 404) and a ``fallback`` driver is given (local processes /
    namespaces), that one is used instead.
    """

    def __init__(
        self,
        fallback: ProbeDriver | None = None,
        timeout_margin_s: float = 60.0,
        probe_port: int = 0,
    ) -> None:
        self._fallback = fallback
        self._probe_port = probe_port
        self._using_fallback = False
        self._margin = timeout_margin_s
        self._secret = b""
        self._ports: dict[str, int] = {}
        self._gateways: list[Gateway] = []

    def _client(self, gw: Gateway, timeout: float = 30.0) -> GatewayClient:
        return GatewayClient(gw.host, gw.control_port, self._secret, timeout=timeout)

    def start(self, fleet: GatewayFleet) -> None:
        from gateway_agent.client import GatewayError
        from skyplane_ops.provision.secrets import secret_bytes

        self._secret = secret_bytes(fleet.secret_ref)
        self._gateways = list(fleet.gateways)
        for gw in fleet.gateways:
            try:
                self._ports[gw.gateway_id] = self._client(gw).probe_listen(self._probe_port)
            except GatewayError as exc:
                if exc.status == 404 and self._fallback is not None:
                    self._using_fallback = True
                    self._fallback.start(fleet)
                    return
                raise ProfilerError(
                    f"gateway {gw.gateway_id} ({gw.region}) cannot host a probe: {exc}"
                ) from exc

    def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> ProbeResult:
        from gateway_agent.client import GatewayError

        if self._using_fallback and self._fallback is not None:
            return self._fallback.probe(src, dst, connections, seconds)
        try:
            # Sent once (never retried): a retried probe would pay its bytes twice.
            return self._client(src).probe(
                data_host(dst, src.region),
                self._ports[dst.gateway_id],
                connections=connections,
                seconds=seconds,
                timeout=seconds + self._margin,
            )
        except GatewayError as exc:  # ProbeFailedError too: the probe ran and failed
            raise ProfilerError(f"probe {src.region} -> {dst.region} failed: {exc}") from exc

    def close(self) -> None:
        if self._using_fallback and self._fallback is not None:
            self._fallback.close()
            return
        for gw in self._gateways:
            if gw.gateway_id in self._ports:
                with contextlib.suppress(Exception):
                    self._client(gw, timeout=10).probe_close()
        self._ports.clear()
