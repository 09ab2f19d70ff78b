"""What a dispatch is given and gives back: the data path's knobs (``DispatchOptions``), the
totals of the chunks to come (``ChunkTotals``) and what the run did (``DispatchStats``): plain
data, kept apart from the dispatcher's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.provision.lease import LINGER_S
from skyplane_ops.transfer.dispatch.minting import DEFAULT_LIFETIME_S


@dataclass
class DispatchOptions:
    """Knobs of the data path; ``None`` connections means "as the plan says"."""

    connections: int | None = None
    # AES-GCM per hop: "auto" where the hop leaves a network the user owns (see
    # ``spec.encrypt_hop``), "all"/True, "none"/False, or an explicit collection of
    # (src_region, dst_region) hops. A clear hop's chunks are still tagged end to end.
    encrypt: bool | str | frozenset[tuple[str, str]] = "auto"
    compress_level: int = 0
    max_attempts: int = 4
    poll_interval: float = 0.1
    stall_timeout: float = 300.0
    # A hop that answers nothing or moves no bytes for this long is dead (see liveness.py);
    # it must exceed the time one chunk takes over the slowest hop.
    hop_timeout: float = 30.0
    # Gateway leases while the job runs (None: the fleet's, else 60 s; 0: hold no lease) and
    # after it ends.
    lease_s: float | None = None
    lease_linger_s: float = LINGER_S
    reader_threads: int = 8
    writer_threads: int = 8
    # Per job and gateway: the objects of a batched chunk are read/written this many at once
    # (64: at 20 ms per S3 request, 32 in flight capped a gateway near 1,000 PUT/s; the store
    # pools hold 64 connections).
    object_threads: int = 64
    # Chunks submitted and not yet finished, per source gateway: the rest waits in the control
    # plane, so a gateway holds a bounded batch of work at any object count (and a dead path
    # has few chunks to move).
    window_chunks: int = 64
    # The largest chunk the job sends (its part size): a gateway whose byte budget is smaller
    # refuses the job before any byte moves (None: not checked).
    max_chunk_bytes: int | None = None
    # How long the store credentials minted for the job live (seconds): they are minted again
    # and sent to the gateways half-way through (AWS sessions last 15 min at least; the
    # control plane keeps a shorter life itself: see ``dispatch.minting``).
    credentials_lifetime_s: float = DEFAULT_LIFETIME_S
    # The transfer's bandwidth cap, bytes/s over all paths (None: none), and the file a new cap
    # is written to while the job runs (``transfer.bwlimit.live_path``; None: not watched).
    bwlimit: float | None = None
    bwlimit_file: str | None = None
    # The worker's own cap (bytes/s; ``--worker-gbps`` when given, None: none): what its
    # one-region route may read and write, besides its share of ``bwlimit``.
    worker_rate: float | None = None
    # Objects keep their metadata (``objmeta``); ``metadata_set`` is written over it.
    metadata: bool = True
    metadata_set: dict[str, str] = field(default_factory=dict)
    # gateway id or region -> hooks honoured only by agents started with --enable-test-hooks
    test_hooks: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ChunkTotals:
    """What a chunk iterator will yield, known before the first chunk (for progress)."""

    chunks: int
    nbytes: int
    objects: int


@dataclass
class DispatchStats:
    chunks: int = 0
    resent: int = 0
    rerouted: int = 0
    dead_hops: list[str] = field(default_factory=list)
    bytes_done: int = 0
    changed_keys: set[str] = field(default_factory=set)
    # key -> why, for objects a gateway could not copy ("source: ..." / "destination: ...")
    failed_keys: dict[str, str] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per route index: bytes delivered, and seconds from the start until its last chunk landed.
    path_bytes: dict[int, int] = field(default_factory=dict)
    path_seconds: dict[int, float] = field(default_factory=dict)
    # Per route index that joined while the job ran (``join``): seconds from the start.
    path_joined: dict[int, float] = field(default_factory=dict)
