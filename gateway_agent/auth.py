"""Per-transfer secret handling: signed control requests, data-connection handshakes, sealing.

The secret never crosses the wire. Control requests carry an HMAC over method, path, a
timestamp, a nonce and the body hash; data connections run a mutual HMAC challenge-response
before any frame is accepted. Sensitive job fields (store credentials) are sealed with
AES-GCM under a key derived from the secret, because the control channel is plain HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAX_CLOCK_SKEW_S = 120.0
NONCE_BYTES = 16


def new_secret() -> bytes:
    """A fresh 32-byte per-transfer secret."""
    return secrets.token_bytes(32)


def load_secret(path: str) -> bytes:
    """Read a secret file (raw bytes or hex text, as written by ``write_secret``)."""
    with open(path, "rb") as fh:
        raw = fh.read().strip()
    try:
        return bytes.fromhex(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return raw


def write_secret(path: str, secret: bytes) -> None:
    """Write a secret as hex into a new 0600 file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret.hex())


def derive_key(secret: bytes, label: bytes, salt: bytes = b"") -> bytes:
    """A 32-byte key for one purpose (HKDF-SHA256), so no key is used for two jobs."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt or None, info=label).derive(secret)


def mac(key: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 over length-prefixed parts (unambiguous concatenation)."""
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        h.update(len(part).to_bytes(4, "big"))
        h.update(part)
    return h.digest()


# ---- control requests ------------------------------------------------------------------------


def sign_request(secret: bytes, method: str, path: str, body: bytes) -> dict[str, str]:
    """Headers that authenticate one control request."""
    ts = f"{time.time():.3f}"
    nonce = secrets.token_hex(NONCE_BYTES)
    sig = mac(
        secret,
        method.encode(),
        path.encode(),
        ts.encode(),
        nonce.encode(),
        hashlib.sha256(body).digest(),
    )
    return {"X-Sky-Timestamp": ts, "X-Sky-Nonce": nonce, "X-Sky-Signature": sig.hex()}


class RequestVerifier:
    """Checks control-request signatures, rejecting stale timestamps and replayed nonces."""

    def __init__(self, secret: bytes, max_nonces: int = 100_000) -> None:
        self._secret = secret
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._max = max_nonces
        self._lock = threading.Lock()

    def verify(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bool:
        ts_s = headers.get("x-sky-timestamp", "")
        nonce = headers.get("x-sky-nonce", "")
        sig_hex = headers.get("x-sky-signature", "")
        try:
            ts = float(ts_s)
            sig = bytes.fromhex(sig_hex)
        except ValueError:
            return False
        now = time.time()
        if abs(now - ts) > MAX_CLOCK_SKEW_S or not nonce:
            return False
        want = mac(
            self._secret,
            method.encode(),
            path.encode(),
            ts_s.encode(),
            nonce.encode(),
            hashlib.sha256(body).digest(),
        )
        if not hmac.compare_digest(want, sig):
            return False
        with self._lock:
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            while self._seen and (
                len(self._seen) > self._max
                or next(iter(self._seen.values())) < now - 2 * MAX_CLOCK_SKEW_S
            ):
                self._seen.popitem(last=False)
        return True


# ---- sealing sensitive job fields ---------------------------------------------------------------


def seal(secret: bytes, plaintext: bytes) -> str:
    """AES-GCM encrypt ``plaintext`` for the agent; returns base64 text."""
    key = derive_key(secret, b"skyplane-ops seal v1")
    nonce = os.urandom(12)
    return base64.b64encode(nonce + AESGCM(key).encrypt(nonce, plaintext, None)).decode()


def unseal(secret: bytes, token: str) -> bytes:
    """Inverse of ``seal``; raises ``cryptography.exceptions.InvalidTag`` on tampering."""
    raw = base64.b64decode(token)
    key = derive_key(secret, b"skyplane-ops seal v1")
    return AESGCM(key).decrypt(raw[:12], raw[12:], None)
