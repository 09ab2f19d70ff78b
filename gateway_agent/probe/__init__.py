"""Throughput probe between two gateways: N parallel TCP connections for T seconds.

The receiving gateway runs a ``ProbeServer`` (``server``); the sending gateway calls
``run_probe`` (``run``, which also holds the agent's ``control_request`` for ``POST
/v1/probe`` and the command line); ``wire`` has the framing, the authentication of each
connection and ``ProbeResult``. The protocol is described in ``run``. The names the agent, the
profiler and users import are importable from here, and ``python -m gateway_agent.probe
serve|run`` drives the probe on a host without the agent.

Standard library plus the agent's own handshake: this package ships to every gateway VM.
"""

from __future__ import annotations

from gateway_agent.probe.run import control_request, main, run_probe
from gateway_agent.probe.server import ProbeServer
from gateway_agent.probe.wire import (
    DEFAULT_CONNECTIONS,
    DEFAULT_SECONDS,
    HANDSHAKE_TIMEOUT_S,
    MAX_CONNECTIONS,
    PING_COUNT,
    RECV_CHUNK,
    SEND_CHUNK,
    ProbeAuthError,
    ProbeError,
    ProbeResult,
)

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_SECONDS",
    "HANDSHAKE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "PING_COUNT",
    "RECV_CHUNK",
    "SEND_CHUNK",
    "ProbeAuthError",
    "ProbeError",
    "ProbeResult",
    "ProbeServer",
    "control_request",
    "main",
    "run_probe",
]
