"""A fake cloud VM that is real where it matters: sshd on its own loopback address.

The fake clouds call ``LoopbackVM.boot`` with the VM's cloud-init user-data: like cloud-init,
it installs the ed25519 host key found there (or, when there is none, generates one and prints
it on its ``console`` between cloud-init's SSH HOST KEY KEYS markers), makes the login user it
names (``tests.fakes.vmuser``: no sudo) with the authorized client key, then starts OpenSSH on
``address:ssh_port``. A host key the control plane did not put in the user-data or read from the
console would therefore fail verification, exactly as on a real VM.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skyplane_ops.provision.cloudvm import KeyPair, parse_cloud_init
from tests.fakes.vmuser import ensure_user
from tests.fixtures.ports import wait_for_port

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
_counter = itertools.count(1)
_lock = threading.Lock()


def next_address(pool: int) -> str:
    """A fresh loopback address for a VM (127.<pool>.x.y; all of 127/8 is local on Linux)."""
    with _lock:
        n = next(_counter)
    return f"127.{pool}.{n // 250}.{n % 250 + 2}"


@dataclass
class LoopbackVM:
    address: str
    proc: subprocess.Popen[bytes] | None
    workdir: Path
    netns: str | None = None  # set when the VM is a namespace on a ``CloudNet``
    console: str = ""  # what cloud-init printed on the serial console
    login: str = ""  # the user cloud-init made (the one the VM is logged into)

    @classmethod
    def boot(
        cls,
        address: str,
        ssh_port: int | None,
        user_data: str,
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
    ) -> LoopbackVM:
        """Apply the user-data like cloud-init would; start sshd unless ``ssh_port`` is None.

        ``env`` is what the VM's environment gives its processes (on a real VM: an instance
        role or a metadata server; here: the emulators' endpoints and test credentials)."""
        workdir = Path(tempfile.mkdtemp(prefix="fakevm-"))
        os.chmod(workdir, 0o755)  # sshd reads authorized_keys as the logged-in user
        config = parse_cloud_init(user_data)
        keys = config.get("ssh_keys") or {}
        if "ed25519_private" not in keys:  # cloud-init's ssh_genkeytypes: made on the VM
            made = KeyPair.generate()
            keys = {"ed25519_private": made.private_pem, "ed25519_public": made.public}
        host_key = workdir / "ssh_host_ed25519_key"
        host_key.write_text(keys["ed25519_private"])
        os.chmod(host_key, 0o600)
        console = console_host_keys(keys["ed25519_public"])
        users = [u for u in config["users"] if isinstance(u, dict)]
        login = users[0]["name"] if users else "root"
        authorized = [k for u in users for k in u["ssh_authorized_keys"]]
        (workdir / "authorized_keys").write_text("\n".join(authorized) + "\n")
        os.chmod(workdir / "authorized_keys", 0o644)
        if ssh_port is None:
            return cls(address, None, workdir, netns, console, login)
        ensure_user(login)  # an account of this machine: sshd logs the client in as it
        (workdir / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {ssh_port}",
                    f"ListenAddress {address}",
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                    f"PidFile {workdir / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin yes",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                    # one line: sshd uses only the first SetEnv it reads
                    *(["SetEnv " + " ".join(f"{k}={v}" for k, v in env.items())] if env else []),
                    "",
                ]
            )
        )
        os.makedirs("/run/sshd", exist_ok=True)
        prefix = ["ip", "netns", "exec", netns] if netns else []
        proc = subprocess.Popen(
            [*prefix, SSHD, "-D", "-e", "-f", str(workdir / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(ssh_port, host=address, timeout=10)
        return cls(address, proc, workdir, netns, console, login)

    def enforce(self, allowed: Mapping[int, Sequence[str]]) -> None:
        """Apply firewall rules the cloud was given: TCP port -> admitted source CIDRs, all
        other inbound TCP refused (nftables in the VM's namespace; loopback VMs cannot)."""
        if self.netns:
            from tests.fakes.netvm import apply_rules

            apply_rules(self.netns, allowed)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def console_host_keys(*public: str) -> str:
    """Serial console output as cloud-init prints host keys (``cc_keys_to_console``)."""
    return (
        "[   12.345678] cloud-init[1021]: Cloud-init v. 23.4 running 'modules:final'\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        + "".join(f"{p} root@fakevm\n" for p in public)
        + "-----END SSH HOST KEY KEYS-----\n"
    )
