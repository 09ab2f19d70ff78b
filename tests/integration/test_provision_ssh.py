"""The ssh backend against real OpenSSH sshd servers on loopback (one per emulated host).

The agent that gets bootstrapped is the real ``gateway_agent``, shipped as the zip bundle and
started detached by sshd's shell; its health is checked through its authenticated control API.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway_agent.client import GatewayClient
from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.profiler import GridStore
from skyplane_ops.provision import get_provisioner, records
from skyplane_ops.provision.bundle import build_wheelhouse
from skyplane_ops.provision.cancel import ProvisionCancelled
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import delete_secret, secret_bytes
from skyplane_ops.provision.ssh import (
    GatewayStartError,
    HostKeyError,
    HostUnreachableError,
    SSHAuthError,
    SSHInventory,
    connect,
)
from skyplane_ops.testing.sshd import SshdServer
from skyplane_ops.testing.transfer import make_plan, read_tree, write_dataset
from skyplane_ops.transfer import run_transfer
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.sshd

Factory = Callable[[int], list[SshdServer]]


def _entry(server: SshdServer, remote_root: Path, **over: Any) -> dict[str, Any]:
    return server.inventory_entry(remote_root, **over)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent, sshd's shell, is gone).
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def _remaining_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*")] if root.exists() else []


@pytest.mark.slow
def test_fleet_on_three_sshd_hosts_bootstraps_and_tears_down(
    sshd_factory: Factory, tmp_path: Path
) -> None:
    servers = sshd_factory(3)
    root = tmp_path / "remote"
    inventory = {
        "regions": {
            "local:a": [_entry(servers[0], root), _entry(servers[1], root)],
            "local:b": [_entry(servers[2], root)],
        }
    }
    prov = get_provisioner("ssh", inventory=inventory)
    fleet = prov.provision({"local:a": 2, "local:b": 1}, transfer_id="ssh-t1")
    try:
        assert len(fleet.gateways) == 3 and fleet.regions == ["local:a", "local:b"]
        secret = secret_bytes(fleet.secret_ref)
        assert stat.S_IMODE(os.stat(fleet.secret_ref).st_mode) == 0o600
        pids = []
        for gw in fleet.gateways:
            health = GatewayClient(gw.host, gw.control_port, secret).health()
            assert health  # the real agent answered a signed request
            remote = Path(gw.resources["remote_dir"])
            assert stat.S_IMODE((remote / "secret").stat().st_mode) == 0o600
            assert json.loads((remote / "ready.json").read_text())["pid"] == gw.resources["pid"]
            pids.append(int(gw.resources["pid"]))
        assert all(_alive(p) for p in pids)
        # The fleet survives a JSON round trip (XCom) and deprovisions from that copy.
        fleet = GatewayFleet.from_json(fleet.to_json())
    finally:
        prov.deprovision(fleet)
    assert not any(_alive(p) for p in pids), "an agent survived tear-down"
    assert _remaining_files(root) == [], "uploaded files survived tear-down"
    assert not Path(fleet.secret_ref).exists()


@pytest.mark.slow
def test_real_transfer_through_an_ssh_fleet(sshd_factory: Factory, tmp_path: Path) -> None:
    servers = sshd_factory(3)
    root = tmp_path / "remote"
    regions = ["ssh:src", "ssh:relay", "ssh:dst"]
    inventory = {r: [_entry(s, root)] for r, s in zip(regions, servers, strict=True)}
    prov = get_provisioner("ssh", inventory=inventory)
    plan = make_plan(regions)
    fleet = prov.provision(plan.vms, transfer_id="ssh-xfer")
    try:
        src, dst = tmp_path / "src", tmp_path / "dst"
        data = write_dataset(src, {"big.bin": 5 * 1024 * 1024 + 7, "dir/small.txt": 999})
        result = run_transfer(
            plan, fleet, f"file://{src}", f"file://{dst}", journal_dir=tmp_path / "journal"
        )
        assert read_tree(dst) == data
        assert result.verified and result.route == ["ssh:src -> ssh:relay -> ssh:dst (100%)"]
    finally:
        prov.deprovision(fleet)
    assert _remaining_files(root) == []


def test_wrong_host_key_is_refused_and_nothing_is_left(
    sshd_factory: Factory, tmp_path: Path
) -> None:
    good, other = sshd_factory(2)
    root = tmp_path / "remote"
    inventory = {
        "regions": {
            "local:a": [_entry(good, root)],
            # Host 2 claims to be `good` (its key) but is a different machine.
            "local:b": [_entry(other, root, host_key=good.host_key)],
        }
    }
    prov = get_provisioner("ssh", inventory=inventory)
    with pytest.raises(HostKeyError, match="does not match"):
        prov.provision({"local:a": 1, "local:b": 1}, transfer_id="ssh-badkey")
    assert _remaining_files(root) == [], "the healthy host was not cleaned up"
    secrets_dir = Path(os.environ["SKYPLANE_OPS_HOME"]) / "secrets"
    assert not (secrets_dir / "ssh-badkey.secret").exists()


def test_unknown_host_key_needs_explicit_opt_in(sshd_factory: Factory, tmp_path: Path) -> None:
    (server,) = sshd_factory(1)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    inv = SSHInventory.from_dict(
        {"local:a": [_entry(server, tmp_path, host_key=None, known_hosts=str(known_hosts))]}
    )
    host = inv.hosts["local:a"][0]
    with pytest.raises(HostKeyError, match="unknown"):
        connect(host)
    connect(host, accept_unknown_host_keys=True).close()
    # A known_hosts file with the right key works without opting in.
    known_hosts.write_text(f"[127.0.0.1]:{server.port} {server.host_key}\n")
    connect(host).close()


def test_wrong_credentials_are_a_clear_error(sshd_factory: Factory, tmp_path: Path) -> None:
    (server,) = sshd_factory(1)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    prov = get_provisioner(
        "ssh",
        inventory={"local:a": [_entry(server, tmp_path / "remote", key_path=str(stranger))]},
    )
    with pytest.raises(SSHAuthError, match="refused our credentials"):
        prov.provision({"local:a": 1}, transfer_id="ssh-auth")
    assert _remaining_files(tmp_path / "remote") == []


def test_unreachable_host_is_a_clear_error(sshd_factory: Factory, tmp_path: Path) -> None:
    (server,) = sshd_factory(1)
    dead = {**_entry(server, tmp_path / "remote"), "port": free_port()}
    prov = get_provisioner("ssh", inventory={"local:a": [dead]}, connect_timeout=3)
    with pytest.raises(HostUnreachableError, match="cannot reach"):
        prov.provision({"local:a": 1}, transfer_id="ssh-dead")


def test_inventory_missing_a_plan_region_fails_before_any_connection(tmp_path: Path) -> None:
    inventory = {"local:a": [{"address": "127.0.0.1", "port": free_port()}]}
    prov = get_provisioner("ssh", inventory=inventory)
    with pytest.raises(
        ProvisionError, match=r"region 'local:b' needs 1 host\(s\), the inventory has 0"
    ):
        prov.provision({"local:a": 1, "local:b": 1}, transfer_id="ssh-empty")
    with pytest.raises(ProvisionError, match="needs 2"):
        prov.provision({"local:a": 2}, transfer_id="ssh-empty")


def test_host_python_without_agent_dependencies_is_explained(
    sshd_factory: Factory, tmp_path: Path
) -> None:
    (server,) = sshd_factory(1)
    # A python with -I -S cannot see any site-packages: the agent's C-extension deps are missing.
    entry = _entry(server, tmp_path / "remote", python=f"{sys.executable} -I -S")
    prov = get_provisioner("ssh", inventory={"local:a": [entry]})
    with pytest.raises(GatewayStartError, match="lacks the agent's dependencies"):
        prov.provision({"local:a": 1}, transfer_id="ssh-nodeps")
    assert _remaining_files(tmp_path / "remote") == []


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(
        ProvisionError, match=r"unknown provisioning backend 'gce'.*aws.*local.*ssh"
    ):
        get_provisioner("gce")


def test_inventory_loads_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text(
        '[[regions."aws:us-east-1"]]\naddress = "10.0.0.5"\nuser = "ubuntu"\n'
        'host_key = "ssh-ed25519 AAAA"\n'
    )
    inv = SSHInventory.load(path)
    (host,) = inv.hosts["aws:us-east-1"]
    assert (host.address, host.user, host.port, host.region) == (
        "10.0.0.5",
        "ubuntu",
        22,
        "aws:us-east-1",
    )
    path.write_text("[[regions.x]]\nbogus = 1\n")
    with pytest.raises(ProvisionError, match="bad inventory entry"):
        SSHInventory.load(path)


@pytest.mark.slow
def test_deprovision_command_sweeps_a_lost_fleet_by_tag(
    sshd_factory: Factory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = sshd_factory(2)
    root = tmp_path / "remote"
    # Separate remote roots: these loopback "hosts" share one filesystem, real hosts do not.
    inventory = {
        "local:a": [_entry(servers[0], root / "h0")],
        "local:b": [_entry(servers[1], root / "h1")],
    }
    inv_path = tmp_path / "hosts.json"
    inv_path.write_text(json.dumps(inventory))
    prov = get_provisioner("ssh", inventory=inventory)
    fleet = prov.provision({"local:a": 1, "local:b": 1}, transfer_id="ssh-lost")
    pids = [int(g.resources["pid"]) for g in fleet.gateways]
    records.forget_fleet(fleet)  # the control plane died and its record is gone too
    delete_secret(fleet.secret_ref)

    assert prov.sweep(older_than_seconds=3600) == [], "fresh gateways are not 'older than 1h'"
    assert prov.sweep(transfer_id="someone-else") == []
    assert all(_alive(p) for p in pids)
    argv = ["deprovision", "--transfer-id", "ssh-lost", "--backend", "ssh"]
    assert cli.main([*argv, "--inventory", str(inv_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("deleted ssh:") == 2 and "2 resource(s) deleted" in out
    assert not any(_alive(p) for p in pids)
    assert [p for p in _remaining_files(root) if p.is_file()] == []


def test_deprovision_command_needs_an_inventory_for_ssh(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["deprovision", "--all", "--backend", "ssh"]) == 2
    assert "needs --inventory" in capsys.readouterr().err


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """Agent dependency wheels for the system python, downloaded once with pip (cached)."""
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = Path(".cache") / "wheelhouse-test" / f"py{version}"
    if not (list(dest.glob("zstandard-*.whl")) and list(dest.glob("httptools-*.whl"))):
        try:
            build_wheelhouse(dest, python_version=version)
        except ProvisionError as exc:
            pytest.skip(f"cannot download agent wheels from PyPI here: {exc}")
    return dest


@pytest.mark.slow
@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system python3")
def test_agent_dependencies_come_from_an_uploaded_wheelhouse(
    sshd_factory: Factory, tmp_path: Path, wheelhouse: Path
) -> None:
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import zstandard"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the system python already has the agent's dependencies")
    (server,) = sshd_factory(1)
    root = tmp_path / "remote"
    entry = _entry(server, root, python=SYSTEM_PYTHON)
    prov = get_provisioner("ssh", inventory={"local:a": [entry]}, wheelhouse=str(wheelhouse))
    fleet = prov.provision({"local:a": 1}, transfer_id="ssh-wheels")
    try:
        (gw,) = fleet.gateways
        assert GatewayClient(gw.host, gw.control_port, secret_bytes(fleet.secret_ref)).health()
        deps = Path(gw.resources["remote_dir"]) / "deps"
        assert (deps / "zstandard").is_dir() and (deps / "httptools").is_dir()
        cmdline = Path(f"/proc/{gw.resources['pid']}/cmdline").read_bytes()
        assert cmdline.startswith(SYSTEM_PYTHON.encode())
    finally:
        prov.deprovision(fleet)
    assert _remaining_files(root) == []


def test_gateway_that_loses_its_control_plane_stops_itself(
    sshd_factory: Factory, tmp_path: Path
) -> None:
    (server,) = sshd_factory(1)
    root = tmp_path / "remote"
    prov = get_provisioner("ssh", inventory={"local:a": [_entry(server, root)]}, idle_timeout=1.5)
    fleet = prov.provision({"local:a": 1}, transfer_id="ssh-idle")
    pid = int(fleet.gateways[0].resources["pid"])
    try:
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # nobody talks to the agent: its idle timer must fire
        assert not _alive(pid), "the agent kept running without its control plane"
    finally:
        prov.deprovision(fleet)  # still removes the uploaded files
    assert _remaining_files(root) == []


@pytest.mark.slow
def test_own_sites_through_the_cli_with_control_and_per_peer_data_addresses(
    sshd_factory: Factory, tmp_path: Path, capsys
) -> None:
    """``profile`` then ``cp`` on the ssh backend, with the inventory as the only universe.

    Site b's agent listens only on 127.0.0.2: SSH reaches it at 127.0.0.1 (sshd), the control
    plane at its ``control_address``, and its peers at their ``peer_addresses`` entry; its
    default ``data_address`` 127.0.0.3 has no listener, so the profile and the copy work only
    if every address is chosen per purpose and per peer.
    """
    servers = sshd_factory(3)
    root = tmp_path / "remote"
    b_host = _entry(
        servers[2],
        root,
        bind_host="127.0.0.2",
        control_address="127.0.0.2",
        data_address="127.0.0.3",
        peer_addresses={"site:a": "127.0.0.2", "site:relay": "127.0.0.2"},
    )
    inventory = {
        "regions": {
            "site:a": [_entry(servers[0], root)],
            "site:relay": {"hosts": [_entry(servers[1], root)], "egress_usd_per_gb": 0.02},
            "site:b": {"hosts": [b_host], "vm_usd_per_hour": 0.1},
            "site:empty": {"hosts": []},
        }
    }
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    options = json.dumps({"inventory": str(inv)})
    store = str(tmp_path / "grid")
    common = ["--backend", "ssh", "--backend-options", options]
    profile = ["profile", *common, "--store", store, "--connections", "2,8", "--duration", "0.6"]
    assert cli.main(profile) == 0
    measured = GridStore(store).measurements()
    pairs = {m.pair for m in measured if not m.no_link}
    sites = ["site:a", "site:relay", "site:b"]
    assert pairs == {(s, d) for s in sites for d in sites if s != d}
    assert {m.connections for m in measured} == {2, 8}
    capsys.readouterr()

    src, dst = tmp_path / "src", tmp_path / "dst"
    data = write_dataset(src, {"big.bin": 3 * 1024 * 1024 + 5, "small.txt": 999})
    cp = ["cp", f"file://{src}", f"file://{dst}", "--src-region", "site:a"]
    assert cli.main([*cp, "--dst-region", "site:b", *common, "--grid-store", store, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert read_tree(dst) == data
    used = {r for p in out["plan_summary"]["paths"] for r in p["regions"]}
    assert used <= set(sites) and all(n <= 1 for n in out["plan_summary"]["vms"].values())
    assert _remaining_files(root) == []


def test_a_cancel_while_the_agent_starts_removes_it(sshd_factory: Factory, tmp_path: Path) -> None:
    """The run of both's cancel (``provision.cancel``) reaches the ssh backend: it lands while
    the agent still starts (its python sleeps before serving, as a slow host would); the
    ready wait ends at once and the agent and its files are removed."""
    (server,) = sshd_factory(1)
    root = tmp_path / "remote"
    slow = tmp_path / "slow-python"
    py = sys.executable  # the serving one sleeps first, in the same pid (as ``boot_delay``)
    boot = "import os,sys,time;time.sleep(60);os.execv(sys.argv[1],sys.argv[1:])"
    slow.write_text(
        f'#!/bin/sh\ncase "$*" in *--ready-file*) exec {py} -c "{boot}" {py} "$@";; esac\n'
        f'exec {py} "$@"\n'
    )
    slow.chmod(0o755)
    inventory = {"regions": {"local:a": [_entry(server, root, python=str(slow))]}}
    prov = get_provisioner("ssh", inventory=inventory)
    cancel = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            prov.provision({"local:a": 1}, transfer_id="ssh-cancel", cancel=cancel)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    agent_log = list(root.rglob("agent.log"))
    deadline = time.monotonic() + 60
    while not agent_log:  # the agent was started: it "boots"
        assert time.monotonic() < deadline and thread.is_alive(), f"no agent: {outcome}"
        time.sleep(0.05)
        agent_log = list(root.rglob("agent.log"))
    cancel.set()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the ready wait did not end on cancel"
    (exc,) = outcome
    assert isinstance(exc, ProvisionCancelled)
    assert _remaining_files(root) == [], "the cancelled agent's files survived"
    assert not _running_under(root), "the cancelled agent still runs"
    assert records.load_fleets(transfer_id="ssh-cancel") == []


def _running_under(root: Path) -> list[int]:
    """Live processes whose command line names ``root`` (an agent's files are under it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(root).encode() in (proc / "cmdline").read_bytes() and _alive(int(proc.name)):
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found
