"""A fake cloud VM that is real where it matters: sshd on its own loopback address, and a guest
that powers off only the way a stock Ubuntu guest lets it.

The fake clouds call ``LoopbackVM.boot`` with the VM's cloud-init user-data: like cloud-init,
it installs the ed25519 host key found there (or, when there is none, generates one and prints
it on its ``console`` between cloud-init's SSH HOST KEY KEYS markers), makes the login user it
names (``tests.fakes.vmuser``: an account of this machine, its own group only) with the
authorized client key, then starts OpenSSH on ``address:ssh_port``. A host key the control plane
did not put in the user-data or read from the console would therefore fail verification,
exactly as on a real VM.

The guest (``Guest``): cloud-init's ``write_files`` land under the VM's own root directory
(``workdir/root``; scripts see their paths re-rooted there, as under a chroot) and its
``runcmd`` runs as the guest's root, so the root-owned deadline a backend installs really runs.
The login user has the distribution's defaults: ``shutdown``, ``poweroff`` and ``systemctl
poweroff`` refuse it (as logind refuses a remote non-root user: "Interactive authentication
required"), and ``sudo`` runs only what cloud-init's sudoers rules grant it. These stand-ins
come first in the login's ``PATH`` (``SetEnv``; an agent started under ``env -i`` keeps the
login's ``PATH``). The guest's root is this machine's root *with* ``FAKEVM_ROOT=1`` (what its
``runcmd`` and ``sudo`` give their children); anything else is the login: a real non-root
account (the kernel keeps it from root's files and from ``FAKEVM_ROOT``'s meaning), or, where a
test logs in as this machine's root (``loopback_boot_options``), root without the mark. ``sudo``
is a client of a root broker per guest (a unix socket served by the fake's process, which reads
the caller's uid with ``SO_PEERCRED``, as the real setuid ``sudo`` knows its caller): it runs,
as the guest's root, exactly what the sudoers rules grant the caller and nothing else. A guest
that powers off (``workdir/poweroff``) has its processes killed and its cloud told
(``on_poweroff``): the cloud then does what the provider does (AWS: the shutdown behaviour;
GCE: TERMINATED; Azure: stopped). On Azure, ``curl`` stands in for the instance metadata
service (an identity token naming the VM's principal) and forwards ARM calls to the fake ARM.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


# Guest paths cloud-init writes that the fake keeps under the VM's own root directory.
GUEST_PATHS = (
    "/usr/local/sbin/",
    "/var/lib/skyplane-ops",
    "/etc/sudoers.d/",
    "/etc/systemd/system/",
    "/etc/skyplane-ops",
)
REFUSED = (
    "Failed to set wall message, ignoring: Interactive authentication required.\n"
    "Failed to power off system via logind: Interactive authentication required.\n"
)

# The stand-ins' interpreter: any account of this machine may run it (the test's own python
# lives under /root, unreadable to the VM's non-root login); they need only the stdlib.
STANDIN_PYTHON = next(
    (p for p in ("/usr/bin/python3", sys.executable) if os.access(p, os.X_OK)), sys.executable
)

_POWER = f"""#!{STANDIN_PYTHON}
# The guest's shutdown/poweroff/systemctl: only the guest's root may power off.
import os, subprocess, sys
work, root = {{work!r}}, {{root!r}}
name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
is_root = os.geteuid() == 0 and os.environ.get("FAKEVM_ROOT") == "1"
if name == "systemctl" and args[:2] == ["enable", "--now"]:
    if not is_root:
        sys.exit("Failed to enable unit: Access denied")
    for unit in args[2:]:
        text = open(root + "/etc/systemd/system/" + unit).read()
        lines = [l for l in text.splitlines() if l.startswith("ExecStart=")]
        cmd = lines[0].split("=", 1)[1].split()
        cmd[0] = root + cmd[0] if cmd[0].startswith({GUEST_PATHS!r}) else cmd[0]
        subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sys.exit(0)
