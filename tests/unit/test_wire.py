"""Wire format and authentication on real socket pairs (no gateway process needed)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import google_crc32c
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway_agent import auth, wire
from gateway_agent.stores import checksum
from gateway_agent.stores.checksum import crc32c

SECRET = b"s" * 32


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    return a, b


def _handshake(
    server_secret: bytes, client_secret: bytes, encrypt: bool
) -> tuple[Any, Any, socket.socket, socket.socket]:
    srv, cli = _pair()
    out: dict[str, Any] = {}

    def serve() -> None:
        try:
            out["s"] = wire.server_handshake(srv, server_secret)
        except wire.HandshakeError as exc:
            out["s"] = exc
            srv.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        c: Any = wire.client_handshake(cli, client_secret, encrypt)
    except wire.HandshakeError as exc:
        c = exc
    t.join(5)
    return out["s"], c, srv, cli


@pytest.mark.parametrize("encrypt", [False, True])
def test_frames_round_trip(encrypt: bool) -> None:
    s_sess, c_sess, srv, cli = _handshake(SECRET, SECRET, encrypt)
    payload = bytes(range(256)) * 1000
    crc = google_crc32c.value(payload)
    with srv, cli:
        for compressor in (None, zstandard.ZstdCompressor()):
            sender = threading.Thread(
                target=wire.send_frame,
                args=(cli, c_sess, {"job": "j", "chunk": 7}, payload, crc, compressor),
            )
            sender.start()  # the payload exceeds the socket buffers: send while reading
            header = wire.read_header(srv)
            frame = wire.read_body(srv, s_sess, header, zstandard.ZstdDecompressor())
            assert frame.meta == {"job": "j", "chunk": 7}
            sender.join(5)
            assert bytes(frame.payload) == payload and frame.crc32c == crc


def test_wrong_secret_is_refused_both_ways() -> None:
    s_sess, c_sess, srv, cli = _handshake(SECRET, b"x" * 32, False)
    srv.close()
    cli.close()
    assert isinstance(s_sess, wire.HandshakeError)
    assert isinstance(c_sess, wire.HandshakeError)


def test_sealed_frames_detect_tampering() -> None:
    s_sess, c_sess, srv, cli = _handshake(SECRET, SECRET, True)
    with srv, cli:
        wire.send_frame(cli, c_sess, {"chunk": 1}, b"hello world" * 100, 0)
        header = wire.read_header(srv)
        _flags, _meta_len, payload_len, _raw_len, _crc, _seq, _kind = header
        sealed = bytearray(wire.recv_exact(srv, payload_len))
        sealed[5] ^= 1
        # Replay the tampered bytes through a fresh pair with the same session state.
        a, b = _pair()
        with a, b:
            a.sendall(sealed)
            with pytest.raises(Exception):  # noqa: B017 - cryptography's InvalidTag
                wire.read_body(b, s_sess, header)


def test_stranger_sending_garbage_is_dropped_fast() -> None:
    srv, cli = _pair()
    with srv, cli:
        cli.sendall(b"GET / HTTP/1.1\r\n\r\n" + b"\0" * 100)
        t0 = time.monotonic()
        with pytest.raises(wire.HandshakeError):
            wire.server_handshake(srv, SECRET)
        assert time.monotonic() - t0 < wire.HANDSHAKE_TIMEOUT_S + 1


def test_the_sender_names_its_gateway_and_the_proof_covers_the_name() -> None:
    srv, cli = _pair()
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(s=wire.server_handshake(srv, SECRET)))
    t.start()
    wire.client_handshake(cli, SECRET, encrypt=False, sender="gw-a-1")
    t.join(5)
    srv.close()
    cli.close()
    assert out["s"].peer == "gw-a-1"

    # A sender that swaps the name after proving another one is refused.
    srv, cli = _pair()
    with srv, cli:
        errors: list[Exception] = []

        def serve() -> None:
            try:
                wire.server_handshake(srv, SECRET)
            except wire.HandshakeError as exc:
                errors.append(exc)

        t = threading.Thread(target=serve)
        t.start()
        hello = bytes(wire.recv_exact(cli, len(wire.MAGIC) + wire.CHALLENGE_BYTES))
        challenge_c = b"c" * wire.CHALLENGE_BYTES
        proof = auth.mac(SECRET, b"client", hello[len(wire.MAGIC) :], challenge_c, b"\0", b"gw-a")
        cli.sendall(challenge_c + bytes([0, 4]) + b"gw-b" + proof)
        t.join(5)
        assert errors and "does not know the transfer secret" in str(errors[0])


def test_a_gateway_of_another_wire_version_is_named_as_such() -> None:
    srv, cli = _pair()
    with srv, cli:
        srv.sendall(b"SKYG\x01" + b"x" * wire.CHALLENGE_BYTES)
        named = f"wire version 1, this one {wire.WIRE_VERSION}"
        with pytest.raises(wire.HandshakeError, match=named):
            wire.client_handshake(cli, SECRET, encrypt=False)


def test_control_signatures_reject_replay_and_tamper() -> None:
    v = auth.RequestVerifier(SECRET)
    body = b'{"a": 1}'
    headers = {k.lower(): x for k, x in auth.sign_request(SECRET, "POST", "/v1/jobs", body).items()}
    assert v.verify("POST", "/v1/jobs", body, headers)
    assert not v.verify("POST", "/v1/jobs", body, headers)  # replayed nonce
    h2 = {k.lower(): x for k, x in auth.sign_request(SECRET, "POST", "/v1/jobs", body).items()}
    assert not v.verify("POST", "/v1/jobs", b'{"a": 2}', h2)  # body changed
    h3 = {k.lower(): x for k, x in auth.sign_request(b"other", "GET", "/v1/health", b"").items()}
    assert not v.verify("GET", "/v1/health", b"", h3)
    old = {k.lower(): x for k, x in auth.sign_request(SECRET, "GET", "/v1/health", b"").items()}
    old["x-sky-timestamp"] = str(time.time() - 3600)
    assert not v.verify("GET", "/v1/health", b"", old)


def test_seal_round_trip_and_tamper() -> None:
    token = auth.seal(SECRET, b'{"key": "value"}')
    assert auth.unseal(SECRET, token) == b'{"key": "value"}'
    with pytest.raises(Exception):  # noqa: B017 - InvalidTag
        auth.unseal(b"y" * 32, token)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 50))
def test_crc32c_any_buffer_matches_google_crc32c(data: bytes, cut: int) -> None:
    expected = google_crc32c.value(data)
    assert crc32c(data) == expected
    assert crc32c(bytearray(data)) == expected
    assert crc32c(memoryview(bytearray(data))) == expected
    assert crc32c(memoryview(data)) == expected  # read-only view: the copying path
    head, tail = data[:cut], data[cut:]
    assert crc32c(tail, crc32c(head)) == expected
    # The google-crc32c fallback (hosts without the ``crc32c`` accelerator) agrees too.
    for buf in (data, bytearray(data), memoryview(bytearray(data)), memoryview(data)):
        assert checksum._google(buf) == expected
    assert checksum._google(bytearray(tail), checksum._google(head)) == expected


def test_crc32c_uses_the_accelerator_when_installed() -> None:
    pytest.importorskip("crc32c")
    assert checksum.IMPLEMENTATION == "crc32c"


def test_control_signatures_name_the_gateways_boot_epoch() -> None:
    """A request signed for an earlier process of a gateway (another epoch) is refused."""
    now = auth.RequestVerifier(SECRET, "gw", epoch="e2")

    def signed(epoch: str) -> dict[str, str]:
        headers = auth.sign_request(SECRET, "POST", "/v1/shutdown", b"{}", "gw", epoch)
        return {k.lower(): x for k, x in headers.items()}

    assert not now.verify("POST", "/v1/shutdown", b"{}", signed("e1"))
    forged = {**signed("e1"), "x-sky-epoch": "e2"}  # the epoch is covered by the signature
    assert not now.verify("POST", "/v1/shutdown", b"{}", forged)
    assert now.verify("POST", "/v1/shutdown", b"{}", signed("e2"))
