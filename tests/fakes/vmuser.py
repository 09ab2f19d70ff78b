"""The login user of a fake VM, as cloud-init makes it, and the "image's" python.

A fake VM's sshd runs as root on this machine and logs a client in as a real account of this
machine, so the user the VM's cloud-init names must exist here: ``ensure_user`` creates it the
way Ubuntu's ``useradd`` does for a user cloud-init lists without ``sudo`` or ``groups`` (its
own group only, a home, ``/bin/bash``, password locked) and leaves it for the next test (other
test runs may be logged in as it). ``root`` and existing accounts are used as they are.

The test's interpreter lives under ``/root`` (unreadable to other users), so a fake VM's
non-root login needs a python of its own: ``image_python`` is a virtual environment of the
system python, world-readable, whose site-packages point at this test run's (same CPython minor
version, so the compiled wheels load). It stands in for an image with the agent's dependencies
installed.
"""

from __future__ import annotations

import atexit
import functools
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()


def ensure_user(name: str) -> pwd.struct_passwd:
    """The account ``name``, created (no sudo, no extra groups) if this machine lacks it."""
    with _lock:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        # Password "*": none valid, key login only. (cloud-init's lock_passwd writes "!", which
        # Ubuntu's sshd accepts for keys through PAM; this sshd runs without PAM and would
        # refuse a "!" account.)
        done = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", "--password",
             "*", name],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if done.returncode not in (0, 9):  # 9: created meanwhile by another test run
            raise RuntimeError(f"useradd {name} failed: {done.stderr.strip()}")
        return pwd.getpwnam(name)


@functools.cache
def image_python() -> str:
    """A python any user of this machine can run, with the agent's dependencies importable."""
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(system, os.X_OK):
        raise RuntimeError(f"{system} is missing: a fake VM's non-root login needs it")
    root = Path(tempfile.mkdtemp(prefix="fakevm-python-"))
    atexit.register(shutil.rmtree, root, True)
    os.chmod(root, 0o755)
    subprocess.run([system, "-m", "venv", "--without-pip", str(root)], check=True)
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    out = subprocess.run(
        [str(root / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    pth = Path(out, "fakevm-deps.pth")
    pth.write_text(sysconfig.get_path("purelib") + "\n")
    pth.chmod(0o644)  # the rest was made under umask 022; only mkdtemp's own directory is 0700
    return str(root / "bin" / "python")
