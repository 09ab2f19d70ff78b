"""A TCP proxy that adds a fixed latency to every request: what a remote object store feels like.

Bytes from a client are forwarded to the upstream server ``delay`` seconds after they arrived
(a delay line, not a sleep per read: a request that arrives in several pieces is late by
``delay`` once, and requests on many connections wait side by side); answers come back at once.
So every request/response round trip takes ``delay`` longer, on any number of concurrent
connections.

It runs as its own process (uvloop when installed), so the proxy's own work never competes for
the GIL with the client it measures. A benchmark starts it next to a server on loopback::

    with LatencyProxy(("127.0.0.1", 9000), delay=0.02) as proxy:
        endpoint = f"http://127.0.0.1:{proxy.port}"

Run alone: ``python benchmarks/latency_proxy.py --upstream 127.0.0.1:9000 --port 9001``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from s3_server import free_port, serve_process

# Bytes held in one direction's delay line before the proxy stops reading that connection.
LINE_LIMIT = 4 << 20


class LatencyProxy:
    """A proxy process on a free loopback port, forwarding to ``upstream`` ``delay`` s late."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.port = free_port()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> LatencyProxy:
        host, port = self.upstream
        cmd = [sys.executable, __file__, "--upstream", f"{host}:{port}", "--port", str(self.port)]
        self._stack.enter_context(serve_process([*cmd, "--delay", str(self.delay)], self.port))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


async def _delayed(reader: Any, writer: Any, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each piece ``delay`` seconds after it was read."""
    loop = asyncio.get_running_loop()
    line: collections.deque[tuple[float, bytes]] = collections.deque()
    held = 0
    room = asyncio.Event()
    room.set()

    def flush() -> None:
        nonlocal held
        now = loop.time()
        while line and line[0][0] <= now:
            data = line.popleft()[1]
            held -= len(data)
            if data:
                writer.write(data)
            else:
                writer.close()  # the client closed its side: pass that on, late as well
        if line:
            loop.call_at(line[0][0], flush)
        if held < LINE_LIMIT:
            room.set()

    try:
        while True:
            data = await reader.read(1 << 16)
            if not line:
                loop.call_at(loop.time() + delay, flush)
            line.append((loop.time() + delay, data))
            held += len(data)
            if not data:
                return
            if held >= LINE_LIMIT:
                room.clear()
                await room.wait()
    except (ConnectionError, OSError):
        with contextlib.suppress(Exception):
            writer.close()


async def _direct(reader: Any, writer: Any) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(upstream: tuple[str, int], port: int, delay: float) -> None:
    async def one(client_r: Any, client_w: Any) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*upstream)
        except OSError:
            client_w.close()
            return
        for w in (client_w, up_w):  # a request in two pieces must not wait for an ACK
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_delayed(client_r, up_w, delay), _direct(up_r, client_w))

    server = await asyncio.start_server(one, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds added per request")
    args = parser.parse_args()
    host, _, up_port = args.upstream.rpartition(":")
    try:
        import uvloop

        run: Any = uvloop.run
    except ImportError:
        run = asyncio.run
    run(serve((host, int(up_port)), args.port, args.delay))


if __name__ == "__main__":
    main()
