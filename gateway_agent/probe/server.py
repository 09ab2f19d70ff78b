"""The receiving end of a throughput probe: ``ProbeServer`` counts the bytes its data
connections receive between the client's start and stop marks (see ``gateway_agent.probe``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

from gateway_agent.probe.wire import (
    HANDSHAKE_TIMEOUT_S,
    MAX_CONNECTIONS,
    RECV_CHUNK,
    ProbeError,
    _as_key,
    _recv_json,
    _rst_close,
    _send_json,
)
from gateway_agent.wire import HandshakeError, server_handshake


class _Session:
    """Receive-side counters of one probe session (one counter per data connection)."""

    def __init__(self) -> None:
        self.counters: list[list[int]] = []
        self.lock = threading.Lock()

    def add_counter(self) -> list[int]:
        counter = [0]
        with self.lock:
            self.counters.append(counter)
        return counter

    def total(self) -> int:
        with self.lock:
            return sum(c[0] for c in self.counters)


class ProbeServer:
    """Accepts authenticated probe sessions on its own port and counts what it receives.

    Runs in a daemon thread; ``start()`` returns once it listens, ``port`` is the bound port.
    """

    def __init__(self, secret: bytes | str, host: str = "127.0.0.1", port: int = 0) -> None:
        self._secret = _as_key(secret)
        self._host = host
        self._requested_port = port
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._open = 0

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        if self._sock is None:
            raise ProbeError("probe server is not started")
        return int(self._sock.getsockname()[1])

    def start(self) -> ProbeServer:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._requested_port))
        sock.listen(256)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="probe-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()

    def __enter__(self) -> ProbeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if self._open >= MAX_CONNECTIONS + 8:
                    _rst_close(conn)
                    continue
                self._open += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            server_handshake(conn, self._secret)
            conn.settimeout(HANDSHAKE_TIMEOUT_S)
            hello = _recv_json(conn)
            if hello.get("role") == "control":
                self._serve_control(conn)
            elif hello.get("role") == "data":
                self._serve_data(conn, str(hello.get("session", "")))
        except (OSError, ProbeError, HandshakeError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._open -= 1

    def _serve_control(self, conn: socket.socket) -> None:
        session_id = uuid.uuid4().hex
        session = _Session()
        with self._lock:
            self._sessions[session_id] = session
        try:
            _send_json(conn, {"session": session_id})
            conn.settimeout(None)
            mark_bytes = 0
            mark_time = time.monotonic()
            while True:
                msg = _recv_json(conn)
                op = msg.get("op")
                if op == "ping":
                    _send_json(conn, {"op": "pong"})
                elif op == "start":
                    mark_bytes, mark_time = session.total(), time.monotonic()
                    _send_json(conn, {"ok": True})
                elif op == "stop":
                    received = session.total() - mark_bytes
                    seconds = time.monotonic() - mark_time
                    _send_json(
                        conn,
                        {
                            "bytes": received,
                            "seconds": seconds,
                            "connections": len(session.counters),
                        },
                    )
                    return
                else:
                    return
        finally:
            with self._lock:
                self._sessions.pop(session_id, None)

    def _serve_data(self, conn: socket.socket, session_id: str) -> None:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            return
        counter = session.add_counter()
        conn.settimeout(60.0)  # a sender that vanished without a reset must not pin a thread
        buf = bytearray(RECV_CHUNK)
        view = memoryview(buf)
        while True:
            n = conn.recv_into(view)
            if n == 0:
                return
            counter[0] += n
