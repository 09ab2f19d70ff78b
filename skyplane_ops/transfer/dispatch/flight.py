"""Objects in flight: how many objects of the transfer are done, counted from the dispatch
window alone (for progress), so nothing per object outside the window is kept.
"""

from __future__ import annotations

from skyplane_ops.transfer.manifest import Chunk


class _Flight:
    """Objects done, counted from the window alone: an object is done when its last segment
    has been pulled and none of its segments is still in flight (segments of one object come
    in order and together, so this needs only the objects in the window)."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self._left: dict[str, int] = {}  # segments in flight per object
        self._ended: set[str] = set()  # objects whose last segment has been pulled
        self._dropped: set[str] = set()  # failed or changed in this run (few)

    def pulled(self, chunk: Chunk) -> None:
        for s in chunk.segments:
            if s.part == 0:  # a whole object: done when it lands, nothing to track
                continue
            self._left[s.key] = self._left.get(s.key, 0) + 1
            if s.last:
                self._ended.add(s.key)

    def landed(self, chunk: Chunk) -> None:
        for s in chunk.segments:
            if s.part == 0:
                self.done += s.key not in self._dropped
                continue
            n = self._left.get(s.key, 0) - 1
            if n > 0:
                self._left[s.key] = n
                continue
            self._left.pop(s.key, None)
            if s.key in self._ended:
                self._ended.discard(s.key)
                if s.key not in self._dropped:
                    self.done += 1

    def dropped(self, key: str) -> None:
        if key not in self._dropped:
            self._dropped.add(key)
            self.total -= 1
        self._left.pop(key, None)
        self._ended.discard(key)

    def __len__(self) -> int:
        """Objects tracked now (bounded by the window)."""
        return len(self._left)
