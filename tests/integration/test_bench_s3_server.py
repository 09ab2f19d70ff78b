"""The benchmark fixtures of ``benchmarks/s3_latency.py`` work: the minimal S3 server answers
boto3 as S3 would for what the benchmark uses, and the latency proxy delays every request.

Real processes and sockets: the server and the proxy run as their own processes on loopback.
"""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from latency_proxy import LatencyProxy
from s3_server import Server, run_s3_server

from gateway_agent.stores import open_store
from gateway_agent.stores.checksum import crc32c
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError

pytest.importorskip("uvicorn")
KEYS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_s3_server(tmp_path_factory.mktemp("s3-bench")) as srv:
        yield srv


def client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **KEYS)


def test_objects_listing_ranges_and_checksums(server: Server, monkeypatch: Any) -> None:
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket="one")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "bench")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "bench")
    store = open_store("s3://one/", {"endpoint_url": server.endpoint, "region": "us-east-1"})
    data = {f"d{i % 3}/k{i:03d}": bytes([i]) * (100 + i) for i in range(25)}
    for key, body in data.items():
        info = store.write(key, body)
        want = base64.b64encode(crc32c(body).to_bytes(4, "big")).decode()
        assert info.checksums["crc32c"] == want  # echoed by the server's answer
    head = store.head("d0/k003")
    assert head.size == 103 and head.checksums["md5"]
    assert (
        head.checksums["crc32c"]
        == base64.b64encode(crc32c(data["d0/k003"]).to_bytes(4, "big")).decode()
    )
    # Pages of 7 keys, in key order, none lost or repeated.
    paged = open_store(
        "s3://one/", {"endpoint_url": server.endpoint, "region": "us-east-1", "list_page_size": 7}
    )
    assert [o.key for o in paged.list()] == sorted(data)
    assert [o.key for o in store.list("d2/")] == sorted(k for k in data if k.startswith("d2/"))
    top = s3.list_objects_v2(Bucket="one", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["d0/", "d1/", "d2/"]
    assert store.read("d1/k010", 5, 10) == data["d1/k010"][5:15]
    assert store.read("d1/k010", 500) == b""  # past the end
    store.delete("d1/k010")
    with pytest.raises(ObjectNotFoundError):
        store.head("d1/k010")


def test_a_damaged_body_is_refused(server: Server) -> None:
    s3 = client(server.endpoint)
    s3.create_bucket(Bucket="two")
    wrong = base64.b64encode(crc32c(b"other").to_bytes(4, "big")).decode()
    with pytest.raises(Exception, match="BadDigest"):
        s3.put_object(Bucket="two", Key="k", Body=b"body", ChecksumCRC32C=wrong)
    assert s3.list_objects_v2(Bucket="two").get("KeyCount") == 0


def test_unsupported_requests_say_so(server: Server, monkeypatch: Any) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "bench")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "bench")
    client(server.endpoint).create_bucket(Bucket="three")
    store = open_store("s3://three/", {"endpoint_url": server.endpoint, "region": "us-east-1"})
    with pytest.raises(StoreError, match="NotImplemented"):
        store.create_multipart("big")


def test_the_proxy_delays_every_request_and_many_at_once(server: Server) -> None:
    delay = 0.25
    with LatencyProxy(server.address, delay) as proxy:
        s3 = client(f"http://127.0.0.1:{proxy.port}")
        s3.create_bucket(Bucket="four")

        def put(i: int) -> float:
            t0 = time.monotonic()
            s3.put_object(Bucket="four", Key=f"k{i}", Body=b"x" * 1000)
            return time.monotonic() - t0

        with ThreadPoolExecutor(8) as pool:
            t0 = time.monotonic()
            took = list(pool.map(put, range(8)))
            wall = time.monotonic() - t0
    assert min(took) >= delay  # every request waited
    # Eight requests side by side, not one after the other (that would be >= 8 * delay).
    assert wall < 8 * delay, took
    assert client(server.endpoint).list_objects_v2(Bucket="four")["KeyCount"] == 8
