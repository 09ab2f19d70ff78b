"""Strangers on a gateway's ports: real agent processes, real sockets, a smaller load than
``benchmarks/strangers.py`` (which shows the figures). Assertions are on behaviour (what is
answered, what is closed, what still works), never on how fast.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway_agent import wire
from gateway_agent.auth import new_secret
from gateway_agent.control import MAX_PENDING
from skyplane_ops.testing.gateways import (
    AgentProc,
    announce_body,
    closed_by_peer,
    dataset,
    idle_connections,
    nothing_lost,
    proc_usage,
    raw_exchange,
    signed_request,
    start_agent,
    wait_for,
)
from skyplane_ops.testing.transfer import DST, SRC, local_fleet, make_plan, read_tree
from skyplane_ops.transfer import DispatchOptions, run_transfer

MiB = 1024 * 1024


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProc]:
    a = start_agent(tmp_path)
    yield a
    a.stop()


def test_announced_bodies_are_refused_before_a_byte_is_read(agent: AgentProc) -> None:
    """Forged requests announcing 64 MiB (above the cap: 413) or 4 MiB (below it: 401) are
    answered without sending any body: the gateway refused them before reading one (one that
    waited for the body would never answer here)."""
    before = proc_usage(agent.proc.pid)["rss_kib"]
    results: list[int | None] = []

    def stranger() -> None:
        for size in (64 * MiB, 4 * MiB, 64 * MiB, 4 * MiB):
            results.append(announce_body(agent.control_port, size)[0])

    threads = [threading.Thread(target=stranger) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=str) == [401] * 16 + [413] * 16
    assert proc_usage(agent.proc.pid)["rss_kib"] - before < 32 * 1024
    assert agent.client().health()["ok"]


@pytest.mark.parametrize(
    ("length", "status"),
    [("-1", 400), ("+5", 400), ("abc", 400), (str(2**40), 413), ("99999999999999999999", 413)],
)
def test_bad_content_lengths_are_refused_unread(agent: AgentProc, length: str, status: int) -> None:
    head = f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
    assert raw_exchange(agent.control_port, head) == status


def test_chunked_bodies_and_garbage_are_refused(agent: AgentProc) -> None:
    chunked = b"POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert raw_exchange(agent.control_port, chunked) == 411
    assert raw_exchange(agent.control_port, b"\x16\x03\x01 hello\r\n\r\n") == 400
    unsigned = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    assert raw_exchange(agent.control_port, unsigned) == 401


def test_request_heads_are_capped_in_size_and_time(agent: AgentProc) -> None:
    huge = b"GET /v1/health HTTP/1.1\r\nX-Pad: " + b"a" * (64 * 1024)
    assert raw_exchange(agent.control_port, huge) in (431, None)
    with socket.create_connection(("127.0.0.1", agent.control_port)) as slow:
        slow.sendall(b"GET /v1/health HTTP/1.1\r\nX-Slow: ")  # ... and never the rest
        wait_for(lambda: closed_by_peer(slow), 60, "the gateway to drop a slow head")


def test_a_request_signed_for_one_gateway_is_refused_by_another(tmp_path: Path) -> None:
    secret = new_secret()
    a = start_agent(tmp_path, "gw-a", secret=secret)
    b = start_agent(tmp_path, "gw-b", secret=secret)
    try:
        assert signed_request(b.control_port, secret, "gw-a", "GET", "/v1/health")[0] == 401
        status, body = signed_request(a.control_port, secret, "gw-a", "GET", "/v1/health")
        assert status == 200 and body["gateway_id"] == "gw-a"
        assert signed_request(b.control_port, secret, "gw-b", "GET", "/v1/health")[0] == 200
    finally:
        a.stop()
        b.stop()


def test_idle_strangers_are_capped_and_real_requests_still_pass(agent: AgentProc) -> None:
    n = 3 * MAX_PENDING
    with (
        idle_connections(agent.control_port, n) as ctl,
        idle_connections(agent.data_port, n) as data,
    ):
        # The oldest beyond the cap are closed by the gateway, the rest time out.
        wait_for(lambda: sum(closed_by_peer(s) for s in ctl) >= n - MAX_PENDING, 60, "evictions")
        wait_for(lambda: sum(closed_by_peer(s) for s in data) >= n - MAX_PENDING, 60, "evictions")
        health = agent.client().health()
        assert health["ok"] and health["control"]["evicted"] >= n - MAX_PENDING
        usage = proc_usage(agent.proc.pid)
        assert usage["threads"] <= 2 * MAX_PENDING + 40, usage
        assert usage["fds"] <= 2 * MAX_PENDING + 40, usage
    with socket.create_connection(("127.0.0.1", agent.data_port), timeout=10) as sock:
        wire.client_handshake(sock, agent.secret, encrypt=False)  # the data listener serves


def test_descriptor_exhaustion_does_not_stop_the_listeners(tmp_path: Path) -> None:
    """With 64 descriptors and no pending cap, 100 strangers exhaust the agent (EMFILE); once
    they leave, both listeners accept again (the data listener used to stop for good)."""
    agent = start_agent(tmp_path, "gw-emfile", "--max-pending", "1000", nofile=64)
    try:
        with idle_connections(agent.data_port, 100), idle_connections(agent.control_port, 20):
            wait_for(lambda: "backing off" in agent.log.read_text(), 60, "EMFILE in the log")

        def handshake() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", agent.data_port), timeout=10) as s:
                    wire.client_handshake(s, agent.secret, encrypt=False)
                return True
            except (OSError, wire.HandshakeError):
                return False

        wait_for(handshake, 60, "the data listener to accept again", step=0.2)
        assert agent.client().health()["ok"]
        assert "accepting again" in agent.log.read_text()
    finally:
        agent.stop()


def test_a_transfer_started_during_an_attack_completes(tmp_path: Path) -> None:
    src, dst, journal = tmp_path / "src", tmp_path / "dst", tmp_path / "journal"
    src.mkdir()
    dst.mkdir()
    old, new = dataset(src, dst, big=2, big_mib=4, small=20)
    plan = make_plan([SRC, DST])
    stop = threading.Event()
    with local_fleet(plan, hooks=False, buffer_mib=64) as (_, fleet):
        ports = [p for g in fleet.gateways for p in (g.control_port, g.data_port)]

        def announcer(port: int) -> None:
            while not stop.is_set():
                announce_body(port, 64 * MiB)

        workers = [threading.Thread(target=announcer, args=(g.control_port,), daemon=True)
                   for g in fleet.gateways for _ in range(4)]  # fmt: skip
        for w in workers:
            w.start()
        try:
            with (
                idle_connections(ports[0], 100),
                idle_connections(ports[1], 100),
                idle_connections(ports[2], 100),
                idle_connections(ports[3], 100),
            ):
                run_transfer(
                    plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=journal,
                    part_size=2 * MiB, dispatch=DispatchOptions(lease_linger_s=0),
                )  # fmt: skip
        finally:
            stop.set()
            for w in workers:
                w.join()
    assert nothing_lost(src, dst, old, new) == []
    assert read_tree(dst) == new
