"""Per-transfer secret handling: signed control requests, data-connection handshakes, sealing.

The secret never crosses the wire. Control requests carry an HMAC over method, path, a
timestamp and expiry, a nonce, the body length and hash, the target gateway's id and its boot
epoch (random per process start: a request made for an earlier process of the same gateway,
whose replay memory died with it, is refused by the restarted one); the gateway signs every
answer, bound to the request it answers, and the client uses none it cannot verify; data
connections run a mutual HMAC challenge-response before any frame is accepted. Sensitive job
fields (store options, and the store credentials a control plane hands its gateways, bound
to one job on one gateway) are sealed with AES-GCM under a key derived from the secret,
because the control channel is plain HTTP.
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

# A signed request is valid for this long after it was made (and never before, minus skew).
REQUEST_TTL_S = 60.0
CONTROL_LABEL = b"skyplane-ops control v3"  # 3: the gateway's boot epoch is signed
EPOCH_BYTES = 16


def new_epoch() -> str:
    """A gateway process's boot epoch: random per start, never reused (hex)."""
    return secrets.token_hex(EPOCH_BYTES)


def _control_mac(
    secret: bytes,
    method: str,
    path: str,
    ts: str,
    expires: str,
    nonce: str,
    length: str,
    digest: str,
    gateway_id: str,
    epoch: str,
) -> bytes:
    return mac(
        secret,
        CONTROL_LABEL,
        method.encode(),
        path.encode(),
        ts.encode(),
        expires.encode(),
        nonce.encode(),
        length.encode(),
        digest.encode(),
        gateway_id.encode(),
        epoch.encode(),
    )


def sign_request(
    secret: bytes, method: str, path: str, body: bytes, gateway_id: str = "", epoch: str = ""
) -> dict[str, str]:
    """Headers that authenticate one control request *for one gateway process*.

    The MAC covers method, path, timestamp, expiry, nonce, body length, the body's SHA-256,
    the target gateway id and its boot ``epoch`` (``GET /v1/hello`` tells both). Everything
    it covers is in the headers, so the gateway checks it before reading a byte of body; a
    request captured at one gateway is refused by every other (each checks its own id), and
    by the same gateway once restarted (a new process has a new epoch, so a nonce it never
    saw cannot be replayed to it).
    """
    now = time.time()
    ts = f"{now:.3f}"
    expires = f"{now + REQUEST_TTL_S:.3f}"
    nonce = secrets.token_hex(NONCE_BYTES)
    length = str(len(body))
    digest = hashlib.sha256(body).hexdigest()
    sig = _control_mac(secret, method, path, ts, expires, nonce, length, digest, gateway_id, epoch)
    return {
        "X-Sky-Timestamp": ts,
        "X-Sky-Expires": expires,
        "X-Sky-Nonce": nonce,
        "X-Sky-Gateway": gateway_id,
        "X-Sky-Epoch": epoch,
        "X-Sky-Body-SHA256": digest,
        "X-Sky-Signature": sig.hex(),
    }


