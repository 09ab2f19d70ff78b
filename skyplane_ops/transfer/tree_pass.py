"""The tree pass of a several-destination copy: each chunk read once at the source and sent
down the plan's distribution trees to every destination, each sink's ``done`` journaled into
its own destination's journal.

Why a pass before the per-destination runs, not a dispatcher of its own: each destination
keeps what a single copy has (lock, listing, journal, commit, verification) by running as
today afterwards (``FanoutRun``); those runs find the chunks the pass landed in their
journals (``todo.resume``) and send only what is still missing, then commit and verify. So
the pass may stop anywhere (a sink killed, a gateway error, a stall) without losing or
tearing anything: it writes only what an interrupted copy writes (objects and parts, never a
commit), and what it did not finish the unicast runs finish.

The pass runs over the destinations whose chunk lists are the same (a first copy: all of
them; a re-run: those with the same work left), pruning each tree to their regions. A chunk
lost on a branch (a send that failed) or refused on arrival is sent again, from the root down
that tree cut to the sinks that miss it, up to the dispatcher's ``max_attempts`` per sink (as a
single copy re-sends a chunk); what is still missing then is left to that destination's run.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from gateway_agent.auth import load_secret, seal
from gateway_agent.client import GatewayClient
from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet, data_host
from skyplane_ops.transfer.catalog import Catalog
from skyplane_ops.transfer.commit import prepare_uploads
from skyplane_ops.transfer.dispatch import DispatchOptions
from skyplane_ops.transfer.dispatch.spec import LOOPBACK_CONNECTIONS, encrypt_hop, hop_kind
from skyplane_ops.transfer.journal import Journal
from skyplane_ops.transfer.listing import list_request, transfer_lock
from skyplane_ops.transfer.manifest import Chunk
from skyplane_ops.transfer.metadata import sync_meta_check, upload_meta
from skyplane_ops.transfer.progress import Progress, ProgressCallback
from skyplane_ops.transfer.request import TransferRequest
from skyplane_ops.transfer.todo import iter_chunks, plan_todo, resume
from skyplane_ops.transfer.tree_feed import TreeFeeder

log = logging.getLogger(__name__)

# Bytes of small objects batched into one chunk: smaller than a copy's batches, so the chunks
# split between the trees by their shares and pipeline through relays (each hop forwards a
# chunk once it has it whole). The journal records segments, not chunks: the destinations'
# runs resume from it whatever the batches were.
TREE_BATCH_BYTES = 2 * 1024 * 1024

# Seconds a status call may wait for news: one such call per turn of the poll loop.
POLL_WAIT = 0.1

Tree = dict[str, list[str]]  # region -> the regions it forwards to


@dataclass
class TreePassResult:
    """What the pass did: the destinations it served, chunks landed per destination, the
    bytes the source's gateways sent and the wall time."""

    served: list[str] = field(default_factory=list)
    landed: dict[str, int] = field(default_factory=dict)
    source_bytes_read: int = 0
    source_bytes_sent: int = 0
    bytes_landed: int = 0
    resent: int = 0  # chunk copies sent again to sinks that missed them
    seconds: float = 0.0
    why_not: str = ""


def plan_trees(plan: TransferPlan) -> list[tuple[float, Tree]] | None:
    """The plan's trees ((share, next hops)): a multicast plan's own, else its paths merged
    into one tree (None when they do not form one: a region reached from two others)."""
    given = (plan.details or {}).get("multicast", {}).get("trees")
    if given:
        return [(float(t["share"]), {u: list(v) for u, v in t["next_hops"].items()}) for t in given]
    parent: dict[str, str] = {}
    tree: Tree = {}
    for p in plan.paths:
        for u, v in zip(p.regions, p.regions[1:], strict=False):
            if parent.setdefault(v, u) != u or v == plan.src:
                return None
            if v not in tree.setdefault(u, []):
                tree[u].append(v)
    return [(1.0, tree)] if tree else None


def prune(tree: Tree, sinks: set[str]) -> Tree:
    """``tree`` without the branches that lead to none of ``sinks``."""

    def needed(u: str) -> bool:
        return u in sinks or any(needed(v) for v in tree.get(u, ()))

    return {u: [v for v in vs if needed(v)] for u, vs in tree.items() if needed(u)}


