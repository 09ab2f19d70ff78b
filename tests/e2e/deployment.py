"""Starting and stopping the deployed services of the e2e tests: each component is its own
process group with its own HOME, reached only through its ports, its logs and the databases.

Nothing here asserts: ``Component`` runs one long-lived command and stops it (INT, TERM, then
KILL, by its process group only); ``wait_until`` polls a condition and fails with the logs
that explain why it never held. The deployments' stores are buckets of one S3 emulator
(``make_buckets``, ``s3_client``), the source read through a slow link (``slow_s3``); the
databases they run on are ``skyplane_ops.testing.services``'.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyplane_ops.testing.emulators import Emulator
from skyplane_ops.testing.throttle import ThrottledProxy, throttled_proxy

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Airflow, Dagster or skyplane setting, plus ``extra``."""
    prefixes = ("AIRFLOW", "DAGSTER", "SKYPLANE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def s3_client(s3: Emulator) -> Any:
    """A boto3 client of the S3 emulator, with its credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3.options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=s3.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3.env["AWS_SECRET_ACCESS_KEY"],
    )


def make_buckets(s3: Emulator, prefix: str = "") -> tuple[str, dict[str, str]]:
    """(a fresh suffix, the ``state``, ``src`` and ``dst`` buckets made with it): a deployment
    of its own on the session's emulator."""
    suffix = uuid.uuid4().hex[:8]
    buckets = {name: f"{prefix}{name}{suffix}" for name in ("state", "src", "dst")}
    for bucket in buckets.values():
        s3.make_bucket(bucket)
    return suffix, buckets


def slow_s3(s3: Emulator, rate_bps: float) -> AbstractContextManager[ThrottledProxy]:
    """A rate-limited forwarder in front of the emulator (``.endpoint``): the slow source
    link that lets a transfer be killed half-way on any machine."""
    port = int(s3.options["endpoint_url"].rsplit(":", 1)[1])
    return throttled_proxy(("127.0.0.1", port), rate_bps)


@dataclass
class Component:
    """One long-running service process (an Airflow scheduler, a Celery worker, a daemon)."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Component:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.cwd) if self.cwd else None,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the whole group at once: a worker host that dies."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """INT, TERM, then KILL the process group (its children forked in it go with it)."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGINT, 20), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        # Children that outlived their parent (a task runner mid-exit) go with the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def stop_all(components: Iterable[Component]) -> None:
    """Stop every component at once: each signal goes to all groups, then all are awaited
    (one after the other, a shutdown would cost the sum of their grace periods)."""
    running = [c for c in components if c.proc is not None]
    for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        alive = [c for c in running if c.alive]
        for component in alive:
            assert component.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.proc.pid, sig)
        deadline = time.monotonic() + wait
        while any(c.alive for c in alive) and time.monotonic() < deadline:
            time.sleep(0.1)
    for component in running:  # children that outlived their parent go with the group
        assert component.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.proc.pid, signal.SIGKILL)
        component.proc.wait()


def wait_until(
    what: str,
    condition: Callable[[], object],
    timeout: float,
    components: Iterable[Component] = (),
    every: float = 1.0,
) -> object:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``, with the
    tails of the components' logs (and of any that died meanwhile)."""
    watched = list(components)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [c.name for c in watched if c.proc is not None and not c.alive]
        if dead or time.monotonic() >= deadline:
            logs = "\n".join(f"--- {c.name} ---\n{c.tail()}" for c in watched)
            why = f"{', '.join(dead)} exited" if dead else f"{timeout:.0f} s passed"
            raise AssertionError(f"waiting for {what}: {why}\n{logs}")
        time.sleep(every)


def gateway_processes(marker: str) -> list[int]:
    """Pids of gateway agents whose command line mentions ``marker`` (a test's folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"gateway_agent" in cmdline and marker.encode() in cmdline:
            found.append(int(entry.name))
    return found
