"""A TCP proxy that adds a fixed delay to every request: what a remote object store feels like.

Each burst of bytes from a client (an HTTP request, for small objects) waits ``delay`` seconds
before it is forwarded to the upstream server; answers come back at once. One event loop in a
thread, so a benchmark can start it next to an emulator on loopback::

    with LatencyProxy(("127.0.0.1", 9000), delay=0.02) as proxy:
        endpoint = f"http://127.0.0.1:{proxy.port}"
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any


class LatencyProxy:
    """``listen`` on a free loopback port, forward to ``upstream`` with ``delay`` per request."""

    def __init__(self, upstream: tuple[str, int], delay: float) -> None:
        self.upstream, self.delay = upstream, delay
        self.port = 0
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the latency proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _pipe(self, reader: Any, writer: Any, delay: float) -> None:
        try:
            while data := await reader.read(1 << 16):
                if delay:
                    self.requests += 1
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, client_r: Any, client_w: Any) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            self._pipe(client_r, up_w, self.delay), self._pipe(up_r, client_w, 0.0)
        )
