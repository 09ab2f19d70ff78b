"""The gcp backend against a FAKE Compute Engine API (``tests/fakes/gce.py``).

There is no emulator for the Compute API, so a small fake of the REST endpoints the backend
calls runs as a real HTTP server on loopback and the real ``google-cloud-compute`` SDK (REST
transport, anonymous credentials) is pointed at it by ``api_endpoint``. Its VMs are real where it
matters: each runs OpenSSH on its own loopback address with the host key and client key taken
from the VM's cloud-init user-data, so the SSH bootstrap and the agents run end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.cloudvm import (
    AGENT_USER,
    DEADLINE_HELPER,
    QuotaError,
    parse_cloud_init,
    parse_console_host_key,
)
from skyplane_ops.provision.gcp import GCPProvisioner
from skyplane_ops.provision.ssh import HostKeyError
from tests.fakes.gce import FakeGCE
from tests.fixtures.ports import free_port
from tests.integration.provision_helpers import (
    Recording,
    assert_firewall,
    assert_healthy,
    assert_regions_in_parallel,
    boot_with_a_foreign_host_key,
    kill_mid_provision,
    loopback_boot_options,
)

pytestmark = pytest.mark.emulator

CLIENT_CIDR = "198.51.100.7/32"  # TEST-NET-2: only written into the fake's rules
REGIONS = {"gcp:us-central1": 2, "gcp:europe-west1": 1}
NOTHING: dict[str, list[str]] = {
    "networks": [],
    "firewalls": [],
    "subnetworks": [],
    "instances": [],
}


@pytest.fixture
def gce() -> Iterator[FakeGCE]:
    fake = FakeGCE().start()
    try:
        yield fake
    finally:
        fake.close()


def _prov(fake: FakeGCE, **kw: Any) -> GCPProvisioner:
    kw.setdefault("bootstrap", Recording())
    return GCPProvisioner(
        project=fake.project,
        endpoint=fake.url,
        credentials="anonymous",
        client_cidr=CLIENT_CIDR,
        machine_type="n2-standard-8",
        **kw,
    )


def test_metadata_holds_no_secret_and_the_host_key_comes_from_the_serial_console(
    gce: FakeGCE,
) -> None:
    """Metadata is readable by every process on the VM and by anyone with instances.get: it
    holds public material only, refuses project-wide SSH keys, and the host key the backend
    trusts is the one the VM generated and printed on serial port 1 (old code: a host private
    key in user-data). The login has no sudo; a customer key encrypts the boot disk if given."""
    boot = Recording()
    kms = "projects/p/locations/us/keyRings/r/cryptoKeys/k"
    prov = _prov(gce, bootstrap=boot, disk_kms_key=kms)
    fleet = prov.provision(REGIONS, transfer_id="gcp-meta")
    for (zone, name), inst in gce.instances.items():
        public = prov.api.client("InstancesClient").get(
            project=gce.project, zone=zone, instance=name
        )
        assert "PRIVATE KEY" not in type(public).to_json(public), "no secret readable via the API"
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        assert set(items) == {"user-data", "block-project-ssh-keys", "disable-legacy-endpoints"}
        assert items["block-project-ssh-keys"] == "TRUE"
        config = parse_cloud_init(items["user-data"])
        assert "ssh_keys" not in config and config["ssh_genkeytypes"] == ["ed25519"]
        (agent_cfg,) = [  # the guest agent keeps the key cloud-init made
            f for f in config["write_files"] if f["path"] == "/etc/default/instance_configs.cfg"
        ]
        # ... next to the root-owned deadline (its helper, unit and one sudoers rule)
        paths = {f["path"] for f in config["write_files"]}
        assert {DEADLINE_HELPER, "/etc/sudoers.d/90-skyplane-ops"} <= paths
        assert "set_host_keys = false" in agent_cfg["content"] and agent_cfg["append"] is True
        (login,) = config["users"]
        assert login["name"] == "skyplane" and not {"sudo", "groups"} & set(login)
        assert inst["disks"][0]["diskEncryptionKey"] == {"kmsKeyName": kms}
    consoles = {name: parse_console_host_key(vm.console) for (_, name), vm in gce.vms.items()}
    assert {h.instance_id: h.ssh.host_key for h in boot.hosts} == consoles
    assert all(k and k.startswith("ssh-ed25519 ") for k in consoles.values())
    prov.deprovision(fleet)
    assert gce.leftovers() == NOTHING


@pytest.mark.sshd
@pytest.mark.slow
def test_the_agent_runs_as_the_unprivileged_login_cloud_init_made() -> None:
    """On a fake VM whose sshd logs in as the account its cloud-init names (created here like
    Ubuntu's useradd: own group only), the agent runs as that user: not root, in no sudo or
    admin group. (This machine has no ``sudo`` binary, so the "no passwordless sudo" part is
    what cloud-init is told: no ``sudo`` rule, checked in the user-data.)"""
    import grp
    import pwd

    from tests.fakes.vmuser import image_python

    ssh_port = free_port()
    fake = FakeGCE(ssh_port=ssh_port).start()
    try:
        opts = {**loopback_boot_options(ssh_port), "remote_python": image_python()}
        del opts["ssh_user"]  # the backend's default: AGENT_USER
        prov = GCPProvisioner(
            project=fake.project,
            endpoint=fake.url,
            credentials="anonymous",
            client_cidr=CLIENT_CIDR,
            **opts,
        )
        fleet = prov.provision({"gcp:us-central1": 1}, transfer_id="gcp-unpriv")
        try:
            (inst,) = fake.instances.values()
            (login,) = parse_cloud_init(inst["metadata"]["items"][0]["value"])["users"]
            assert login["name"] == AGENT_USER and "sudo" not in login
            (gw,) = fleet.gateways
            assert gw.resources["ssh"]["user"] == AGENT_USER
            account = pwd.getpwnam(AGENT_USER)
            status = Path(f"/proc/{gw.resources['pid']}/status").read_text()
            uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
            assert set(uids) == {str(account.pw_uid)} and account.pw_uid != 0
            groups = {grp.getgrgid(g).gr_name for g in os.getgrouplist(AGENT_USER, account.pw_gid)}
            assert not groups & {"root", "sudo", "admin", "wheel"}, groups
            assert gw.resources["remote_dir"].startswith(account.pw_dir + "/")
            # Its only privilege is cloud-init's one sudoers rule: the deadline helper's
            # ``extend``/``poweroff``, run as the guest's root; nothing else through sudo.
            (vm,) = fake.vms.values()
            assert vm.guest is not None and vm.login == AGENT_USER

            def as_login(*argv: str) -> int:
                return subprocess.run(
                    argv, env={"PATH": vm.guest.path}, user=account.pw_uid,
                    group=account.pw_gid, extra_groups=[], cwd="/", capture_output=True,
                    timeout=30,
                ).returncode  # fmt: skip

            assert as_login("sudo", "-n", DEADLINE_HELPER, "extend", "600") == 0
            for argv in (
                ("sudo", "-n", "id"),
                ("sudo", "-n", DEADLINE_HELPER, "start", "1", "99999"),
                ("shutdown", "-h", "now"),
            ):
                assert as_login(*argv) != 0, argv
            assert not vm.powered_off
            assert_healthy(fleet)
        finally:
            prov.deprovision(fleet)
        assert fake.leftovers() == NOTHING
    finally:
        fake.close()


def test_labels_rules_exactly_once_and_teardown(gce: FakeGCE) -> None:
    prov = _prov(gce)
    gce.lose_answer = True  # the first create's answer is lost: retried with its requestId
    fleet = prov.provision(REGIONS, transfer_id="gcp-t1", tags={"team": "data"})
    assert not gce.lose_answer, "an answer was lost"
    assert gce.inserts == 3 and len(gce.instances) == 3, "each VM created exactly once"
    assert sorted(fleet.regions) == sorted(REGIONS)
    for inst in gce.instances.values():
        labels = inst["labels"]
        assert labels["skyplane-ops_transfer-id"] == "gcp-t1" and labels["team"] == "data"
        assert labels["skyplane-ops_creator"]
        assert int(labels["skyplane-ops_expires-at"]) > int(labels["skyplane-ops_created-at"])
        assert inst["disks"][0]["initializeParams"]["labels"] == labels
        assert inst["disks"][0]["initializeParams"]["sourceImage"].endswith("ubuntu-2204-lts")
        assert inst["scheduling"]["instanceTerminationAction"] == "DELETE"
        assert inst["scheduling"]["maxRunDuration"]["seconds"] == str(6 * 3600)
        assert inst["machineType"].endswith("/n2-standard-8")
    # Networks, subnets and firewalls take no labels: named after, and describing, the transfer.
    for thing in [*gce.networks.values(), *gce.firewalls.values(), *gce.subnetworks.values()]:
        assert thing["name"].startswith("skyplane-ops-gcp-t1")
        assert json.loads(thing["description"])["skyplane-ops:transfer-id"] == "gcp-t1"
    ssh, gw = gce.firewalls["skyplane-ops-gcp-t1-ssh"], gce.firewalls["skyplane-ops-gcp-t1-gw"]
    assert ssh["sourceRanges"] == [CLIENT_CIDR] and ssh["allowed"][0]["ports"] == ["22"]
    fleet_ips = {f"{g.host}/32" for g in fleet.gateways}
    assert set(gw["sourceRanges"]) == {CLIENT_CIDR} | fleet_ips, "control plane + fleet only"
    assert gw["allowed"][0]["ports"] == ["8701", "8702", "8703"]
    key_paths = [r["key_path"] for r in fleet.resources["regions"].values()]
    prov.deprovision(fleet)
    assert gce.leftovers() == NOTHING
    assert not any(Path(p).exists() for p in key_paths)
    prov.deprovision(fleet)  # idempotent


def test_a_failure_at_every_step_leaves_nothing(gce: FakeGCE) -> None:
    """Count the mutating calls of a good run, then fail each one in turn."""
    prov = _prov(gce)
    before = len(gce.mutations)
    prov.deprovision(prov.provision(REGIONS, transfer_id="gcp-count"))
    steps = [m for m in gce.mutations[before:] if not m.startswith("DELETE")]
    assert len(steps) >= 8  # network, 2 firewalls, 2 subnets, 3 instances, firewall patch
    for n in range(1, len(steps) + 1):
        gce.fail_request(n)
        with pytest.raises(ProvisionError, match="everything created was deleted"):
            _prov(gce).provision(REGIONS, transfer_id=f"gcp-f{n}")
        gce.fail_request(None)
        assert gce.leftovers() == NOTHING, f"leftovers after failing step {n}: {steps[n - 1]}"
    boot = Recording(fail=True)
    with pytest.raises(ProvisionError, match="injected bootstrap failure"):
        _prov(gce, bootstrap=boot).provision(REGIONS, transfer_id="gcp-fboot")
    assert len(boot.hosts) == 3 and gce.leftovers() == NOTHING


def test_next_zone_when_one_has_no_capacity_and_clear_quota_errors(gce: FakeGCE) -> None:
    gce.exhausted_zones = {"us-central1-a"}
    prov = _prov(gce)
    fleet = prov.provision({"gcp:us-central1": 1}, transfer_id="gcp-zone")
    assert [g.resources["zone"] for g in fleet.gateways] == ["us-central1-b"]
    prov.deprovision(fleet)

    gce.exhausted_zones = {"us-central1-a", "us-central1-b", "us-central1-c"}
    with pytest.raises(QuotaError, match=r"gcp us-central1: no capacity for n2-standard-8"):
        prov.provision({"gcp:us-central1": 1}, transfer_id="gcp-nocap")
    gce.exhausted_zones = set()
    gce.cpu_quota = 8
    with pytest.raises(QuotaError, match=r"gcp us-central1: quota.*N2_CPUS.*deleted"):
        prov.provision({"gcp:us-central1": 2}, transfer_id="gcp-quota")
    assert gce.leftovers() == NOTHING


def test_spot_option(gce: FakeGCE) -> None:
    prov = _prov(gce, spot=True)
    fleet = prov.provision({"gcp:us-central1": 1}, transfer_id="gcp-spot")
    (inst,) = gce.instances.values()
    assert inst["scheduling"]["provisioningModel"] == "SPOT"
    assert inst["scheduling"]["instanceTerminationAction"] == "DELETE"
    prov.deprovision(fleet)


_KILLED_CHILD = """
import sys, time
from skyplane_ops.provision.gcp import GCPProvisioner
def hang(hosts, tid, ref):
    print("instances-up", flush=True)
    time.sleep(3600)
GCPProvisioner(project=sys.argv[1], endpoint=sys.argv[2], credentials="anonymous",
               client_cidr="198.51.100.7/32", bootstrap=hang).provision(
    {"gcp:us-central1": 1, "gcp:asia-east1": 1}, transfer_id="gcp-killed")
"""


def test_sweeper_after_sigkill_of_the_control_plane(
    gce: FakeGCE, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control plane dies (SIGKILL) mid-provision; ``deprovision --all`` finds the rest."""
    keep = _prov(gce).provision({"gcp:us-central1": 1}, transfer_id="gcp-keep")
    kill_mid_provision(_KILLED_CHILD, [gce.project, gce.url], b"instances-up")
    assert any("gcp-killed" in n for n in gce.leftovers()["instances"])

    options = tmp_path / "opts.json"
    options.write_text(
        json.dumps(
            {"gcp": {"project": gce.project, "endpoint": gce.url, "credentials": "anonymous"}}
        )
    )
    argv = ["deprovision", "--transfer-id", "gcp-killed", "--backend", "gcp"]
    assert cli.main([*argv, "--options", str(options)]) == 0
    out = capsys.readouterr().out
    assert "instance/skyplane-ops-gcp-killed-us-central1-0" in out
    left = gce.leftovers()
    assert all("gcp-killed" not in n for names in left.values() for n in names)
    assert left["instances"] == ["skyplane-ops-gcp-keep-us-central1-0"], "others' are kept"
    assert _prov(gce).sweep(older_than_seconds=3600) == []  # gcp-keep is fresh
    assert cli.main(["deprovision", "--all", "--backend", "gcp", "--options", str(options)]) == 0
    assert gce.leftovers() == NOTHING
    assert not records.load_fleets(transfer_id=keep.transfer_id)


@pytest.mark.sshd
@pytest.mark.slow
def test_ssh_bootstrap_with_the_host_key_from_the_serial_console(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real sshd per fake VM with a host key made on the VM and read back from its serial
    console; the agent starts and answers."""
    ssh_port = free_port()
    fake = FakeGCE(ssh_port=ssh_port).start()
    try:
        prov = GCPProvisioner(
            project=fake.project,
            endpoint=fake.url,
            credentials="anonymous",
            client_cidr=CLIENT_CIDR,
            **loopback_boot_options(ssh_port),
        )
        fleet = prov.provision({"gcp:us-central1": 1, "gcp:europe-west1": 1}, transfer_id="gcp-e2e")
        try:
            for gw in fleet.gateways:
                assert gw.resources["ssh"]["host_key"].startswith("ssh-ed25519 ")
            assert_healthy(fleet)
            (inst, *_) = fake.instances.values()
            user_data = parse_cloud_init(inst["metadata"]["items"][0]["value"])
            assert "ssh_keys" not in user_data
        finally:
            prov.deprovision(fleet)
        assert fake.leftovers() == NOTHING

        # A VM whose host key is not the one we generated is refused, and nothing is left.
        boot_with_a_foreign_host_key(monkeypatch)
        with pytest.raises(HostKeyError, match="everything created was deleted"):
            prov.provision({"gcp:us-central1": 1}, transfer_id="gcp-mitm")
        assert fake.leftovers() == NOTHING
    finally:
        fake.close()


@pytest.mark.sshd
@pytest.mark.slow
def test_firewall_admits_the_control_plane_and_the_fleet_and_refuses_a_stranger() -> None:
    """VMs as network namespaces on a bridge, with the fake's firewall rules enforced by
    nftables in each VM: the SSH bootstrap (control plane) gets in, gateways reach each other's
    ports, a host on the same network that is not in the fleet is refused on every port."""
    from tests.fakes.netvm import CloudNet, available

    why = available()
    if why:
        pytest.skip(f"CloudNet {why}")
    net = CloudNet()
    fake = FakeGCE(ssh_port=22).start()
    fake.vm_net = net
    try:
        prov = GCPProvisioner(
            project=fake.project,
            endpoint=fake.url,
            credentials="anonymous",
            client_cidr=f"{net.gateway}/32",  # this process, as the VMs see it
            ssh_user=os.environ.get("USER") or "root",
            remote_python=sys.executable,
            poweroff_on_idle=False,  # these "VMs" share the test machine's kernel
            idle_timeout=120,
        )
        fleet = prov.provision({"gcp:us-central1": 1, "gcp:europe-west1": 1}, transfer_id="gcp-fw")
        try:
            a, b = fleet.gateways
            ns = {vm.address: vm.netns for vm in fake.vms.values()}
            assert a.control_port == 8701 and a.host in ns and b.host in ns
            assert_firewall(net, fleet, ns)
        finally:
            prov.deprovision(fleet)
        assert fake.leftovers() == NOTHING
    finally:
        fake.close()
        net.close()


def test_regions_are_provisioned_in_parallel(gce: FakeGCE) -> None:
    """Every region's provisioning is running at the same moment (a barrier all must reach)."""
    assert_regions_in_parallel(_prov(gce), REGIONS, "gcp-par")
