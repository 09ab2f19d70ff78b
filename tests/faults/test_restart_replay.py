"""A signed control request captured before a gateway restart is refused after it.

The replay memory (nonces seen) lives in the gateway process; a restarted gateway (same id,
same secret, same port) has a new boot epoch, and every signed request names the epoch it was
made for. Real agent processes on real sockets: the request is captured as it crossed the wire
and sent again, byte for byte, to the restarted process.
"""

from __future__ import annotations

from pathlib import Path

from skyplane_ops.testing.gateways import hello, sign_for, start_agent, wait_for


def test_a_shutdown_captured_before_a_restart_is_refused_after_it(tmp_path: Path) -> None:
    first = start_agent(tmp_path, "gw-replay")
    port = first.control_port
    client = first.client(gateway_id="gw-replay")
    try:
        assert client.health()["ok"]  # the control plane learnt this process's epoch
        captured_health = sign_for(port, first.secret, "gw-replay", "GET", "/v1/health")
        assert captured_health.send(port)[0] == 200
        assert captured_health.send(port)[0] == 401  # replayed to the same process: refused
        # The control plane stops the gateway; an eavesdropper keeps the signed request.
        shutdown = sign_for(port, first.secret, "gw-replay", "POST", "/v1/shutdown", {})
        assert shutdown.send(port)[0] == 200
        wait_for(lambda: first.proc.poll() is not None, 30, "the first gateway to stop")

        # The same gateway comes back: same id, same secret, same control port.
        (tmp_path / "gw-replay.ready").unlink()
        second = start_agent(
            tmp_path, "gw-replay", "--control-port", str(port), secret=first.secret
        )
        try:
            assert second.control_port == port
            assert hello(port)["epoch"] != captured_health.headers["X-Sky-Epoch"]
            for captured in (shutdown, captured_health):
                status, answer = captured.send(port)
                assert status == 401, (status, answer)
            assert second.proc.poll() is None  # still running: the replay changed nothing
            # The control plane's client (which knew the first epoch) carries on.
            health = client.health()
            assert health["ok"] and health["pid"] == second.proc.pid
            # Refused: the two replays, and the client's first request (signed for the first
            # epoch; it asked for the new one and signed again).
            assert health["control"]["rejected"] == 3
            client.shutdown()
            wait_for(lambda: second.proc.poll() is not None, 30, "the second gateway to stop")
        finally:
            second.stop()
    finally:
        first.stop()
