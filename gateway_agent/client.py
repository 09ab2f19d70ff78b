"""The control-plane side of the control API (stdlib HTTP, signed requests).

Every request is signed for one gateway id (a request captured at one gateway is refused by
every other) and for the boot epoch of its running process (a request captured before a restart
is refused after it). Pass ``gateway_id`` when it is known (the fleet has it); the client asks
the gateway once (``GET /v1/hello``, unsigned) for its epoch (and its id when not given). When a
request is refused as unauthenticated, the client asks again: if the gateway was restarted
meanwhile (a new epoch), the request, which the gateway refused unread, is signed anew and sent
once more; the normal control plane thus carries on over a legitimate restart.

Every answer, hello and refusals included, must carry the gateway's signature of it, bound to
this request (``auth.sign_answer``; hello is asked with a fresh nonce): the client checks it
before it reads anything of the answer, its status included. An unsigned or mis-signed answer
(forged or altered on the plain-HTTP channel, or a gateway of another transfer) raises
``AnswerNotAuthentic``; nothing of it is used.
"""

from __future__ import annotations

import http.client
import json
import secrets
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from gateway_agent.auth import (
    ANSWER_HEADER,
    NONCE_BYTES,
    answer_matches,
    rekey_context,
    seal,
    sign_request,
)
from gateway_agent.probe.wire import DEFAULT_CONNECTIONS, DEFAULT_SECONDS, ProbeResult


class GatewayError(Exception):
    """The gateway answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class AnswerNotAuthentic(GatewayError):
    """The answer does not carry the gateway's signature of it (altered or forged on the way,
    or the gateway holds another secret): nothing of it was used. Its ``status`` is 401: the
    gateway could not be authenticated."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 401)


class ProbeFailedError(GatewayError):
    """The agent ran the probe and it failed; ``auth`` says the peer refused the secret."""

    def __init__(self, message: str, auth: bool = False) -> None:
        super().__init__(message, 200)
        self.auth = auth


