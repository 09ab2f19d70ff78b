"""Azure: what the service vouches for, on a real Azurite (see gateway_agent/stores/azure/store.py).

Azurite, like Azure, computes the MD5 of every Put Blob and Put Block body it receives and
refuses the request when a ``Content-MD5`` header says otherwise. A proxy between the store
and Azurite flips one byte of each upload body: with ``checksums=md5`` (the default) the write
is refused and nothing lands; with ``checksums=off`` the same corruption lands silently (which
shows the proxy really corrupts, so the first assertion can fail). Verification then uses the
CRC32C the store wrote beside the bytes (blob metadata) and reads nothing back; blobs written by
another tool (no such metadata) are read back.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.azure.store import CRC_METADATA, block_id
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.testing.emulators import AZURITE_ACCOUNT, azurite_connection_string, environ
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer.checksum import crc32c_b64
from skyplane_ops.transfer.verify import verify_objects
from tests.integration.http_proxy import CountingProxy

MiB = 1024 * 1024
pytestmark = [pytest.mark.emulator]


def _flip_upload_bodies(method: str, path: str, body: bytes) -> bytes:
    """Corrupt the data of Put Blob and Put Block (not block lists, not container calls)."""
    query = parse_qs(urlsplit(path).query)
    if method != "PUT" or "restype" in query or query.get("comp", ["block"]) != ["block"]:
        return body
    return body[:-1] + bytes([body[-1] ^ 0x01]) if body else body


def _endpoint(conn: str) -> str:
    fields = dict(item.split("=", 1) for item in conn.split(";") if "=" in item)
    return fields["BlobEndpoint"].rsplit("/", 1)[0]


@pytest.fixture
def corrupting(azurite: Any) -> Iterator[CountingProxy]:
    """Azurite behind a proxy that flips a byte of every upload body; the connection string
    in the environment points at the proxy meanwhile."""
    upstream = _endpoint(azurite.env["AZURE_STORAGE_CONNECTION_STRING"])
    with CountingProxy(upstream, _flip_upload_bodies) as proxy:
        port = urlsplit(proxy.endpoint).port
        assert port is not None
        with environ({"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(port)}):
            yield proxy


@pytest.fixture
def counting(azurite: Any) -> Iterator[CountingProxy]:
    """Azurite behind a proxy that only records requests (connection string as above)."""
    upstream = _endpoint(azurite.env["AZURE_STORAGE_CONNECTION_STRING"])
    with CountingProxy(upstream) as proxy:
        port = urlsplit(proxy.endpoint).port
        assert port is not None
        with environ({"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(port)}):
            yield proxy


def _blob_gets(proxy: CountingProxy, container: str) -> list[str]:
    """GETs of blob bytes in ``container`` (not listings, not block lists)."""
    prefix = f"/{AZURITE_ACCOUNT}/{container}/"
    return [
        urlsplit(p).path
        for m, p in proxy.requests
        if m == "GET" and p.startswith(prefix) and "comp=" not in p
    ]


def _container(azurite: Any) -> tuple[str, str]:
    name = f"z{uuid.uuid4().hex[:10]}"
    return azurite.make_bucket(name), name


def test_corrupted_put_blob_is_refused(azurite: Any, corrupting: CountingProxy) -> None:
    uri, _ = _container(azurite)
    data = os.urandom(100_000)
    store = open_store(uri, azurite.options)
    with pytest.raises(StoreError) as refused:
        store.write("one", data)
    assert refused.value.status == 400, refused.value
    with pytest.raises(ObjectNotFoundError):
        store.head("one")
    # Without the MD5 the same corruption lands unnoticed: the proxy does corrupt.
    plain = open_store(uri, {**azurite.options, "checksums": "off"})
    plain.write("one", data)
    assert plain.read("one") != data and len(plain.read("one")) == len(data)


def test_corrupted_put_block_is_refused(azurite: Any, corrupting: CountingProxy) -> None:
    uri, _ = _container(azurite)
    part = os.urandom(300_000)
    store = open_store(uri, azurite.options)
    upload = store.create_multipart("multi")
    with pytest.raises(StoreError) as refused:
        store.upload_part("multi", upload, 1, part)
    assert refused.value.status == 400, refused.value
    plain = open_store(uri, {**azurite.options, "checksums": "off"})
    upload = plain.create_multipart("multi")
    plain.upload_part("multi", upload, 1, part)
    plain.complete_multipart("multi", upload, [1])
    assert plain.read("multi") != part


def test_verify_trusts_crc32c_written_with_the_bytes(azurite: Any, counting: CountingProxy) -> None:
    """Single-shot and block-list blobs carry the CRC32C of their bytes; verification needs no
    read-back, and still catches a changed blob (ours: natively; another tool's: read back)."""
    uri, name = _container(azurite)
    store = open_store(uri, azurite.options)
    one = os.urandom(1000)
    info = store.write("one", one)
    assert info.checksums["crc32c"] == crc32c_b64(crc32c(one))
    parts = [os.urandom(700_000), os.urandom(123)]
    upload = store.create_multipart("multi")
    for n, part in enumerate(parts, 1):
        store.upload_part("multi", upload, n, part)
    done = store.complete_multipart("multi", upload, [1, 2])
    whole = b"".join(parts)
    assert done.checksums["crc32c"] == crc32c_b64(crc32c(whole))
    expected = {"one": (len(one), crc32c(one)), "multi": (len(whole), crc32c(whole))}
    check = verify_objects(store, expected)
    assert check.status == "passed" and check.method == "native crc32c", check.to_dict()
    assert _blob_gets(counting, name) == [], "verify read blob bytes back"

    # Rewritten by us with other bytes of the same size: the stored CRC32C is of those bytes.
    store.write("one", bytes(b ^ 1 for b in one))
    # Rewritten by another tool (plain SDK, no metadata): nothing vouches, so it is read back.
    from azure.storage.blob import BlobClient

    raw = BlobClient.from_connection_string(
        azurite.env["AZURE_STORAGE_CONNECTION_STRING"], name, "multi"
    )
    raw.upload_blob(whole[:-1] + b"\0", overwrite=True)
    assert CRC_METADATA not in (raw.get_blob_properties().metadata or {})
    check = verify_objects(store, expected)
    assert sorted(check.failures) == ["multi: crc32c mismatch on read-back", "one: crc32c mismatch"]
    assert check.method == "native crc32c+read-back crc32c"
    assert _blob_gets(counting, name) == [f"/{AZURITE_ACCOUNT}/{name}/multi"]


def test_part_staged_with_two_contents_is_not_committed(azurite: Any) -> None:
    """Two different blocks for one part (named by their CRC32C): the commit refuses to pick."""
    uri, _ = _container(azurite)
    store = open_store(uri, azurite.options)
    upload = store.create_multipart("k")
    store.upload_part("k", upload, 1, b"a" * 1000)
    store.upload_part("k", upload, 1, b"b" * 1000)
    assert block_id(upload, 1, crc32c(b"a" * 1000)) != block_id(upload, 1, crc32c(b"b" * 1000))
    with pytest.raises(StoreError, match="two contents"):
        store.complete_multipart("k", upload, [1])
    with pytest.raises(ObjectNotFoundError):
        store.head("k")


@pytest.mark.slow
def test_copy_to_azure_verifies_without_read_back(
    tmp_path: Path, azurite: Any, counting: CountingProxy
) -> None:
    """A whole copy (real gateways, multipart and small objects) with ``verify="full"``."""
    src = tmp_path / "src"
    data = {"big.bin": os.urandom(11 * MiB + 17), "small/a": os.urandom(3000), "small/b": b"b"}
    for key, blob in data.items():
        (src / key).parent.mkdir(parents=True, exist_ok=True)
        (src / key).write_bytes(blob)
    uri, name = _container(azurite)
    plan = make_plan([SRC, DST])
    with local_fleet(plan, hooks=False) as (_, fleet):
        result = run_transfer(
            plan,
            fleet,
            f"file://{src}/",
            uri,
            dst_options=azurite.options,
            journal_dir=tmp_path / "journal",
            part_size=5 * MiB,
            verify="full",
        )
    assert result.verified, result.verification
    assert result.verification["method"] == "native crc32c", result.verification
    assert _blob_gets(counting, name) == []
    assert open_store(uri, azurite.options).read("big.bin") == data["big.bin"]
