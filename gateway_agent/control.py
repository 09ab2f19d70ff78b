"""The control API: JSON over HTTP/1.1 (one request per connection), every request signed.

Endpoints (all under /v1): GET hello (unsigned: the gateway id and boot epoch a client signs
for), GET health, POST shutdown, POST lease, POST jobs (start), POST jobs/ID/chunks (submit
source descriptors), POST jobs/ID/credentials (fresh sealed store credentials), GET
jobs/ID/status?cursor=N[&wait=S] (incremental; a long poll of at most
``MAX_STATUS_WAIT_S``), POST jobs/ID/stop, POST jobs/ID/drop (a path declared dead), POST
probe.

What a stranger can make this server do is bounded: the request head is at most
``MAX_HEAD_BYTES`` and must arrive within ``HEAD_TIMEOUT_S``; the signature (which covers the
announced length and the body's digest, see ``auth``) is checked *before* any body byte is
read; a missing, negative or too large ``Content-Length`` is refused unread; at most
``MAX_PENDING`` connections may be unauthenticated at once (the oldest gives way); at most
``MAX_ACTIVE`` authenticated requests run at once. An unsigned, expired, replayed, wrongly
signed, other-gateway or earlier-process (another boot epoch) request gets 401 and changes
nothing.

Every answer whose request head could be read is signed with the transfer secret, bound to
that request (``auth.sign_answer``: method, target, the request's signature or, for hello, the
nonce in its query; status and body), refusals included; ``client.GatewayClient`` uses no
answer it cannot verify, so a forged or altered answer on the plain-HTTP channel is an error.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

from gateway_agent.agent import Agent
from gateway_agent.auth import (
    ANSWER_HEADER,
    RequestVerifier,
    rekey_context,
    sign_answer,
    unseal,
)
from gateway_agent.guard import ConnectionGate, Deadline, accept_forever, shut
from gateway_agent.job.base import JobError
from gateway_agent.probe.run import control_request as probe_request

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 16 * 1024
MAX_BODY = 8 * 1024 * 1024
HEAD_TIMEOUT_S = 5.0
BODY_IDLE_S = 30.0
MAX_PENDING = 64
MAX_ACTIVE = 32
# A status long poll holds its request (and one of the MAX_ACTIVE slots) at most this long;
# clients time out after a second at the least.
MAX_STATUS_WAIT_S = 0.5
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            411: "Length Required", 413: "Payload Too Large", 431: "Header Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


# Signs an answer (status, body) for the request being served (see ``auth.sign_answer``).
Signer = Callable[[int, bytes], str]


class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ControlServer:
    """The control listener of one agent (``serve_forever`` in a thread, ``stop`` to end)."""

    def __init__(
        self, host: str, port: int, agent: Agent, *, max_pending: int = MAX_PENDING
    ) -> None:
        self.agent = agent
        self.verifier = RequestVerifier(agent.secret, agent.gateway_id, epoch=agent.epoch)
        self.gate = ConnectionGate(max_pending)
        self._active = threading.BoundedSemaphore(MAX_ACTIVE)
        self._closed = threading.Event()
        self._listener = socket.create_server((host, port), backlog=128)
        self.rejected = 0

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def serve_forever(self) -> None:
        accept_forever(self._listener, self._spawn, self._closed, "control API")

    def stop(self) -> None:
        """Stop accepting at once (wakes the accept loop) and close the listener."""
        self._closed.set()
        shut(self._listener)
        try:
            self._listener.close()
        except OSError:
            pass

    def _spawn(self, sock: socket.socket, addr: Any) -> None:
        self.gate.admit(sock)
        try:
            threading.Thread(
                target=self._serve, args=(sock, addr), name="control-conn", daemon=True
            ).start()
        except RuntimeError:  # no thread could be started: drop this connection
            self.gate.release(sock)
            sock.close()

    def _serve(self, sock: socket.socket, addr: Any) -> None:
        try:
            with sock:
                try:
                    self._one_request(sock)
                except BadRequest as exc:
                    log.debug("control request from %s refused: %s", addr, exc)
                    _reply(sock, exc.code, {"error": str(exc)})
        except (OSError, TimeoutError):
            pass
        finally:
            self.gate.release(sock)

    # ---- one request ---------------------------------------------------------------------------

    def _one_request(self, sock: socket.socket) -> None:
        method, target, headers, rest = _read_head(sock)
        request_signature = headers.get("x-sky-signature", "")
        secret = self.agent.secret  # a request is answered with the secret it was made with

        def sign(code: int, body: bytes) -> str:
            return sign_answer(secret, method, target, request_signature, code, body)

        try:
            self._answer(sock, sign, method, target, headers, rest)
        except BadRequest as exc:
            log.debug("control request refused: %s", exc)
            _reply(sock, exc.code, {"error": str(exc)}, sign)

    def _answer(
        self,
        sock: socket.socket,
        sign: Signer,
        method: str,
        target: str,
        headers: dict[str, str],
        rest: bytes,
    ) -> None:
        url = urlparse(target)
        if method == "GET" and url.path == "/v1/hello":  # unsigned: which id to sign for
            hello = {"gateway_id": self.agent.gateway_id, "epoch": self.agent.epoch}
            _reply(sock, 200, hello, sign)  # the client's nonce is in the signed target
            return
        length = _content_length(headers)
        if length > MAX_BODY:
            _reply(sock, 413, {"error": "request too large"}, sign)
            return
        if not self.verifier.verify_headers(method, target, length, headers):
            self.rejected += 1
            _reply(sock, 401, {"error": "unauthenticated"}, sign)
            return
        self.gate.release(sock)  # authenticated: no longer a stranger
        if not self._active.acquire(blocking=False):
            _reply(sock, 503, {"error": "too many requests in flight"}, sign)
            return
        try:
            sock.settimeout(BODY_IDLE_S)
            body = _read_body(sock, rest, length)
            if not self.verifier.body_matches(body, headers):
                _reply(sock, 401, {"error": "body does not match its signature"}, sign)
                return
            self.agent.touch()
            self._dispatch(sock, sign, method, url.path, url.query, body)
        finally:
            self._active.release()

    def _dispatch(
        self, sock: socket.socket, sign: Signer, method: str, path: str, query: str, body: bytes
    ) -> None:
        agent = self.agent
        parts = [p for p in path.split("/") if p]
        try:
            data = json.loads(body) if body else {}
            if not isinstance(data, dict):
                raise JobError("request body must be a JSON object")
            result = self._route(method, parts, parse_qs(query), data)
        except (JobError, ValueError) as exc:
            _reply(sock, 400, {"error": str(exc)}, sign)
            return
        except Exception as exc:
            log.exception("control request failed")
            _reply(sock, 500, {"error": repr(exc)}, sign)
            return
        if result is None:
            _reply(sock, 404, {"error": f"no such endpoint {method} {path}"}, sign)
            return
        _reply(sock, 200, result, sign)
        if parts == ["v1", "shutdown"] and method == "POST":
            threading.Thread(target=agent.shutdown, daemon=True).start()

    def _route(
        self, method: str, parts: list[str], query: dict[str, list[str]], data: dict[str, Any]
    ) -> dict[str, Any] | None:
        agent = self.agent
        if parts == ["v1", "health"] and method == "GET":
            return {**agent.health(), "control": self.stats()}
        if parts == ["v1", "lease"] and method == "POST":
            idle = data.get("idle_timeout")
            return agent.renew_lease(
                float(data.get("seconds", 0)), None if idle is None else float(idle)
            )
        if parts == ["v1", "probe"] and method == "POST":
            return probe_request(agent, data)
        if parts == ["v1", "rekey"] and method == "POST":
            return self._rekey(data)
        if parts == ["v1", "shutdown"] and method == "POST":
            return {"ok": True}  # the agent stops after this reply has been written
        if parts == ["v1", "jobs"] and method == "POST":
            return agent.start_job(data)
        if len(parts) == 4 and parts[:2] == ["v1", "jobs"]:
            job_id, action = parts[2], parts[3]
            if action == "status" and method == "GET":
                cursor = int(query.get("cursor", ["0"])[0])
                wait = min(MAX_STATUS_WAIT_S, max(0.0, float(query.get("wait", ["0"])[0])))
                return agent.job(job_id).status(cursor, wait)
            if action == "chunks" and method == "POST":
                return {"accepted": agent.job(job_id).submit(list(data.get("chunks", [])))}
            if action == "stop" and method == "POST":
                return agent.stop_job(job_id)
            if action == "drop" and method == "POST":
                return agent.drop_path(job_id, str(data.get("path", "")))
            if action == "credentials" and method == "POST":
                return agent.job(job_id).update_credentials(data)
            if action == "rates" and method == "POST":
                return agent.job(job_id).set_rates(dict(data.get("rates") or {}))
            if action == "leave" and method == "POST":
                return agent.leave_out(job_id, str(data.get("gateway", "")))
        return None

    def _rekey(self, data: dict[str, Any]) -> dict[str, Any]:
        """A new secret, sealed with the current one for this gateway: the agent forgets its
        jobs and takes it; requests from now on are checked against it."""
        agent = self.agent
        try:
            new = unseal(agent.secret, str(data.get("sealed", "")), rekey_context(agent.gateway_id))
        except Exception:
            raise JobError("the new secret does not open with this gateway's secret") from None
        result = agent.rekey(new)
        self.verifier = RequestVerifier(new, agent.gateway_id, epoch=agent.epoch)
        return result

    def stats(self) -> dict[str, int]:
        return {
            "pending": self.gate.pending,
            "evicted": self.gate.evicted,
            "rejected": self.rejected,
        }


def _read_head(sock: socket.socket) -> tuple[str, str, dict[str, str], bytes]:
    """Request line and headers (at most MAX_HEAD_BYTES, within HEAD_TIMEOUT_S)."""
    deadline = Deadline(HEAD_TIMEOUT_S)
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        if len(buf) >= MAX_HEAD_BYTES:
            raise BadRequest(431, "request head too large")
        sock.settimeout(deadline.left())
        piece = sock.recv(MAX_HEAD_BYTES - len(buf) + 4)
        if not piece:
            raise BadRequest(400, "connection closed in the request head")
        buf += piece
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest(431, "request head too large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise BadRequest(400, "malformed request line") from None
    if not version.startswith("HTTP/1.") or method not in ("GET", "POST"):
        raise BadRequest(400, "unsupported request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    return method, target, headers, rest


def _content_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise BadRequest(411, "chunked bodies are not accepted")
    raw = headers.get("content-length")
    if raw is None:
        return 0
    if not raw.isdigit():  # also refuses "-1", "+5", " 5", ""
        raise BadRequest(400, "bad Content-Length")
    return int(raw)


def _read_body(sock: socket.socket, rest: bytes, length: int) -> bytes:
    if len(rest) > length:
        raise BadRequest(400, "more bytes than Content-Length")
    body = bytearray(rest)
    while len(body) < length:
        piece = sock.recv(min(1 << 20, length - len(body)))
        if not piece:
            raise BadRequest(400, "connection closed in the body")
        body += piece
    return bytes(body)


def _reply(
    sock: socket.socket, code: int, payload: dict[str, Any], sign: Signer | None = None
) -> None:
    """Write one answer; signed (``auth.ANSWER_HEADER``) whenever the request's head was read,
    refusals included: the client uses no answer it cannot verify."""
    body = json.dumps(payload).encode()
    signature = f"{ANSWER_HEADER}: {sign(code, body)}\r\n" if sign is not None else ""
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"{signature}"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    try:
        sock.settimeout(BODY_IDLE_S)
        sock.sendall(head + body)
    except OSError:
        pass