class RequestVerifier:
    """Checks control-request signatures: target gateway and its boot epoch, expiry, replayed
    nonces, body digest. The nonces seen live in this process only; the ``epoch`` (new at every
    start) is what makes them enough: a request signed for an earlier process is refused here.

    ``verify_headers`` runs before the body is read (it needs only the headers and the
    announced length); ``body_matches`` checks the body read afterwards against the signed
    digest. ``verify`` does both for a body already in hand.
    """

    def __init__(
        self, secret: bytes, gateway_id: str = "", max_nonces: int = 100_000, epoch: str = ""
    ) -> None:
        self._secret = secret
        self.gateway_id = gateway_id
        self.epoch = epoch
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._max = max_nonces
        self._lock = threading.Lock()

    def verify_headers(self, method: str, path: str, length: int, headers: dict[str, str]) -> bool:
        """True if the headers carry a fresh, unreplayed signature for this gateway."""
        ts_s = headers.get("x-sky-timestamp", "")
        exp_s = headers.get("x-sky-expires", "")
        nonce = headers.get("x-sky-nonce", "")
        digest = headers.get("x-sky-body-sha256", "")
        target = headers.get("x-sky-gateway", "")
        epoch = headers.get("x-sky-epoch", "")
        try:
            ts = float(ts_s)
            expires = float(exp_s)
            sig = bytes.fromhex(headers.get("x-sky-signature", ""))
        except ValueError:
            return False
        now = time.time()
        if (
            not nonce
            or len(nonce) > 2 * NONCE_BYTES * 2
            or len(digest) != 64
            or target != self.gateway_id
            or epoch != self.epoch
            or ts > now + MAX_CLOCK_SKEW_S
            or now > expires + MAX_CLOCK_SKEW_S
            or not 0 < expires - ts <= REQUEST_TTL_S
        ):
            return False
        want = _control_mac(
            self._secret, method, path, ts_s, exp_s, nonce, str(length), digest, target, epoch
        )
        if not hmac.compare_digest(want, sig):
            return False
        with self._lock:
            if nonce in self._seen:
                return False
            self._seen[nonce] = now
            horizon = now - REQUEST_TTL_S - 2 * MAX_CLOCK_SKEW_S
            while self._seen and (
                len(self._seen) > self._max or next(iter(self._seen.values())) < horizon
            ):
                self._seen.popitem(last=False)
        return True

    @staticmethod
    def body_matches(body: bytes, headers: dict[str, str]) -> bool:
        """The body read after ``verify_headers`` is the one that was signed."""
        want = headers.get("x-sky-body-sha256", "")
        return hmac.compare_digest(hashlib.sha256(body).hexdigest(), want)

    def verify(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bool:
        return self.body_matches(body, headers) and self.verify_headers(
            method, path, len(body), headers
        )


# ---- control answers ---------------------------------------------------------------------------

ANSWER_LABEL = b"skyplane-ops control answer v1"
ANSWER_HEADER = "X-Sky-Answer-Signature"


def sign_answer(
    secret: bytes, method: str, target: str, request_signature: str, status: int, body: bytes
) -> str:
    """The signature a gateway puts on its answer (``ANSWER_HEADER``, hex): an HMAC over the
    request it answers (method, target with its query, and the request's own signature, which
    covers its nonce, gateway, epoch and body), the status and the answer body's SHA-256.

    Bound to the request's signature, an answer cannot be replayed to another request, nor
    one of an earlier exchange to a later one; the unsigned ``GET /v1/hello`` carries a fresh
    nonce in its query for the same reason. The label keeps answers and requests apart."""
    return mac(
        secret,
        ANSWER_LABEL,
        method.encode(),
        target.encode(),
        request_signature.encode(),
        str(status).encode(),
        hashlib.sha256(body).digest(),
    ).hex()


def answer_matches(
    secret: bytes,
    method: str,
    target: str,
    request_signature: str,
    status: int,
    body: bytes,
    signature: str | None,
) -> bool:
    """Whether ``signature`` is the gateway's signature of this answer to this request (the
    client checks it before using anything of the answer, its status included)."""
    want = sign_answer(secret, method, target, request_signature, status, body)
    return bool(signature) and hmac.compare_digest(want, str(signature))


# ---- sealing sensitive job fields ---------------------------------------------------------------


def seal(secret: bytes, plaintext: bytes, context: bytes = b"") -> str:
    """AES-GCM encrypt ``plaintext`` for the agent; returns base64 text.

    ``context`` is authenticated, not encrypted (AES-GCM's associated data): a token sealed
    for one context (a job and gateway, see ``credentials_context``) does not open in another.
    """
    key = derive_key(secret, b"skyplane-ops seal v1")
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, plaintext, context or None)
    return base64.b64encode(nonce + sealed).decode()


def unseal(secret: bytes, token: str, context: bytes = b"") -> bytes:
    """Inverse of ``seal``; raises ``cryptography.exceptions.InvalidTag`` on tampering (or on
    another ``context`` than the token was sealed for)."""
    raw = base64.b64decode(token)
    key = derive_key(secret, b"skyplane-ops seal v1")
    return AESGCM(key).decrypt(raw[:12], raw[12:], context or None)


def rekey_context(gateway_id: str) -> bytes:
    """What a sealed new secret (``POST /v1/rekey``) is bound to: that gateway."""
    return mac(b"skyplane-ops rekey v1", gateway_id.encode())


def credentials_context(job_id: str, gateway_id: str) -> bytes:
    """What a job's sealed store credentials are bound to: that job on that gateway."""
    return mac(b"skyplane-ops store credentials v1", job_id.encode(), gateway_id.encode())
