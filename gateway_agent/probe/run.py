"""Throughput probe between two gateways: N parallel TCP connections for T seconds.

The profiler measures the throughput grid with this probe, the way the Skyplane paper did
(64 connections, 5 s per ordered region pair). The *receiving* gateway runs a ``ProbeServer``;
the *sending* gateway calls ``run_probe(peer_host, peer_port, secret, connections, seconds)``.

Wire protocol (one probe session = one control connection + N data connections):

1. Every connection is authenticated with the per-transfer secret exactly like a data
   connection of a transfer: the agent's mutual HMAC challenge-response
   (``gateway_agent.wire.server_handshake`` / ``client_handshake``, unencrypted: the probe
   payload is zeros). A wrong secret closes the connection; the client raises
   ``ProbeAuthError``.
2. After auth the client sends one JSON line: ``{"role": "control"}`` or
   ``{"role": "data", "session": ID}``.
3. On the control connection the client pings a few times (application-level RTT), then opens
   the data connections, which stream zeros. After a short warm-up (slow start) it sends
   ``start``; at the end of the T seconds it sends ``stop`` and the server answers with the
   bytes it *received* between the two marks and the seconds between them. The client then
   resets the data connections, so data still queued in socket buffers is never counted.

Both ends are counted: ``sent_gbps`` is what the sender pushed into its sockets during the
window, ``received_gbps`` what the receiver got during its window. The grid uses the received
rate: it is what actually crossed the path.

Inside the agent, ``control_request`` serves the control API's ``POST /v1/probe``: ``listen``
starts this gateway's ProbeServer (beside the data listener, same address) and returns its
port; ``run`` probes a peer and returns the ProbeResult; ``close`` stops the server.

Standard library plus the agent's own handshake: this module ships to every gateway VM.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from gateway_agent.auth import load_secret
from gateway_agent.probe.server import ProbeServer
from gateway_agent.probe.wire import (
    DEFAULT_CONNECTIONS,
    DEFAULT_SECONDS,
    MAX_CONNECTIONS,
    PING_COUNT,
    SEND_CHUNK,
    ProbeAuthError,
    ProbeError,
    ProbeResult,
    _as_key,
    _client_auth,
    _recv_json,
    _rst_close,
    _send_json,
)


class _Sender:
    """One data connection that streams zeros until told to stop."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent = 0
        self.error: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        payload = memoryview(bytes(SEND_CHUNK))
        self.sock.settimeout(0.2)
        try:
            while not stop.is_set():
                try:
                    self.sent += self.sock.send(payload)
                except TimeoutError:
                    continue
        except OSError as exc:
            if not stop.is_set():
                self.error = exc


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ProbeError(f"cannot reach probe server {host}:{port}: {exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _open_data_connections(
    host: str, port: int, key: bytes, session: str, count: int, timeout: float
) -> list[socket.socket]:
    """Connect and authenticate ``count`` data connections in parallel: one after the other
    would cost ~3 round trips each, half a minute for 64 connections across an ocean."""
    opened: list[socket.socket] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            sock = _connect(host, port, timeout)
        except BaseException as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            opened.append(sock)
        try:
            _client_auth(sock, key)
            _send_json(sock, {"role": "data", "session": session})
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=open_one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for sock in opened:
            _rst_close(sock)
        first = errors[0]
        if isinstance(first, ProbeError):
            raise first
        raise ProbeError(f"opening probe connections failed: {first}") from first
    return opened


def run_probe(
    peer_host: str,
    peer_port: int,
    secret: bytes | str,
    connections: int = DEFAULT_CONNECTIONS,
    seconds: float = DEFAULT_SECONDS,
    *,
    warmup_seconds: float | None = None,
    connect_timeout: float = 10.0,
) -> ProbeResult:
    """Stream to the peer's ProbeServer over ``connections`` TCP connections for ``seconds``.

    The first ``warmup_seconds`` (default: 10% of ``seconds``, at most 1 s) are not counted, so
    TCP slow start does not bias short probes; the whole probe takes ``seconds``.
    """
    if not 1 <= connections <= MAX_CONNECTIONS:
        raise ValueError(f"connections must be in 1..{MAX_CONNECTIONS}, got {connections}")
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    warmup = min(1.0, 0.1 * seconds) if warmup_seconds is None else warmup_seconds
    if not 0 <= warmup < seconds:
        raise ValueError("warmup_seconds must be in [0, seconds)")
    key = _as_key(secret)
    started_at = datetime.now(UTC).isoformat()
    control = _connect(peer_host, peer_port, connect_timeout)
    senders: list[_Sender] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    try:
        control.settimeout(connect_timeout)
        _client_auth(control, key)
        _send_json(control, {"role": "control"})
        session = str(_recv_json(control)["session"])
        rtts: list[float] = []
        for _ in range(PING_COUNT):
            t0 = time.perf_counter()
            _send_json(control, {"op": "ping"})
            _recv_json(control)
            rtts.append((time.perf_counter() - t0) * 1000.0)
        senders.extend(
            _Sender(sock)
            for sock in _open_data_connections(
                peer_host, peer_port, key, session, connections, connect_timeout
            )
        )
        begin = time.monotonic()
        for sender in senders:
            thread = threading.Thread(target=sender.run, args=(stop,), daemon=True)
            thread.start()
            threads.append(thread)
        time.sleep(warmup)
        control.settimeout(max(30.0, 4 * seconds))
        _send_json(control, {"op": "start"})
        sent_mark, mark = sum(s.sent for s in senders), time.monotonic()
        _recv_json(control)
        time.sleep(max(0.0, begin + seconds - time.monotonic()))
        sent_end, end = sum(s.sent for s in senders), time.monotonic()
        _send_json(control, {"op": "stop"})
        report = _recv_json(control)
    except (OSError, KeyError, ValueError) as exc:
        raise ProbeError(f"probe to {peer_host}:{peer_port} failed: {exc}") from exc
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
        for sender in senders:
            _rst_close(sender.sock)
        _rst_close(control)
    errors = [s.error for s in senders if s.error is not None]
    if errors and len(errors) == len(senders):
        raise ProbeError(f"every probe connection failed, first: {errors[0]}")
    window = max(end - mark, 1e-9)
    recv_seconds = max(float(report["seconds"]), 1e-9)
    bytes_sent = sent_end - sent_mark
    bytes_received = int(report["bytes"])
    return ProbeResult(
        peer=f"{peer_host}:{peer_port}",
        connections=connections,
        seconds=round(recv_seconds, 6),
        bytes_sent=bytes_sent,
        bytes_received=bytes_received,
        sent_gbps=bytes_sent * 8 / window / 1e9,
        received_gbps=bytes_received * 8 / recv_seconds / 1e9,
        rtt_ms=statistics.median(rtts),
        started_at=started_at,
        warmup_seconds=warmup,
    )


