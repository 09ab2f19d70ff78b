"""The control-plane side of the control API (stdlib HTTP, signed requests)."""

from __future__ import annotations

import http.client
import json
from typing import Any

from gateway_agent.auth import sign_request


class GatewayError(Exception):
    """The gateway answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class GatewayClient:
    """Talks to one gateway's control API with the per-transfer secret."""

    def __init__(self, host: str, control_port: int, secret: bytes, timeout: float = 30.0) -> None:
        self.host = host
        self.port = control_port
        self._secret = secret
        self.timeout = timeout

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        body = json.dumps(payload).encode() if payload is not None else b""
        headers = sign_request(self._secret, method, path, body)
        headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except OSError as exc:
            raise GatewayError(f"gateway {self.host}:{self.port} unreachable: {exc}") from exc
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"error": raw[:200].decode(errors="replace")}
        if resp.status != 200:
            raise GatewayError(
                f"gateway {self.host}:{self.port}: {data.get('error', resp.reason)}", resp.status
            )
        return data

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/health")
        return result

    def shutdown(self) -> None:
        self._call("POST", "/v1/shutdown", {})

    def start_job(self, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/v1/jobs", spec)
        return result

    def submit_chunks(self, job_id: str, chunks: list[dict[str, Any]]) -> int:
        return int(self._call("POST", f"/v1/jobs/{job_id}/chunks", {"chunks": chunks})["accepted"])

    def status(self, job_id: str, cursor: int = 0) -> dict[str, Any]:
        """Counters and the events after ``cursor``; pass back the returned ``cursor`` next time."""
        result: dict[str, Any] = self._call("GET", f"/v1/jobs/{job_id}/status?cursor={cursor}")
        return result

    def stop_job(self, job_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/v1/jobs/{job_id}/stop", {})
        return result
