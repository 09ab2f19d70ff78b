"""Behaviour outside the shared contract: retries, lazy SDK imports, local-filesystem details."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_agent.stores import StoreError, TransientStoreError, open_store
from gateway_agent.stores import memory as memory_backend
from gateway_agent.stores.local import STAGING, atomic
from gateway_agent.stores.local.atomic import TMP_PREFIX, create_file
from tests.fixtures.ports import free_port
from tests.stores.conftest import local_tree


# -- retries (tenacity) --------------------------------------------------------------------------
def test_transient_failures_are_retried() -> None:
    memory_backend.create_bucket("retry-ok")
    store = open_store("mem://retry-ok/", {"inject_transient_failures": 3})
    assert store.write("k", b"v").size == 1  # 3 failures, then success on attempt 4
    assert store.read("k") == b"v"


def test_retry_budget_is_bounded() -> None:
    memory_backend.create_bucket("retry-fail")
    store = open_store("mem://retry-fail/", {"inject_transient_failures": 10, "max_attempts": 3})
    for _ in range(3):  # 3 calls x 3 attempts = 9 of the 10 injected failures
        with pytest.raises(TransientStoreError):
            store.write("k", b"v")
    store.write("k", b"v")  # the 10th failure, then success on the second attempt
    assert store.read("k") == b"v"


def test_unreachable_endpoint_is_transient_after_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real refused TCP connection to loopback: retried, then a TransientStoreError."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    store = open_store(
        "s3://some-bucket/",
        {"endpoint_url": f"http://127.0.0.1:{port}", "region": "us-east-1", "max_attempts": 2,
         "backoff_seconds": 0.01},
    )  # fmt: skip
    with pytest.raises(TransientStoreError) as err:
        store.head("k")
    assert "connection failed" in str(err.value)


# -- the gateway ships alone ---------------------------------------------------------------------
def test_backends_import_their_sdk_lazily() -> None:
    """A gateway with only boto3 must work: azure/google are never imported for s3/file."""
    code = textwrap.dedent(
        """
        import sys
        for blocked in ("azure", "google", "airflow", "dagster", "skyplane_ops"):
            sys.modules[blocked] = None  # any import of these now fails
        from gateway_agent.stores import open_store
        open_store("s3://bkt-x/p", {"endpoint_url": "http://127.0.0.1:9", "region": "us-east-1"})
        open_store("file:///tmp/x")
        open_store("mem://m/")
        try:
            open_store("gs://bkt-x/p")
        except ImportError:
            print("gcs needs its SDK")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "gcs needs its SDK"


# -- local filesystem ----------------------------------------------------------------------------
_FILE_NAMES = st.binary(min_size=1, max_size=60).filter(
    lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")
)


