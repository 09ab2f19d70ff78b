"""Tampering on the wire between real gateways and on the control channel (issue 36).

An attacker on the path is a small TCP proxy in the test (the only part not real: it stands for
the network). On a data connection it parses the sender's stream and changes one chunk: in a
clear frame it flips a payload byte and recomputes the CRC32C (header and metadata), as anyone
on the path can; in a sealed frame it flips a byte of a record. On the control channel it
alters, strips or replays the gateway's answers. Nothing altered may be written or used.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway_agent import wire
from gateway_agent.client import GatewayClient, GatewayError
from gateway_agent.stores.checksum import crc32c
from skyplane_ops import cli
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.testing.gateways import start_agent
from skyplane_ops.testing.transfer import (
    DST,
    SRC,
    copy_dirs,
    local_fleet,
    make_plan,
    read_tree,
    write_dataset,
)
from skyplane_ops.transfer import DispatchOptions

MiB = 1024 * 1024


# ---- a proxy that changes one data frame ------------------------------------------------------


class FrameProxy:
    """Forwards data connections to ``port``; changes the first chunk frame it sees once."""

    def __init__(self, port: int, mode: str) -> None:
        self.port_to, self.mode = port, mode
        self.tampered = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.port_to))
            threading.Thread(target=self._pipe, args=(up, conn), daemon=True).start()
            threading.Thread(target=self._frames, args=(conn, up), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while piece := src.recv(1 << 16):
                dst.sendall(piece)
        except OSError:
            pass
        FrameProxy._shut(src, dst)

    def _take(self) -> bool:
        with self._lock:
            first = self.tampered == 0
            self.tampered += first
            return first

    def _frames(self, src: socket.socket, dst: socket.socket) -> None:
        """The sender's side: its handshake answer as is, then frame by frame."""
        try:
            head = bytes(wire.recv_exact(src, wire.CHALLENGE_BYTES + 2))
            dst.sendall(head + bytes(wire.recv_exact(src, head[-1] + 32)))
            while True:
                hdr = bytes(wire.recv_exact(src, wire.HEADER.size))
                kind, flags, res, meta_len, payload_len, raw_len, crc, seq = wire.HEADER.unpack(hdr)
                if flags & wire.FRAME_SEALED:
                    body = bytearray(wire.recv_exact(src, payload_len))
                    if self.mode == "sealed" and self._take():
                        body[meta_len + wire.TAG + 1000] ^= 0x01  # in the first body record
                    dst.sendall(hdr + body)
                    continue
                meta_b = bytes(wire.recv_exact(src, meta_len))
                payload = bytearray(wire.recv_exact(src, payload_len))
                if self.mode == "clear" and payload_len and self._take():
                    payload[payload_len // 2] ^= 0xFF
                    crc = crc32c(payload)  # what a CRC32C-only frame cannot stop
                    meta = json.loads(meta_b)
                    meta["crcs"] = [crc]  # one segment per chunk in these tests
                    meta_b = json.dumps(meta, separators=(",", ":")).encode()
                    hdr = wire.HEADER.pack(
                        kind, flags, res, len(meta_b), payload_len, raw_len, crc, seq
                    )
                dst.sendall(hdr + meta_b + payload)
        except (OSError, wire.ConnectionClosed):
            pass
        finally:
            self._shut(src, dst)

    @staticmethod
    def _shut(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def proxied(fleet: GatewayFleet, region: str, mode: str) -> Iterator[tuple[GatewayFleet, Any]]:
    """``fleet`` with the data port of ``region``'s gateway behind a ``FrameProxy``."""
    (gw,) = fleet.in_region(region)
    proxy = FrameProxy(gw.data_port, mode)
    gateways = [dataclasses.replace(g, data_port=proxy.port) if g is gw else g
                for g in fleet.gateways]  # fmt: skip
    try:
        yield dataclasses.replace(fleet, gateways=gateways), proxy
    finally:
        proxy.close()


@pytest.mark.parametrize("mode", ["clear", "sealed"])
def test_a_frame_changed_on_the_wire_is_refused_and_sent_again(
    dirs: tuple[Path, Path, Path], mode: str
) -> None:
    """Clear (the default on loopback: frames tagged end to end) and sealed (AES-GCM) hops
    between two real gateways: the changed chunk is refused at the sink, never written, and
    the control plane sends it again; the copy ends byte-identical."""
    src, dst, journal = dirs
    data = write_dataset(src, {"big.bin": 4 * MiB})
    plan = make_plan([SRC, DST])
    opts = DispatchOptions(connections=2, stall_timeout=60)  # the default: clear on loopback
    if mode == "sealed":
        opts.encrypt = True
    with local_fleet(plan, hooks=False) as (_, fleet), proxied(fleet, DST, mode) as (via, proxy):
        result = copy_dirs(plan, via, (src, dst, journal), part_size=MiB, dispatch=opts)
    assert proxy.tampered == 1
    assert read_tree(dst) == data
    assert result.verified and result.chunks_resent >= 1


# ---- a proxy that changes control answers -------------------------------------------------------


def _answer_proxy(port: int, change: Callable[[bytes, bytes], bytes]) -> socket.socket:
    """A control-API proxy in front of ``port``: each answer goes through ``change(request
    head, answer)`` (one request per connection, as the control API speaks)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def one(conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", port)) as up:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(1 << 16)
            head = request.split(b"\r\n\r\n", 1)[0]
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
            while len(request) < len(head) + 4 + length:
                request += conn.recv(1 << 16)
            up.sendall(request)
            answer = b""
            while piece := up.recv(1 << 16):
                answer += piece
            conn.sendall(change(head, answer))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener


def _hello(head: bytes) -> bool:
    return head.startswith(b"GET /v1/hello")


def _rewrite(answer: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """The answer with its JSON body changed by ``change`` (Content-Length kept true)."""
    top, _, body = answer.partition(b"\r\n\r\n")
    data = json.loads(body)
    change(data)
    new = json.dumps(data).encode()
    lines = [h for h in top.split(b"\r\n") if not h.lower().startswith(b"content-length")]
    return b"\r\n".join([*lines, b"Content-Length: %d" % len(new)]) + b"\r\n\r\n" + new


def _alter(head: bytes, answer: bytes) -> bytes:
    return answer if _hello(head) else _rewrite(answer, lambda d: d.update(forged=True))


def _strip(head: bytes, answer: bytes) -> bytes:
    if _hello(head):
        return answer
    top, _, body = answer.partition(b"\r\n\r\n")
    lines = [h for h in top.split(b"\r\n") if not h.lower().startswith(b"x-sky-answer")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _alter_hello(head: bytes, answer: bytes) -> bytes:
    if not _hello(head):
        return answer
    return _rewrite(answer, lambda d: d.update(epoch="0" * len(d["epoch"])))


class _Replay:
    """Answers every health request with the first health answer it saw."""

    def __init__(self) -> None:
        self.first: bytes | None = None

    def __call__(self, head: bytes, answer: bytes) -> bytes:
        if not head.startswith(b"GET /v1/health"):
            return answer
        if self.first is None:
            self.first = answer
        return self.first


def test_control_answers_changed_on_the_way_are_refused(tmp_path: Path) -> None:
    agent = start_agent(tmp_path)
    proxies: list[socket.socket] = []
    try:

        def client(change: Callable[[bytes, bytes], bytes]) -> GatewayClient:
            proxies.append(_answer_proxy(agent.control_port, change))
            port = int(proxies[-1].getsockname()[1])
            return GatewayClient("127.0.0.1", port, agent.secret, attempts=1)

        assert client(lambda _h, a: a).health()["region"] == "test:f"  # a proxy as such is fine
        for change, what in ((_alter, "mis-signed"), (_strip, "unsigned"),
                             (_alter_hello, "mis-signed")):  # fmt: skip
            with pytest.raises(GatewayError, match=what) as refused:
                client(change).health()
            assert refused.value.status == 401
        replay = client(_Replay())
        replay.health()  # the first answer, genuine
        with pytest.raises(GatewayError, match="mis-signed"):
            replay.health()  # the same answer to a new request
        with pytest.raises(GatewayError, match="mis-signed"):
            client(_alter).renew_lease(30)  # a changed answer is never used
    finally:
        for p in proxies:
            p.close()
        agent.stop()


# ---- the default of cp across providers ----------------------------------------------------------


def test_cp_across_providers_seals_every_hop_between_providers_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``skyplane-ops cp`` (in this process, local backend) from an Azure to a GCP region: the
    job spec every gateway is started with seals each hop between providers; ``--encrypt
    none`` seals none. The start request is observed on its way (a spy that calls through)."""
    monkeypatch.setenv("SKYPLANE_OPS_HOME", str(tmp_path / "home"))
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"a.bin": 2 * MiB, "b": 100})
    specs: list[dict[str, Any]] = []
    real = GatewayClient.start_job

    def spy(self: GatewayClient, spec: dict[str, Any]) -> dict[str, Any]:
        specs.append(spec)
        return real(self, spec)

    monkeypatch.setattr(GatewayClient, "start_job", spy)
    regions = ["--src-region", "azure:canadacentral", "--dst-region", "gcp:asia-northeast1"]
    for extra, sealed in (([], True), (["--encrypt", "none"], False)):
        specs.clear()
        (dst / str(sealed)).mkdir(parents=True)
        argv = ["cp", str(src), str(dst / str(sealed)), *regions, "--no-progress", *extra]
        assert cli.main(argv) == 0
        assert read_tree(dst / str(sealed)) == data
        hops = {h: v["encrypt"] for s in specs for h, v in s["hops"].items()}
        across = {h for h in hops if h.split(":")[0] != h.split(">")[1].split(":")[0]}
        assert specs and across, hops
        assert {h: hops[h] for h in across} == dict.fromkeys(across, sealed)
