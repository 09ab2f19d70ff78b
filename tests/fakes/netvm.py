"""Fake cloud VMs that sit on a real network and obey their firewall rules.

A ``CloudNet`` is a Linux bridge in its own network namespace; each VM is a namespace plugged
into it with its own address, running sshd (``LoopbackVM.boot(..., netns=...)``) and whatever
the SSH bootstrap starts there; this process (the control plane) reaches the bridge through a
veth from the root namespace at ``gateway``. The fake clouds translate the NSG / VPC firewall
rules they were given into nftables rules in each VM's namespace (``apply_rules``), so a rule
that admits the wrong addresses fails a test. Needs root, iproute2 and nftables.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.vm import LoopbackVM


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def available() -> str | None:
    """Why this machine cannot run CloudNet, or None."""
    import os

    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("nft"):
        return "nftables is not installed (scripts/install-test-tools.sh)"
    return None


def apply_rules(netns: str, allowed: Mapping[int, Sequence[str]]) -> None:
    """Default-deny inbound TCP, admitting each port only from its source CIDRs."""
    lines = [
        "flush ruleset",
        "table inet fakecloud {",
        " chain input {",
        "  type filter hook input priority 0; policy accept;",
        '  iif "lo" accept',
        "  ct state established,related accept",
    ]
    for port, sources in sorted(allowed.items()):
        if sources:
            lines.append(
                f"  tcp dport {port} ip saddr {{ {', '.join(sorted(set(sources)))} }} accept"
            )
    lines += ["  meta l4proto tcp reject with tcp reset", " }", "}", ""]
    subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-f", "-"],
        input="\n".join(lines).encode(),
        check=True,
        capture_output=True,
    )


class CloudNet:
    """One bridged /24 of fake VMs (10.199.N.0/24), torn down by ``close``."""

    def __init__(self) -> None:
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
        self.n = next(n for n in range(10, 250) if f"10.199.{n}." not in used)
        self.tag = f"sfw{self.n}"
        self.bridge_ns = f"{self.tag}-br"
        self.gateway = f"10.199.{self.n}.1"
        self.namespaces: list[str] = []
        self._next = 10
        _ip("netns", "add", self.bridge_ns)
        self.namespaces.append(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        _ip("link", "add", f"{self.tag}r", "type", "veth", "peer", "name", "up0",
            "netns", self.bridge_ns)  # fmt: skip
        _ip("addr", "add", f"{self.gateway}/24", "dev", f"{self.tag}r")
        _ip("link", "set", f"{self.tag}r", "up")
        _ip("-n", self.bridge_ns, "link", "set", "up0", "master", "br0", "up")

    def attach(self) -> tuple[str, str]:
        """A new namespace on the bridge: returns (namespace, address)."""
        k = self._next
        self._next += 1
        ns, address = f"{self.tag}-h{k}", f"10.199.{self.n}.{k}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        _ip("-n", self.bridge_ns, "link", "add", f"v{k}", "type", "veth", "peer", "name", "eth0",
            "netns", ns)  # fmt: skip
        _ip("-n", self.bridge_ns, "link", "set", f"v{k}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns, address

    def boot(
        self, ssh_port: int | None, user_data: str, env: Mapping[str, str], **kw: Any
    ) -> LoopbackVM:
        ns, address = self.attach()
        return LoopbackVM.boot(address, ssh_port, user_data, env, netns=ns, **kw)

    def can_connect(self, netns: str, address: str, port: int) -> bool:
        """Whether a TCP connection from inside ``netns`` to address:port is accepted."""
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(({address!r}, {port}), timeout=5).close()\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )
        import sys

        run = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", code])
        return run.returncode == 0

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", f"{self.tag}r"], capture_output=True)
        import os
        import signal

        for ns in reversed(self.namespaces):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():  # processes started in our own namespaces only
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
