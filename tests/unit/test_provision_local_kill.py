"""Stopping a local gateway waits on the process itself (a pidfd), not on a polling interval:
a process that exits on SIGTERM is reaped as it exits, one that ignores SIGTERM is killed after
the grace, and a pid that is not our agent (another command line) is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from skyplane_ops.provision.local import _alive, _kill

MARKER = "skyplane-test-agent-marker"


def _start(ignore_term: bool) -> subprocess.Popen[bytes]:
    code = "import signal, sys, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "sys.stdout.write('up\\n'); sys.stdout.flush()\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, MARKER], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def test_an_agent_that_stops_on_sigterm_is_gone_when_kill_returns() -> None:
    proc = _start(ignore_term=False)
    assert _alive(proc.pid, MARKER)
    start = time.monotonic()
    _kill(proc.pid, MARKER, grace=30.0)
    assert time.monotonic() - start < 10.0  # not the grace: it returned on the exit itself
    assert not _alive(proc.pid, MARKER)
    # Reaped by _kill (the process is our child): no zombie left behind.
    assert not os.path.exists(f"/proc/{proc.pid}")


def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    proc = _start(ignore_term=True)
    start = time.monotonic()
    _kill(proc.pid, MARKER, grace=0.5)
    assert time.monotonic() - start >= 0.5
    assert not _alive(proc.pid, MARKER)
    assert proc.wait(timeout=10) == -signal.SIGKILL or not os.path.exists(f"/proc/{proc.pid}")


def test_a_pid_that_is_not_our_agent_is_left_alone() -> None:
    proc = _start(ignore_term=False)
    try:
        _kill(proc.pid, "some-other-marker", grace=0.5)
        assert proc.poll() is None and _alive(proc.pid, MARKER)
    finally:
        proc.kill()
        proc.wait()
