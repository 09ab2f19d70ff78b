"""Round scheduling: every ordered pair once, no gateway sends or receives twice per round."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyplane_ops.profiler.schedule import all_pairs, schedule_rounds


def _check(rounds: list[list[tuple[str, str]]], wanted: set[tuple[str, str]], exclusive: bool):
    flat = [p for rnd in rounds for p in rnd]
    assert Counter(flat) == Counter(wanted), "every wanted pair exactly once"
    for rnd in rounds:
        assert rnd, "no empty rounds"
        senders = Counter(s for s, _ in rnd)
        receivers = Counter(d for _, d in rnd)
        assert max(senders.values()) == 1, f"a gateway sends twice in {rnd}"
        assert max(receivers.values()) == 1, f"a gateway receives twice in {rnd}"
        if exclusive:
            busy = Counter([s for s, _ in rnd] + [d for _, d in rnd])
            assert max(busy.values()) == 1, f"a gateway is in two probes in {rnd}"


@pytest.mark.parametrize("n", range(2, 9))
def test_complete_digraph_in_n_minus_one_rounds(n: int) -> None:
    regions = [f"r{i}" for i in range(n)]
    rounds = schedule_rounds(regions)
    _check(rounds, set(all_pairs(regions)), exclusive=False)
    assert len(rounds) == n - 1  # optimal: each region must send n-1 times


@pytest.mark.parametrize("n", range(2, 9))
def test_exclusive_rounds(n: int) -> None:
    regions = [f"r{i}" for i in range(n)]
    rounds = schedule_rounds(regions, exclusive=True)
    _check(rounds, set(all_pairs(regions)), exclusive=True)
    assert len(rounds) == 2 * (n - 1 if n % 2 == 0 else n)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 7), data=st.data(), exclusive=st.booleans())
def test_any_subset_of_pairs(n: int, data: st.DataObject, exclusive: bool) -> None:
    """A resumed run schedules only the pairs left; the constraints still hold."""
    regions = [f"r{i}" for i in range(n)]
    subset = data.draw(st.sets(st.sampled_from(all_pairs(regions))))
    rounds = schedule_rounds(regions, subset, exclusive=exclusive)
    _check(rounds, subset, exclusive)


def test_unknown_region_in_pairs() -> None:
    with pytest.raises(ValueError, match="not in the run"):
        schedule_rounds(["a", "b"], [("a", "c")])