def _signature(chunks: Sequence[Chunk]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple((s.key, s.part, s.offset, s.length) for s in c.segments) for c in chunks)


@dataclass
class _Destination:
    request: TransferRequest
    region: str
    journal: Journal
    catalog: Catalog
    uploads: dict[str, str]
    chunks: list[Chunk]


def tree_pass(
    plan: TransferPlan,
    fleet: GatewayFleet,
    requests: Sequence[TransferRequest],
    regions: Sequence[str],
    *,
    options: DispatchOptions | None = None,
    progress: ProgressCallback | None = None,
) -> TreePassResult:
    """Send the destinations' common chunks down the plan's trees once; see the module."""
    if not requests:
        return TreePassResult(why_not="no destination")
    # The data path's knobs of the request (the same for every destination) over the tuning.
    options = requests[0].dispatch_options(options)
    trees = plan_trees(plan)
    if not trees:
        return TreePassResult(why_not="the plan's paths form no tree")
    dst_options = {json.dumps(dict(r.dst.options), sort_keys=True, default=str) for r in requests}
    if len(dst_options) > 1 or any(
        r.move or r.files_from is not None or r.bwlimit_bps for r in requests
    ):
        return TreePassResult(
            why_not="destinations with different options, a move, a key list or a rate cap"
        )
    with ExitStack() as stack:
        prepared: list[_Destination] = []
        for req, region in zip(requests, regions, strict=True):
            try:
                stack.enter_context(transfer_lock(req))
            except Exception as exc:  # held by another run: that destination is its own
                log.info("tree pass skips %s: %s", req.dst_uri, exc)
                continue
            prepared.append(stack.enter_context(_prepare(req, region)))
        groups: dict[tuple[Any, ...], list[_Destination]] = {}
        for d in prepared:
            if d.chunks:
                groups.setdefault(_signature(d.chunks), []).append(d)
        group = max(groups.values(), key=len, default=[])
        if len(group) < 2:
            return TreePassResult(why_not="fewer than two destinations with the same work")
        return _send(plan, fleet, trees, group, options, progress)
    raise AssertionError("unreachable")  # pragma: no cover


class _prepare:
    """A destination's listing, journal, resumed segments and multipart uploads, as
    ``run_transfer`` makes them; the listing is closed on exit."""

    def __init__(self, request: TransferRequest, region: str) -> None:
        self.request, self.region = request, region

    def __enter__(self) -> _Destination:
        req = self.request
        journal = Journal(req.journal_path, req.key)
        self.listing = list_request(req)
        catalog = self.listing.catalog
        src, dst = req.src.open("source"), req.dst.open("destination")
        plan_todo(
            catalog, dst, req.dst_uri, req.include, req.exclude, sync=req.sync,
            delete=False, max_delete=req.max_delete,
            names_fit=src.capabilities.file_names and dst.capabilities.file_names,
            ignore_existing=req.ignore_existing, update=req.update, move=False,
            src_uri=req.src_uri,
            meta_check=sync_meta_check(src, dst, req.metadata, req.metadata_set),
        )  # fmt: skip
        catalog.load_journal(journal.path)
        resume(catalog, req.part_size, dst.capabilities)
        meta = upload_meta(src, dst, req.metadata, req.metadata_set)
        uploads = prepare_uploads(dst, req.dst_uri, catalog, journal, req.part_size, meta)
        chunks = list(iter_chunks(catalog, req.part_size, dst.capabilities, TREE_BATCH_BYTES))
        return _Destination(req, self.region, journal, catalog, uploads, chunks)

    def __exit__(self, *exc: object) -> None:
        self.listing.close()


