"""The azure backend against a FAKE Azure Resource Manager (``tests/fakes/azure_compute.py``).

There is no emulator for ARM's compute and network APIs, so a small fake of the endpoints the
backend calls runs as a real HTTPS server on loopback and the real ``azure-mgmt-*`` SDKs are
pointed at it by ``base_url`` (with a static test token and the fake's certificate). Its VMs are
real where it matters: each runs OpenSSH on its own loopback address with the host key and
client key taken from the VM's custom data, so the SSH bootstrap runs end to end.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.azure import VM_CONTRIBUTOR, AzureProvisioner
from skyplane_ops.provision.azure.arm import RELEASE_SCRIPT, SELF_RELEASE_ACTIONS, self_release_role
from skyplane_ops.provision.cloudvm import (
    TAG_CREATED,
    TAG_CREATOR,
    TAG_EXPIRES,
    TAG_TRANSFER,
    QuotaError,
    parse_cloud_init,
)
from skyplane_ops.provision.cloudvm.common import deadline_grant
from skyplane_ops.provision.ssh import HostKeyError
from tests.fakes.azure_compute import FakeARM
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
REGIONS = {"azure:westus2": 2, "azure:canadacentral": 1}


@pytest.fixture
def arm() -> Iterator[FakeARM]:
    fake = FakeARM().start()
    try:
        yield fake
    finally:
        fake.close()


def _prov(fake: FakeARM, **kw: Any) -> AzureProvisioner:
    kw.setdefault("bootstrap", Recording())
    kw.setdefault("client_cidr", CLIENT_CIDR)
    return AzureProvisioner(
        subscription_id=fake.subscription,
        base_url=fake.url,
        ca_bundle=fake.ca_bundle,
        credential="fake",
        vm_size="Standard_D8_v5",
        **kw,
    )


def test_tags_rules_exactly_once_and_teardown(arm: FakeARM) -> None:
    arm.lose_vm_answer = True  # the first VM's answer is lost: the SDK retries the PUT
    prov = _prov(arm)
    fleet = prov.provision(REGIONS, transfer_id="az-t1", tags={"team": "data"})
    assert arm.vm_creations == 3 and len(arm.of_type("virtualMachines")) == 3, "exactly once"
    tagged = [r for r in arm.store.values() if "location" in r]  # every taggable resource
    assert len(tagged) == 2 * 3 + 3 * 3  # per region: group, nsg, vnet; per VM: ip, nic, vm
    for res in tagged:
        tags = res["tags"]
        assert tags[TAG_TRANSFER] == "az-t1" and tags["team"] == "data", res["id"]
        assert tags[TAG_CREATOR] and tags[TAG_EXPIRES] > tags[TAG_CREATED]
    for vm in arm.of_type("virtualMachines"):
        props = vm["properties"]
        assert props["hardwareProfile"]["vmSize"] == "Standard_D8_v5"
        assert props["storageProfile"]["imageReference"]["sku"] == "22_04-lts-gen2"
        assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
        assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"]
        # The VM deletes itself (not deallocates: that keeps billing disk and IP) before its
        # root deadline powers it off and on shutdown, and has the right to do only that.
        user_data = parse_cloud_init(base64.b64decode(props["osProfile"]["customData"]).decode())
        files = {f["path"]: f["content"] for f in user_data["write_files"]}
        release = files["/usr/local/sbin/skyplane-ops-before-poweroff"]
        assert "-X DELETE" in release and "deallocate" not in release
        assert files["/usr/local/sbin/skyplane-ops-release"] == release
        assert "skyplane-ops-deadline" in files["/etc/sudoers.d/90-skyplane-ops"]
    (assignment, *_) = arm.of_type("roleAssignments")
    assert assignment["properties"]["roleDefinitionId"] == self_release_role(arm.subscription)[0]
    assert "/virtualMachines/" in assignment["id"], "scoped to the VM itself"
    for nsg in arm.of_type("networkSecurityGroups"):
        rules = {r["name"]: r["properties"] for r in nsg["properties"]["securityRules"]}
        assert rules["ssh-from-control-plane"]["sourceAddressPrefixes"] == [CLIENT_CIDR]
        gw = rules["gateways-from-fleet"]
        assert gw["destinationPortRanges"] == ["8701", "8702", "8703"]
        fleet_ips = {f"{g.host}/32" for g in fleet.gateways}
        assert set(gw["sourceAddressPrefixes"]) == {CLIENT_CIDR} | fleet_ips
    key_paths = [r["key_path"] for r in fleet.resources["regions"].values()]
    prov.deprovision(fleet)
    assert arm.leftovers() == []
    assert not any(Path(p).exists() for p in key_paths)
    prov.deprovision(fleet)  # idempotent


def test_vm_identity_holds_only_its_dead_man_switch_and_the_login_has_no_sudo(
    arm: FakeARM,
) -> None:
    """Each VM's identity gets one custom role, exactly the call of its self-delete (a
    ``DELETE`` of the VM; disk, NIC and IP go with it by ``deleteOption``), at its own scope
    (not Virtual Machine Contributor: run-command, resize, re-image...); without ``self_delete``
    (old name ``self_deallocate``) it gets no identity at all. The VM's one login has no sudo
    except the deadline helper's one rule, and the OS disk takes the customer key when one is
    given (Azure encrypts it at rest either way)."""
    des = (
        f"/subscriptions/{arm.subscription}/resourceGroups/keys/providers/"
        "Microsoft.Compute/diskEncryptionSets/des1"
    )
    prov = _prov(arm, disk_encryption_set_id=des)
    fleet = prov.provision(REGIONS, transfer_id="az-id")
    role_id, _ = self_release_role(arm.subscription)
    (role,) = arm.role_definitions.values()
    assert role["id"] == role_id
    assert role["properties"]["permissions"] == [
        {"actions": list(SELF_RELEASE_ACTIONS), "notActions": [], "dataActions": [],
         "notDataActions": []}
    ]  # fmt: skip
    assert SELF_RELEASE_ACTIONS == ("Microsoft.Compute/virtualMachines/delete",)
    # ... which is every call the release script makes: one DELETE of the VM's own id.
    assert RELEASE_SCRIPT.count(" -X ") == 1 and "-X DELETE" in RELEASE_SCRIPT
    assert '"$arm$id?' in RELEASE_SCRIPT and "deallocate" not in RELEASE_SCRIPT
    assert role["properties"]["assignableScopes"] == [f"/subscriptions/{arm.subscription}"]
    vms = {vm["id"].lower(): vm for vm in arm.of_type("virtualMachines")}
    assignments = arm.of_type("roleAssignments")
    assert len(assignments) == len(vms) == 3
    for a in assignments:
        props = a["properties"]
        assert (
            props["roleDefinitionId"] == role_id and VM_CONTRIBUTOR not in props["roleDefinitionId"]
        )
        scope = a["id"].lower().rsplit("/providers/microsoft.authorization/", 1)[0]
        assert props["principalId"] == vms[scope]["identity"]["principalId"], "its own VM only"
    # What ARM lets each identity do: delete its own VM; not deallocate it, not touch another.
    ids = sorted(vms)
    for own, other in zip(ids, [*ids[1:], ids[0]], strict=True):
        token = {"Authorization": f"Bearer vm-identity:{vms[own]['identity']['principalId']}"}
        assert arm.refuse(token, "DELETE", own) is None
        assert arm.refuse(token, "POST", f"{own}/deallocate") is not None
        assert arm.refuse(token, "PUT", own) is not None
        assert arm.refuse(token, "DELETE", other) is not None
    for vm in vms.values():
        profile = vm["properties"]["osProfile"]
        text = base64.b64decode(profile["customData"]).decode()
        (login,) = parse_cloud_init(text)["users"]
        assert login["name"] == profile["adminUsername"] == "skyplane"
        assert not {"sudo", "groups"} & set(login), "no sudo, no admin groups"
        # no sudo except the deadline helper's ``extend``/``poweroff`` rule
        assert text.count("NOPASSWD") == 1
        (sudoers,) = [
            f for f in parse_cloud_init(text)["write_files"] if f["path"].startswith("/etc/sudoers")
        ]
        assert sudoers["content"] == deadline_grant("skyplane")
        disk = vm["properties"]["storageProfile"]["osDisk"]["managedDisk"]
        assert disk["diskEncryptionSet"] == {"id": des}
    prov.deprovision(fleet)

    bare = _prov(arm, self_deallocate=False)
    fleet = bare.provision({"azure:westus2": 1}, transfer_id="az-noid")
    (vm,) = arm.of_type("virtualMachines")
    assert "identity" not in vm and arm.of_type("roleAssignments") == []
    bare.deprovision(fleet)
    assert arm.leftovers() == []


def test_the_self_delete_role_is_defined_once_by_an_administrator_not_by_the_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The control plane only reads the role (it holds no ``roleDefinitions/write``, which
    would let it rewrite the one role its assignment condition allows): on a subscription
    where nobody ran the setup, provisioning fails before creating anything, naming the
    command; ``skyplane-ops setup --backend azure`` prints the role, ``--apply`` defines it."""
    fake = FakeARM(gateway_role=False).start()
    try:
        with pytest.raises(ProvisionError, match=r"setup --backend azure --apply"):
            _prov(fake).provision(REGIONS, transfer_id="az-norole")
        assert fake.mutations == [], "nothing created"
        assert fake.leftovers() == [] and fake.role_definitions == {}
        options = json.dumps(
            {"subscription_id": fake.subscription, "base_url": fake.url,
             "ca_bundle": fake.ca_bundle, "credential": "fake"}
        )  # fmt: skip
        assert cli.main(["setup", "--backend", "azure", "--backend-options", options]) == 0
        printed = json.loads(capsys.readouterr().out)
        role_id, body = self_release_role(fake.subscription)
        assert printed["needs"] == [{"kind": "role definition", "id": role_id, "definition": body}]
        assert printed["applied"] is False and fake.role_definitions == {}, "printed only"
        assert (
            cli.main(["setup", "--backend", "azure", "--backend-options", options, "--apply"]) == 0
        )
        assert json.loads(capsys.readouterr().out)["applied"] is True
        assert list(fake.role_definitions) == [role_id.lower()]
        prov = _prov(fake)
        prov.deprovision(prov.provision({"azure:westus2": 1}, transfer_id="az-role"))
        assert fake.leftovers() == []
    finally:
        fake.close()


