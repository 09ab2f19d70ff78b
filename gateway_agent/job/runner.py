"""One transfer job on one gateway: source, relay and sink roles, chosen per chunk by its path.

The job spec (from the control plane) names every path as a list of regions and every gateway
of those regions. For a chunk on path P this gateway finds its own region in P: the last region
means sink (verify CRC32C, write), anything else means forward to the next region's pool; chunk
descriptors submitted through the control API make it a source for them. Progress is exposed as
monotonic counters plus an event log read incrementally with a cursor.

This module holds ``Job`` (start, status, stop, routing and relaying); its parts live next to
it: ``base`` (state, stores, counters and events), ``source`` (reading chunks),
``serverside`` (chunks the stores copy themselves) and ``sink`` (writing chunks).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any

from gateway_agent import wire
from gateway_agent.flow import Lease
from gateway_agent.job.base import InChunk, JobError
from gateway_agent.job.serverside import ServerSideRole
from gateway_agent.job.sink import SinkRole
from gateway_agent.job.tree import SharedLease, Tree
from gateway_agent.pool import OutboundPool, OutChunk

# How long stopping a job waits for its readers and writers to finish their current call.
STOP_GRACE_S = 5.0


def _held(q: queue.Queue[Any]) -> dict[str, int]:
    """Chunks and payload bytes in ``q`` (a snapshot under its lock; stop markers left out)."""
    with q.mutex:
        chunks = [c for c in q.queue if c is not None]
    return {"chunks": len(chunks), "bytes": sum(len(c.payload) for c in chunks)}


class Job(ServerSideRole, SinkRole):
    """Runs one job's roles on this gateway until stopped."""

    def start(self) -> None:
        for pool in self._pools.values():
            pool.start()
        is_source = any(r[0] == self.region for r in self.routes.values()) or any(
            t.root == self.region for t in self.trees.values()
        )
        is_sink = any(r[-1] == self.region for r in self.routes.values()) or any(
            self.region in t.sinks for t in self.trees.values()
        )
        if is_source:
            for i in range(int(self.spec.get("reader_threads", 8))):
                self._spawn(self._source_loop, f"read-{i}")
        if is_sink:
            for i in range(int(self.spec.get("writer_threads", 8))):
                self._spawn(self._sink_loop, f"write-{i}")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=f"{self.job_id}-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def status(self, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        """Counters plus the events after ``cursor`` (incremental, never the full history).

        ``wait`` > 0: a long poll; with no event after ``cursor`` yet, answer as soon as one
        comes (or the job stops), after ``wait`` seconds at most. The control plane then
        learns of a finished chunk at once instead of at its next poll."""
        with self._lock:
            if wait > 0:
                self._news.wait_for(
                    lambda: len(self.events) > cursor or self._stop.is_set(), timeout=wait
                )
            events = self.events[cursor:]
            return {
                "job_id": self.job_id,
                "gateway_id": self.gateway_id,
                "region": self.region,
                "counters": {**self.counters, **self.credential_counters()},
                "events": events,
                "cursor": cursor + len(events),
                "error": self.error,
                "stopped": self._stop.is_set(),
                "queued": {r: p.queue.qsize() for r, p in self._pools.items()},
                # Chunk descriptors submitted here and not yet picked up by a reader.
                "backlog": self._source_q.qsize(),
            }

    @property
    def running(self) -> bool:
        return not self._stop.is_set()

    def queues(self) -> dict[str, Any]:
        """What waits here, for the metrics: chunks and bytes per next hop's pool and in the
        sink writers' queue, chunk descriptors not yet picked up by a reader."""
        hops = {r: _held(p.queue) for r, p in self._pools.items()}
        return {"next_hop": hops, "sink": _held(self._sink_q), "source": self._source_q.qsize()}

    def stop(self) -> None:
        """Stop every role; chunks still held are dropped and their budget released."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:
            self._news.notify_all()  # long polls answer now
        self._budget.wake()  # sources waiting for a lease give up at once
        for pool in self._pools.values():
            pool.close()
        for _ in self._threads:
            self._source_q.put(None)
            self._sink_q.put(None)
        # Readers and writers finish the store call they are in (a part is written whole or
        # not at all); the wait is bounded overall, not per thread.
        deadline = time.monotonic() + STOP_GRACE_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for pool in self._pools.values():
            pool.drain()
        if self._objects_pool is not None:
            self._objects_pool.shutdown(wait=False, cancel_futures=True)
        while True:
            try:
                item = self._sink_q.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.lease.release()

    # ---- routing -------------------------------------------------------------------------------

    def submit(self, descriptors: list[dict[str, Any]]) -> int:
        """Queue chunk descriptors for this gateway to read and send (source role)."""
        for d in descriptors:
            tree = self.trees.get(str(d["path"]))
            route = [tree.root] if tree is not None else self.routes.get(str(d["path"]))
            if route is None or route[0] != self.region:
                raise JobError(f"chunk {d.get('chunk')} is not sourced in {self.region}")
            self._source_q.put(d)
        return len(descriptors)

    def route(self, chunk: InChunk) -> None:
        """Hand a chunk on: to the sink writers if this is its last region, else downstream."""
        if self._stop.is_set():
            chunk.lease.release()
            return
        tree = self.trees.get(str(chunk.meta["path"]))
        if tree is not None:
            self._fan_out(chunk, tree)
            return
        route = self.routes.get(str(chunk.meta["path"]))
        if route is None or self.region not in route:
            chunk.lease.release()
            self._fail(f"chunk {chunk.meta.get('chunk')} arrived on a path not through here")
            return
        i = route.index(self.region)
        if i == len(route) - 1:
            if i == 0 and self._local_bucket.rate:
                self._local_bucket.take(len(chunk.payload), self._stop.is_set)
            self._sink_q.put(chunk)
            return
        if str(chunk.meta["path"]) in self._dropped:
            chunk.lease.release()
            self._event(t="lost", chunk=chunk.meta.get("chunk"), path=chunk.meta["path"],
                        why="its path was declared dead")  # fmt: skip
            return
        chunk = self._apply_relay_hooks(chunk, first=i == 0)
        self._pools[route[i + 1]].put(
            OutChunk(chunk.meta, chunk.payload, chunk.crc32c, chunk.lease)
        )

    def _fan_out(self, chunk: InChunk, tree: Tree) -> None:
        """A multicast chunk: one copy to each next hop of this region, and one to the sink
        writers if this region is one of the tree's sinks; they share the chunk's lease."""
        if self.region not in tree.regions:
            chunk.lease.release()
            self._fail(f"chunk {chunk.meta.get('chunk')} arrived on a tree not through here")
            return
        path = str(chunk.meta["path"])
        targets = [] if path in self._dropped else list(tree.next.get(self.region, ()))
        sink = self.region in tree.sinks
        if not targets and not sink:
            chunk.lease.release()
            self._event(t="lost", chunk=chunk.meta.get("chunk"), path=path,
                        why="its path was declared dead")  # fmt: skip
            return
        if targets:
            chunk = self._apply_relay_hooks(chunk, first=tree.root == self.region)
        leases = SharedLease(chunk.lease, len(targets) + int(sink)).copies()
        for nxt, lease in zip(targets, leases, strict=False):
            self._pools[nxt].put(OutChunk(chunk.meta, chunk.payload, chunk.crc32c, lease))
        if sink:
            self._sink_q.put(
                InChunk(
                    chunk.meta,
                    chunk.payload,
                    chunk.crc32c,
                    leases[-1],
                    chunk.received_crc,
                    chunk.tag_ok,
                )
            )

    def drop_path(self, path: str) -> dict[str, Any]:
        """The control plane declared ``path`` dead (it re-sends its chunks on other paths):
        release what waits to go along it, and abort a next hop no live path still uses."""
        with self._lock:
            self._dropped.add(str(path))
            dropped = set(self._dropped)
        for nxt, pool in self._pools.items():
            users = {
                p
                for p, r in self.routes.items()
                if self.region in r and r[r.index(self.region) + 1 :][:1] == [nxt]
            } | {p for p, t in self.trees.items() if nxt in t.next.get(self.region, ())}
            if users <= dropped:
                pool.abort()
            else:
                pool.drop(lambda meta: str(meta.get("path")) in dropped)
        return {"dropped": sorted(dropped)}

    def leave_out(self, gateway_id: str) -> dict[str, Any]:
        """The control plane found next-hop gateway ``gateway_id`` dead while its region has
        others: send nothing more to it (``OutboundPool.leave_out``)."""
        why = f"gateway {gateway_id} is dead (control plane)"
        left = [nxt for nxt, pool in self._pools.items() if pool.leave_out(gateway_id, why)]
        return {"left_out": gateway_id, "pools": left}

    def on_frame(
        self,
        meta: dict[str, Any],
        payload: memoryview,
        crc: int,
        lease: Lease,
        received_crc: int | None = None,
        tag_ok: bool | None = None,
    ) -> None:
        """A frame arrived from upstream for this job."""
        self._count(chunks_received=1, bytes_received=len(payload))
        self.route(InChunk(meta, payload, crc, lease, received_crc, tag_ok))

    def frame_refused(self, meta: dict[str, Any], why: str) -> None:
        """A frame of this job failed authentication on arrival (and was dropped whole):
        report the chunk it named, so the control plane sends it again at once."""
        self._count(chunks_bad=1)
        self._event(t="bad", chunk=meta.get("chunk"), path=meta.get("path"), why=why)

    def _next_pool(self, meta: dict[str, Any]) -> OutboundPool | None:
        """The one pool a relayed chunk goes to (None for a tree's chunk: it may fan out)."""
        route = self.routes.get(str(meta.get("path")))
        if route is None or self.region not in route:
            return None
        i = route.index(self.region)
        return self._pools.get(route[i + 1]) if i + 1 < len(route) else None

    def can_splice(self, meta: dict[str, Any]) -> bool:
        """A relayed chunk can go straight through when the next hop sends frames unchanged."""
        if self._stop.is_set() or self._hooks:
            return False
        pool = self._next_pool(meta)
        return pool is not None and pool.plain

    def splice_forward(
        self,
        meta: dict[str, Any],
        meta_b: bytes,
        header: tuple[int, int, int, int, int, int, int],
        upstream: socket.socket,
        pipe: tuple[int, int],
    ) -> None:
        """Relay one frame kernel-side; waits for a free downstream connection (back-pressure).

        Raises ``wire.UpstreamError`` when the upstream connection broke mid-frame.
        """
        payload_len = header[2]
        pool = self._next_pool(meta)
        if pool is not None:
            pool.bucket.take(payload_len, self._stop.is_set)
        conn = pool.borrow() if pool is not None else None
        if pool is None or conn is None or conn.sock is None:
            wire.discard(upstream, payload_len)
            self._count(chunks_lost=1)
            self._event(
                t="lost",
                chunk=meta.get("chunk"),
                path=meta.get("path"),
                why="no downstream connection",
            )
            return
        try:
            n = wire.splice_frame(upstream, conn.sock, pipe, header, meta_b)
        except wire.DownstreamError as exc:
            pool.give_back(conn, broken=True)
            self._count(chunks_received=1, bytes_received=payload_len, chunks_lost=1)
            self._event(
                t="lost", chunk=meta.get("chunk"), path=meta.get("path"), why=f"send failed: {exc}"
            )
            return
        except wire.UpstreamError:
            pool.give_back(conn, broken=True)  # the peer saw half a frame: start afresh
            raise
        pool.give_back(conn)
        self._count(
            chunks_received=1,
            bytes_received=payload_len,
            chunks_sent=1,
            bytes_sent=payload_len,
            wire_bytes_sent=n,
        )

    def is_sink_for(self, meta: dict[str, Any]) -> bool:
        """Whether a chunk with this metadata ends its path at this gateway."""
        tree = self.trees.get(str(meta.get("path")))
        if tree is not None:
            return self.region in tree.sinks
        route = self.routes.get(str(meta.get("path")))
        return route is not None and route[-1] == self.region

    def _apply_relay_hooks(self, chunk: InChunk, first: bool) -> InChunk:
        """Test hooks (only with --enable-test-hooks): corrupt or delay forwarded chunks."""
        if not self._hooks or first:
            return chunk
        delay = float(self._hooks.get("relay_delay_s", 0))
        if delay:
            time.sleep(delay)
        with self._lock:
            corrupt = int(self._hooks.get("corrupt_chunks", 0))
            if corrupt > 0:
                self._hooks["corrupt_chunks"] = corrupt - 1
        if corrupt > 0 and len(chunk.payload):
            buf = bytearray(chunk.payload)
            buf[len(buf) // 2] ^= 0xFF
            self._event(t="hook", what="corrupted", chunk=chunk.meta["chunk"])
            return InChunk(chunk.meta, memoryview(buf), chunk.crc32c, chunk.lease, None)
        return chunk
