"""A minimal S3-compatible server for benchmarks only: fast enough that latency, not it, counts.

moto serves 50-100 requests/s here, s3rver (npm) about 400-700: both bound any client long before
20 ms of request latency does. This one answers a few thousand per second on one core, so a
benchmark behind ``latency_proxy`` measures how many requests a client keeps in flight.

It is a **benchmark fixture, not an S3 emulator for tests of S3 semantics**: written for this
repository (no code taken from elsewhere), one process, one event loop (uvicorn + httptools +
uvloop, a raw ASGI app). Objects are files under ``--root/<bucket>/`` (the key URL-quoted into
one file name, written to a temporary file and renamed); sizes, ETags (MD5), CRC32C and
modification times are kept in memory and rebuilt from the files at start. Signatures and
credentials are not checked (any well-formed request is accepted), path-style addressing only.

Supported: ListBuckets, Create/Head/Delete bucket, ListObjects v1 and v2 (prefix, delimiter,
marker / continuation token / start-after, max-keys, ``encoding-type=url``), PutObject
(``Content-MD5`` and ``x-amz-checksum-crc32c`` are checked, BadDigest on a mismatch; the CRC32C
is stored and echoed), GetObject (``Range``, ``If-Match``), HeadObject (``x-amz-checksum-mode:
ENABLED`` reports the full-object CRC32C), CopyObject, DeleteObject. Anything else (multipart,
aws-chunked bodies, versioning) answers 501 NotImplemented.

Run: ``python benchmarks/s3_server.py --root DIR --port N`` (or :func:`run_s3_server`).
"""

from __future__ import annotations

import argparse
import base64
import bisect
import collections
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote
from xml.sax.saxutils import escape

from crc32c import crc32c

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
XMLNS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


@dataclass
class Obj:
    size: int
    etag: str  # hex MD5, unquoted
    mtime: float
    crc32c: str | None  # base64 big-endian, as S3 reports it; None when not sent on upload


class S3Error(Exception):
    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.status, self.code, self.message = status, code, message or code


class Buckets:
    """The objects of every bucket: files on disk, their metadata and sorted keys in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.meta: dict[str, dict[str, Obj]] = {}
        self.keys: dict[str, list[str]] = {}
        root.mkdir(parents=True, exist_ok=True)
        for bucket in sorted(p.name for p in root.iterdir() if p.is_dir()):
            self.meta[bucket], self.keys[bucket] = {}, []
            for f in (root / bucket).iterdir():
                if not f.name.startswith(".tmp-"):
                    data = f.read_bytes()
                    self._index(bucket, unquote(f.name), data, None, f.stat().st_mtime)

    def _index(self, bucket: str, key: str, data: bytes, crc: str | None, mtime: float) -> Obj:
        obj = Obj(len(data), hashlib.md5(data).hexdigest(), mtime, crc)
        if key not in self.meta[bucket]:
            bisect.insort(self.keys[bucket], key)
        self.meta[bucket][key] = obj
        return obj

    def path(self, bucket: str, key: str) -> Path:
        return self.root / bucket / quote(key, safe="")

    def objects(self, bucket: str) -> dict[str, Obj]:
        if bucket not in self.meta:
            raise S3Error(404, "NoSuchBucket", f"bucket {bucket} does not exist")
        return self.meta[bucket]

    def get(self, bucket: str, key: str) -> Obj:
        obj = self.objects(bucket).get(key)
        if obj is None:
            raise S3Error(404, "NoSuchKey", f"{key} does not exist")
        return obj

    def put(self, bucket: str, key: str, data: bytes, crc: str | None) -> Obj:
        self.objects(bucket)
        if not key or len(key.encode()) > 1024 or len(quote(key, safe="")) > 255:
            raise S3Error(400, "KeyTooLongError", "key too long for this benchmark server")
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.root / bucket)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path(bucket, key))
        return self._index(bucket, key, data, crc, time.time())

    def delete(self, bucket: str, key: str) -> None:
        if self.objects(bucket).pop(key, None) is not None:
            keys = self.keys[bucket]
            del keys[bisect.bisect_left(keys, key)]
            with contextlib.suppress(FileNotFoundError):
                self.path(bucket, key).unlink()


def _http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def _crc_b64(data: bytes) -> str:
    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()


def _kind(method: str, bucket: str, key: str) -> str:
    """A request's kind for the counts: ``list`` (a GET of a bucket), ``head``, ``get``..."""
    if not bucket:
        return "list_buckets"
    if not key:
        return "list" if method == "GET" else f"bucket_{method.lower()}"
    return method.lower()


def bench_stats(endpoint: str) -> dict[str, int]:
    """The server's request counts so far (``App.counts``)."""
    import urllib.request

    with urllib.request.urlopen(f"{endpoint}/_bench/stats", timeout=10) as answer:
        return dict(json.loads(answer.read()))


