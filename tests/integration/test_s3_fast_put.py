"""The S3 store's fast PutObject, GetObject and ListObjectsV2 paths (``stores/s3/fast.py``) on real
servers and sockets.

* Signatures: a moto_server that enforces IAM auth (``INITIAL_NO_AUTH_ACTION_COUNT``) checks
  the SigV4 signature of every request (moto recomputes it with botocore's S3SigV4Auth); the
  fast path's PUTs, keys with spaces, ``%``, ``+``, ``~`` and non-ASCII included, are accepted
  with the right secret and refused (AccessDeniedError) with a wrong one.
* Bodies: moto does not check ``x-amz-checksum-crc32c`` against the body, the benchmark server
  (``benchmarks/s3_server.py``) does (BadDigest, as S3 does): behind a proxy that flips one
  byte of every PUT body, the write is refused and nothing lands.
* The path is taken: boto3's own PutObject handler must not fire, the fast path's counter
  must equal the writes; with ``fast_put: false`` the reverse.
* Listings: the fast path's pages (signed, checked by moto) give exactly what boto3's give,
  entry for entry (keys that need URL-encoding, sizes, ETags, times, rows for the catalog),
  page by page; a missing bucket is the same typed error; a region redirect hands over to
  boto3 mid-listing.
* Reads: the fast path's ranged GETs (signed, checked by moto) read what boto3 reads, range
  for range, and fail the same typed way (a missing object, a pinned version that changed, a
  start past the end); ranges of 1 MiB and more, and reads to the end, go through boto3.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.stores import open_store
from gateway_agent.stores.errors import (
    AccessDeniedError,
    ObjectNotFoundError,
    SourceChangedError,
    StoreError,
)
from gateway_agent.stores.s3 import S3Store
from gateway_agent.stores.s3.answers import crc32c_b64
from skyplane_ops.testing.emulators import BIN, _free_port, _server, environ
from tests.integration.http_proxy import CountingProxy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

pytestmark = [pytest.mark.emulator]
KEYS = ["plain", "dir/a b.txt", "pct%41+plus~tilde", "ü/日本/é", "a//b", "semi;colon=eq&amp"]
ALLOW_ALL = {"Effect": "Allow", "Action": "*", "Resource": "*"}
POLICY = {"Version": "2012-10-17", "Statement": [ALLOW_ALL]}


def _through_boto3(store: S3Store, operation: str) -> list[str]:
    """Records every request of ``operation`` that goes through boto3's pipeline."""
    seen: list[str] = []
    store._client.meta.events.register(
        f"before-send.s3.{operation}", lambda request, **_: seen.append(request.url)
    )
    return seen


def _boto3_puts(store: S3Store) -> list[str]:
    return _through_boto3(store, "PutObject")


@pytest.fixture(scope="module")
def signed_moto() -> Iterator[dict[str, str]]:
    """moto_server checking IAM auth and signatures; yields endpoint and a user's key pair."""
    import boto3

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    with _server(cmd, port, {"INITIAL_NO_AUTH_ACTION_COUNT": "3"}):
        root = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", **root)
        iam.create_user(UserName="fast")  # the three requests made without auth
        iam.put_user_policy(UserName="fast", PolicyName="all", PolicyDocument=json.dumps(POLICY))
        key = iam.create_access_key(UserName="fast")["AccessKey"]
        creds = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"]}
        creds["AWS_SECRET_ACCESS_KEY"] = key["SecretAccessKey"]
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket="signed")
        yield {"endpoint": endpoint, **creds}


def _open(endpoint: str, bucket: str, prefix: str = "pre/", **extra: Any) -> S3Store:
    store = open_store(
        f"s3://{bucket}/{prefix}", {"endpoint_url": endpoint, "region": "us-east-1", **extra}
    )
    assert isinstance(store, S3Store)
    return store


def test_fast_put_is_signed_as_s3_expects(signed_moto: dict[str, str]) -> None:
    creds = {k: v for k, v in signed_moto.items() if k.startswith("AWS_")}
    with environ(creds):
        store = _open(signed_moto["endpoint"], "signed")
        boto_puts = _boto3_puts(store)
        data = {k: f"body of {k}".encode() * 7 for k in KEYS}
        for key, body in data.items():
            info = store.write(key, body)
            assert info.checksums["crc32c"] == crc32c_b64(body)  # vouched, as boto3's answer
        assert store._fast is not None and store._fast.sent == len(KEYS)
        assert boto_puts == []
        assert sorted(o.key for o in store.list()) == sorted(KEYS)
        for key, body in data.items():
            assert store.read(key) == body
            assert store.head(key).checksums["crc32c"] == crc32c_b64(body)