def test_a_failure_at_every_step_leaves_nothing(arm: FakeARM) -> None:
    prov = _prov(arm)
    before = len(arm.mutations)
    prov.deprovision(prov.provision(REGIONS, transfer_id="az-count"))
    steps = [m for m in arm.mutations[before:] if not m.startswith("DELETE")]
    assert len(steps) >= 17  # 2 groups, 2 nsgs, 2 vnets, 3 x (ip, nic, vm, role), 2 rules
    for n in range(1, len(steps) + 1):
        arm.fail_request(n)
        with pytest.raises(ProvisionError, match="everything created was deleted"):
            _prov(arm).provision(REGIONS, transfer_id=f"az-f{n}")
        arm.fail_request(None)
        assert arm.leftovers() == [], f"leftovers after failing step {n}: {steps[n - 1]}"
    boot = Recording(fail=True)
    with pytest.raises(ProvisionError, match="injected bootstrap failure"):
        _prov(arm, bootstrap=boot).provision(REGIONS, transfer_id="az-fboot")
    assert len(boot.hosts) == 3 and arm.leftovers() == []


def test_next_zone_on_no_capacity_and_clear_quota_errors(arm: FakeARM) -> None:
    arm.exhausted_zones = {"westus2-1"}
    prov = _prov(arm)
    fleet = prov.provision({"azure:westus2": 1}, transfer_id="az-zone")
    assert [vm["zones"] for vm in arm.of_type("virtualMachines")] == [["2"]]
    prov.deprovision(fleet)
    arm.exhausted_zones = {"westus2-1", "westus2-2", "westus2-3"}
    with pytest.raises(QuotaError, match=r"azure westus2: no capacity for Standard_D8_v5"):
        prov.provision({"azure:westus2": 1}, transfer_id="az-nocap")
    arm.exhausted_zones = set()
    arm.core_quota = 8
    with pytest.raises(QuotaError, match=r"azure westus2: quota.*standardDSv5Family Cores"):
        prov.provision({"azure:westus2": 2}, transfer_id="az-quota")
    assert arm.leftovers() == []