class GatewayClient:
    """Talks to one gateway's control API with the per-transfer secret."""

    def __init__(
        self,
        host: str,
        control_port: int,
        secret: bytes,
        timeout: float = 30.0,
        attempts: int = 4,
        gateway_id: str | None = None,
    ) -> None:
        self.host = host
        self.gateway_id = gateway_id
        self.epoch: str | None = None  # the running process's boot epoch (from hello)
        self.attempts = max(1, attempts)
        self.port = control_port
        self._secret = secret
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
        *,
        attempts: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        body = json.dumps(payload).encode() if payload is not None else b""
        attempts = self.attempts if attempts is None else max(1, attempts)
        status, reason, raw = self._send(method, path, body, attempts, timeout)
        if status == 401 and self._restarted(timeout):
            # Signed for an earlier process of this gateway: refused before anything ran.
            status, reason, raw = self._send(method, path, body, attempts, timeout)
        return self._decode(status, reason, raw)

    def _send(
        self, method: str, path: str, body: bytes, attempts: int, timeout: float | None
    ) -> tuple[int, str, bytes]:
        # Idempotent endpoints are retried a few times on a reset connection (a busy listen
        # backlog); a gateway that stays unreachable is reported after ~1 s. A probe run
        # passes ``attempts=1``: its bytes (and egress dollars) must not be paid twice.
        for attempt in Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            retry=retry_if_exception_type((OSError, http.client.HTTPException)),
            reraise=True,
        ):
            with attempt:
                try:
                    status, reason, raw = self._once(method, path, body, timeout)
                except (OSError, http.client.HTTPException) as exc:
                    if attempt.retry_state.attempt_number >= attempts:
                        raise GatewayError(
                            f"gateway {self.host}:{self.port} unreachable: {exc}"
                        ) from exc
                    raise
        return status, reason, raw

    def _restarted(self, timeout: float | None) -> bool:
        """Whether the gateway's boot epoch changed since this client learned it (it was
        restarted); the new one is used from now on."""
        if self.epoch is None:
            return False
        try:
            _, epoch = self._hello(timeout)
        except (OSError, http.client.HTTPException):
            return False
        changed, self.epoch = epoch != self.epoch, epoch
        return changed

    def _once(
        self, method: str, path: str, body: bytes, timeout: float | None = None
    ) -> tuple[int, str, bytes]:
        if self.gateway_id is None or self.epoch is None:
            gateway_id, self.epoch = self._hello(timeout)
            if self.gateway_id is None:
                self.gateway_id = gateway_id
        headers = sign_request(self._secret, method, path, body, self.gateway_id, self.epoch)
        headers["Content-Type"] = "application/json"
        return self._exchange(method, path, body, headers, headers["X-Sky-Signature"], timeout)

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        request_signature: str,
        timeout: float | None,
    ) -> tuple[int, str, bytes]:
        """One request and its answer, whose signature is checked before anything of it is
        used (``AnswerNotAuthentic`` otherwise)."""
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=self.timeout if timeout is None else timeout
        )
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            status, reason, raw = resp.status, resp.reason, resp.read()
            signature = resp.getheader(ANSWER_HEADER)
        finally:
            conn.close()
        if not answer_matches(
            self._secret, method, path, request_signature, status, raw, signature
        ):
            raise AnswerNotAuthentic(
                f"gateway {self.host}:{self.port}: the answer to {method} {path.split('?')[0]} "
                f"is {'mis-signed' if signature else 'unsigned'} (altered on the way, or not "
                "this transfer's gateway): refused"
            )
        return status, reason, raw

    def _hello(self, timeout: float | None) -> tuple[str, str]:
        """The gateway id and boot epoch the gateway at this address signs for (asked with a
        fresh nonce, so a recorded answer cannot be played back)."""
        path = f"/v1/hello?nonce={secrets.token_hex(NONCE_BYTES)}"
        status, _reason, raw = self._exchange("GET", path, b"", {}, "", timeout)
        try:
            hello = json.loads(raw)
            return str(hello["gateway_id"]), str(hello.get("epoch", ""))
        except (ValueError, KeyError, TypeError):
            raise http.client.HTTPException(
                f"{self.host}:{self.port} does not look like a gateway (status {status})"
            ) from None

    def _decode(self, status: int, reason: str, raw: bytes) -> Any:
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"error": raw[:200].decode(errors="replace")}
        if status != 200:
            raise GatewayError(
                f"gateway {self.host}:{self.port}: {data.get('error', reason)}", status
            )
        return data

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/health")
        return result

    def shutdown(self) -> None:
        self._call("POST", "/v1/shutdown", {})

    def renew_lease(
        self, seconds: float, timeout: float | None = None, idle_timeout: float | None = None
    ) -> dict[str, Any]:
        """Keep the gateway alive for ``seconds`` more (it stops itself when the lease lapses);
        ``idle_timeout`` raises its idle watchdog's to at least that (a parked fleet's)."""
        body: dict[str, Any] = {"seconds": seconds}
        if idle_timeout is not None:
            body["idle_timeout"] = idle_timeout
        result: dict[str, Any] = self._call("POST", "/v1/lease", body, attempts=1, timeout=timeout)
        return result

    def rekey(self, secret: bytes) -> dict[str, Any]:
        """Hand the gateway a new secret (sealed with the current one, for this gateway): it
        drops every job and answers only to the new secret from then on, as this client does.
        Not retried: a rekey that took effect would refuse the same request made again."""
        if self.gateway_id is None or self.epoch is None:
            gateway_id, self.epoch = self._hello(None)
            self.gateway_id = self.gateway_id or gateway_id
        sealed = seal(self._secret, secret, rekey_context(self.gateway_id))
        result: dict[str, Any] = self._call("POST", "/v1/rekey", {"sealed": sealed}, attempts=1)
        self._secret = secret
        return result

    def start_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/jobs", spec)
        return result

    def submit_chunks(self, job_id: str, chunks: list[dict[str, Any]]) -> int:
        return int(self._call("POST", f"/v1/jobs/{job_id}/chunks", {"chunks": chunks})["accepted"])

    def status(self, job_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        """Counters and the events after ``cursor``; pass back the returned ``cursor`` next time.
        ``wait`` > 0: the gateway answers when an event comes, after that long at most."""
        query = f"cursor={cursor}" + (f"&wait={wait:g}" if wait > 0 else "")
        result: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}/status?{query}")
        return result

    def drop_path(self, job_id: str, path: str) -> dict[str, Any]:
        """Tell the gateway that ``path`` of the job is dead (see ``Job.drop_path``)."""
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/drop", {"path": path})
        return result

    def leave_out(self, job_id: str, gateway_id: str) -> dict[str, Any]:
        """Tell the gateway that next-hop gateway ``gateway_id`` is dead (see
        ``Job.leave_out``)."""
        body = {"gateway": gateway_id}
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/leave", body)
        return result

    def set_rates(self, job_id: str, rates: dict[str, float | None]) -> dict[str, Any]:
        """New bandwidth caps per hop (``{"a>b": bytes/s}``) of the job on this gateway."""
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/rates", {"rates": rates})
        return result

    def update_credentials(self, job_id: str, sealed: str) -> dict[str, Any]:
        """Hand a running job fresh store credentials (sealed for it on this gateway, see
        ``Job.update_credentials``)."""
        body = {"sealed_credentials": sealed}
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/credentials", body)
        return result

    def stop_job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/stop", {})
        return result

    # ---- throughput probes (POST /v1/probe, see gateway_agent.probe) ---------------------------

    def probe_listen(self, port: int = 0) -> int:
        """Open this agent's probe server (idempotent; ``port=0``: any free port); its port."""
        reply = self._call("POST", "/v1/probe", {"action": "listen", "port": port})
        if "error" in reply:
            raise ProbeFailedError(str(reply["error"]))
        return int(reply["probe_port"])

    def probe(
        self,
        peer_host: str,
        peer_port: int,
        *,
        connections: int = DEFAULT_CONNECTIONS,
        seconds: float = DEFAULT_SECONDS,
        timeout: float | None = None,
    ) -> ProbeResult:
        """Have this gateway probe a peer's probe server for ``seconds`` over ``connections``.

        Sent once, never retried: a probe's bytes (and egress) must not be paid twice.
        ``timeout`` (default ``seconds + 60``) bounds the whole request. Raises
        ``ProbeFailedError`` when the probe itself failed, ``GatewayError`` when the agent
        could not be asked.
        """
        payload = {
            "action": "run",
            "peer_host": peer_host,
            "peer_port": peer_port,
            "connections": connections,
            "seconds": seconds,
        }
        reply = self._call(
            "POST",
            "/v1/probe",
            payload,
            attempts=1,
            timeout=seconds + 60.0 if timeout is None else timeout,
        )
        if "error" in reply:
            raise ProbeFailedError(str(reply["error"]), bool(reply.get("auth")))
        return ProbeResult.from_dict(reply)

    def probe_close(self, timeout: float | None = None) -> bool:
        """Close this agent's probe server; whether one was open."""
        reply = self._call("POST", "/v1/probe", {"action": "close"}, timeout=timeout)
        return bool(reply.get("closed"))
