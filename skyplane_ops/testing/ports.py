"""Free loopback ports, and waiting until something listens on one."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
    """Block until something accepts TCP connections on host:port; ``TimeoutError`` if nothing
    does within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f}s")
