"""Multicast paths of a job: a distribution tree per path, and a lease shared by its copies.

A job spec may name, besides its ``routes`` (one list of regions per path), ``trees``: per
path, ``{"next": {region: [next regions]}, "sinks": [regions]}``. A chunk on a tree path is
read once at the tree's root; every region forwards it to each of its next hops (each through
that hop's own pool, so each branch has its own connections and queue) and writes it when it
is one of the sinks. ``dst_uris`` (region -> URI) gives each sink region its own destination.

The chunk's payload is shared by its copies (nothing writes into it), and so is its byte
budget: ``SharedLease`` releases it when the last copy is sent or written. A slow branch thus
holds only the chunks it still has to send; the others go on until the gateway's budget is
full of them: a branch holds the others back only by the budget its backlog takes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway_agent.flow import Lease


@dataclass(frozen=True)
class Tree:
    """One multicast path: the regions each region forwards to, and where it is written."""

    next: Mapping[str, tuple[str, ...]]
    sinks: frozenset[str]

    @property
    def root(self) -> str:
        children = {v for vs in self.next.values() for v in vs}
        roots = [u for u in self.next if u not in children]
        return roots[0] if len(roots) == 1 else ""

    @property
    def regions(self) -> set[str]:
        return {*self.next, *(v for vs in self.next.values() for v in vs), *self.sinks}

    def edges(self) -> list[tuple[str, str]]:
        return [(u, v) for u, vs in self.next.items() for v in vs]


def parse_trees(spec: Mapping[str, Any]) -> dict[str, Tree]:
    """The spec's ``trees`` (ValueError for a malformed one: no single root, or a cycle)."""
    out: dict[str, Tree] = {}
    for path, body in (spec.get("trees") or {}).items():
        nxt = {str(u): tuple(str(v) for v in vs) for u, vs in dict(body["next"]).items()}
        tree = Tree(nxt, frozenset(str(s) for s in body.get("sinks", ())))
        if not tree.root:
            raise ValueError(f"tree path {path} has no single root")
        seen, todo = {tree.root}, [tree.root]
        while todo:
            for v in tree.next.get(todo.pop(), ()):
                if v in seen:
                    raise ValueError(f"tree path {path} reaches {v} twice")
                seen.add(v)
                todo.append(v)
        if not tree.sinks <= seen:
            raise ValueError(f"tree path {path} does not reach its sinks")
        out[str(path)] = tree
    return out


class _Copy(Lease):
    """One copy's hold on a shared lease: released once, however often it is told to."""

    __slots__ = ("_shared",)

    def __init__(self, shared: SharedLease) -> None:
        super().__init__(shared.lease.budget, 0)
        self._shared = shared

    def release(self) -> None:
        if self._done:
            return
        self._done = True
        self._shared.drop_one()


class SharedLease:
    """A chunk's lease shared by its ``copies``: released when every copy released its own
    (``copies()``), so a copy released twice never frees the payload under another."""

    __slots__ = ("_left", "_lock", "lease")

    def __init__(self, lease: Lease, copies: int) -> None:
        self.lease = lease
        self._left = copies
        self._lock = threading.Lock()

    def copies(self) -> list[Lease]:
        return [_Copy(self) for _ in range(self._left)]

    def drop_one(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self.lease.release()