def test_fast_get_reads_what_boto3_reads(signed_moto: dict[str, str]) -> None:
    creds = {k: v for k, v in signed_moto.items() if k.startswith("AWS_")}
    with environ(creds):
        fast = _open(signed_moto["endpoint"], "signed", "get/")  # its own names
        slow = _open(signed_moto["endpoint"], "signed", "get/", fast_get=False)
        boto_gets = _through_boto3(fast, "GetObject")
        bodies = {k: (k.encode() * 50)[:333] for k in KEYS}
        for key, body in bodies.items():
            fast.write(key, body)
        ranges = [(0, 333), (0, 1), (100, 50), (300, 100), (332, 1)]
        for key in KEYS:
            for start, length in ranges:
                got = fast.read(key, start, length)
                assert got == slow.read(key, start, length) == bodies[key][start : start + length]
            etag = fast.head(key).version
            assert etag is not None
            assert fast.read(key, 0, 333, etag) == bodies[key]
        assert fast.read("plain", 333, 10) == slow.read("plain", 333, 10) == b""  # past the end
        assert fast._fast_get is not None and boto_gets == []
        assert fast._fast_get.gets == len(KEYS) * (len(ranges) + 1) + 1
        listed = fast.head("plain").version
        assert listed is not None and fast.read("plain", 0, 5, listed) == bodies["plain"][:5]
        fast.write("plain", b"rewritten")
        for store in (fast, slow):
            with pytest.raises(SourceChangedError):
                store.read("plain", 0, 5, listed)
            with pytest.raises(ObjectNotFoundError):
                store.read("never-written", 0, 5)
        assert boto_gets == []
        # Big ranges and reads to the end stream through boto3.
        fast.write("big", b"z" * (1024 * 1024))
        assert fast.read("big", 0, 1024 * 1024) == b"z" * (1024 * 1024)
        assert fast.read("plain") == b"rewritten"
        assert len(boto_gets) == 2


def test_fast_head_answers_what_boto3_answers(signed_moto: dict[str, str]) -> None:
    """A HEAD per named key (``files_from``) skips boto3's pipeline, signed as S3 checks it."""
    creds = {k: v for k, v in signed_moto.items() if k.startswith("AWS_")}
    with environ(creds):
        fast = _open(signed_moto["endpoint"], "signed", "head/")
        slow = _open(signed_moto["endpoint"], "signed", "head/", fast_get=False)
        boto_heads = _through_boto3(fast, "HeadObject")
        for key in KEYS:
            fast.write(key, f"head of {key}".encode())
        for key in KEYS:
            assert fast.head(key) == slow.head(key)
            assert fast.head(key).checksums["crc32c"] == crc32c_b64(f"head of {key}".encode())
        with pytest.raises(ObjectNotFoundError):
            fast.head("never-written")
        assert fast._fast_get is not None and fast._fast_get.heads == 2 * len(KEYS) + 1
        assert boto_heads == []


