"""This host's network stack as the netns backend uses it: ``ip``/``tc`` runs (one process
for many commands), and listing, emptying and deleting network namespaces (root only)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

from skyplane_ops.errors import ProvisionError


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProvisionError("the netns backend needs root (network namespaces, veth and tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ProvisionError(f"the netns backend needs '{tool}' (apt-get install iproute2)")


def short_id(transfer_id: str) -> str:
    return hashlib.sha1(transfer_id.encode()).hexdigest()[:6]


def sh(*argv: str, ns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ProvisionError(f"'{' '.join(cmd)}' failed: {proc.stderr.strip()}")
    return proc.stdout


def batch(tool: str, lines: Sequence[str], ns: str | None = None) -> None:
    """Run ``ip``/``tc`` commands from stdin in one process (in namespace ``ns``)."""
    if not lines:
        return
    cmd = [tool, *(["-n", ns] if ns else []), "-batch", "-"]
    proc = subprocess.run(
        cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ProvisionError(f"'{' '.join(cmd)}' failed: {proc.stderr.strip()}")


def list_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie -- an exited child nobody reaped -- does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _kill_namespace_processes(namespaces: Sequence[str]) -> None:
    """TERM every process of every namespace at once, wait for them all, KILL what is left.

    Waiting looks at the signalled pids in ``/proc`` (no process per poll: a loaded machine
    spent ~0.2 s per teardown in ``ip netns pids`` polls); the namespaces are asked again
    before returning, in case something started meanwhile.
    """

    def pids() -> list[int]:
        return [
            int(p) for ns in namespaces for p in sh("ip", "netns", "pids", ns, check=False).split()
        ]

    alive = pids()
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0), (signal.SIGKILL, 2.0)):
        if not alive:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while any(_alive(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.01)
        alive = pids()


def teardown_namespaces(namespaces: Sequence[str], root_veths: Sequence[str]) -> list[str]:
    """Delete namespaces (after killing their processes) and root veths; idempotent."""
    existing = set(list_namespaces())
    ours = [ns for ns in namespaces if ns in existing]
    _kill_namespace_processes(ours)
    try:
        batch("ip", [f"netns del {ns}" for ns in ours])  # one process for all of them
    except ProvisionError:
        left = set(list_namespaces())
        for ns in ours:
            if ns in left:
                sh("ip", "netns", "del", ns)
    removed = [f"netns:{ns}" for ns in ours]
    links = sh("ip", "-o", "link", "show", check=False)
    for veth in root_veths:
        if re.search(rf"^\d+: {re.escape(veth)}[@:]", links, re.M):
            sh("ip", "link", "del", veth, check=False)
            removed.append(f"veth:{veth}")
    return removed