@settings(max_examples=150, deadline=None)
@given(_FILE_NAMES)
def test_every_local_file_name_is_its_key(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    """Any file a disk holds lists under its own name (non-UTF-8 bytes as surrogate escapes,
    ``%XX`` never decoded) and reads back under that key; writing the key makes that file."""
    root = tmp_path_factory.mktemp("names")
    if raw.startswith(TMP_PREFIX.encode()) or raw == STAGING.encode():
        return  # the store's own reserved names
    (root / os.fsdecode(raw)).write_bytes(b"x" + raw)
    store = open_store(f"file://{root}")
    (info,) = list(store.list())
    assert os.fsencode(info.key) == raw
    assert store.read(info.key) == b"x" + raw
    other = open_store(f"file://{root}-copy")
    other.write(info.key, b"y")
    assert os.listdir(os.fsencode(f"{root}-copy")) == [raw]


def test_local_staging_is_never_listed(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    upload = store.create_multipart("obj")
    store.upload_part("obj", upload, 1, b"part")
    assert (tmp_path / STAGING).is_dir()
    assert list(store.list()) == []
    assert list(store.list(".")) == []
    store.complete_multipart("obj", upload, [1])
    assert [i.key for i in store.list()] == ["obj"]
    assert not (tmp_path / STAGING).exists()  # the upload folder and the empty staging folder


def test_local_staging_folder_is_kept_while_another_upload_uses_it(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    first, second = store.create_multipart("a"), store.create_multipart("b")
    store.upload_part("a", first, 1, b"1")
    store.upload_part("b", second, 1, b"2")
    store.abort_multipart("a", first)
    assert [p.name for p in (tmp_path / STAGING).iterdir()] == [second]
    store.write("c", b"3")  # a plain write in between must not disturb the open upload
    store.complete_multipart("b", second, [1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "c"]


def test_local_parallel_uploads_across_processes_leave_nothing(tmp_path: Path) -> None:
    """Processes racing to create and remove ``.%staging`` (and folders emptied by deletes)
    never fail and leave nothing behind."""
    code = textwrap.dedent(
        """
        import sys
        from gateway_agent.stores import open_store
        store = open_store(sys.argv[1])
        for i in range(150):
            key = f"{sys.argv[2]}/{i}"
            upload = store.create_multipart(key)
            store.upload_part(key, upload, 1, b"x")
            if i % 3:
                store.complete_multipart(key, upload, [1])
            else:
                store.abort_multipart(key, upload)
            store.write(key + ".w", b"y")
            shared = f"shared/folder/{sys.argv[2]}-{i}"  # pruned and recreated all the time
            store.write(shared, b"z")
            store.delete(shared)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, f"file://{tmp_path}", f"p{n}"])
        for n in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    assert not (tmp_path / STAGING).exists() and not (tmp_path / "shared").exists()
    assert len(list(open_store(f"file://{tmp_path}").list())) == 4 * (100 + 150)
    assert len(local_tree(tmp_path)) == 4 * (100 + 150)  # no hidden temporary files either


@pytest.fixture(params=["O_TMPFILE", "named temp file"])
def atomic_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of creating a file atomically; the fallback is forced by hiding /proc."""
    if request.param == "O_TMPFILE":
        if atomic._proc_fd() is None:
            pytest.skip("no O_TMPFILE on this filesystem")
    else:
        monkeypatch.setitem(atomic._state, "proc", None)
    return str(request.param)


def test_local_writes_in_both_atomic_modes(tmp_path: Path, atomic_mode: str) -> None:
    store = open_store(f"file://{tmp_path}")
    store.write("a/new", b"1")
    store.write("a/new", b"22")  # overwrite: O_TMPFILE cannot link over a file, renames instead
    assert store.copy("a/new", "b/copy").size == 2  # type: ignore[attr-defined]
    store.write("c", b"")
    assert [(i.key, store.read(i.key)) for i in store.list()] == [
        ("a/new", b"22"),
        ("b/copy", b"22"),
        ("c", b""),
    ]
    assert local_tree(tmp_path) == ["a/new", "b/copy", "c"]
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failed_write_leaves_nothing(tmp_path: Path, atomic_mode: str) -> None:
    """A write that dies half-way (here: the data source fails) leaves no file, named or not."""

    def fill(fd: int) -> None:
        os.write(fd, b"half of it")
        raise RuntimeError("source failed")

    (tmp_path / "old").write_bytes(b"previous")
    for name in ("new", "old"):
        with pytest.raises(RuntimeError):
            create_file(str(tmp_path / name), fill)
    assert local_tree(tmp_path) == ["old"]
    assert (tmp_path / "old").read_bytes() == b"previous"


def test_local_list_skips_leftover_temporary_files(tmp_path: Path) -> None:
    """A named temp file a crashed writer left (fallback mode) is never listed as a key."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / f"{TMP_PREFIX}0123abcd").write_bytes(b"half")
    (tmp_path / "d" / "real").write_bytes(b"whole")
    assert [i.key for i in open_store(f"file://{tmp_path}").list()] == ["d/real"]


def test_local_files_are_plain_files(tmp_path: Path) -> None:
    """Ordinary keys are ordinary paths, so file:// sources need no import step."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a b.txt").write_bytes(b"hello")
    store = open_store(f"file://{tmp_path}")
    assert [(i.key, i.size) for i in store.list()] == [("dir/a b.txt", 5)]
    store.write("x/y.bin", b"12")
    assert (tmp_path / "x" / "y.bin").read_bytes() == b"12"
    store.delete("x/y.bin")
    assert not (tmp_path / "x").exists()  # emptied folders are pruned


def test_local_key_cannot_be_object_and_folder(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    store.write("a", b"1")
    with pytest.raises(StoreError):
        store.write("a/b", b"2")


def test_local_completion_without_copy_file_range(tmp_path: Path) -> None:
    """Filesystems without copy_file_range (EXDEV/ENOSYS) fall back to a buffered copy.

    The refusal is simulated (mock): every filesystem on this machine supports the call.
    """
    store = open_store(f"file://{tmp_path}")
    parts = {n: bytes([n]) * (3 * 1024 * 1024 + n) for n in (1, 2, 3)}
    upload = store.create_multipart("k")
    for n in (3, 1, 2):
        store.upload_part("k", upload, n, parts[n])
    with mock.patch("os.copy_file_range", side_effect=OSError(errno.EXDEV, "cross-device")):
        store.complete_multipart("k", upload, [1, 2, 3])
    assert store.read("k") == parts[1] + parts[2] + parts[3]


def test_local_pinned_read_catches_a_rewrite_during_the_read(tmp_path: Path) -> None:
    """The file is rewritten in place (same size, old mtime put back) after the version check
    before the first byte and while bytes are read: the check after the last byte refuses the
    mix. The rewrite is injected at that exact point by wrapping the store's read helper."""
    from gateway_agent.stores import SourceChangedError
    from gateway_agent.stores.local import store as local_backend

    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 8192)
    store = open_store(f"file://{tmp_path}")
    (info,) = list(store.list())
    real = local_backend.pread_all

    def rewrite_then_read(fd: int, start: int, length: int) -> bytes:
        st = os.stat(path)
        with open(path, "r+b") as fh:
            fh.write(b"b" * 100)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return real(fd, start, length)

    with mock.patch.object(local_backend, "pread_all", rewrite_then_read):
        with pytest.raises(SourceChangedError) as err:
            store.read("f.bin", 0, 8192, version=info.version)
    assert err.value.key == "f.bin" and err.value.expected == info.version
    assert err.value.found != info.version
    # unpinned reads stay plain reads
    assert store.read("f.bin", 0, 100) == b"b" * 100
