"""The netns backend: an emulated 3-region WAN with tc-shaped veth links and real agents.

Regions A, B, C; A-B shaped at 100 Mbit/s, A-C and C-B at 400 Mbit/s (a grid of 1 and 4 Gbit/s
scaled by 0.1). iperf3 checks the shaping of each link end; the real transfer engine then moves
files A->B directly (>= 90% of 100 Mbit/s) and over the overlay A->C->B (>= 90% of 400 Mbit/s).
Every test checks that no namespace, veth or agent process is left. Needs root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import get_provisioner
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.netns import NetnsProvisioner
from skyplane_ops.provision.netns.host import list_namespaces
from skyplane_ops.provision.netns.testbed import Testbed
from skyplane_ops.testing.transfer import make_plan, read_tree, write_dataset
from skyplane_ops.transfer import run_transfer
from skyplane_ops.transfer.progress import Progress, steady_rate_mbit

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="network namespaces, veth and tc need root (CI runs as root)"
    ),
]

A, B, C = "netns:A", "netns:B", "netns:C"
GRID = {f"{A}->{B}": 1.0, f"{A}->{C}": 4.0, f"{C}->{B}": 4.0}  # Gbit/s, scaled by 0.1
MiB = 1024 * 1024


def _our_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def _assert_nothing_left(transfer_id: str, pids: list[int]) -> None:
    assert not [ns for ns in list_namespaces() if f".{transfer_id}." in ns], "namespace left"
    tb = Testbed.plan(transfer_id, [A, B, C], GRID)
    for i in range(3):
        assert tb._root_veth(i) not in _our_links(), "management veth left"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"agent {pid} left running"


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_links_are_shaped_on_both_ends_and_torn_down() -> None:
    tid = f"nt-{uuid.uuid4().hex[:8]}"
    tb = Testbed.plan(tid, [A, B, C], GRID, scale=0.1)
    tb.build()
    try:
        assert tb.shaped_mbit(A, B) == tb.shaped_mbit(B, A) == 100
        assert tb.shaped_mbit(A, C) == tb.shaped_mbit(C, B) == 400
        for src, dst in ((A, B), (B, A), (A, C)):
            shaped = tb.shaped_mbit(src, dst)
            # Best of up to 3 short runs: other work on this shared 2-core box can starve iperf3.
            rate = 0.0
            for _ in range(3):
                rate = max(rate, tb.iperf_mbit(src, dst))
                if rate >= 0.9 * shaped:
                    break
            assert 0.9 * shaped <= rate <= 1.05 * shaped, f"{src}->{dst}: {rate:.1f} Mbit/s"
    finally:
        tb.teardown()
    _assert_nothing_left(tid, [])


@pytest.fixture
def netns_fleet() -> Iterator[tuple[NetnsProvisioner, GatewayFleet]]:
    prov = get_provisioner("netns", grid=GRID, scale=0.1, idle_timeout=120)
    assert isinstance(prov, NetnsProvisioner)
    tid = f"nt-{uuid.uuid4().hex[:8]}"
    fleet = prov.provision({A: 1, B: 1, C: 1}, transfer_id=tid)
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    try:
        yield prov, fleet
    finally:
        prov.deprovision(fleet)
        _assert_nothing_left(tid, pids)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "mbit", "mib"),
    [((A, B), 100, 40), ((A, C, B), 400, 160)],
    ids=["direct-100mbit", "overlay-via-C-400mbit"],
)
def test_transfer_reaches_the_shaped_rate(
    netns_fleet: tuple[NetnsProvisioner, GatewayFleet],
    tmp_path: Path,
    route: tuple[str, ...],
    mbit: int,
    mib: int,
) -> None:
    _, fleet = netns_fleet
    src = tmp_path / "src"
    data = write_dataset(src, {f"part{i:02d}.bin": 8 * MiB for i in range(mib // 8)})
    plan = make_plan(list(route))
    achieved = 0.0
    # A second run only if the first was starved by other work on this shared 2-core machine.
    for attempt in range(2):
        samples: list[Progress] = []
        out = tmp_path / f"dst{attempt}"
        result = run_transfer(
            plan,
            fleet,
            f"file://{src}",
            f"file://{out}",
            journal_dir=tmp_path / "journal",
            part_size=MiB,
            progress=samples.append,
            verify="size",
        )
        assert read_tree(out) == data
        achieved = max(achieved, steady_rate_mbit(samples))
        if achieved >= 0.9 * mbit:
            break
    print(f"{'->'.join(route)}: {achieved:.1f} Mbit/s steady, {result.gbps * 1000:.1f} overall")
    assert achieved >= 0.9 * mbit, f"{achieved:.1f} Mbit/s < 90% of {mbit}"
    assert achieved <= 1.1 * mbit, f"{achieved:.1f} Mbit/s beats the {mbit} Mbit/s shaping"


def test_missing_grid_rate_is_a_clear_error() -> None:
    prov = get_provisioner("netns", grid={f"{A}->{B}": 1.0})
    with pytest.raises(ProvisionError, match="no rate for netns:A -> netns:C"):
        prov.provision({A: 1, B: 1, C: 1}, transfer_id="nt-norate")
    assert not [ns for ns in list_namespaces() if ".nt-norate." in ns]


def test_agents_get_the_byte_budget_asked_for() -> None:
    """``buffer_mib`` (a backend option) reaches every agent: its budget bounds its memory."""
    prov = get_provisioner("netns", grid=GRID, buffer_mib=96)
    tid = f"nt-budget-{uuid.uuid4().hex[:4]}"
    fleet = prov.provision({A: 1, B: 1}, transfer_id=tid)
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    try:
        for pid in pids:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--buffer-mib") + 1] == b"96", argv
    finally:
        prov.deprovision(fleet)
    _assert_nothing_left(tid, pids)


def test_agent_failure_tears_the_testbed_down() -> None:
    prov = get_provisioner("netns", grid=GRID, python="/bin/false")
    with pytest.raises(ProvisionError, match="exited"):
        prov.provision({A: 1, B: 1}, transfer_id="nt-badagent")
    _assert_nothing_left("nt-badagent", [])


def test_sweeper_removes_a_leftover_testbed() -> None:
    tb = Testbed.plan("nt-leak", [A, B, C], GRID)
    tb.build()  # "forgotten": no fleet record, the control plane died
    prov = get_provisioner("netns")
    assert prov.sweep(older_than_seconds=3600) == []
    removed = prov.sweep(transfer_id="nt-leak")
    assert sorted(r for r in removed if r.startswith("netns:")) == [
        f"netns:skyplane-ops.nt-leak.r{i}" for i in range(3)
    ]
    _assert_nothing_left("nt-leak", [])


_ECHO = """
import socket
srv = socket.create_server(("0.0.0.0", 7007))
while True:
    conn, _ = srv.accept()
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.close()
"""

_PING = """
import socket, sys, time
sock = socket.create_connection((sys.argv[1], 7007), timeout=5)
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
best = 9.0
for _ in range(5):
    t = time.perf_counter()
    sock.sendall(b"x")
    sock.recv(1)
    best = min(best, time.perf_counter() - t)
