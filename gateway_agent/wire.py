"""Data-connection wire format: authenticated handshake and chunk frames.

A data connection is one-directional (sender -> receiver). The receiver speaks first with a
random challenge; the sender proves it knows the per-transfer secret and names its gateway
(the proof covers the name: the receiver can cut a dead sender's connections), the receiver
proves it back, and only then are frames read. A frame is a fixed header, a JSON metadata
block and a payload. The CRC32C in the header is over the *original* payload bytes; it is
computed once at the source and checked at the sink. Per hop, payloads may be
zstd-compressed and/or sealed with AES-GCM (key derived from the secret and both challenges;
the header is the associated data).

No frame is ever unauthenticated. A hop either seals its frames (AES-GCM: tampering, replay
or reordering fails a record's tag; a body record that fails refuses its frame, whose chunk is
reported for re-sending, and one of the header or metadata drops the connection), or the
chunk carries an end-to-end tag from its source (``meta["tag"]``, see ``FrameTagger``):
GMAC under a one-time key derived from the transfer secret and a random per-frame nonce,
over the original payload, the metadata and the header's length and CRC32C. The source tags
every chunk whose path has a clear hop; relays forward the tag untouched (a clear relay still
splices, never copying the payload to user space) and the sink checks it while the payload is
hot, refusing the chunk on a mismatch (the control plane sends it again). A CRC32C alone would
not do: anyone on the path can recompute it. A tagged frame replayed whole delivers the same
chunk again (harmless: a chunk's bytes are pinned to the source version listed).
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway_agent.auth import derive_key, mac
from gateway_agent.flow import Buffer
from gateway_agent.stores.checksum import crc32c

WIRE_VERSION = 3  # 2: the sender names its gateway in the handshake; 3: chunk tags
MAGIC = b"SKYG" + bytes([WIRE_VERSION])
CHALLENGE_BYTES = 32
HANDSHAKE_TIMEOUT_S = 5.0
# Kernel send/receive timeout on authenticated data connections: a peer that moves no bytes
# for this long (stopped, hung, vanished) fails the call and frees the thread. Senders reopen
# connections idle for half of it, so an idle pool is never cut under a sender.
DATA_IO_TIMEOUT_S = 120.0
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024

FLAG_ENCRYPT = 0x01

KIND_CHUNK = 1
FRAME_ZSTD = 0x01
FRAME_SEALED = 0x02

# kind, flags, reserved, meta_len, payload_len (on the wire), raw_len, crc32c, seq
HEADER = struct.Struct("!BBHIIIIQ")
MAX_META = 16 * 1024 * 1024
MAX_PAYLOAD = 1024 * 1024 * 1024
CRC_PIECE = 1024 * 1024  # receive-and-checksum granularity at the sink (stays in L2/L3)
SEAL_PIECE = 1024 * 1024  # plaintext bytes per AES-GCM record
TAG = 16


class HandshakeError(Exception):
    """The peer failed authentication or broke the protocol."""


class ConnectionClosed(Exception):
    """The peer closed the connection cleanly between frames."""


class FrameRefused(HandshakeError):
    """A frame whose metadata was authentic failed authentication further on (a sealed record
    was tampered with): ``meta`` names the chunk, so the receiver can report it for re-sending.
    The rest of the frame was read (each record's nonce counted), so the connection is still in
    step and its next frames, each authenticated on its own, can be read."""

    def __init__(self, meta: dict[str, Any], why: str) -> None:
        super().__init__(why)
        self.meta = meta


# ---- end-to-end chunk tags ---------------------------------------------------------------------

TAG_LABEL = b"skyplane-ops chunk tag v1"
TAG_NONCE_BYTES = 16
TAG_BYTES = 16


def frame_key(secret: bytes) -> bytes:
    """The transfer's chunk-tag key (HKDF of the secret; used for nothing else)."""
    return derive_key(secret, TAG_LABEL)


def _canonical_meta(meta: dict[str, Any]) -> bytes:
    """The metadata as the tag covers it: every field but the tag, in one fixed encoding (a
    relay that parses and re-encodes the metadata does not change what was tagged)."""
    rest = {k: v for k, v in meta.items() if k != "tag"}
    return json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()


class FrameTagger:
    """GMAC (AES-GCM authenticating, encrypting nothing) over one chunk: its original payload
    (fed piece by piece, while each piece is in the CPU cache next to its CRC32C), then the
    canonical metadata, its length, the payload length and the CRC32C. The AES-256 key is
    HMAC-SHA256(frame key, nonce), the nonce 16 random bytes per tagged frame, so each key tags
    one message (its GCM IV can then be fixed). GMAC, not Poly1305: with AES and carry-less
    multiply instructions it costs half as much per byte (``benchmarks/cores.py``)."""

    def __init__(self, key: bytes, nonce: bytes | None = None) -> None:
        self.nonce = os.urandom(TAG_NONCE_BYTES) if nonce is None else nonce
        one_time = mac(key, b"gmac one-time key", self.nonce)
        self._gmac = Cipher(algorithms.AES(one_time), modes.GCM(bytes(12))).encryptor()

    @classmethod
    def for_meta(cls, key: bytes, meta: dict[str, Any]) -> FrameTagger | None:
        """A tagger that checks the tag ``meta`` carries (None: no tag, or a malformed one)."""
        tag = meta.get("tag")
        if not key or not isinstance(tag, str) or len(tag) != 2 * (TAG_NONCE_BYTES + TAG_BYTES):
            return None
        try:
            return cls(key, bytes.fromhex(tag[: 2 * TAG_NONCE_BYTES]))
        except ValueError:
            return None

    def update(self, piece: memoryview | bytes | bytearray) -> None:
        self._gmac.authenticate_additional_data(piece)

    def _finish(self, meta: dict[str, Any], raw_len: int, crc: int) -> bytes:
        m = _canonical_meta(meta)
        self._gmac.authenticate_additional_data(m + struct.pack("!QQI", len(m), raw_len, crc))
        self._gmac.finalize()
        return bytes(self._gmac.tag)

    def seal(self, meta: dict[str, Any], raw_len: int, crc: int) -> str:
        """The tag to put in ``meta["tag"]`` (nonce and GMAC tag, hex)."""
        return (self.nonce + self._finish(meta, raw_len, crc)).hex()

    def matches(self, meta: dict[str, Any], raw_len: int, crc: int) -> bool:
        """Whether ``meta["tag"]`` is the tag of what was fed, ``meta`` and the header fields."""
        try:
            want = bytes.fromhex(str(meta.get("tag", ""))[2 * TAG_NONCE_BYTES :])
        except ValueError:
            return False
        return hmac.compare_digest(self._finish(meta, raw_len, crc), want)


def crc_and_tag(data: memoryview | bytes | bytearray, tagger: FrameTagger | None) -> int:
    """CRC32C of ``data``, feeding ``tagger`` on the way (1 MiB pieces: each is checksummed
    and tagged while it is in the CPU cache); without a tagger one CRC32C call, as before."""
    if tagger is None:
        return crc32c(data)
    view = memoryview(data).cast("B")
    running = 0
    for pos in range(0, len(view), CRC_PIECE):
        piece = view[pos : pos + CRC_PIECE]
        running = crc32c(piece, running)
        tagger.update(piece)
    if not len(view):
        running = crc32c(b"")
    return running


def check_tag(
    key: bytes, meta: dict[str, Any], payload: memoryview | bytes | bytearray, crc: int
) -> bool:
    """Whether ``meta``'s tag covers this payload, metadata and CRC32C (False: untagged)."""
    tagger = FrameTagger.for_meta(key, meta)
    if tagger is None:
        return False
    tagger.update(payload)
    return tagger.matches(meta, len(payload), crc)


def tune_socket(sock: socket.socket) -> None:
    """Large buffers and no Nagle: chunks are big, headers must not wait."""
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def recv_exact_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` completely from the socket (no intermediate copies)."""
    got = 0
    total = len(view)
    while got < total:
        n = sock.recv_into(view[got:], total - got)
        if n == 0:
            raise ConnectionClosed("peer closed the connection")
        got += n


def recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    recv_exact_into(sock, memoryview(buf))
    return buf


def send_all(sock: socket.socket, parts: list[memoryview | bytes]) -> None:
    """Send several buffers with sendmsg (scatter-gather), resuming after partial sends."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        sent = sock.sendmsg(views)
        while sent and views:
            if sent >= len(views[0]):
                sent -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


@dataclass
class Session:
    """The state one authenticated connection carries: optional AEAD, a frame counter and
    the transfer's chunk-tag key (receiver side: to check tags while the payload is hot)."""

    aead: AESGCM | None
    seq: int = 0
    peer: str = ""  # the sender's gateway id (receiver side; "" for a probe or a client)
    scratch: bytearray | None = None  # reused record buffer for sealing
    frame_key: bytes = b""

    def next_nonce(self) -> bytes:
        self.seq += 1
        return b"\0\0\0\0" + self.seq.to_bytes(8, "big")


def _session_key(secret: bytes, challenge_s: bytes, challenge_c: bytes) -> AESGCM:
    return AESGCM(derive_key(secret, b"skyplane-ops data v1", challenge_s + challenge_c))


def server_handshake(sock: socket.socket, secret: bytes) -> Session:
    """Receiver side: challenge the peer; raise HandshakeError on a wrong secret. The
    session's ``peer`` is the gateway the sender named (covered by its proof)."""
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    challenge_s = os.urandom(CHALLENGE_BYTES)
    try:
        sock.sendall(MAGIC + challenge_s)
        head = bytes(recv_exact(sock, CHALLENGE_BYTES + 2))
        rest = bytes(recv_exact(sock, head[-1] + 32))
    except (OSError, ConnectionClosed) as exc:
        raise HandshakeError(f"handshake failed: {exc}") from exc
    challenge_c, flags, name, proof = head[:CHALLENGE_BYTES], head[-2], rest[:-32], rest[-32:]
    want = mac(secret, b"client", challenge_s, challenge_c, bytes([flags]), name)
    if not hmac.compare_digest(want, proof):
        raise HandshakeError("peer does not know the transfer secret")
    sock.sendall(mac(secret, b"server", challenge_c, challenge_s, bytes([flags])))
    sock.settimeout(None)
    aead = _session_key(secret, challenge_s, challenge_c) if flags & FLAG_ENCRYPT else None
    return Session(aead, peer=name.decode("utf-8", "replace"), frame_key=frame_key(secret))


def client_handshake(
    sock: socket.socket, secret: bytes, encrypt: bool, sender: str = ""
) -> Session:
    """Sender side: answer the challenge, naming ``sender`` (this gateway's id, at most 255
    bytes), and check the receiver knows the secret too."""
    name = sender.encode()
    if len(name) > 255:
        raise ValueError(f"gateway id longer than 255 bytes: {sender[:40]!r}...")
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        hello = bytes(recv_exact(sock, len(MAGIC) + CHALLENGE_BYTES))
        if hello[: len(MAGIC)] != MAGIC:
            if hello[: len(MAGIC) - 1] == MAGIC[:-1]:
                raise HandshakeError(
                    f"the gateway speaks wire version {hello[len(MAGIC) - 1]}, this one "
                    f"{WIRE_VERSION}: start every gateway of a fleet from one release"
                )
            raise HandshakeError("not a skyplane-ops gateway")
        challenge_s = hello[len(MAGIC) :]
        challenge_c = os.urandom(CHALLENGE_BYTES)
        flags = FLAG_ENCRYPT if encrypt else 0
        proof = mac(secret, b"client", challenge_s, challenge_c, bytes([flags]), name)
        sock.sendall(challenge_c + bytes([flags, len(name)]) + name + proof)
        answer = bytes(recv_exact(sock, 32))
    except (OSError, ConnectionClosed) as exc:
        raise HandshakeError(f"handshake failed: {exc}") from exc
    if not hmac.compare_digest(
        answer, mac(secret, b"server", challenge_c, challenge_s, bytes([flags]))
    ):
        raise HandshakeError("gateway does not know the transfer secret")
    sock.settimeout(None)
    aead = _session_key(secret, challenge_s, challenge_c) if encrypt else None
    return Session(aead, frame_key=frame_key(secret))


@dataclass
class Frame:
    """One received chunk frame; ``payload`` holds the original (decoded) bytes.
    ``computed_crc`` and ``tag_ok`` are set when the receiver checked them on arrival (the
    chunk's sink), else None."""

    meta: dict[str, Any]
    payload: memoryview
    crc32c: int
    wire_bytes: int
    computed_crc: int | None = None
    tag_ok: bool | None = None


def send_frame(
    sock: socket.socket,
    session: Session,
    meta: dict[str, Any],
    payload: memoryview | bytes,
    crc32c: int,
    compressor: Any = None,
) -> int:
    """Encode and send one chunk frame; returns the bytes put on the wire."""
    meta_b = json.dumps(meta, separators=(",", ":")).encode()
    raw_len = len(payload)
    flags = 0
    body: memoryview | bytes = payload
    if compressor is not None:
        body = compressor.compress(payload)
        flags |= FRAME_ZSTD
    if session.aead is not None:
        return _send_sealed(sock, session, flags, meta_b, memoryview(body), raw_len, crc32c)
    header = HEADER.pack(KIND_CHUNK, flags, 0, len(meta_b), len(body), raw_len, crc32c, 0)
    send_all(sock, [header, meta_b, body])
    return HEADER.size + len(meta_b) + len(body)


def _sealed_len(meta_len: int, body_len: int) -> int:
    pieces = -(-body_len // SEAL_PIECE)
    return meta_len + TAG + body_len + TAG * pieces


def _send_sealed(
    sock: socket.socket,
    session: Session,
    flags: int,
    meta_b: bytes,
    body: memoryview,
    raw_len: int,
    crc: int,
) -> int:
    """A sealed frame: metadata, then the body in 1 MiB AES-GCM records (cache-sized, so
    sealing runs at several GB/s instead of ~1 GB/s for one huge record). Each record uses the
    next nonce of the connection; the header (with payload_len 0) is every record's AAD."""
    assert session.aead is not None
    flags |= FRAME_SEALED
    first = session.seq + 1
    wire_len = _sealed_len(len(meta_b), len(body))
    header = HEADER.pack(KIND_CHUNK, flags, 0, len(meta_b), wire_len, raw_len, crc, first)
    aad = HEADER.pack(KIND_CHUNK, flags, 0, len(meta_b), 0, raw_len, crc, first)
    send_all(sock, [header, session.aead.encrypt(session.next_nonce(), meta_b, aad)])
    body = body.cast("B")
    if session.scratch is None:
        session.scratch = bytearray(SEAL_PIECE + TAG)
    out = memoryview(session.scratch)
    for pos in range(0, len(body), SEAL_PIECE):
        piece = body[pos : pos + SEAL_PIECE]
        record = out[: len(piece) + TAG]
        session.aead.encrypt_into(session.next_nonce(), piece, aad, record)
        send_all(sock, [record])
    return HEADER.size + wire_len


def _read_sealed(
    sock: socket.socket,
    session: Session,
    header: tuple[int, int, int, int, int, int, int],
    buffer: Buffer | None,
    want_crc: Callable[[dict[str, Any]], bool] | None,
) -> Frame:
    """Inverse of ``_send_sealed``: records are opened into ``buffer`` one by one (and, at a
    sink, checksummed while hot); any tampering, reordering or replay fails the tag check."""
    flags, meta_len, payload_len, raw_len, crc, seq, kind = header
    aead = session.aead
    if aead is None:
        raise HandshakeError("sealed frame on a clear connection")
    if seq != session.seq + 1:
        raise HandshakeError("frame sequence mismatch (replay or loss)")
    aad = HEADER.pack(kind, flags, 0, meta_len, 0, raw_len, crc, seq)
    meta_b = aead.decrypt(session.next_nonce(), bytes(recv_exact(sock, meta_len + TAG)), aad)
    meta = json.loads(meta_b)
    cipher_len = payload_len - meta_len - TAG
    pieces = -(-cipher_len // (SEAL_PIECE + TAG))
    body_len = cipher_len - TAG * pieces
    if body_len < 0 or _sealed_len(meta_len, body_len) != payload_len:
        raise HandshakeError("malformed sealed frame")
    if buffer is None or len(buffer) < body_len:
        buffer = bytearray(body_len)
    body = memoryview(buffer)[:body_len]
    scratch = memoryview(bytearray(min(cipher_len, SEAL_PIECE + TAG) or 1))
    check = not flags & FRAME_ZSTD and want_crc is not None and want_crc(meta)
    tagger = FrameTagger.for_meta(session.frame_key, meta) if check else None
    running = 0
    pos = 0
    refused = False
    while pos < body_len:
        n = min(SEAL_PIECE, body_len - pos)
        recv_exact_into(sock, scratch[: n + TAG])
        nonce = session.next_nonce()
        if refused:  # the rest of a refused frame: read, counted, dropped
            pos += n
            continue
        try:
            aead.decrypt_into(nonce, scratch[: n + TAG], aad, body[pos : pos + n])
        except InvalidTag:
            refused = True
            pos += n
            continue
        if check:
            running = crc32c(body[pos : pos + n], running)
            if tagger is not None:
                tagger.update(body[pos : pos + n])
        pos += n
    if refused:
        raise FrameRefused(meta, "a sealed record failed authentication (changed on the way)")
    if not check:
        return Frame(meta, body, crc, HEADER.size + payload_len)
    tag_ok = tagger.matches(meta, body_len, crc) if tagger is not None else None
    return Frame(meta, body, crc, HEADER.size + payload_len, running, tag_ok)


def read_header(sock: socket.socket) -> tuple[int, int, int, int, int, int, int]:
    """Read a frame header: (flags, meta_len, payload_len, raw_len, crc32c, seq, kind)."""
    buf = bytearray(HEADER.size)
    view = memoryview(buf)
    n = sock.recv_into(view, HEADER.size)
    if n == 0:
        raise ConnectionClosed("peer closed the connection")
    if n < HEADER.size:
        recv_exact_into(sock, view[n:])
    kind, flags, _, meta_len, payload_len, raw_len, crc, seq = HEADER.unpack(buf)
    if kind != KIND_CHUNK or meta_len > MAX_META or payload_len > MAX_PAYLOAD + MAX_META:
        raise HandshakeError("malformed frame header")
    return flags, meta_len, payload_len, raw_len, crc, seq, kind


def read_body(
    sock: socket.socket,
    session: Session,
    header: tuple[int, int, int, int, int, int, int],
    decompressor: Any = None,
    buffer: Buffer | None = None,
    want_crc: Callable[[dict[str, Any]], bool] | None = None,
    meta_b: bytes | None = None,
    meta_read: dict[str, Any] | None = None,
) -> Frame:
    """Read the rest of a frame whose header was already read (after budget was granted);
    ``meta_b`` (and ``meta_read``, its parsed form) when the caller already read the metadata.

    A clear frame's payload is received straight into ``buffer`` when one is given (at least
    ``payload_len`` bytes, e.g. from the budget's pool), otherwise into a new bytearray. When
    ``want_crc(meta)`` says so (this gateway is the chunk's sink), the CRC32C is computed piece
    by piece while each piece is still in the CPU cache and returned as ``computed_crc``.
    """
    flags, meta_len, payload_len, raw_len, crc, _seq, _kind = header
    if flags & FRAME_SEALED:
        frame = _read_sealed(sock, session, header, buffer, want_crc)
        if not flags & FRAME_ZSTD:
            if len(frame.payload) != raw_len:
                raise HandshakeError("payload length mismatch")
            return frame
        meta_b = b""
        body: memoryview = frame.payload
        meta_obj: dict[str, Any] | None = frame.meta
    else:
        meta_obj = None
        if session.aead is not None:
            raise HandshakeError("clear frame on an encrypted connection")
        if meta_b is None:
            meta_b = bytes(recv_exact(sock, meta_len))
        if buffer is None or len(buffer) < payload_len:
            buffer = bytearray(payload_len)
        body = memoryview(buffer)[:payload_len]
        if meta_read is None:
            meta_read = json.loads(meta_b)
        if not flags & FRAME_ZSTD and want_crc is not None:
            meta = meta_read
            if want_crc(meta):
                tagger = FrameTagger.for_meta(session.frame_key, meta)
                running = 0
                for pos in range(0, payload_len, CRC_PIECE):
                    piece = body[pos : pos + CRC_PIECE]
                    recv_exact_into(sock, piece)
                    running = crc32c(piece, running)
                    if tagger is not None:
                        tagger.update(piece)
                tag_ok = tagger.matches(meta, payload_len, crc) if tagger is not None else None
                wire_len = HEADER.size + meta_len + payload_len
                return Frame(meta, body, crc, wire_len, running, tag_ok)
        recv_exact_into(sock, body)
    if flags & FRAME_ZSTD:
        if decompressor is None:
            raise HandshakeError("compressed frame but no decompressor")
        body = memoryview(decompressor.decompress(body, max_output_size=raw_len))
    if len(body) != raw_len:
        raise HandshakeError("payload length mismatch")
    meta = meta_obj if meta_obj is not None else meta_read
    if not isinstance(meta, dict):
        raise HandshakeError("frame metadata is not an object")
    return Frame(meta, body, crc, HEADER.size + meta_len + payload_len)


# ---- zero-copy relaying ------------------------------------------------------------------------

PIPE_BYTES = 1024 * 1024
HAVE_SPLICE = hasattr(os, "splice")


class UpstreamError(Exception):
    """Reading the frame from the upstream connection failed (that connection is done)."""


class DownstreamError(Exception):
    """Writing the frame to the downstream connection failed (the upstream is still in sync)."""


def make_pipe() -> tuple[int, int]:
    """A pipe sized for splicing (1 MiB when the kernel allows)."""
    r, w = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(w, 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except (OSError, ImportError):
        pass
    return r, w


def splice_frame(
    up: socket.socket,
    down: socket.socket,
    pipe: tuple[int, int],
    header: tuple[int, int, int, int, int, int, int],
    meta_b: bytes,
) -> int:
    """Forward one clear frame whose header and metadata were read: the header and metadata
    are re-sent, the payload moves upstream socket -> pipe -> downstream socket in the kernel
    (``splice``), never copied through user space. Returns the bytes written downstream.

    On a downstream failure the rest of the payload is still read (and dropped) so the
    upstream connection stays in sync, then ``DownstreamError`` is raised.
    """
    flags, meta_len, payload_len, raw_len, crc, _seq, kind = header
    head = HEADER.pack(kind, flags, 0, meta_len, payload_len, raw_len, crc, 0)
    r, w = pipe
    up_fd, down_fd = up.fileno(), down.fileno()
    down_ok = True
    down_error: Exception | None = None
    try:
        send_all(down, [head, meta_b])
    except OSError as exc:
        down_ok, down_error = False, exc
    left = payload_len
    while left:
        try:
            n = os.splice(up_fd, w, min(left, PIPE_BYTES))
        except OSError as exc:
            raise UpstreamError(str(exc)) from exc
        if n == 0:
            raise UpstreamError("upstream closed mid-frame")
        left -= n
        while n:
            if down_ok:
                try:
                    m = os.splice(r, down_fd, n)
                except OSError as exc:
                    down_ok, down_error = False, exc
                    continue
            else:
                m = len(os.read(r, n))
            n -= m
    if not down_ok:
        raise DownstreamError(str(down_error))
    return HEADER.size + meta_len + payload_len


def discard(sock: socket.socket, n: int) -> None:
    """Read and drop ``n`` bytes (keeps a connection in sync after skipping a frame)."""
    scratch = memoryview(bytearray(min(n, PIPE_BYTES) or 1))
    while n:
        k = min(n, len(scratch))
        recv_exact_into(sock, scratch[:k])
        n -= k