def _send(
    plan: TransferPlan,
    fleet: GatewayFleet,
    trees: list[tuple[float, Tree]],
    group: list[_Destination],
    options: DispatchOptions,
    progress: ProgressCallback | None,
) -> TreePassResult:
    secret = load_secret(fleet.secret_ref)
    sinks = {d.region: d for d in group}
    paths: dict[str, dict[str, Any]] = {
        str(i): {"next": prune(t, set(sinks)), "sinks": sorted(sinks)}
        for i, (_, t) in enumerate(trees)
    }
    for t in paths.values():
        reached = {*t["next"], *(v for vs in t["next"].values() for v in vs)}
        if not set(sinks) <= reached:
            return TreePassResult(why_not=f"a tree of the plan misses {set(sinks) - reached}")
    for i, (_, t) in enumerate(trees):  # re-sends: each tree cut to one sink
        for s in sinks:
            paths[retry_path(i, s)] = {"next": prune(t, {s}), "sinks": [s]}
    edges = {(u, v) for t in paths.values() for u, vs in t["next"].items() for v in vs}
    used = {r for e in edges for r in e} | set(sinks)
    first = group[0].request
    sealed = seal(
        secret,
        json.dumps({"src": dict(first.src.options), "dst": dict(first.dst.options)}).encode(),
    )
    job_id = f"tree-{uuid.uuid4().hex[:12]}"
    hops = {}
    for u, v in edges:
        kind = hop_kind(u, v, [data_host(g, u) for g in fleet.in_region(v)], fleet.backend)
        hops[f"{u}>{v}"] = {
            "connections": _connections(plan, fleet, u, v, kind, options.connections),
            "encrypt": encrypt_hop(options.encrypt, u, v, kind),
            "compress_level": options.compress_level,
        }
    clients = {
        g.gateway_id: GatewayClient(g.host, g.control_port, secret, timeout=10.0, attempts=1)
        for r in used
        for g in fleet.in_region(r)
    }
    root = plan.src
    largest = max((c.nbytes for c in group[0].chunks), default=0)
    started: list[str] = []
    out = TreePassResult(served=[d.request.dst_uri for d in group])
    try:
        for region in sorted(used, key=lambda r: r == root):  # the root last
            for g in fleet.in_region(region):
                table = {
                    r: [
                        {"id": h.gateway_id, "host": data_host(h, region), "data_port": h.data_port}
                        for h in fleet.in_region(r)
                    ]
                    for r in used
                }
                clients[g.gateway_id].start_job(
                    {
                        "job_id": job_id,
                        "routes": {},
                        "trees": paths,
                        "gateways": table,
                        "hops": hops,
                        "src_uri": first.src_uri,
                        "dst_uris": {r: d.request.dst_uri for r, d in sinks.items()},
                        "sealed_options": sealed,
                        "reader_threads": options.reader_threads,
                        "writer_threads": options.writer_threads,
                        "object_threads": options.object_threads,
                        "max_chunk_bytes": min(first.part_size, largest) or None,
                        "metadata": {"keep": options.metadata, "set": options.metadata_set},
                        "test_hooks": options.test_hooks.get(g.gateway_id)
                        or options.test_hooks.get(region)
                        or {},
                    }
                )
                started.append(g.gateway_id)
        t0 = time.monotonic()
        root_client = clients[fleet.in_region(root)[0].gateway_id]
        feeder = _feeder(root_client, job_id, trees, group)
        feeder.top_up()
        below = {r: _below(paths, r) & set(sinks) for r in used}
        resend = _Resend(root_client, job_id, group, feeder, options.max_attempts)
        _await(fleet, clients, job_id, sinks, below, options, progress, out, feeder, resend)
        out.seconds = time.monotonic() - t0
        for g in fleet.in_region(root):
            counters = clients[g.gateway_id].status(job_id)["counters"]
            out.source_bytes_read += int(counters["bytes_read"])
            out.source_bytes_sent += int(counters["bytes_sent"])
    finally:
        for gid in started:
            try:
                clients[gid].stop_job(job_id)
            except Exception:  # a killed gateway: nothing left to stop
                pass
        for d in group:
            d.journal.sync()
    return out


