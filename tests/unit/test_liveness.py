"""HopWatch verdicts on a region of two gateways, with explicit clocks (no sleeping): one dead
gateway does not kill the region's paths, and once it is left out the region is judged by the
other alone (its silence no longer holds back stall detection)."""

from __future__ import annotations

from skyplane_ops.transfer.liveness import HopWatch

SRC, RELAY, DST = "r:src", "r:relay", "r:dst"
GATEWAYS = {SRC: ["s0"], RELAY: ["r0", "r1"], DST: ["d0"]}
TIMEOUT = 10.0


def watch_at_zero() -> HopWatch:
    return HopWatch([[SRC, RELAY, DST]], GATEWAYS, TIMEOUT, now=0.0)


def answer(watch: HopWatch, now: float, moved: int, *gids: str) -> None:
    for gid in gids:
        watch.answered(gid, {"bytes_received": moved}, now)


def test_one_silent_gateway_of_two_does_not_kill_the_path() -> None:
    watch = watch_at_zero()
    answer(watch, 15.0, 1, "s0", "r0", "d0")  # r1 silent since 0
    assert watch.gateway_dead("r1", 15.0)
    assert watch.check(15.0, {0: 1}) == []


def test_both_gateways_silent_kill_the_hop_into_their_region() -> None:
    watch = watch_at_zero()
    answer(watch, 15.0, 1, "s0", "d0")
    dead = watch.check(15.0, {0: 1})
    assert [(d.path, d.hop) for d in dead] == [(0, (SRC, RELAY))]
    assert "r0, r1" in dead[0].why


def test_a_left_out_gateway_no_longer_holds_back_stall_detection() -> None:
    watch = watch_at_zero()
    answer(watch, 6.0, 1, "s0", "r0", "d0")  # r1 silent for more than half the timeout
    # The source keeps reading; bytes stopped reaching the relay at 6 s; polls still answer.
    answer(watch, 20.0, 2, "s0")
    answer(watch, 20.0, 1, "r0", "d0")
    assert watch.check(20.0, {0: 1}) == []  # r1's silence suspends stall verdicts
    watch.leave_out("r1")
    dead = watch.check(20.0, {0: 1})
    assert [(d.path, d.hop) for d in dead] == [(0, (SRC, RELAY))]
    assert "no bytes reached r:relay" in dead[0].why


def test_the_last_gateway_of_a_region_left_decides_alone() -> None:
    watch = watch_at_zero()
    watch.leave_out("r1")
    answer(watch, 15.0, 1, "s0", "d0")  # r0, now the region's only gateway, is silent
    dead = watch.check(15.0, {0: 1})
    assert [d.hop for d in dead] == [(SRC, RELAY)]
    assert "r1" not in dead[0].why