if name == "systemctl" and (not args or args[0] not in ("poweroff", "halt")):
    sys.exit("System has not been booted with systemd as init system (PID 1).")
if not is_root:
    sys.stderr.write({REFUSED!r})
    sys.exit(1)
if name == "shutdown" and "-c" in args:
    sys.exit(0)
if name == "shutdown" and "now" not in args:
    sys.exit("fake guest: only 'shutdown ... now' is emulated")
open(work + "/poweroff", "w").write(" ".join(sys.argv))
"""

_SUDO = f"""#!{STANDIN_PYTHON}
# The guest's sudo: asks the guest's root broker (which knows the caller by its uid) to run the
# command as the guest's root; the broker runs only what cloud-init's sudoers rules grant.
import json, socket, sys
args = sys.argv[1:]
while args and args[0].startswith("-"):
    args.pop(0)
if not args:
    sys.exit("usage: sudo [-n] command")
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect({{sock!r}})
except OSError:
    sys.exit("sudo: unable to reach the guest's root broker")
conn.sendall(json.dumps(args).encode() + b"\\n")
answer = json.loads(conn.makefile("rb").readline())
sys.stdout.write(answer["out"])
sys.stderr.write(answer["err"])
sys.exit(answer["rc"])
"""

_CURL = f"""#!{STANDIN_PYTHON}
# The guest's curl, as the Azure release script uses it: the instance metadata service (an
# identity token naming the VM's principal, the VM's resource id) and ARM (the fake ARM).
import json, ssl, sys, urllib.error, urllib.request
conf = json.load(open({{imds!r}}))
args, method, headers, url = sys.argv[1:], "GET", {{{{}}}}, ""
while args:
    a = args.pop(0)
    if a == "-X":
        method = args.pop(0)
    elif a == "-H":
        k, _, v = args.pop(0).partition(":")
        headers[k.strip()] = v.strip()
    elif not a.startswith("-"):
        url = a
md = "http://169.254.169.254/metadata/"
if url.startswith(md + "identity/oauth2/token"):
    print(json.dumps({{{{"access_token": conf["token"]}}}}))
elif url.startswith(md + "instance/compute/resourceId"):
    print(conf["resource_id"])
elif url.startswith("https://management.azure.com/"):
    target = conf["arm"] + url[len("https://management.azure.com"):]
    req = urllib.request.Request(target, method=method, headers=headers)
    try:
        urllib.request.urlopen(req, context=ssl.create_default_context(cafile=conf["ca"]))
    except urllib.error.HTTPError as exc:
        sys.exit(22)
else:
    sys.exit(7)
