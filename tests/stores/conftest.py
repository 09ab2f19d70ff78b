"""Backends for the store conformance suite: every test in it runs once per backend.

``backend`` is parametrised over memory, local, s3 (moto), azure (Azurite) and gcs
(gcp-storage-emulator); emulator fixtures are requested lazily so selecting ``-k memory`` starts
no server. ``store`` is a fresh bucket opened under a prefix with a space in it, so every test
also checks that keys are relative to the URI's prefix.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import ObjectStore, open_store
from gateway_agent.stores import memory as memory_backend
from skyplane_ops.testing.emulators import azurite_connection_string, environ

BACKENDS = ["memory", "local", "s3", "azure", "gcs"]
PREFIX = "pre fix/"
_counter = itertools.count()


@dataclass
class Backend:
    """What the conformance tests need to know about one backend."""

    name: str
    options: dict[str, Any]
    _new_bucket: Callable[[str], object]
    uri_for: Callable[[str, str], str]
    # A context manager yielding a store whose credentials/permissions are refused, or a reason
    # why this backend cannot show access denied.
    denied: Callable[[], contextlib.AbstractContextManager[ObjectStore]] | None = None
    denied_reason: str = ""
    cross_process: bool = True
    # Every name the backend really holds for a bucket (hidden staging objects, unfinished
    # uploads, files and empty folders on disk), or None where the server cannot show more
    # than ``list`` does (Azure keeps uncommitted blocks invisibly; memory has no server).
    stored_names: Callable[[str], list[str]] | None = None

    def new_bucket(self) -> str:
        """Create a fresh, uniquely named bucket and return its name."""
        name = f"conf-{next(_counter)}-{uuid.uuid4().hex[:8]}"
        self._new_bucket(name)
        return name

    def open(self, bucket: str, prefix: str = "", **extra: Any) -> ObjectStore:
        return open_store(self.uri_for(bucket, prefix), {**self.options, **extra})

    def missing_bucket_uri(self) -> str:
        return self.uri_for(f"missing-{uuid.uuid4().hex[:12]}", "")


def local_tree(folder: Path, keep: Path | None = None) -> list[str]:
    """Files and empty folders under ``folder`` (relative, folders with a trailing ``/``).

    ``keep`` is a folder that may stay empty without counting (a store's own root).
    """
    names = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if not path.is_dir():
            names.append(rel)
        elif path != keep and not any(path.iterdir()):
            names.append(rel + "/")
    return names


def _local_backend(root: Path) -> Backend:
    def new_bucket(name: str) -> str:
        (root / name).mkdir()
        return name

    @contextlib.contextmanager
    def denied() -> Iterator[ObjectStore]:
        # Root ignores file modes, so as root make the folder immutable (EPERM even for root).
        folder = root / f"denied-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i", str(folder)], check=True)
        else:
            folder.chmod(0o555)
        try:
            yield open_store(f"file://{folder}")
        finally:
            if os.geteuid() == 0:
                subprocess.run(["chattr", "-i", str(folder)], check=True)
            folder.chmod(0o755)

    return Backend(
        "local",
        {},
        new_bucket,
        lambda bucket, prefix: f"file://{root / bucket}/{prefix}",
        denied=denied,
        stored_names=lambda bucket: local_tree(root / bucket, keep=root / bucket / PREFIX),
    )


@pytest.fixture(scope="session")
def local_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="store-conformance-") as tmp:
        yield Path(tmp)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, local_root: Path) -> Backend:
    return make_backend(request.param, request, local_root)


@pytest.fixture(params=BACKENDS)
def dst_backend(request: pytest.FixtureRequest, local_root: Path) -> Backend:
    """A second backend, for tests of a store pair (``backend`` -> ``dst_backend``)."""
    return make_backend(request.param, request, local_root)


def make_backend(name: str, request: pytest.FixtureRequest, local_root: Path) -> Backend:
    """The backend ``name``; its emulator is started (once per session) only now."""
    if name == "memory":
        return Backend(
            "memory",
            {},
            memory_backend.create_bucket,
            lambda bucket, prefix: f"mem://{bucket}/{prefix}",
            denied_reason="the in-memory fake has no credentials or permissions",
            cross_process=False,
        )
    if name == "local":
        return _local_backend(local_root)
    if name == "s3":
        emu = request.getfixturevalue("moto_s3")

        @contextlib.contextmanager
        def s3_denied() -> Iterator[ObjectStore]:
            auth = request.getfixturevalue("moto_s3_auth")
            yield open_store(auth.uri_for("any-bucket"), {**auth.options, "max_attempts": 1})

        return Backend(
            "s3",
            emu.options,
            emu.make_bucket,
            emu.uri_for,
            denied=s3_denied,
            stored_names=emu.stored_names,
        )
    if name == "azure":
        emu = request.getfixturevalue("azurite")
        port = int(emu.env["AZURE_STORAGE_CONNECTION_STRING"].split("127.0.0.1:")[1].split("/")[0])

        @contextlib.contextmanager
        def az_denied() -> Iterator[ObjectStore]:
            bucket = emu.make_bucket(f"denied-{uuid.uuid4().hex[:8]}").rstrip("/").split("/")[-1]
            wrong = "d3Jvbmcta2V5LW5vdC10aGUtYXp1cml0ZS1vbmU="
            with environ(
                {"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(port, wrong)}
            ):
                yield open_store(emu.uri_for(bucket), {**emu.options, "max_attempts": 1})

        return Backend("azure", emu.options, emu.make_bucket, emu.uri_for, denied=az_denied)
    emu = request.getfixturevalue("gcs_emulator")
    return Backend(
        "gcs",
        emu.options,
        emu.make_bucket,
        emu.uri_for,
        denied_reason="gcp-storage-emulator enforces no credentials or IAM",
        stored_names=emu.stored_names,
    )


@pytest.fixture
def bucket(backend: Backend) -> str:
    return backend.new_bucket()


@pytest.fixture
def store(backend: Backend, bucket: str) -> ObjectStore:
    """A fresh bucket opened under ``PREFIX``."""
    return backend.open(bucket, PREFIX)