print(best)
"""


def test_delay_relay_adds_round_trip_time() -> None:
    tid = f"nt-{uuid.uuid4().hex[:8]}"
    tb = Testbed.plan(tid, [A, B], {f"{A}->{B}": 1.0})
    tb.build()
    try:
        subprocess.Popen(tb.exec_argv(B, [sys.executable, "-c", _ECHO]), start_new_session=True)

        def rtt() -> float:
            for _ in range(50):
                out = subprocess.run(
                    tb.exec_argv(A, [sys.executable, "-c", _PING, tb.address(B)]),
                    capture_output=True,
                    text=True,
                )
                if out.returncode == 0:
                    return float(out.stdout)
                time.sleep(0.1)  # the echo server is still starting
            raise AssertionError(out.stderr)

        before = rtt()
        tb.add_delay(A, B, 7007, 40.0)
        after = rtt()
        assert before < 0.01, before
        assert 0.040 <= after < 0.080, after
    finally:
        tb.teardown()
    assert not [ns for ns in list_namespaces() if f".{tid}." in ns]


def test_transfer_over_a_delayed_link(tmp_path: Path) -> None:
    prov = get_provisioner("netns", grid=GRID, delay_ms={(A, B): 30.0}, idle_timeout=60)
    tid = f"nt-{uuid.uuid4().hex[:8]}"
    fleet = prov.provision({A: 1, B: 1}, transfer_id=tid)
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    try:
        data = write_dataset(tmp_path / "src", {"x.bin": 3 * MiB, "y.txt": 10})
        run_transfer(
            make_plan([A, B]),
            fleet,
            f"file://{tmp_path / 'src'}",
            f"file://{tmp_path / 'dst'}",
            journal_dir=tmp_path / "journal",
        )
        assert read_tree(tmp_path / "dst") == data
    finally:
        prov.deprovision(fleet)
    _assert_nothing_left(tid, pids)


def test_profiler_probes_cross_a_delayed_link(tmp_path: Path) -> None:
    """Probes go through the delay relays too: measured RTT includes the added delay."""
    from skyplane_ops.profiler import refresh_grid

    run_id = f"nt-prof-{uuid.uuid4().hex[:6]}"
    result = refresh_grid(
        [A, B],
        backend="netns",
        backend_options={"grid": GRID, "delay_ms": {(A, B): 30.0}, "idle_timeout": 60},
        connections=2,
        duration_s=1.0,
        store_uri=str(tmp_path / "grid"),
        run_id=run_id,
    )
    assert not result.failed and result.measured == 2, result.failed
    for m in result.measurements:
        assert m.rtt_ms >= 30.0 and m.gbps > 0, m
    _assert_nothing_left(run_id, [])