"""


def _reroot(text: str, root: Path) -> str:
    for prefix in GUEST_PATHS:
        text = text.replace(prefix, f"{root}{prefix}")
    return text


class _RootBroker:
    """The guest's ``sudo``, root side: a unix socket any guest process may reach; it knows the
    caller by ``SO_PEERCRED`` (the kernel's word, not the caller's) and runs, as the guest's
    root, only a command the sudoers rules grant that caller. This machine's root calling is
    the login of a test that logs in as root (see the module's docstring)."""

    def __init__(self, guest: Guest) -> None:
        self.guest = guest
        self.path = guest.workdir / "sudo.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.path.chmod(0o666)
        self.sock.listen(16)
        threading.Thread(target=self._serve, name="fakevm-sudo", daemon=True).start()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            try:
                args = json.loads(conn.makefile("rb").readline())
                answer = self.run(self._caller(uid), [str(a) for a in args])
            except (ValueError, KeyError, OSError, subprocess.SubprocessError) as exc:
                answer = {"rc": 1, "out": "", "err": f"sudo: {exc}\n"}
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def _caller(self, uid: int) -> str:
        return self.guest.login_user if uid == 0 else pwd.getpwuid(uid).pw_name

    def rules(self, user: str) -> list[str]:
        """The commands the sudoers rules of the guest grant ``user`` (NOPASSWD only)."""
        allowed = []
        for path in sorted(self.guest.root.glob("etc/sudoers.d/*")):
            for line in path.read_text().splitlines():
                who, _, rest = line.strip().partition(" ")
                if who == user and "NOPASSWD:" in rest:
                    allowed += [c.strip() for c in rest.split("NOPASSWD:", 1)[1].split(",")]
        return allowed

    def run(self, user: str, args: list[str]) -> dict[str, Any]:
        wanted = " ".join(args)
        if not any(r == "ALL" or fnmatch.fnmatchcase(wanted, r) for r in self.rules(user)):
            return {"rc": 1, "out": "", "err": "sudo: a password is required\n"}
        path = args[0]
        if path.startswith(GUEST_PATHS):
            path = f"{self.guest.root}{path}"
        env = {"PATH": self.guest.path, "FAKEVM_ROOT": "1", "HOME": str(self.guest.root)}
        done = subprocess.run(
            [path, *args[1:]], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        return {"rc": done.returncode, "out": done.stdout, "err": done.stderr}


class Guest:
    """What cloud-init and the guest OS do in the fake: files, root's runcmd, the stand-ins."""

    def __init__(self, workdir: Path, config: Mapping, login_user: str) -> None:
        self.workdir = workdir
        self.root = workdir / "root"
        self.bin = workdir / "bin"
        self.login_user = login_user
        for folder in (self.bin, self.root):
            folder.mkdir(parents=True)
            folder.chmod(0o755)  # root's: the login may read and run, never write
        for name in ("shutdown", "poweroff", "halt", "systemctl"):
            self._script(name, _POWER.format(work=str(workdir), root=str(self.root)))
        self._script("sudo", _SUDO.format(sock=str(workdir / "sudo.sock")))
        self._script("curl", _CURL.format(imds=str(workdir / "imds.json")))
        (workdir / "imds.json").write_text("{}")
        (workdir / "imds.json").chmod(0o644)  # the metadata service answers every process
        for user in config.get("users", []):
            if isinstance(user, dict) and user.get("sudo"):  # cloud-init's own sudoers rule
                rules = user["sudo"] if isinstance(user["sudo"], list) else [user["sudo"]]
                path = self.root / "etc/sudoers.d/90-cloud-init-users"
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as out:
                    out.writelines(f"{user['name']} {r}\n" for r in rules)
        for item in config.get("write_files", []):
            path = Path(f"{self.root}{item['path']}")
            path.parent.mkdir(parents=True, exist_ok=True)
            mode = int(item.get("permissions", "0644"), 8)
            content = item.get("content", "")
            # scripts see guest paths re-rooted (a chroot); sudoers rules and units keep them
            text = _reroot(content, self.root) if mode & 0o100 else content
            with path.open("a" if item.get("append") else "w") as out:
                out.write(text)
            path.chmod(mode)
        self._broker = _RootBroker(self)
        self.runcmd = [list(c) for c in config.get("runcmd", [])]

    def _script(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    @property
    def path(self) -> str:
        return f"{self.bin}:{os.environ.get('PATH', os.defpath)}"

    def run_runcmd(self) -> None:
        """cloud-init's runcmd, as the guest's root (commands in guest paths re-rooted)."""
        env = {"PATH": self.path, "FAKEVM_ROOT": "1", "HOME": str(self.root)}
        for cmd in self.runcmd:
            if isinstance(cmd, str):
                cmd = ["sh", "-c", cmd]
            argv = [_reroot(cmd[0], self.root) if cmd[0].startswith(GUEST_PATHS) else cmd[0]]
            if not Path(argv[0]).exists() and "/" in argv[0]:
                continue  # e.g. a unit this guest has no systemd for
            subprocess.run([*argv, *cmd[1:]], env=env, check=False, capture_output=True, timeout=30)

    def pids(self) -> list[int]:
        """This guest's processes: every one whose environment holds its stand-ins' PATH."""
        mark = str(self.bin).encode()
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mark in (entry / "environ").read_bytes():
                        found.append(int(entry.name))
                except OSError:
                    continue
        return found

    def kill(self) -> None:
        self._broker.close()
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class LoopbackVM:
    address: str
    proc: subprocess.Popen[bytes] | None
    workdir: Path
    netns: str | None = None  # set when the VM is a namespace on a ``CloudNet``
    guest: Guest | None = None
    on_poweroff: Callable[[LoopbackVM], None] | None = None
    powered_off: bool = False
    console: str = ""  # what cloud-init printed on the serial console
    login: str = ""  # the user cloud-init made (the one the VM is logged into)
    _stopped: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def boot(
        cls,
        address: str,
        ssh_port: int | None,
        user_data: str,
        env: Mapping[str, str] | None = None,
        netns: str | None = None,
        on_poweroff: Callable[[LoopbackVM], None] | None = None,
    ) -> LoopbackVM:
        """Apply the user-data like cloud-init would; start sshd unless ``ssh_port`` is None.

        ``env`` is what the VM's environment gives its processes (on a real VM: an instance
        role or a metadata server; here: the emulators' endpoints and test credentials)."""
        workdir = Path(tempfile.mkdtemp(prefix="fakevm-"))
        os.chmod(workdir, 0o755)  # sshd reads authorized_keys as the logged-in user
        config = parse_cloud_init(user_data)
        users = [u for u in config.get("users", []) if isinstance(u, dict)]
        login = users[0]["name"] if users else "root"
        keys = config.get("ssh_keys") or {}
        if "ed25519_private" not in keys:  # cloud-init's ssh_genkeytypes: made on the VM
            made = KeyPair.generate()
            keys = {"ed25519_private": made.private_pem, "ed25519_public": made.public}
        host_key = workdir / "ssh_host_ed25519_key"
        host_key.write_text(keys["ed25519_private"])
        os.chmod(host_key, 0o600)
        console = console_host_keys(keys["ed25519_public"])
        authorized = [k for u in users for k in u.get("ssh_authorized_keys", [])]
        (workdir / "authorized_keys").write_text("\n".join(authorized) + "\n")
        os.chmod(workdir / "authorized_keys", 0o644)
        guest = Guest(workdir, config, login)
        vm = cls(
            address,
            None,
            workdir,
            netns,
            guest=guest,
            on_poweroff=on_poweroff,
            console=console,
            login=login,
        )
        guest.run_runcmd()
        threading.Thread(target=vm._watch_power, name="fakevm-power", daemon=True).start()
        if ssh_port is None:
            return vm
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
                    # one line: sshd uses only the first SetEnv it reads; the guest's stand-ins
                    # come first in the login's PATH
                    "SetEnv "
                    + " ".join(f"{k}={v}" for k, v in {**(env or {}), "PATH": guest.path}.items()),
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
        vm.proc = proc
        return vm

    def _watch_power(self) -> None:
        """The guest powered off: its processes die and its cloud is told."""
        marker = self.workdir / "poweroff"
        while not self._stopped.wait(0.2):
            if marker.exists():
                self.powered_off = True
                self._halt()
                if self.on_poweroff is not None:
                    self.on_poweroff(self)
                return

    def _halt(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.guest is not None:
            self.guest.kill()

    def set_imds(self, **conf: str) -> None:
        """What the guest's instance metadata service answers (Azure: token, resource id)."""
        (self.workdir / "imds.json").write_text(json.dumps(conf))

    def enforce(self, allowed: Mapping[int, Sequence[str]]) -> None:
        """Apply firewall rules the cloud was given: TCP port -> admitted source CIDRs, all
        other inbound TCP refused (nftables in the VM's namespace; loopback VMs cannot)."""
        if self.netns:
            from tests.fakes.netvm import apply_rules

            apply_rules(self.netns, allowed)

    def stop(self) -> None:
        self._stopped.set()
        if self.guest is not None:
            self.guest.kill()
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
