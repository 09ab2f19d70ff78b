"""One conformance suite, run unchanged against every backend (the rclone idea).

Backends: in-memory fake, local filesystem, S3 on a moto_server process, Azure Blob on an Azurite
process, GCS on a gcp-storage-emulator process (see tests/stores/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway_agent.stores import (
    AccessDeniedError,
    BucketNotFoundError,
    InvalidURIError,
    KeyNotSupportedError,
    ObjectNotFoundError,
    ObjectStore,
    SourceChangedError,
    SupportsCopy,
    UploadNotFoundError,
    open_store,
)
from tests.faults._names import DOUBLE_SLASH, HOLDS, REFUSES
from tests.stores.conftest import PREFIX, Backend

pytestmark = pytest.mark.emulator
MIB = 1024 * 1024


def pattern(n: int, seed: int = 0) -> bytes:
    """Deterministic, non-repeating-per-block bytes (so swapped parts are detected)."""
    block = hashlib.sha256(f"{seed}".encode()).digest() * 2048  # 64 KiB
    head = seed.to_bytes(8, "big")
    out = bytearray(head + block)
    while len(out) < n:
        out += hashlib.sha256(out[-32:]).digest() + block
    return bytes(out[:n])


def keys_of(store: ObjectStore, prefix: str = "") -> list[str]:
    return sorted(info.key for info in store.list(prefix))


def assert_nothing_but(backend: Backend, bucket: str, keys: list[str]) -> None:
    """Listing, and what the backend really holds (files on disk, hidden staging objects,
    unfinished uploads), show exactly ``keys``: multipart leaves nothing behind."""
    assert keys_of(backend.open(bucket)) == sorted(keys)
    if backend.stored_names is not None:
        assert backend.stored_names(bucket) == sorted(keys)


# -- basic objects -----------------------------------------------------------------------------
def test_write_head_read_overwrite(store: ObjectStore) -> None:
    info = store.write("obj", b"first version")
    assert info.key == "obj" and info.size == 13
    head = store.head("obj")
    assert head.size == 13 and head.key == "obj"
    assert store.read("obj") == b"first version"
    store.write("obj", b"v2")
    assert store.read("obj") == b"v2"
    assert store.head("obj").size == 2
    assert keys_of(store) == ["obj"]


def test_zero_byte_object(store: ObjectStore) -> None:
    store.write("empty", b"")
    assert store.head("empty").size == 0
    assert store.read("empty") == b""
    assert store.read("empty", 0, 10) == b""
    assert [(i.key, i.size) for i in store.list()] == [("empty", 0)]


def test_ranged_reads_at_boundaries(store: ObjectStore) -> None:
    data = pattern(100_000, seed=7)
    store.write("r", data)
    size = len(data)
    assert store.read("r", 0, 1) == data[:1]  # first byte
    assert store.read("r", size - 1, 1) == data[-1:]  # last byte
    assert store.read("r", size - 1) == data[-1:]  # open-ended from the last byte
    assert store.read("r", size - 10, 100) == data[-10:]  # range running past the end
    assert store.read("r", size) == b""  # start exactly at the end
    assert store.read("r", size + 5, 10) == b""  # start past the end
    assert store.read("r", 123, 0) == b""  # empty range
    assert store.read("r", 4096, 65536) == data[4096 : 4096 + 65536]  # interior, unaligned
    assert store.read("r") == data


def test_native_checksums_are_declared(backend: Backend, store: ObjectStore) -> None:
    info = store.write("c", b"checksum me")
    reported = set(store.head("c").checksums) | set(info.checksums)
    assert reported <= store.capabilities.native_checksums
    if "md5" in store.capabilities.native_checksums:
        assert store.head("c").checksums.get("md5") == hashlib.md5(b"checksum me").hexdigest()
    if backend.name == "s3":
        assert store.capabilities.min_part_size == 5 * MIB


def test_odd_names_round_trip(backend: Backend, store: ObjectStore) -> None:
    """Every name this backend can hold lists, heads and reads back verbatim (``%XX`` is never
    decoded, the 1024-byte name is the clouds' limit)."""
    names = HOLDS[backend.name]
    for i, key in enumerate(names):
        store.write(key, f"body {i}".encode())
    assert keys_of(store) == sorted(names)
    for i, key in enumerate(names):
        assert store.read(key) == f"body {i}".encode()
        assert store.head(key).key == key
    if DOUBLE_SLASH in names:
        assert keys_of(store, "double//") == [DOUBLE_SLASH]
        assert keys_of(store, "double/") == [DOUBLE_SLASH]
    assert keys_of(store, "unicode/ü") == ["unicode/ünïcödé/日本語 ファイル.txt"]
    assert keys_of(store, "report%") == ["report%202024.txt"]


def test_names_a_backend_cannot_hold_are_refused(backend: Backend, store: ObjectStore) -> None:
    """A typed per-object error before anything is written, not a mangled name."""
    for key in REFUSES[backend.name]:
        with pytest.raises(KeyNotSupportedError) as err:
            store.write(key, b"x")
        assert repr(key) in str(err.value)
        with pytest.raises(KeyNotSupportedError):
            store.create_multipart(key)
    assert keys_of(store) == []


# -- versions: a read pinned to the listed version never returns another one ---------------------
def test_listing_carries_a_version_that_moves_with_every_write(store: ObjectStore) -> None:
    written = store.write("v", b"first")
    (listed,) = list(store.list())
    assert listed.version and listed.version == store.head("v").version
    assert written.version in (None, listed.version)
    assert store.read("v", version=listed.version) == b"first"
    assert store.read("v", 1, 3, version=listed.version) == b"irs"
    assert store.read("v", 0, 0, version=listed.version) == b""
    store.write("v", b"other")  # same size, new content
    assert store.head("v").version != listed.version
    for start, length in ((0, None), (1, 3), (0, 0), (10, 5)):
        with pytest.raises(SourceChangedError) as err:
            store.read("v", start, length, version=listed.version)
        assert err.value.key == "v" and err.value.expected == listed.version
    store.delete("v")
    with pytest.raises(SourceChangedError) as err:
        store.read("v", version=listed.version)
    with pytest.raises(ObjectNotFoundError):
        store.read("v")  # unpinned: the plain missing-key error


def test_multipart_object_has_a_pinnable_version(store: ObjectStore) -> None:
    part = max(store.capabilities.min_part_size, 1024)
    upload = store.create_multipart("mp")
    store.upload_part("mp", upload, 1, b"a" * part)
    store.upload_part("mp", upload, 2, b"tail")
    store.complete_multipart("mp", upload, [1, 2])
    version = store.head("mp").version
    assert version and [i.version for i in store.list()] == [version]
    assert store.read("mp", part, 4, version=version) == b"tail"


def test_keys_are_relative_to_the_uri_prefix(
    backend: Backend, bucket: str, store: ObjectStore
) -> None:
    store.write("a/one", b"1")
    store.write("a/two", b"2")
    store.write("ab", b"3")
    assert keys_of(store, "a/") == ["a/one", "a/two"]
    assert keys_of(store, "a") == ["a/one", "a/two", "ab"]
    root = backend.open(bucket)
    assert keys_of(root) == [PREFIX + k for k in ("a/one", "a/two", "ab")]
    assert root.read(PREFIX + "ab") == b"3"
    sibling = backend.open(bucket, "pre")  # "pre/" is not a prefix of "pre fix/"
    assert keys_of(sibling) == []


def test_server_side_copy_when_declared(store: ObjectStore) -> None:
    if not store.capabilities.server_side_copy:
        pytest.skip("backend declares no server-side copy")
    assert isinstance(store, SupportsCopy)
    store.write("src/a", b"payload")
    info = store.copy("src/a", "dst/b c")
    assert info.key == "dst/b c" and info.size == 7
    assert store.read("dst/b c") == b"payload"
    with pytest.raises(ObjectNotFoundError):
        store.copy("src/missing", "dst/x")


def test_delete(store: ObjectStore) -> None:
    store.write("gone/soon", b"x")
    store.write("stays", b"y")
    store.delete("gone/soon")
    with pytest.raises(ObjectNotFoundError):
        store.head("gone/soon")
    with pytest.raises(ObjectNotFoundError):
        store.read("gone/soon")
    assert keys_of(store) == ["stays"]
    store.delete("gone/soon")  # deleting a missing key is a no-op, as on S3


@pytest.mark.slow
def test_list_thousands_of_keys_across_pages(backend: Backend, bucket: str) -> None:
    # Small pages so every cloud backend crosses several page boundaries (gcp-storage-emulator
    # ignores the page size and answers in one page; moto and Azurite honour it).
    paged = {"list_page_size": 700} if backend.name in ("s3", "azure", "gcs") else {}
    store = backend.open(bucket, "many/", **paged)
    keys = [f"k/{i // 1000}/{i:05d}" for i in range(2_600)]
    # gcp-storage-emulator serialises requests (GIL-bound), so extra client threads only add
    # contention there; the other servers overlap requests.
    with ThreadPoolExecutor(2 if backend.name == "gcs" else 16) as pool:
        list(pool.map(lambda k: store.write(k, k.encode()[-3:]), keys))
    listed = list(store.list())
    assert len(listed) == len(keys)  # four pages of 700
    assert sorted(i.key for i in listed) == sorted(keys)
    assert all(i.size == 3 for i in listed)
    # A prefix whose matches straddle page boundaries, plus a streaming (lazy) consumer.
    assert len(keys_of(store, "k/1/")) == 1000
    assert len(keys_of(store, "k/2/")) == 600
    first = next(iter(store.list("k/0/")))
    assert first.key.startswith("k/0/")


# -- multipart ---------------------------------------------------------------------------------
def _part_size(store: ObjectStore) -> int:
    return max(store.capabilities.min_part_size, 1 * MIB)


def test_multipart_out_of_order(backend: Backend, bucket: str, store: ObjectStore) -> None:
    size = _part_size(store)
    parts = {1: pattern(size, 1), 2: pattern(size, 2), 3: pattern(size, 3), 4: b"tail"}
    upload = store.create_multipart("mp/obj")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: store.upload_part("mp/obj", upload, n, parts[n]), [4, 2, 3, 1]))
    with pytest.raises(ObjectNotFoundError):
        store.head("mp/obj")  # nothing visible before completion
    assert keys_of(store) == []
    info = store.complete_multipart("mp/obj", upload, [3, 1, 4, 2])
    whole = b"".join(parts[n] for n in (1, 2, 3, 4))
    assert info.size == len(whole)
    assert store.read("mp/obj") == whole
    assert store.read("mp/obj", size - 2, 4) == whole[size - 2 : size + 2]  # across a part seam
    assert keys_of(store) == ["mp/obj"]
    assert_nothing_but(backend, bucket, [PREFIX + "mp/obj"])


