"""A userspace TCP relay that adds delay, for the netns testbed (this kernel has no netem).

``python -m skyplane_ops.provision.netns.wanrelay --listen HOST:PORT --connect HOST:PORT
--delay-ms D`` accepts connections and forwards each to ``--connect``; every byte is held for
D/2 ms in each direction, so the round-trip time grows by D ms. Bytes in flight per direction
are bounded (``--max-buffer-mib``) so a slow receiver back-pressures the sender instead of
growing memory. It runs inside the sending region's namespace (``ip netns exec``) and dies with
it.
"""

from __future__ import annotations

import argparse
import queue
import socket
import threading
import time
from collections.abc import Sequence

CHUNK = 64 * 1024


def _pump(src: socket.socket, dst: socket.socket, delay_s: float, max_chunks: int) -> None:
    """Copy src -> dst, releasing each chunk ``delay_s`` after it was read."""
    pending: queue.Queue[tuple[float, bytes]] = queue.Queue(maxsize=max_chunks)

    def writer() -> None:
        try:
            while True:
                due, data = pending.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        while True:
            data = src.recv(CHUNK)
            pending.put((time.monotonic() + delay_s, data))
            if not data:
                break
    except OSError:
        pending.put((time.monotonic(), b""))
    thread.join()


def _handle(client: socket.socket, target: tuple[str, int], delay_s: float, chunks: int) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    there = threading.Thread(target=_pump, args=(client, upstream, delay_s, chunks), daemon=True)
    there.start()
    _pump(upstream, client, delay_s, chunks)
    there.join()
    client.close()
    upstream.close()


def serve(
    listen: tuple[str, int], target: tuple[str, int], delay_ms: float, max_buffer_mib: int = 64
) -> None:
    """Accept forever; one pair of pump threads per connection."""
    chunks = max(1, max_buffer_mib * 1024 * 1024 // CHUNK)
    server = socket.create_server(listen, reuse_port=False)
    while True:
        client, _ = server.accept()
        threading.Thread(
            target=_handle, args=(client, target, delay_ms / 2000.0, chunks), daemon=True
        ).start()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wanrelay", description=__doc__)
    parser.add_argument("--listen", type=_addr, required=True)
    parser.add_argument("--connect", type=_addr, required=True)
    parser.add_argument("--delay-ms", type=float, required=True, help="added round-trip time")
    parser.add_argument("--max-buffer-mib", type=int, default=64)
    args = parser.parse_args(argv)
    serve(args.listen, args.connect, args.delay_ms, args.max_buffer_mib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
