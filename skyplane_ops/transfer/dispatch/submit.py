"""Submitting chunks: each goes to the live path that drains first and, on it, to the
least-loaded source gateway, as a descriptor batched per gateway and sent in the background.
The part of ``Dispatcher`` that decides where a chunk goes and how it is sent there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from gateway_agent.client import GatewayClient, GatewayError
from skyplane_ops.errors import TransferError
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.transfer.manifest import Chunk, Segment
from skyplane_ops.transfer.submitter import Submitter

# A path of a job that paths join holds at most this many seconds of work at its rate, but
# always a chunk, and a chunk per reader up to ``HOLD_MIN_BYTES`` (``_room``: fewer would
# leave its readers idle, and its measured rate would shrink with them).
HOLD_S = 1.0
HOLD_MIN_BYTES = 64 << 20

# Chunk descriptors per submit request, and segments per request: a batch of small objects is
# one chunk of up to 256 segments, so the request body stays a few hundred KiB.
SUBMIT_BATCH = 500
SUBMIT_SEGMENTS = 4096


def _submit_to(client: GatewayClient, *, job_id: str, batch: list[dict[str, Any]]) -> int:
    return client.submit_chunks(job_id, batch)


def _segment(s: Segment, uploads: Mapping[str, str]) -> dict[str, Any]:
    """A segment as the gateways read it: ``key`` and ``length``, plus ``offset``, ``part``
    with ``upload_id`` and ``version`` only where they say something (a whole object of an
    unversioned store is two fields: its metadata is encoded and decoded at every gateway of
    the path, per object)."""
    d: dict[str, Any] = {"key": s.key, "length": s.length}
    if s.offset:
        d["offset"] = s.offset
    if s.part >= 1:
        d["part"] = s.part
        d["upload_id"] = uploads.get(s.key)
    if s.version is not None:
        d["version"] = s.version
    return d


class Submission:
    """The submitting part of ``Dispatcher``: path and source per chunk, batches per gateway."""

    job_id: str
    fleet: GatewayFleet
    routes: list[tuple[list[str], float]]
    clients: dict[str, GatewayClient]
    _by_id: dict[str, Gateway]
    _alive: list[bool]
    _assigned: dict[str, int]
    _path_bytes: list[int]
    _outstanding: list[int]
    _outstanding_n: list[int]
    _chunk_path: dict[int, int]
    _left: set[str]  # gateways left out after they died (their regions have others)
    _sender: Submitter
    _arrivals: Any
    options: Any
    plan_gbps: list[float]  # per path, as planned
    _path_since: dict[int, float]  # per live path: when it started (monotonic)
    _path_done: dict[int, int]  # per path: bytes delivered

    def _call(self, gateway_id: str, fn: Callable[[GatewayClient], Any]) -> Any:
        try:
            return fn(self.clients[gateway_id])
        except GatewayError as exc:
            g = self._by_id[gateway_id]
            raise TransferError(
                f"gateway {gateway_id} in region {g.region} ({g.host}:{g.control_port}) "
                f"failed: {exc}"
            ) from exc

    def _pick_path(self, nbytes: int) -> int:
        """The live path that would finish its outstanding bytes plus this chunk first, at
        rates in proportion to the plan's shares: all chunks submitted at once split by the
        shares; chunks submitted later (more than a window) go where work drains fastest, so
        a path slower than predicted does not become the transfer's tail."""
        live = [i for i in range(len(self.routes)) if self._alive[i]]
        if self._arrivals is not None:  # joining paths: those with room first (``_has_room``)
            now = time.monotonic()
            live = [i for i in live if self._room(i, now)] or live
        best = min(
            live, key=lambda i: (self._outstanding[i] + nbytes) / max(self.routes[i][1], 1e-9)
        )
        self._path_bytes[best] += nbytes
        self._outstanding[best] += nbytes
        self._outstanding_n[best] += 1
        return best

    def _has_room(self) -> bool:
        """Whether a live path may take more chunks. Paths that join a running job
        (``join``) each hold at most ``HOLD_S`` seconds of work at the rate they drain (see
        ``_room``), so a
        slow path does not sit on the work a faster one joining later could take. Without
        joining paths there is no such bound (the window alone)."""
        if self._arrivals is None:
            return True
        now = time.monotonic()
        return any(self._alive[p] and self._room(p, now) for p in range(len(self.routes)))

    def _room(self, p: int, now: float) -> bool:
        """Path ``p`` holds no chunk, fewer than a chunk per reader within
        ``HOLD_MIN_BYTES``, or less than ``HOLD_S`` seconds of its rate (the plan's, or the
        one it has shown if higher)."""
        n, held = self._outstanding_n[p], self._outstanding[p]
        if n < 1 or (n < self.options.reader_threads and held < HOLD_MIN_BYTES):
            return True
        since = self._path_since.get(p, now)
        done = self._path_done.get(p, 0)
        measured = done / (now - since) if now - since >= 1.0 else 0.0
        # Never below the plan's rate: a path held to what it moved would move only that
        # (its rate is what it holds over a chunk's time), and shrink with every measure.
        return held < max(self.plan_gbps[p] / 8e-9, measured) * HOLD_S

    def _pick_source(self, path: int, nbytes: int) -> str:
        region = self.routes[path][0][0]
        gid = min(
            (g.gateway_id for g in self.fleet.in_region(region) if g.gateway_id not in self._left),
            key=lambda i: self._assigned[i],
        )
        self._assigned[gid] += nbytes
        return gid

    def _descriptor(self, chunk: Chunk, path: int, uploads: Mapping[str, str]) -> dict[str, Any]:
        return {
            "chunk": chunk.chunk_id,
            "path": str(path),
            "attempt": chunk.attempts,
            "segs": [_segment(s, uploads) for s in chunk.segments],
        }

    def _submit(self, chunks: list[Chunk], uploads: Mapping[str, str]) -> None:
        per_gateway: dict[str, list[dict[str, Any]]] = {}
        for c in chunks:
            path = self._pick_path(c.nbytes)
            self._chunk_path[c.chunk_id] = path
            gid = c.source = self._pick_source(path, c.nbytes)
            per_gateway.setdefault(gid, []).append(self._descriptor(c, path, uploads))
        for gid, descs in per_gateway.items():
            batch: list[dict[str, Any]] = []
            segments = 0
            for d in descs:
                if batch and (len(batch) >= SUBMIT_BATCH or segments >= SUBMIT_SEGMENTS):
                    self._send(gid, batch)
                    batch, segments = [], 0
                batch.append(d)
                segments += len(d["segs"])
            if batch:
                self._send(gid, batch)

    def _send(self, gid: str, batch: list[dict[str, Any]]) -> None:
        """Queue ``batch`` for ``gid`` (a failure is raised by the poll loop's next turn)."""
        self._sender.send(
            gid, partial(self._call, gid, partial(_submit_to, job_id=self.job_id, batch=batch))
        )