def _connections(
    plan: TransferPlan, fleet: GatewayFleet, u: str, v: str, kind: str, given: int | None
) -> int:
    """TCP connections per sender on hop ``u -> v``, as the dispatcher sets them: the
    request's, else the plan's for the hop shared by its gateway pairs (8 without one), at
    most ``LOOPBACK_CONNECTIONS`` on one host."""
    if given:
        return given
    n = 8
    pairs = max(1, len(fleet.in_region(u)) * len(fleet.in_region(v)))
    for hop in plan.hops:
        if (hop.src, hop.dst) == (u, v) and hop.connections > 0:
            n = max(1, min(64, -(-hop.connections // pairs)))
    return min(n, LOOPBACK_CONNECTIONS) if kind == "loopback" else n


def retry_path(tree: int, sink: str) -> str:
    """The job path that re-sends tree ``tree``'s chunks to ``sink`` alone."""
    return f"{tree}>{sink}"


def _descriptor(chunk: Chunk, path: str, group: list[_Destination]) -> dict[str, Any]:
    """A chunk's descriptor at the root: each part names its multipart upload at every sink
    region (``upload_ids``)."""
    segs = []
    for s in chunk.segments:
        seg: dict[str, Any] = {"key": s.key, "length": s.length, "offset": s.offset}
        if s.part >= 1:
            seg["part"] = s.part
            seg["upload_ids"] = {d.region: d.uploads.get(s.key) for d in group}
        if s.version is not None:
            seg["version"] = s.version
        segs.append(seg)
    return {"chunk": chunk.chunk_id, "path": path, "attempt": 0, "segs": segs}


def _feeder(
    client: GatewayClient, job_id: str, trees: list[tuple[float, Tree]], group: list[_Destination]
) -> TreeFeeder:
    """Every chunk at the root, down the tree that would land it first (``tree_feed``)."""
    chunks = group[0].chunks
    return TreeFeeder(
        shares=[share for share, _ in trees],
        items=[(c.chunk_id, c.nbytes, c) for c in chunks],
        make=lambda chunk, k: _descriptor(chunk, str(k), group),
        submit=lambda batch: client.submit_chunks(job_id, batch),
        largest=max((c.nbytes for c in chunks), default=0),
    )


class _Resend:
    """Sends a chunk again to the sinks that missed it, down its tree cut to each, at most
    ``max_attempts`` sends per chunk and sink in all (the dispatcher's policy for a chunk a
    hop lost or refused); past that the sink's own run sends it."""

    def __init__(
        self,
        client: GatewayClient,
        job_id: str,
        group: list[_Destination],
        feeder: TreeFeeder,
        max_attempts: int,
    ) -> None:
        self.client, self.job_id, self.group = client, job_id, group
        self.feeder, self.max_attempts = feeder, max(1, max_attempts)
        self.sends: dict[tuple[int, str], int] = {}

    def missed(self, chunk: Chunk, path: str, sinks: set[str]) -> set[str]:
        """``chunk`` (sent down ``path``) missed ``sinks``: send it again to those with
        attempts left (an event of the first send counts once per sink: a copy refused at a
        relay and at the sinks below it is one miss). Returns the sinks given up."""
        tree = self.feeder.tree_of.get(chunk.chunk_id)
        if tree is None:
            return set()
        again, given_up = [], set()
        for s in sorted(sinks):
            n = self.sends.get((chunk.chunk_id, s), 1)
            if path == str(tree[0]) and n > 1:
                continue  # the first send's miss: already sent again
            if n >= self.max_attempts:
                given_up.add(s)
                continue
            self.sends[(chunk.chunk_id, s)] = n + 1
            desc = _descriptor(chunk, retry_path(tree[0], s), self.group)
            again.append({**desc, "attempt": n})
        if again:
            log.info("tree pass: chunk %s sent again to %d sink(s)", chunk.chunk_id, len(again))
            self.client.submit_chunks(self.job_id, again)
        return given_up


def _await(
    fleet: GatewayFleet,
    clients: Mapping[str, GatewayClient],
    job_id: str,
    sinks: Mapping[str, _Destination],
    below: Mapping[str, set[str]],
    options: DispatchOptions,
    progress: ProgressCallback | None,
    out: TreePassResult,
    feeder: TreeFeeder,
    resend: _Resend,
) -> None:
    """Journal each sink's ``done`` chunks into its destination's journal until every chunk
    landed or was given up at every sink. A sink is given up when its gateway is gone or
    failed; a chunk when a sink could not write it (``failed``/``changed``: the destination's
    run sends it). A chunk a sender lost or a gateway refused is sent again to the sinks below
    (``_Resend``) until its attempts are spent, then left to their runs. The pass ends early
    when a sender fails, or when nothing lands for the hop timeout. ``below``: per region,
    the sinks its branches reach. A chunk done with at every sink frees its room in
    ``feeder``'s window for the next."""
    senders = {r for r, after in below.items() if after - {r}}
    chunks = {c.chunk_id: c for c in next(iter(sinks.values())).chunks}
    total_bytes = sum(c.nbytes for c in chunks.values()) * len(sinks)
    left = {r: set(chunks) for r in sinks}
    cursors: dict[str, int] = {}
    landed_somewhere: set[int] = set()
    t0 = last = time.monotonic()
    seen = 0
    quiet = min(options.stall_timeout, options.hop_timeout)
    while any(left.values()):
        waited = False  # one long poll per turn (on a sink with chunks to come), others quick
        for region in sorted(senders | set(left)):
            if region in sinks and not left.get(region) and region not in senders:
                continue
            for g in fleet.in_region(region):
                wait = 0.0 if waited or not left.get(region) else POLL_WAIT
                waited = waited or wait > 0
                try:
                    st = clients[g.gateway_id].status(job_id, cursors.get(g.gateway_id, 0), wait)
                    failed = st.get("error")
                except Exception as exc:  # gone: a sink's destination run will say so
                    failed = str(exc)
                    st = {"cursor": 0, "events": []}
                if failed:
                    log.info("tree pass: %s (%s) failed: %s", region, g.gateway_id, failed)
                    if region not in sinks:
                        return  # a sender: the destinations' runs finish the rest
                    left[region] = set()
                    continue
                cursors[g.gateway_id] = st["cursor"]
                for ev in st["events"]:
                    cid, kind = ev.get("chunk", -1), ev.get("t")
                    if kind == "error" and ev.get("hop"):  # a branch is dead: its sinks too
                        for r in below.get(str(ev["hop"][1]), set()) & set(left):
                            left[r] = set()
                    if cid not in chunks:
                        continue
                    if kind == "done" and region in sinks and cid in left[region]:
                        _journal(sinks[region], chunks[cid], ev, out)
                        left[region].discard(cid)
                        landed_somewhere.add(cid)
                    elif kind in ("lost", "bad"):  # below the hop or the gateway: again
                        at = str(ev.get("to") or region)
                        missing = {r for r in below.get(at, set()) if cid in left.get(r, ())}
                        path = str(ev.get("path", feeder.tree_of.get(cid, (0, 0))[0]))
                        before = sum(resend.sends.values())
                        for r in resend.missed(chunks[cid], path, missing):
                            left[r].discard(cid)
                        out.resent += sum(resend.sends.values()) - before
                    elif kind in ("failed", "changed") and region in sinks:
                        left[region].discard(cid)
        for cid in [c for c in feeder.tree_of if not any(c in rest for rest in left.values())]:
            feeder.resolved(cid, landed=cid in landed_somewhere)
            landed_somewhere.discard(cid)
        feeder.top_up()
        n = sum(out.landed.values())
        if progress is not None:
            elapsed = time.monotonic() - t0
            done_bytes = out.bytes_landed
            progress(
                Progress(
                    bytes_done=done_bytes,
                    bytes_total=total_bytes,
                    chunks_done=n,
                    chunks_total=len(chunks) * len(sinks),
                    elapsed_s=round(elapsed, 3),
                    gbps=round(done_bytes * 8 / 1e9 / elapsed, 4) if elapsed else 0.0,
                )
            )
        if n != seen:
            last, seen = time.monotonic(), n
        elif time.monotonic() - last > quiet:
            log.info("tree pass: nothing landed for %.0f s: the runs finish it", quiet)
            return


def _below(paths: Mapping[str, Mapping[str, Any]], region: str) -> set[str]:
    """``region`` and the regions after it in any of the trees."""
    out, todo = {region}, [region]
    while todo:
        u = todo.pop()
        for t in paths.values():
            for v in t["next"].get(u, ()):
                if v not in out:
                    out.add(v)
                    todo.append(v)
    return out


def _journal(d: _Destination, chunk: Chunk, ev: Mapping[str, Any], out: TreePassResult) -> None:
    """A chunk landed at ``d``: its segments in ``d``'s journal, as the engine records them."""
    crcs = [int(x) for x in ev.get("crcs", [])]
    records = [
        (s.seg_id, crc, s.fp or "null") for s, crc in zip(chunk.segments, crcs, strict=False)
    ]
    d.journal.record_done(records)
    out.landed[d.request.dst_uri] = out.landed.get(d.request.dst_uri, 0) + 1
    out.bytes_landed += chunk.nbytes
