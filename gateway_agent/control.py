"""The control API: JSON over HTTP, every request signed with the per-transfer secret.

Endpoints (all under /v1): GET health, POST shutdown, POST jobs (start), POST jobs/ID/chunks
(submit source descriptors), GET jobs/ID/status?cursor=N (incremental), POST jobs/ID/stop,
POST probe (throughput probes, see probe.py).
An unsigned, stale, replayed or wrongly signed request gets 401 and changes nothing.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from gateway_agent import probe
from gateway_agent.agent import Agent
from gateway_agent.auth import RequestVerifier
from gateway_agent.job import JobError

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024 * 1024


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, host: str, port: int, agent: Agent) -> None:
        self.agent = agent
        self.verifier = RequestVerifier(agent.secret)
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        """Stop ``serve_forever`` (running in another thread) at once and close the listener.

        ``shutdown()`` alone waits for the serving loop's next poll timeout (0.5 s); shutting
        the listening socket down first makes that ``poll()`` return immediately (Linux: the
        socket leaves LISTEN and reports HUP), so the loop sees the request and ends.
        """
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ControlServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _reply(self, code: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, {"error": "request too large"})
            return
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not self.server.verifier.verify(method, self.path, body, headers):
            self._reply(401, {"error": "unauthenticated"})
            return
        agent = self.server.agent
        agent.touch()
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        try:
            data = json.loads(body) if body else {}
            result = self._route(method, parts, parse_qs(url.query), data)
        except JobError as exc:
            self._reply(400, {"error": str(exc)})
            return
        except Exception as exc:
            log.exception("control request failed")
            self._reply(500, {"error": repr(exc)})
            return
        if result is None:
            self._reply(404, {"error": f"no such endpoint {method} {url.path}"})
            return
        self._reply(200, result)
        if parts == ["v1", "shutdown"] and method == "POST":
            self.wfile.flush()
            threading.Thread(target=agent.shutdown, daemon=True).start()

    def _route(
        self, method: str, parts: list[str], query: dict[str, list[str]], data: dict[str, Any]
    ) -> dict[str, Any] | None:
        agent = self.server.agent
        if parts == ["v1", "health"] and method == "GET":
            return agent.health()
        if parts == ["v1", "probe"] and method == "POST":
            return probe.control_request(agent, data)
        if parts == ["v1", "shutdown"] and method == "POST":
            return {"ok": True}  # the agent stops after this reply has been written
        if parts == ["v1", "jobs"] and method == "POST":
            return agent.start_job(data)
        if len(parts) == 4 and parts[:2] == ["v1", "jobs"]:
            job_id, action = parts[2], parts[3]
            if action == "status" and method == "GET":
                cursor = int(query.get("cursor", ["0"])[0])
                return agent.job(job_id).status(cursor)
            if action == "chunks" and method == "POST":
                return {"accepted": agent.job(job_id).submit(list(data.get("chunks", [])))}
            if action == "stop" and method == "POST":
                return agent.stop_job(job_id)
        return None
