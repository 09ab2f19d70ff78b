"""Probe wire plumbing shared by both ends: limits, errors, the result record, line/JSON
framing and the authentication of each connection (see ``gateway_agent.probe``)."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from dataclasses import asdict, dataclass
from typing import Any

from gateway_agent.wire import HandshakeError, client_handshake

DEFAULT_CONNECTIONS = 64
DEFAULT_SECONDS = 5.0
MAX_CONNECTIONS = 1024
HANDSHAKE_TIMEOUT_S = 10.0
SEND_CHUNK = 256 * 1024
RECV_CHUNK = 1024 * 1024
PING_COUNT = 5


class ProbeError(Exception):
    """A probe could not be run (peer unreachable, protocol error, peer gave up)."""


class ProbeAuthError(ProbeError):
    """The peer refused our secret (or we refused theirs)."""


@dataclass(frozen=True)
class ProbeResult:
    """What one probe measured from this gateway to the peer; JSON-friendly."""

    peer: str
    connections: int
    seconds: float
    bytes_sent: int
    bytes_received: int
    sent_gbps: float
    received_gbps: float
    rtt_ms: float
    started_at: str
    warmup_seconds: float = 0.0

    @property
    def gbps(self) -> float:
        """The rate the grid records: bytes that reached the peer."""
        return self.received_gbps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in fields})


def _as_key(secret: bytes | str) -> bytes:
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ProbeError("peer closed the connection during the handshake")
        buf += part
    return bytes(buf)


def _recv_line(sock: socket.socket, limit: int = 65536) -> bytes:
    """Read one newline-terminated line byte by byte (only used for short control lines)."""
    buf = bytearray()
    while not buf.endswith(b"\n"):
        part = sock.recv(1)
        if not part:
            raise ProbeError("peer closed the control connection")
        buf += part
        if len(buf) > limit:
            raise ProbeError("control line too long")
    return bytes(buf)


def _send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _recv_json(sock: socket.socket) -> dict[str, Any]:
    data = json.loads(_recv_line(sock))
    if not isinstance(data, dict):
        raise ProbeError("malformed control message")
    return data


def _client_auth(sock: socket.socket, secret: bytes) -> None:
    try:
        client_handshake(sock, secret, encrypt=False)
    except HandshakeError as exc:
        raise ProbeAuthError(f"probe handshake refused: {exc}") from exc


def _rst_close(sock: socket.socket) -> None:
    """Close with a reset so queued bytes are dropped instead of drained."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
