"""``boot_delay`` on the backends that run here: each gateway takes that long to come up.

The agent's process exists from the start (so it is found and stopped as any agent, even while
it "boots"), opens no port and writes no ready file until the delay has passed; ``provision``
returns only once every gateway answers; the plan's ``t0`` on those backends is the delay plus
the backend's own start-up, and never the cloud's 60 s fallback. Real agent processes here;
the netns case needs root.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from gateway_agent.client import GatewayClient
from skyplane_ops import api
from skyplane_ops.cli import main
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import get_provisioner, records
from skyplane_ops.provision.cancel import ProvisionCancelled
from skyplane_ops.provision.local import LocalProvisioner, _alive
from skyplane_ops.provision.netns.host import _alive as host_alive
from skyplane_ops.provision.netns.host import list_namespaces, sh
from skyplane_ops.provision.netns.testbed import NS_PREFIX
from skyplane_ops.provision.secrets import secret_bytes
from skyplane_ops.sequence import fleet as fleet_step

A, B = "aws:us-east-1", "aws:us-west-2"
DELAY = 2.0


def _tid() -> str:
    return f"boot-{uuid.uuid4().hex[:8]}"


def _wait(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_local_gateway_comes_up_after_its_boot_delay() -> None:
    prov = LocalProvisioner(boot_delay=DELAY)
    start = time.monotonic()
    fleet = prov.provision({A: 1, B: 1}, transfer_id=_tid())
    took = time.monotonic() - start
    try:
        assert took >= DELAY  # the gateways were not up before their delay
        secret = secret_bytes(fleet.secret_ref)
        for gw in fleet.gateways:  # then up, as any agent: same pid, answering
            GatewayClient(gw.host, gw.control_port, secret, timeout=10).health()
    finally:
        prov.deprovision(fleet)
    for gw in fleet.gateways:
        assert not Path(f"/proc/{gw.resources['pid']}").exists()


def test_a_booting_gateway_has_no_port_yet_and_is_swept_like_any_agent() -> None:
    prov = LocalProvisioner(boot_delay=60.0)
    tid = _tid()
    early = prov.start_early([A], transfer_id=tid)  # recorded at once, as a booting VM is
    (proc,) = early.procs.values()
    ready = Path(early.workdir) / f"{next(iter(early.procs))}.ready"
    try:
        _wait(lambda: _alive(proc.pid, str(ready)))  # found by its command line
        # Still the boot's sleeper (the agent replaces it in the same pid): no port, no file.
        assert b"time.sleep" in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert not ready.exists() and proc.poll() is None
        assert get_provisioner("local").sweep(transfer_id=tid)  # stopped while it boots
        _wait(lambda: proc.poll() is not None)
    finally:
        early.cancel()
    assert not Path(early.workdir).exists()


@pytest.mark.parametrize("bad", [-1, float("nan"), True, "30", 7200])
def test_a_bad_boot_delay_is_one_line_before_anything_starts(bad: object) -> None:
    with pytest.raises(ProvisionError, match="boot_delay") as err:
        get_provisioner("local", boot_delay=bad)
    assert "\n" not in str(err.value)
    with pytest.raises(ProvisionError, match="boot_delay"):
        get_provisioner("netns", boot_delay=bad)


def test_t0_on_the_local_backends_is_their_start_up_not_the_clouds() -> None:
    t0 = api.plan(A, B, 0.05, backend="local").details["provisioning_seconds"]
    assert 0 < t0 < 5
    booting = api.plan(A, B, 0.05, backend="local", backend_options={"boot_delay": 30})
    assert booting.details["provisioning_seconds"] == pytest.approx(t0 + 30)
    assert api.plan(A, B, 0.05, backend="aws").details["provisioning_seconds"] == 60.0


def test_plan_on_the_local_backend_does_not_print_the_clouds_t0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--src", A, "--dst", B, "--volume-gb", "0.05", "--backend", "local"]
    assert main(argv) == 0
    assert "60 s" not in capsys.readouterr().out
    argv.append("--vms-only")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "60 s provisioning" not in out and "0.5 s provisioning" in out
    assert main([*argv, "--backend-options", '{"boot_delay": 30}']) == 0
    assert "30.5 s provisioning" in capsys.readouterr().out


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")
def test_a_netns_gateway_comes_up_after_its_boot_delay() -> None:
    prov = get_provisioner("netns", default_gbps=1.0, boot_delay=DELAY)
    start = time.monotonic()
    fleet = prov.provision({"netns:A": 1, "netns:B": 1}, transfer_id=_tid())
    try:
        assert time.monotonic() - start >= DELAY
        secret = secret_bytes(fleet.secret_ref)
        for gw in fleet.gateways:
            GatewayClient(gw.host, gw.control_port, secret, timeout=10).health()
    finally:
        prov.deprovision(fleet)


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")
def test_a_netns_provisioning_cancelled_while_its_gateways_boot_leaves_nothing() -> None:
    """The run of both's cancel (``sequence.fleet.provision(cancel=...)``) reaches the netns
    backend: its agents still "boot" when it lands; the wait ends at once and the namespaces,
    with the booting agents in them, are gone."""
    tid = _tid()
    namespaces = [f"{NS_PREFIX}{tid}.r{i}" for i in range(2)]
    cancel = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fleet_step.provision(
                {"netns:A": 1, "netns:B": 1},
                backend="netns",
                backend_options={"default_gbps": 1.0, "boot_delay": 60.0},
                transfer_id=tid,
                cancel=cancel,
            )
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def booting() -> list[int]:
        if not set(namespaces) <= set(list_namespaces()):
            return []
        return [int(p) for ns in namespaces for p in sh("ip", "netns", "pids", ns).split()]

    _wait(lambda: len(booting()) >= 2 or not thread.is_alive())
    pids = booting()
    assert len(pids) >= 2, f"the agents did not start booting: {outcome}"
    cancel.set()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the boot wait did not end on cancel"
    (exc,) = outcome
    assert isinstance(exc, ProvisionCancelled)
    assert not set(namespaces) & set(list_namespaces())
    assert not [p for p in pids if host_alive(p)]  # (an unreaped zombie runs no more)
    assert records.load_fleets(transfer_id=tid) == []