def test_multipart_overwrites_existing_object(store: ObjectStore) -> None:
    store.write("o", b"old")
    upload = store.create_multipart("o")
    store.upload_part("o", upload, 1, b"new")
    assert store.read("o") == b"old"
    store.complete_multipart("o", upload, [1])
    assert store.read("o") == b"new"


def test_multipart_part_listed_twice_counts_once(store: ObjectStore) -> None:
    head, tail = pattern(_part_size(store), 1), b"tail"
    upload = store.create_multipart("twice")
    store.upload_part("twice", upload, 2, tail)
    store.upload_part("twice", upload, 1, head)
    assert store.complete_multipart("twice", upload, [2, 1, 2, 1]).size == len(head) + 4
    assert store.read("twice") == head + tail


def test_multipart_abort_leaves_nothing_visible(
    backend: Backend, bucket: str, store: ObjectStore
) -> None:
    size = _part_size(store)
    upload = store.create_multipart("ab/obj")
    store.upload_part("ab/obj", upload, 2, pattern(size, 2))
    store.upload_part("ab/obj", upload, 1, pattern(size, 1))
    store.abort_multipart("ab/obj", upload)
    store.abort_multipart("ab/obj", upload)  # idempotent
    with pytest.raises(ObjectNotFoundError):
        store.head("ab/obj")
    assert keys_of(store) == []
    assert_nothing_but(backend, bucket, [])  # no staging files at the bucket root either
    if backend.name != "azure":  # Azure keeps staged blocks until they expire (documented)
        with pytest.raises(UploadNotFoundError):
            store.complete_multipart("ab/obj", upload, [1, 2])