def test_fast_list_gives_what_boto3_gives(signed_moto: dict[str, str]) -> None:
    from skyplane_ops.transfer.listrows import listed

    creds = {k: v for k, v in signed_moto.items() if k.startswith("AWS_")}
    keys = [*KEYS, "sp ace/x", "ctl\x01char", "q?uery#frag", "plus+/+"]
    with environ(creds):
        fast = _open(signed_moto["endpoint"], "signed", list_page_size=3)
        slow = _open(signed_moto["endpoint"], "signed", list_page_size=3, fast_list=False)
        for key in keys:
            fast.write(key, key.encode() * 3)
        boto_lists = _through_boto3(fast, "ListObjectsV2")
        got = list(fast.list())
        assert boto_lists == [] and fast._fast_list is not None
        assert fast._fast_list.pages == -(-len(set(keys)) // 3)  # pages of 3, all signed
        want = list(slow.list())
        assert got == want and sorted(o.key for o in got) == sorted(set(keys))
        assert all(o.modified is not None and o.version for o in got)
        # The catalog's rows: what ``listed`` makes of boto3's ObjectInfo, field for field.
        rows = [r for page in fast.list_rows() for r in page]
        slow_rows = [
            r
            for page in listed(
                _open(signed_moto["endpoint"], "signed", fast_list=False, list_page_size=3)
            )
            for r in page
        ]
        assert rows == slow_rows
        assert [o.key for o in fast.list("dir/")] == ["dir/a b.txt"]


def test_fast_list_of_a_missing_bucket_is_typed(moto_s3: Any) -> None:
    from gateway_agent.stores.errors import BucketNotFoundError

    store = _open(moto_s3.options["endpoint_url"], f"gone-{uuid.uuid4().hex[:8]}")
    with pytest.raises(BucketNotFoundError):
        list(store.list())
    assert store._fast_list is not None and store._fast_list.pages == 1


def test_fast_put_with_wrong_secret_is_refused(signed_moto: dict[str, str]) -> None:
    creds = {"AWS_ACCESS_KEY_ID": signed_moto["AWS_ACCESS_KEY_ID"]}
    creds["AWS_SECRET_ACCESS_KEY"] = "not-" + signed_moto["AWS_SECRET_ACCESS_KEY"]
    with environ(creds):
        store = _open(signed_moto["endpoint"], "signed", max_attempts=1)
        boto_puts = _boto3_puts(store)
        with pytest.raises(AccessDeniedError) as err:
            store.write("denied", b"x" * 100)
    assert err.value.code == "SignatureDoesNotMatch" and err.value.status == 403
    assert "not-" not in str(err.value)  # the message never carries the secret
    assert store._fast is not None and store._fast.sent == 1 and boto_puts == []


def test_fast_put_off_goes_through_boto3(moto_s3: Any) -> None:
    bucket = f"fastoff-{uuid.uuid4().hex[:8]}"
    moto_s3.make_bucket(bucket)
    store = _open(moto_s3.options["endpoint_url"], bucket, fast_put=False)
    boto_puts = _boto3_puts(store)
    store.write("k", b"v")
    assert store._fast is None and len(boto_puts) == 1
    on = _open(moto_s3.options["endpoint_url"], bucket)
    big = b"b" * (1024 * 1024)  # at the size limit: boto3 (with Expect: 100-continue)
    boto_big = _boto3_puts(on)
    on.write("big", big)
    assert on._fast is not None and on._fast.sent == 0 and len(boto_big) == 1
    assert on.read("big") == big


@pytest.fixture
def flipping_bench_server(tmp_path: Path) -> Iterator[tuple[str, CountingProxy]]:
    """The benchmark's S3 server (checks x-amz-checksum-crc32c) behind a proxy that flips the
    first byte of every PUT body to an object."""
    pytest.importorskip("uvicorn")
    from s3_server import run_s3_server

    def flip(method: str, path: str, body: bytes) -> bytes:
        if method == "PUT" and path.count("/") > 1 and body:
            return bytes([body[0] ^ 0x01]) + body[1:]
        return body

    with run_s3_server(tmp_path / "srv") as srv, CountingProxy(srv.endpoint, flip) as proxy:
        yield srv.endpoint, proxy


def test_corrupted_body_is_refused(flipping_bench_server: tuple[str, CountingProxy]) -> None:
    import boto3

    direct, proxy = flipping_bench_server
    keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
    boto3.client("s3", endpoint_url=direct, region_name="us-east-1", **keys).create_bucket(
        Bucket="flip"
    )
    with environ({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}):
        store = _open(proxy.endpoint, "flip", max_attempts=1)
        clean = _open(direct, "flip")
    boto_puts = _boto3_puts(store)
    with pytest.raises(StoreError) as err:
        store.write("bad", b"0123456789" * 100)
    assert err.value.code == "BadDigest" and err.value.status == 400
    assert store._fast is not None and store._fast.sent == 1 and boto_puts == []
    assert ("PUT", "/flip/pre/bad") in proxy.requests
    with pytest.raises(ObjectNotFoundError):
        clean.head("bad")
    assert clean.write("good", b"fine").checksums["crc32c"] == crc32c_b64(b"fine")
    assert clean.read("good") == b"fine"


class ScriptedS3:
    """An HTTP server on loopback answering PUTs from a script: one (status, code) per request
    (then 200 with the body's CRC32C, as S3 does); records each request's User-Agent."""

    def __init__(self, script: list[tuple[int, str]]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.agents: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # ListObjectsV2: the scripted error, else one object
                outer.agents.append(self.headers.get("User-Agent", ""))
                status, code = script.pop(0) if script else (200, "")
                self.send_response(status)
                out = (
                    b"<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
                    b"<Contents><Key>pre/a%20b"
                    b"</Key><Size>3</Size><ETag>&quot;e&quot;</ETag><LastModified>"
                    b"2026-01-02T03:04:05.678Z</LastModified></Contents></ListBucketResult>"
                    if status == 200
                    else f"<Error><Code>{code}</Code><Message>m</Message></Error>".encode()
                )
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.agents.append(self.headers.get("User-Agent", ""))
                status, code = script.pop(0) if script else (200, "")
                out = b""
                self.send_response(status)
                if status == 200:
                    self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
                    self.send_header("x-amz-checksum-crc32c", crc32c_b64(body))
                else:
                    out = f"<Error><Code>{code}</Code><Message>m</Message></Error>".encode()
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def _scripted(script: list[tuple[int, str]]) -> Iterator[ScriptedS3]:
    server = ScriptedS3(script)
    try:
        yield server
    finally:
        server.close()


def test_throttling_is_retried_on_the_fast_path() -> None:
    with _scripted([(503, "SlowDown"), (500, "InternalError")]) as server:
        with environ({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}):
            store = _open(server.endpoint, "retry", backoff_seconds=0.01)
        info = store.write("obj", b"payload")
        assert info.checksums["crc32c"] == crc32c_b64(b"payload")
        assert store._fast is not None and store._fast.sent == 3
        assert all("fast-put" in agent for agent in server.agents)


def test_region_redirect_hands_over_to_boto3() -> None:
    with _scripted([(400, "AuthorizationHeaderMalformed")]) as server:
        with environ({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}):
            store = _open(server.endpoint, "moved")
        boto_puts = _boto3_puts(store)
        store.write("a", b"one")
        store.write("b", b"two")
        assert store._fast is None and len(boto_puts) == 2  # boto3 from the redirect on
        assert len(server.agents) == 3 and "fast-put" in server.agents[0]


def test_list_redirect_hands_over_to_boto3() -> None:
    with _scripted([(301, "PermanentRedirect")]) as server:
        with environ({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}):
            store = _open(server.endpoint, "moved")
        boto_lists = _through_boto3(store, "ListObjectsV2")
        got = list(store.list())
        assert [(o.key, o.size, o.etag) for o in got] == [("a b", 3, "e")]
        assert store._fast_list is None and len(boto_lists) == 1
        assert len(server.agents) == 2 and "fast-put" in server.agents[0]


def test_keys_are_decoded_only_when_the_server_encoded_them() -> None:
    from gateway_agent.stores.s3.fast import parse_list_page

    page = (
        b"<ListBucketResult>{enc}<IsTruncated>true</IsTruncated><NextContinuationToken>t+1"
        b"</NextContinuationToken><Contents><Key>a%2Bb+c</Key><Size>1</Size></Contents>"
        b"</ListBucketResult>"
    )
    encoded = page.replace(b"{enc}", b"<EncodingType>url</EncodingType>")
    assert parse_list_page(encoded) == ([("a+b c", 1, None, None)], "t+1")
    assert parse_list_page(page.replace(b"{enc}", b"")) == ([("a%2Bb+c", 1, None, None)], "t+1")


def test_without_httptools_the_fast_path_uses_urllib3(
    moto_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_agent.stores.s3 import rawhttp

    monkeypatch.setattr(rawhttp, "available", False)
    bucket = f"nohttptools-{uuid.uuid4().hex[:8]}"
    moto_s3.make_bucket(bucket)
    store = _open(moto_s3.options["endpoint_url"], bucket, list_page_size=1)
    assert store._fast is not None and store._fast._raw is None
    boto_puts, boto_lists = _boto3_puts(store), _through_boto3(store, "ListObjectsV2")
    for key in ("a", "b c"):
        assert store.write(key, key.encode()).checksums["crc32c"] == crc32c_b64(key.encode())
    assert [o.key for o in store.list()] == ["a", "b c"]
    assert store._fast.sent == 2 and store._fast.pages == 2 and boto_puts == boto_lists == []