class _AgentLike(Protocol):
    secret: bytes


_AGENT_SERVERS: dict[int, ProbeServer] = {}
_AGENT_LOCK = threading.Lock()


def _bind_host(agent: _AgentLike) -> str:
    """The address the agent's data listener is bound to (peers reach it there)."""
    listener = getattr(agent, "_listener", None)
    if isinstance(listener, socket.socket):
        return str(listener.getsockname()[0])
    return "0.0.0.0"


def control_request(agent: _AgentLike, data: dict[str, Any]) -> dict[str, Any]:
    """Serve ``POST /v1/probe`` for the agent's control API (already authenticated).

    ``{"action": "listen", "port": P}`` -> ``{"probe_port": N}``: idempotent; P = 0 (default)
    takes any free port, a fixed P suits firewalls that only open known ports.
    ``{"action": "run", "peer_host", "peer_port", "connections", "seconds"}`` -> the
    ProbeResult as a dict (or ``{"error": ..., "auth": bool}``).
    ``{"action": "close"}`` -> ``{"closed": bool}``.
    """
    action = data.get("action")
    if action == "listen":
        with _AGENT_LOCK:
            server = _AGENT_SERVERS.get(id(agent))
            if server is None:
                port = int(data.get("port", 0))
                server = ProbeServer(agent.secret, host=_bind_host(agent), port=port).start()
                _AGENT_SERVERS[id(agent)] = server
        return {"probe_port": server.port}
    if action == "run":
        try:
            result = run_probe(
                str(data["peer_host"]),
                int(data["peer_port"]),
                agent.secret,
                int(data.get("connections", DEFAULT_CONNECTIONS)),
                float(data.get("seconds", DEFAULT_SECONDS)),
            )
        except (ProbeError, KeyError, ValueError) as exc:
            return {"error": str(exc), "auth": isinstance(exc, ProbeAuthError)}
        return result.to_dict()
    if action == "close":
        with _AGENT_LOCK:
            server = _AGENT_SERVERS.pop(id(agent), None)
        if server is not None:
            server.stop()
        return {"closed": server is not None}
    return {"error": f"unknown probe action {action!r}"}


def _read_secret(args: argparse.Namespace) -> bytes:
    if args.secret_file:
        return load_secret(args.secret_file)
    env = os.environ.get("SKYPLANE_PROBE_SECRET")
    if not env:
        raise SystemExit("give --secret-file or set SKYPLANE_PROBE_SECRET")
    return env.encode()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gateway_agent.probe serve|run``: drive the probe on a host without the agent."""
    parser = argparse.ArgumentParser(prog="python -m gateway_agent.probe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="listen for probes; prints {'port': N} once ready")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--secret-file")
    serve.add_argument("--max-seconds", type=float, default=3600.0, help="exit after this long")
    serve.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="exit when stdin closes, so a server never outlives the process that started it",
    )
    run = sub.add_parser("run", help="probe a peer; prints the ProbeResult as JSON")
    run.add_argument("--peer", required=True, help="HOST:PORT of the peer's probe server")
    run.add_argument("--secret-file")
    run.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    run.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    args = parser.parse_args(argv)
    secret = _read_secret(args)
    if args.cmd == "serve":
        server = ProbeServer(secret, host=args.host, port=args.port).start()
        done = threading.Event()
        if args.exit_on_stdin_eof:

            def watch_stdin() -> None:
                while sys.stdin.buffer.read(4096):
                    pass
                done.set()

            threading.Thread(target=watch_stdin, daemon=True).start()
        print(json.dumps({"port": server.port}), flush=True)
        try:
            # Runs until interrupted, stdin closes (if asked) or --max-seconds pass, so a
            # forgotten server cannot linger.
            done.wait(args.max_seconds)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return 0
    host, _, port = args.peer.rpartition(":")
    try:
        result = run_probe(host.strip("[]"), int(port), secret, args.connections, args.seconds)
    except ProbeError as exc:
        print(json.dumps({"error": str(exc), "auth": isinstance(exc, ProbeAuthError)}))
        return 1
    print(json.dumps(result.to_dict()), flush=True)
    return 0