def test_multipart_missing_part_is_refused(store: ObjectStore) -> None:
    upload = store.create_multipart("m")
    store.upload_part("m", upload, 1, pattern(_part_size(store), 1))
    with pytest.raises(UploadNotFoundError):
        store.complete_multipart("m", upload, [1, 2])
    with pytest.raises(ObjectNotFoundError):
        store.head("m")
    store.abort_multipart("m", upload)


_PART_WORKER = """
import json, sys
from gateway_agent.stores import open_store
uri, options, key, upload_id, n, size = sys.argv[1:]
data = bytes([int(n)]) * int(size)
open_store(uri, json.loads(options)).upload_part(key, upload_id, int(n), data)
"""


def test_multipart_parts_from_other_processes(backend: Backend, bucket: str) -> None:
    """The control plane creates and completes; separate processes upload the parts."""
    if not backend.cross_process:
        pytest.skip("the in-memory fake lives in one process")
    uri = backend.uri_for(bucket, PREFIX)
    store = open_store(uri, backend.options)
    size = _part_size(store)
    upload = store.create_multipart("xp")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PART_WORKER,
                uri,
                json.dumps(backend.options),
                "xp",
                upload,
                str(n),
                str(size),
            ]
        )
        for n in (3, 1, 2)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    store.complete_multipart("xp", upload, [1, 2, 3])
    data = store.read("xp")
    assert data == b"\x01" * size + b"\x02" * size + b"\x03" * size
    assert_nothing_but(backend, bucket, [PREFIX + "xp"])