def test_spot_option(arm: FakeARM) -> None:
    prov = _prov(arm, spot=True)
    fleet = prov.provision({"azure:westus2": 1}, transfer_id="az-spot")
    (vm,) = arm.of_type("virtualMachines")
    assert vm["properties"]["priority"] == "Spot"
    assert vm["properties"]["evictionPolicy"] == "Delete"
    prov.deprovision(fleet)


_KILLED_CHILD = """
import sys, time
from skyplane_ops.provision.azure import AzureProvisioner
def hang(hosts, tid, ref):
    print("vms-up", flush=True)
    time.sleep(3600)
AzureProvisioner(subscription_id=sys.argv[1], base_url=sys.argv[2], ca_bundle=sys.argv[3],
                 credential="fake", client_cidr="198.51.100.7/32", bootstrap=hang).provision(
    {"azure:westus2": 1, "azure:japaneast": 1}, transfer_id="az-killed")
"""


def test_sweeper_after_sigkill_of_the_control_plane(
    arm: FakeARM, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _prov(arm).provision({"azure:westus2": 1}, transfer_id="az-keep")
    kill_mid_provision(_KILLED_CHILD, [arm.subscription, arm.url, arm.ca_bundle], b"vms-up")
    assert any("az-killed" in r for r in arm.leftovers())
    opts = {
        "subscription_id": arm.subscription,
        "base_url": arm.url,
        "ca_bundle": arm.ca_bundle,
        "credential": "fake",
    }
    options = tmp_path / "opts.json"
    options.write_text(json.dumps({"azure": opts}))
    argv = ["deprovision", "--transfer-id", "az-killed", "--backend", "azure"]
    assert cli.main([*argv, "--options", str(options)]) == 0
    out = capsys.readouterr().out
    assert "azure:resourceGroups/skyplane-ops-az-killed-westus2" in out
    assert "azure:resourceGroups/skyplane-ops-az-killed-japaneast" in out
    assert not any("az-killed" in r for r in arm.leftovers())
    assert any("az-keep" in r for r in arm.leftovers()), "other transfers are kept"
    assert _prov(arm).sweep(older_than_seconds=3600) == []  # az-keep is fresh
    assert cli.main(["deprovision", "--all", "--backend", "azure", "--options", str(options)]) == 0
    assert arm.leftovers() == []


@pytest.mark.sshd
@pytest.mark.slow
def test_ssh_bootstrap_with_the_host_key_from_custom_data(monkeypatch: pytest.MonkeyPatch) -> None:
    ssh_port = free_port()
    fake = FakeARM(ssh_port=ssh_port).start()
    try:
        prov = _prov(fake, **loopback_boot_options(ssh_port))
        fleet = prov.provision({"azure:westus2": 1, "azure:eastus": 1}, transfer_id="az-e2e")
        try:
            assert_healthy(fleet)
        finally:
            prov.deprovision(fleet)
        assert fake.leftovers() == []

        boot_with_a_foreign_host_key(monkeypatch)
        with pytest.raises(HostKeyError, match="everything created was deleted"):
            prov.provision({"azure:westus2": 1}, transfer_id="az-mitm")
        assert fake.leftovers() == []
    finally:
        fake.close()


@pytest.mark.sshd
@pytest.mark.slow
def test_nsg_admits_the_control_plane_and_the_fleet_and_refuses_a_stranger() -> None:
    """VMs as network namespaces on a bridge with the NSG rules enforced by nftables."""
    from tests.fakes.netvm import CloudNet, available

    why = available()
    if why:
        pytest.skip(f"CloudNet {why}")
    net = CloudNet()
    fake = FakeARM(ssh_port=22).start()
    fake.vm_net = net
    try:
        prov = _prov(
            fake,
            bootstrap=None,
            client_cidr=f"{net.gateway}/32",  # this process, as the VMs see it
            ssh_user=os.environ.get("USER") or "root",
            remote_python=sys.executable,
            poweroff_on_idle=False,  # these "VMs" share the test machine's kernel
            idle_timeout=120,
        )
        fleet = prov.provision({"azure:westus2": 1, "azure:japaneast": 1}, transfer_id="az-fw")
        try:
            ns = {vm.address: vm.netns for vm in fake.vms.values()}
            assert_firewall(net, fleet, ns)
        finally:
            prov.deprovision(fleet)
        assert fake.leftovers() == []
    finally:
        fake.close()
        net.close()


def test_regions_are_provisioned_in_parallel(arm: FakeARM) -> None:
    """Every region's provisioning is running at the same moment (a barrier all must reach)."""
    assert_regions_in_parallel(_prov(arm), REGIONS, "azure-par")
