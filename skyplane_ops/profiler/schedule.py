"""Rounds of probes in which no gateway sends two probes or receives two probes at once.

Two probes that share a sender (or a receiver) would split its NIC and both measure too little.
The ordered pairs of n regions form the complete digraph; the cyclic shifts
``i -> (i + k) mod n`` for k = 1..n-1 colour its edges so that in each colour every region
sends exactly once and receives exactly once (n-1 rounds, optimal). Any subset of pairs
(a resumed run) keeps that property by dropping pairs from the shift rounds.

``exclusive=True`` is stricter: a gateway takes part in at most one probe per round, sending
or receiving (a round-robin tournament by the circle method, each match played in both
directions), for backends where a gateway's send and receive share one bottleneck.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Pair = tuple[str, str]


def all_pairs(regions: Sequence[str]) -> list[Pair]:
    """Every ordered pair of distinct regions."""
    return [(a, b) for a in regions for b in regions if a != b]


def _shift_rounds(regions: Sequence[str]) -> list[list[Pair]]:
    n = len(regions)
    return [[(regions[i], regions[(i + k) % n]) for i in range(n)] for k in range(1, n)]


def _tournament_rounds(regions: Sequence[str]) -> list[list[Pair]]:
    players: list[str | None] = list(regions)
    if len(players) % 2:
        players.append(None)  # a bye
    m = len(players)
    rounds: list[list[Pair]] = []
    for _ in range(m - 1):
        matches = [(players[i], players[m - 1 - i]) for i in range(m // 2)]
        real = [(a, b) for a, b in matches if a is not None and b is not None]
        rounds.append(list(real))
        rounds.append([(b, a) for a, b in real])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def schedule_rounds(
    regions: Sequence[str], pairs: Iterable[Pair] | None = None, *, exclusive: bool = False
) -> list[list[Pair]]:
    """Split ``pairs`` (default: all ordered pairs of ``regions``) into conflict-free rounds."""
    order = list(dict.fromkeys(regions))
    wanted = set(all_pairs(order) if pairs is None else pairs)
    unknown = {r for pair in wanted for r in pair} - set(order)
    if unknown:
        raise ValueError(f"pairs mention regions not in the run: {sorted(unknown)}")
    base = _tournament_rounds(order) if exclusive else _shift_rounds(order)
    rounds = [[p for p in rnd if p in wanted] for rnd in base]
    return [rnd for rnd in rounds if rnd]