@pytest.mark.slow
def test_large_object_streamed_in_parts(store: ObjectStore) -> None:
    """A 200 MiB object written as 4 parallel parts and read back as ranges, never whole."""
    part, count = 50 * MIB, 4
    digests: dict[int, str] = {}

    def put(n: int) -> None:
        data = pattern(part, 100 + n)
        digests[n] = hashlib.sha256(data).hexdigest()
        store.upload_part("big/object.bin", upload, n, data)

    upload = store.create_multipart("big/object.bin")
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(put, [3, 1, 4, 2]))
    info = store.complete_multipart("big/object.bin", upload, [1, 2, 3, 4])
    assert info.size == part * count == store.head("big/object.bin").size

    def get(n: int) -> str:
        return hashlib.sha256(store.read("big/object.bin", (n - 1) * part, part)).hexdigest()

    with ThreadPoolExecutor(2) as pool:
        assert dict(zip(range(1, 5), pool.map(get, range(1, 5)), strict=True)) == digests
    assert store.read("big/object.bin", part * count - 1, 10) == pattern(part, 104)[-1:]
    store.delete("big/object.bin")


# -- typed errors --------------------------------------------------------------------------------
def test_missing_key(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.head("no/such/key")
    with pytest.raises(ObjectNotFoundError):
        store.read("no/such/key", 0, 10)


def test_missing_bucket(backend: Backend) -> None:
    if backend.name == "local":
        pytest.skip("a file:// root acts as a prefix: missing lists empty, first write creates it")
    missing = open_store(backend.missing_bucket_uri(), backend.options)
    with pytest.raises(BucketNotFoundError):
        list(missing.list())
    with pytest.raises(BucketNotFoundError):
        missing.head("k")
    with pytest.raises(BucketNotFoundError):
        missing.read("k")
    with pytest.raises(BucketNotFoundError):
        missing.write("k", b"x")
    with pytest.raises(BucketNotFoundError):
        missing.create_multipart("k")


def test_bad_uri(backend: Backend) -> None:
    good = backend.uri_for("bucket-name", "p")
    scheme = good.split("://")[0]
    for bad in (f"{scheme}://", f"{scheme}://UPPER_and_bad!/x", good.replace("://", ":/")):
        with pytest.raises(InvalidURIError):
            open_store(bad, backend.options)
    with pytest.raises(InvalidURIError):
        open_store(good, {**backend.options, "no_such_option": 1})


def test_access_denied(backend: Backend) -> None:
    if backend.denied is None:
        pytest.skip(f"{backend.name}: {backend.denied_reason}")
    with backend.denied() as store:
        with pytest.raises(AccessDeniedError) as err:
            store.write("k", b"x")
        secrets = [os.environ.get("AWS_SECRET_ACCESS_KEY", "")]
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        secrets += [f.split("=", 1)[1] for f in conn.split(";") if f.startswith("AccountKey=")]
        shown = str(err.value) + repr(err.value)
        assert not [s for s in secrets if s and s in shown]  # no credential in the message
        assert err.value.__cause__ is None and err.value.__suppress_context__
        if backend.name != "local":  # a read-only folder still lists
            with pytest.raises(AccessDeniedError):
                list(store.list())
