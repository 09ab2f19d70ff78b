"""Which tree each chunk of the tree pass goes down, decided as the pass runs.

Why not all at once: a plan may send a slice of the data down a tree whose first hop is slow
(a direct link from the source, filled to its measured rate by the plan), and chunks are
whole (2 MiB batches, or parts). Split by the plan's shares up front, such a tree got a
chunk or two more than it could land in the time the fast trees needed, and the pass waited
for it: its tail was 1.2-1.6x a single copy's move on the netns WAN. So the feeder keeps only
a window of chunks in flight (submitted, not yet landed at every sink) and gives the next one
to the tree that would land it first at the rates the trees *deliver* (the plan's shares
until a tree landed something; a tree with a chunk in flight and nothing landed yet gets no
second one). A slow tree then carries what it can in the time the others take, and each
chunk is still read and sent once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Chunks in flight at least (per tree, on top of one each), whatever the measured rate.
MIN_WINDOW_CHUNKS = 16
#: Seconds of the measured landing rate kept in flight beyond that (a pipeline of relays).
HORIZON_S = 1.0


@dataclass
class _TreeState:
    share: float
    in_flight: int = 0  # bytes submitted down this tree, not yet landed everywhere
    landed: int = 0  # bytes landed at every sink through this tree
    chunks_in_flight: int = 0


@dataclass
class TreeFeeder:
    """Submits ``(chunk id, bytes, descriptor maker)`` items down ``shares``' trees.

    ``submit(batch)`` sends descriptors to the root gateway; ``make(item, tree)`` builds one.
    Call ``top_up()`` once, then ``resolved(chunk_id)`` as each chunk lands at (or is given up
    by) every sink, and ``top_up()`` again.
    """

    shares: Sequence[float]
    items: Iterable[tuple[int, int, Any]]
    make: Callable[[Any, int], dict[str, Any]]
    submit: Callable[[list[dict[str, Any]]], object]
    largest: int
    clock: Callable[[], float] = time.monotonic
    trees: list[_TreeState] = field(init=False)
    tree_of: dict[int, tuple[int, int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.trees = [_TreeState(max(s, 1e-9)) for s in self.shares]
        self._items = iter(self.items)
        self._next: tuple[int, int, Any] | None = next(self._items, None)
        self._t0 = self.clock()

    @property
    def exhausted(self) -> bool:
        return self._next is None

    def window(self) -> int:
        """Bytes in flight allowed now: a floor of whole chunks, or the measured rate's
        ``HORIZON_S``."""
        elapsed = max(self.clock() - self._t0, 1e-3)
        rate = sum(t.landed for t in self.trees) / elapsed
        floor = (MIN_WINDOW_CHUNKS + len(self.trees)) * max(self.largest, 1)
        return max(floor, int(rate * HORIZON_S))

    def rates(self) -> list[float]:
        """Each tree's rate as far as known: the plan's shares until a tree landed something,
        then the bytes each landed per second; a tree yet to land any is 0 while it holds a
        chunk (it gets no second one), else its share at the others' pace (so a tree with a
        small share is still tried)."""
        if not any(t.landed for t in self.trees):
            return [t.share for t in self.trees]
        elapsed = max(self.clock() - self._t0, 1e-3)
        measured = [t for t in self.trees if t.landed]
        pace = sum(t.landed for t in measured) / elapsed / sum(t.share for t in measured)
        return [
            t.landed / elapsed if t.landed else 0.0 if t.chunks_in_flight else t.share * pace
            for t in self.trees
        ]

    def pick(self, nbytes: int) -> int | None:
        """The tree that would land ``nbytes`` more first, or None when it has no room: its
        share of the window (by ``rates``) is full. A tree may always hold one chunk."""
        rates = self.rates()
        total = sum(rates)
        window = self.window()

        def finish(k: int) -> float:
            t = self.trees[k]
            return (t.in_flight + nbytes) / rates[k] if rates[k] > 0 else float("inf")

        best = min(range(len(self.trees)), key=lambda k: (finish(k), self.trees[k].in_flight))
        t = self.trees[best]
        room = window * rates[best] / total if total > 0 else 0.0
        if t.chunks_in_flight and t.in_flight + nbytes > max(room, self.largest):
            return None
        return best

    def top_up(self) -> int:
        """Submit chunks while the tree they would land first on has room; the count."""
        batch: list[dict[str, Any]] = []
        count = 0
        while self._next is not None:
            cid, nbytes, item = self._next
            k = self.pick(nbytes)
            if k is None:
                break
            t = self.trees[k]
            t.in_flight += nbytes
            t.chunks_in_flight += 1
            self.tree_of[cid] = (k, nbytes)
            batch.append(self.make(item, k))
            count += 1
            self._next = next(self._items, None)
            if len(batch) >= 256:
                self.submit(batch)
                batch = []
        if batch:
            self.submit(batch)
        return count

    def resolved(self, cid: int, landed: bool = True) -> None:
        """Chunk ``cid`` is done with: landed at every sink (or given up by some)."""
        got = self.tree_of.pop(cid, None)
        if got is None:
            return
        k, nbytes = got
        t = self.trees[k]
        t.in_flight -= nbytes
        t.chunks_in_flight -= 1
        if landed:
            t.landed += nbytes
