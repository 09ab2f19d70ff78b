"""Real object-store emulator servers on free loopback ports, for tests and benchmarks.

The test suite's session fixtures (``tests/fixtures/emulators.py``; each starts its server
once per pytest session):

* ``moto_s3`` -- ``moto_server`` (S3), ``azurite`` -- Azurite blob service (Azure Blob; skips if
  ``.cache/node/node_modules/.bin/azurite-blob`` is missing), ``gcs_emulator`` --
  ``gcp-storage-emulator`` (GCS, in memory).
* ``moto_s3_auth`` -- a second moto server that enforces credentials (every request with the
  test keys is rejected), for access-denied tests.

Each yields an :class:`Emulator` handle:

* ``uri_for(bucket, prefix="")`` -> store URI (``s3://b/p``, ``az://devstoreaccount1/b/p``,
  ``gs://b/p``) to pass to ``gateway_agent.stores.open_store``;
* ``options`` -> the JSON-safe ``options`` dict for ``open_store`` (endpoint, region, project);
* ``env`` -> the environment variables a gateway *subprocess* needs to reach the emulator
  (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_DEFAULT_REGION`` for moto,
  ``AZURE_STORAGE_CONNECTION_STRING`` for Azurite, ``STORAGE_EMULATOR_HOST`` for GCS); the
  fixtures also put them into this process's ``os.environ`` for the session (restored after),
  so in-process ``open_store`` calls work too;
* ``make_bucket(name)`` -> creates the bucket/container and returns ``uri_for(name)``;
* ``stored_names(name)`` -> every name the server keeps for that bucket, straight from the SDK
  (including the store layer's hidden staging objects and, on S3, unfinished multipart uploads
  as ``"upload:<key>"``), so tests can check that nothing is left behind.

Example (a gateway subprocess writing to Azurite)::

    def test_copy(moto_s3, azurite):
        src = moto_s3.make_bucket("src")
        dst = azurite.make_bucket("dst")
        env = {**os.environ, **moto_s3.env, **azurite.env}
        subprocess.run([...gateway..., src, json.dumps(moto_s3.options)], env=env)

Outside pytest (benchmarks) use the context managers :func:`run_moto`, :func:`run_azurite` and
:func:`run_gcs` directly; they start the server as its own process group and stop it on exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
AZURITE_BIN = REPO / ".cache" / "node" / "node_modules" / ".bin" / "azurite-blob"
BIN = Path(sys.executable).parent
AZURITE_ACCOUNT = "devstoreaccount1"
# The well-known, public Azurite development key (documented by Microsoft; not a secret).
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
MOTO_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"emulator did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


@contextlib.contextmanager
def _server(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run one server as its own process group; stop that group (and only it) on exit."""
    with tempfile.TemporaryDirectory(prefix="emulator-log-") as logdir:
        log = Path(logdir) / "server.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        try:
            _wait_for_port(port, proc, log)
            yield
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


@dataclass
class Emulator:
    """How to reach one running emulator: URIs, ``open_store`` options and subprocess env."""

    name: str
    scheme_root: str
    options: dict[str, Any]
    env: dict[str, str]
    _make: Callable[[str], None] = field(repr=False)
    _names: Callable[[str], list[str]] = field(repr=False, default=lambda _: [])

    def uri_for(self, bucket: str, prefix: str = "") -> str:
        """The store URI of a bucket (and optional prefix) on this emulator."""
        return f"{self.scheme_root}{bucket}/{prefix}"

    def make_bucket(self, name: str) -> str:
        """Create a bucket/container (idempotent) and return its URI."""
        self._make(name)
        return self.uri_for(name)

    def stored_names(self, bucket: str) -> list[str]:
        """Every name the server holds for ``bucket``, hidden ones included (sorted)."""
        return sorted(self._names(bucket))


@contextlib.contextmanager
def run_moto(enforce_auth: bool = False) -> Iterator[Emulator]:
    """moto_server on a free port; ``enforce_auth`` makes it reject the test credentials."""
    port = _free_port()
    server_env = {"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if enforce_auth else {}
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    endpoint = f"http://127.0.0.1:{port}"

    def client() -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
        )

    def make(name: str) -> None:
        s3 = client()
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=name)

    def names(name: str) -> list[str]:
        s3 = client()
        keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=name)
                for o in p.get("Contents", [])]  # fmt: skip
        uploads = s3.list_multipart_uploads(Bucket=name).get("Uploads", [])
        return keys + [f"upload:{u['Key']}" for u in uploads]

    with _server(cmd, port, server_env):
        options = {"endpoint_url": endpoint, "region": "us-east-1"}
        yield Emulator("s3", "s3://", options, dict(MOTO_ENV), make, names)


def azurite_connection_string(port: int, key: str = AZURITE_KEY) -> str:
    """The connection string of a local Azurite blob service (optionally with a wrong key)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )


@contextlib.contextmanager
def run_azurite() -> Iterator[Emulator]:
    """Azurite's blob service on a free port with a throwaway data folder."""
    if not AZURITE_BIN.exists():
        raise FileNotFoundError(f"{AZURITE_BIN} missing: run scripts/install-test-tools.sh")
    port = _free_port()
    conn = azurite_connection_string(port)

    def make(name: str) -> None:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import BlobServiceClient

        service = BlobServiceClient.from_connection_string(conn)
        with contextlib.suppress(ResourceExistsError):
            service.create_container(name)

    with tempfile.TemporaryDirectory(prefix="azurite-") as location:
        cmd = [
            str(AZURITE_BIN),
            "--blobHost", "127.0.0.1",
            "--blobPort", str(port),
            "--location", location,
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]  # fmt: skip
        with _server(cmd, port):
            env = {"AZURE_STORAGE_CONNECTION_STRING": conn}
            yield Emulator("azure", f"az://{AZURITE_ACCOUNT}/", {}, env, make)


# gcp-storage-emulator re-serialises its whole metadata table as indented JSON after every
# write, even in memory mode where that snapshot is never read back: O(n) per write, minutes
# for a few thousand keys. The launcher drops that snapshot in memory mode only; the server,
# its handlers and its storage are otherwise the unmodified package.
_GCS_LAUNCHER = """
import sys
from gcp_storage_emulator import storage
_snapshot = storage.Storage._write_config_to_file
def _write_config_to_file(self):
    if not self._use_memory_fs:
        _snapshot(self)
storage.Storage._write_config_to_file = _write_config_to_file
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


@contextlib.contextmanager
def run_gcs() -> Iterator[Emulator]:
    """gcp-storage-emulator (in memory) on a free port."""
    port = _free_port()
    host = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-c",
        _GCS_LAUNCHER,
        "start",
        "--host=127.0.0.1",
        f"--port={port}",
        "--in-memory",
    ]

    def client() -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": host},
        )

    def make(name: str) -> None:
        from google.api_core.exceptions import Conflict

        with contextlib.suppress(Conflict):
            client().create_bucket(name)

    def names(name: str) -> list[str]:
        return [blob.name for blob in client().list_blobs(name)]

    with _server(cmd, port):
        env = {"STORAGE_EMULATOR_HOST": host}
        yield Emulator("gcs", "gs://", {"project": "test"}, env, make, names)


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for a while, then restore the previous values."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