class App:
    """The ASGI application: one request at a time per connection, all in one event loop."""

    def __init__(self, root: Path) -> None:
        self.store = Buckets(root)
        # Requests by kind (list, head, get, put, delete, ...), read at ``GET /_bench/stats``
        # (an invalid bucket name, so never a bucket): what a benchmark counts.
        self.counts: collections.Counter[str] = collections.Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                await send({"type": f"{kind}.complete"})  # lifespan.startup / .shutdown
                if kind == "lifespan.shutdown":
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode(), True).items()}
        try:
            status, out_headers, out = self.handle(scope, headers, query, body)
        except S3Error as exc:
            status, out_headers = exc.status, {"content-type": "application/xml"}
            out = (
                f"<Error><Code>{exc.code}</Code><Message>{escape(exc.message)}</Message></Error>"
            ).encode()
        if scope["method"] == "HEAD":
            out_headers.setdefault("content-length", str(len(out)))
            out = b""
        else:
            out_headers["content-length"] = str(len(out))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in out_headers.items()],
            }
        )
        await send({"type": "http.response.body", "body": out})

    def handle(
        self, scope: Scope, headers: dict[str, str], query: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        method = scope["method"]
        if "aws-chunked" in headers.get("content-encoding", "") or {
            "uploads",
            "uploadId",
            "versionId",
            "delete",
        } & set(query):
            raise S3Error(501, "NotImplemented", "not supported by this benchmark server")
        bucket, _, key = unquote(scope["raw_path"].decode()).lstrip("/").partition("/")
        if bucket == "_bench" and key == "stats":
            return 200, {"content-type": "application/json"}, json.dumps(self.counts).encode()
        self.counts[_kind(method, bucket, key)] += 1
        if not bucket:
            return self.list_buckets()
        if not key:
            return self.bucket_op(method, bucket, query)
        if method == "PUT":
            if "x-amz-copy-source" in headers:
                return self.copy(bucket, key, headers["x-amz-copy-source"])
            return self.put(bucket, key, headers, body)
        if method in ("GET", "HEAD"):
            return self.get(bucket, key, headers, method == "GET")
        if method == "DELETE":
            self.store.objects(bucket)
            self.store.delete(bucket, key)
            return 204, {}, b""
        raise S3Error(405, "MethodNotAllowed")

    def list_buckets(self) -> tuple[int, dict[str, str], bytes]:
        names = "".join(
            f"<Bucket><Name>{escape(b)}</Name><CreationDate>{_iso(0)}</CreationDate></Bucket>"
            for b in sorted(self.store.meta)
        )
        xml = f"<ListAllMyBucketsResult {XMLNS}><Buckets>{names}</Buckets></ListAllMyBucketsResult>"
        return 200, {"content-type": "application/xml"}, xml.encode()

    def bucket_op(
        self, method: str, bucket: str, query: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        s = self.store
        if method == "PUT":
            if bucket not in s.meta:
                (s.root / bucket).mkdir(exist_ok=True)
                s.meta[bucket], s.keys[bucket] = {}, []
            return 200, {"location": f"/{bucket}"}, b""
        if method == "DELETE":
            if s.objects(bucket):
                raise S3Error(409, "BucketNotEmpty")
            del s.meta[bucket], s.keys[bucket]
            (s.root / bucket).rmdir()
            return 204, {}, b""
        s.objects(bucket)
        if method == "HEAD":
            return 200, {}, b""
        if method == "GET" and not ({"location", "versioning", "acl", "policy"} & set(query)):
            return self.list_objects(bucket, query)
        if method == "GET" and "location" in query:
            return 200, {}, f"<LocationConstraint {XMLNS}/>".encode()
        raise S3Error(501, "NotImplemented", "not supported by this benchmark server")

    def list_objects(self, bucket: str, q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        v2 = q.get("list-type") == "2"
        prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
        max_keys = max(0, min(1000, int(q.get("max-keys", "1000"))))
        after = (
            (q.get("continuation-token") or q.get("start-after", "")) if v2 else q.get("marker", "")
        )
        enc = (lambda k: quote(k, safe="/")) if q.get("encoding-type") == "url" else escape
        keys, meta = self.store.keys[bucket], self.store.meta[bucket]
        i = bisect.bisect_right(keys, after) if after else 0
        i = max(i, bisect.bisect_left(keys, prefix))
        rows: list[str] = []
        prefixes: list[str] = []
        last = ""
        truncated = False
        while i < len(keys) and keys[i].startswith(prefix):
            if len(rows) + len(prefixes) >= max_keys:
                truncated = True
                break
            key = keys[i]
            cut = key.find(delim, len(prefix)) if delim else -1
            if cut >= 0:
                common = key[: cut + len(delim)]
                prefixes.append(f"<CommonPrefixes><Prefix>{enc(common)}</Prefix></CommonPrefixes>")
                # past every key under this common prefix
                i = bisect.bisect_left(keys, common[:-1] + chr(ord(common[-1]) + 1))
                last = keys[i - 1]
                continue
            o = meta[key]
            crc = "<ChecksumAlgorithm>CRC32C</ChecksumAlgorithm>" if o.crc32c else ""
            rows.append(
                f"<Contents><Key>{enc(key)}</Key><LastModified>{_iso(o.mtime)}</LastModified>"
                f'<ETag>"{o.etag}"</ETag><Size>{o.size}</Size>{crc}'
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
            last = key
            i += 1
        head = f"<Name>{escape(bucket)}</Name><Prefix>{enc(prefix)}</Prefix>"
        head += f"<MaxKeys>{max_keys}</MaxKeys><IsTruncated>{str(truncated).lower()}</IsTruncated>"
        if delim:
            head += f"<Delimiter>{enc(delim)}</Delimiter>"
        if q.get("encoding-type") == "url":
            head += "<EncodingType>url</EncodingType>"
        if v2:
            head += f"<KeyCount>{len(rows) + len(prefixes)}</KeyCount>"
            if truncated:
                head += f"<NextContinuationToken>{escape(last)}</NextContinuationToken>"
        elif truncated:
            head += f"<Marker>{enc(after)}</Marker><NextMarker>{enc(last)}</NextMarker>"
        kind = "ListBucketResult"
        xml = f"<{kind} {XMLNS}>{head}{''.join(rows)}{''.join(prefixes)}</{kind}>"
        return 200, {"content-type": "application/xml"}, xml.encode()

    def put(
        self, bucket: str, key: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        md5 = headers.get("content-md5")
        if md5 is not None and base64.b64decode(md5) != hashlib.md5(body).digest():
            raise S3Error(400, "BadDigest", "the Content-MD5 does not match the body")
        crc = headers.get("x-amz-checksum-crc32c")
        if crc is not None and crc != _crc_b64(body):
            raise S3Error(400, "BadDigest", "the CRC32C you specified did not match the body")
        obj = self.store.put(bucket, key, body, crc)
        out = {"etag": f'"{obj.etag}"'}
        if crc:
            out |= {"x-amz-checksum-crc32c": crc, "x-amz-checksum-type": "FULL_OBJECT"}
        return 200, out, b""

    def copy(self, bucket: str, key: str, source: str) -> tuple[int, dict[str, str], bytes]:
        sb, _, sk = unquote(source).lstrip("/").partition("/")
        src = self.store.get(sb, sk)
        data = self.store.path(sb, sk).read_bytes()
        obj = self.store.put(bucket, key, data, src.crc32c)
        xml = f'<CopyObjectResult><LastModified>{_iso(obj.mtime)}</LastModified><ETag>"{obj.etag}"'
        xml += "</ETag></CopyObjectResult>"
        return 200, {"content-type": "application/xml"}, xml.encode()

    def get(
        self, bucket: str, key: str, headers: dict[str, str], body: bool
    ) -> tuple[int, dict[str, str], bytes]:
        obj = self.store.get(bucket, key)
        match = headers.get("if-match")
        if match is not None and match.strip('"') != obj.etag:
            raise S3Error(412, "PreconditionFailed", "If-Match did not match")
        out = {
            "etag": f'"{obj.etag}"',
            "last-modified": _http_date(obj.mtime),
            "accept-ranges": "bytes",
            "content-type": "binary/octet-stream",
            "content-length": str(obj.size),
        }
        if obj.crc32c and headers.get("x-amz-checksum-mode", "").upper() == "ENABLED":
            out |= {"x-amz-checksum-crc32c": obj.crc32c, "x-amz-checksum-type": "FULL_OBJECT"}
        rng = headers.get("range")
        start, end = 0, obj.size - 1
        if rng:
            lo, _, hi = rng.removeprefix("bytes=").partition("-")
            start = int(lo) if lo else max(0, obj.size - int(hi))
            end = min(obj.size - 1, int(hi)) if lo and hi else obj.size - 1
            if start >= obj.size:
                raise S3Error(416, "InvalidRange", "the range is past the end of the object")
            out.pop("x-amz-checksum-crc32c", None)
            out |= {"content-range": f"bytes {start}-{end}/{obj.size}"}
            out["content-length"] = str(end - start + 1)
        if not body:
            return (206 if rng else 200), out, b""
        with open(self.store.path(bucket, key), "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        return (206 if rng else 200), out, data


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Until something listens on ``port`` (or the process died: RuntimeError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s")


@contextlib.contextmanager
def serve_process(
    cmd: list[str], port: int, timeout: float = 30.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` (which listens on ``port``) as its own process group; stop it on exit."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port, proc, timeout)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Server:
    """A running server: where it listens and its process id (to read its CPU time)."""

    endpoint: str
    address: tuple[str, int]
    pid: int


@contextlib.contextmanager
def run_s3_server(root: Path | None = None, timeout: float = 30.0) -> Iterator[Server]:
    """This server on a free loopback port (data under ``root`` or a temporary directory);
    ``timeout``: for its start, which reads every object already under ``root``."""
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="s3-bench-")))
        port = free_port()
        cmd = [sys.executable, __file__, "--root", str(root), "--port", str(port)]
        proc = stack.enter_context(serve_process(cmd, port, timeout))
        yield Server(f"http://127.0.0.1:{port}", ("127.0.0.1", port), proc.pid)


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        App(args.root),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level="warning",
        access_log=False,
        backlog=4096,
        timeout_keep_alive=120,
    )


if __name__ == "__main__":
    main()
