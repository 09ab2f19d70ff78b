"""Postgres and Redis for the deployed-orchestrator tests, as private unprivileged processes.

Airflow's CeleryExecutor needs a metadata database that many processes write at once
(Postgres) and a broker (Redis); Dagster's daemon keeps runs and events in Postgres. Each
server runs here from the Debian binaries (``scripts/install-test-tools.sh``) on a free
loopback port, with its data in a fresh temporary folder, never as a system service. Postgres
refuses to run as root, so when the tests run as root both servers run as an unprivileged
user (``postgres`` if the package created it, else ``nobody``). Each is this process's child
in its own session, stopped by its pid when the block ends, and its folder is removed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_bindir() -> Path | None:
    """The folder of ``initdb``/``postgres`` (Debian keeps them out of PATH), or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version_key)
    return Path(versions[-1]).parent if versions else None


def _version_key(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except (ValueError, IndexError):
        return 0


def redis_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )


def _service_user() -> pwd.struct_passwd | None:
    """Who the servers run as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


@contextlib.contextmanager
def _private_dir(prefix: str, user: pwd.struct_passwd | None) -> Iterator[Path]:
    """A 0700 folder the server's user owns (under /tmp: pytest's folders are root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _popen(
    cmd: list[str], log: Path, user: pwd.struct_passwd | None, cwd: Path
) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            start_new_session=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    name = Path(str(proc.args[0] if isinstance(proc.args, list) else proc.args)).name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} in {timeout:.0f} s")


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` (the server's own fast, clean shutdown), then KILL; by pid, this one only."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@dataclass(frozen=True)
class Postgres:
    """A running Postgres: trust authentication for ``user`` on loopback."""

    port: int
    user: str = "skyplane"

    def url(self, database: str, driver: str = "postgresql+psycopg2") -> str:
        """A SQLAlchemy URL (psycopg2: SQLAlchemy 2.1 reads a bare ``postgresql`` as psycopg 3)."""
        return f"{driver}://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create ``name`` (idempotent); returns its SQLAlchemy URL."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("select 1 from pg_database where datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'create database "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def query(self, database: str, sql: str, *args: object) -> list[tuple[object, ...]]:
        """Rows of one read query (for tests that read a metadata database directly)."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname=database)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args or None)
                return list(cur.fetchall())
        finally:
            conn.close()


@contextlib.contextmanager
def run_postgres(timeout: float = 120.0) -> Iterator[Postgres]:
    """``pg_ctl initdb`` into a temporary folder, then ``postgres`` on a free loopback port."""
    bindir = postgres_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (scripts/install-test-tools.sh)")
    user = _service_user()
    service = Postgres(port=_free_port())
    with _private_dir("skyplane-pg-", user) as base:
        data, log = base / "data", base / "server.log"
        init = _popen(
            [
                str(bindir / "pg_ctl"),
                "initdb",
                "-s",
                "-D",
                str(data),
                "-o",
                f"-U {service.user} --auth=trust -E UTF8 --locale=C.UTF-8",
            ],
            log,
            user,
            base,
        )
        if init.wait(timeout) != 0:
            raise RuntimeError(f"initdb failed: {log.read_text(errors='replace')[-2000:]}")
        proc = _popen(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(service.port),
                "-k",
                str(base),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
                "-c",
                "fsync=off",  # a test database: speed over durability
            ],
            log,
            user,
            base,
        )
        try:
            _wait_port(service.port, proc, log, timeout)
            yield service
        finally:
            _stop(proc, signal.SIGINT)  # "fast shutdown"


@dataclass(frozen=True)
class Redis:
    """A running Redis (no persistence, no password: loopback only)."""

    port: int

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


@contextlib.contextmanager
def run_redis(timeout: float = 60.0) -> Iterator[Redis]:
    """``redis-server`` on a free loopback port with its folder in a temporary directory."""
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/install-test-tools.sh)")
    user = _service_user()
    service = Redis(port=_free_port())
    with _private_dir("skyplane-redis-", user) as base:
        log = base / "server.log"
        cmd = [binary, "--port", str(service.port), "--bind", "127.0.0.1", "--dir", str(base)]
        cmd += ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
        proc = _popen(cmd, log, user, base)
        try:
            _wait_port(service.port, proc, log, timeout)
            yield service
        finally:
            _stop(proc, signal.SIGTERM)
