"""Real OpenSSH ``sshd`` servers on loopback, one per emulated gateway host.

Each server has a throwaway ed25519 host key and accepts one throwaway client key; they listen
on free high ports of 127.0.0.1 only. ``start_sshd``/``stop_sshd`` run one; the test suite's
``sshd_factory(n)`` fixture (``tests/fixtures/sshd.py``) starts n of them for a test and stops
them afterwards.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyplane_ops.testing.ports import free_port, wait_for_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class SshdServer:
    """One running sshd: where it listens and the host key line a client should expect."""

    port: int
    host_key: str  # "ssh-ed25519 AAAA..."
    client_key: Path
    user: str
    proc: subprocess.Popen[bytes]
    workdir: Path

    def inventory_entry(self, remote_root: Path, **over: Any) -> dict[str, Any]:
        """This server as an SSH inventory host: this python, agents under ``remote_root``."""
        entry: dict[str, Any] = {
            "address": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key_path": str(self.client_key),
            "host_key": self.host_key,
            "python": sys.executable,
            "bind_host": "127.0.0.1",
            "remote_root": str(remote_root),
        }
        entry.update(over)
        return entry


def keygen(path: Path) -> str:
    """A fresh ed25519 key pair at ``path`` (and ``.pub``); returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "skyplane-ops-test", "-f", str(path)],
        check=True,
    )
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def start_sshd(workdir: Path, client_key: Path, env: Mapping[str, str] | None = None) -> SshdServer:
    """Start one sshd on a free loopback port with a fresh host key; ``env``: variables every
    login session gets (``SetEnv``: what a host's own login environment holds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key_path = workdir / "host_ed25519"
    host_key = keygen(host_key_path)
    shutil.copy(client_key.with_suffix(".pub"), workdir / "authorized_keys")
    port = free_port()
    config = workdir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key_path}",
                f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                f"PidFile {workdir / 'sshd.pid'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin yes",
                "MaxStartups 100",
                "MaxSessions 100",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                # one line: sshd uses only the first SetEnv it reads
                *(["SetEnv " + " ".join(f"{k}={v}" for k, v in env.items())] if env else []),
                "",
            ]
        )
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "sshd.log", "wb"),  # noqa: SIM115 - lives as long as sshd
    )
    wait_for_port(port, timeout=10)
    return SshdServer(port, host_key, client_key, getpass.getuser(), proc, workdir)


def stop_sshd(server: SshdServer) -> None:
    """Stop one server (TERM, then KILL after 5 s)."""
    server.proc.terminate()
    try:
        server.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
