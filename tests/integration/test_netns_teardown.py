"""Tearing a netns testbed down: every process in its namespaces ends (one that ignores SIGTERM
is killed; an exited child nobody reaped does not hold teardown up) and nothing is left. Needs
root."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from skyplane_ops.provision.netns.host import list_namespaces
from skyplane_ops.provision.netns.testbed import Testbed

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and veth need root"),
]

A, B = "netns:A", "netns:B"


def _testbed() -> Testbed:
    tb = Testbed.plan(f"td-{uuid.uuid4().hex[:8]}", [A, B], {f"{A}->{B}": 1.0}, scale=0.1)
    tb.build()
    return tb


def _wait_inside(tb: Testbed, region: str, pid: int) -> None:
    """Until ``pid`` has entered the region's namespace (``ip netns exec`` does that after it
    starts): teardown only knows the processes the namespace lists."""
    deadline = time.monotonic() + 60
    while (
        str(pid)
        not in subprocess.run(
            ["ip", "netns", "pids", tb.namespace(region)], capture_output=True, text=True
        ).stdout.split()
    ):
        assert time.monotonic() < deadline, f"{pid} never entered {tb.namespace(region)}"
        time.sleep(0.01)


def _nothing_left(tb: Testbed, removed: list[str]) -> None:
    assert sorted(r for r in removed if r.startswith("netns:")) == sorted(
        f"netns:{tb.namespace(r)}" for r in (A, B)
    )
    assert not [ns for ns in list_namespaces() if f".{tb.transfer_id}." in ns]


def test_teardown_kills_a_process_that_ignores_sigterm() -> None:
    tb = _testbed()
    stubborn = subprocess.Popen(
        tb.exec_argv(A, ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]),
        start_new_session=True,
    )
    try:
        _wait_inside(tb, A, stubborn.pid)
        removed = tb.teardown()
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait(timeout=30)
    assert stubborn.returncode == -9  # SIGKILL after the TERM wait
    _nothing_left(tb, removed)


def test_exited_children_nobody_reaped_do_not_hold_teardown_up() -> None:
    """The CLI starts the agents itself and does not reap them: after SIGTERM they are
    zombies, which teardown must count as gone instead of waiting for its TERM timeout (3 s)."""
    tb = _testbed()
    # ``env --default-signal``: whatever the test runner's own SIGTERM disposition, the
    # children take the default one (ended by SIGTERM), as agents do.
    argv = ["env", "--default-signal=TERM", "sleep", "600"]
    children = [subprocess.Popen(tb.exec_argv(r, argv), start_new_session=True) for r in (A, B)]
    try:
        for region, child in zip((A, B), children, strict=True):
            _wait_inside(tb, region, child.pid)
        t0 = time.monotonic()
        removed = tb.teardown()
        took = time.monotonic() - t0
        states = [
            Path(f"/proc/{c.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for c in children
        ]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
    codes = [c.returncode for c in children]
    assert states == ["Z", "Z"], (states, codes, took)  # exited, not reaped, while teardown ran
    assert took < 3.0, (codes, took)  # the zombies did not hold teardown up until its KILL
    assert codes == [-signal.SIGTERM] * 2, (codes, took)  # TERM ended them, no KILL was needed
    _nothing_left(tb, removed)
