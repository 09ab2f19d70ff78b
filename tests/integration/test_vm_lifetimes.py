"""VMs always die (issue 36): a control plane killed at every provisioning step leaves nothing
that bills once the VMs' limits pass, and a record ``deprovision`` deletes the rest from.

The clouds are the fakes (``tests/fakes``: Compute Engine, Azure Resource Manager) and moto's
EC2 server; each fake VM's guest runs the cloud-init the backend sent (``tests/fakes/vm.py``:
the root-owned deadline really runs, its login may not power off except through what
cloud-init's sudoers grant). moto's instances have no guest, so here a ``LoopbackVM`` boots from
the user-data moto stores for each instance and, when it powers off, the test applies the
instance's ``InstanceInitiatedShutdownBehavior`` as EC2 does (MOCKED: EC2's reaction to a guest
power-off). Limits are seconds long (``ttl_seconds=4``, ``boot_limit_s=2``).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from gateway_agent.auth import new_secret, write_secret
from gateway_agent.client import GatewayClient
from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.azure import AzureProvisioner
from skyplane_ops.provision.cloudvm import (
    DEADLINE_COMMAND,
    DEADLINE_HELPER,
    TAG_CREATOR,
    TAG_TRANSFER,
    KeyPair,
    cloud_init,
    deadline_cloud_init,
)
from skyplane_ops.provision.gcp import GCPProvisioner
from tests.fakes.azure_compute import FakeARM
from tests.fakes.gce import FakeGCE
from tests.fakes.jsonapi import JSONAPIFake
from tests.fakes.vm import LoopbackVM, next_address
from tests.fixtures.ports import free_port, wait_for_port
from tests.integration.provision_helpers import Recording

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

CIDR = "198.51.100.7/32"  # TEST-NET-2: only written into emulated rules
LIMITS = {"ttl_seconds": 4, "boot_limit_s": 2}

# A control plane in its own process: provisions, and blocks after the n-th create call
# (aws: the call is made, then the step blocks; the fakes instead never answer it) or in the
# SSH bootstrap, printing where it stopped; the test SIGKILLs it there.
_CHILD = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
def boot(hosts, tid, ref):
    print("boot", flush=True)
    time.sleep(3600)
opts = dict(spec["options"], bootstrap=boot)
if spec["backend"] == "aws":
    import boto3
    from skyplane_ops.provision.aws import AWSProvisioner
    calls = [0]
    class Blocking:
        def __init__(self, client):
            self._client = client
        def __getattr__(self, name):
            fn = getattr(self._client, name)
            if not name.startswith(("import_", "create_", "authorize_", "run_")):
                return fn
            def call(*a, **kw):
                out = fn(*a, **kw)
                calls[0] += 1
                if calls[0] == spec["hang_at"]:
                    print("hung", flush=True)
                    time.sleep(3600)
                return out
            return call
    class Killable(AWSProvisioner):
        def _ec2(self, region):
            return Blocking(super()._ec2(region))
    opts["session"] = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    prov = Killable(**opts)
elif spec["backend"] == "azure":
    from skyplane_ops.provision.azure import AzureProvisioner
    prov = AzureProvisioner(**opts)
else:
    from skyplane_ops.provision.gcp import GCPProvisioner
    prov = GCPProvisioner(**opts)
prov.provision(spec["vms"], transfer_id=spec["transfer_id"])
print("done", flush=True)
"""


def _run_and_kill(spec: dict[str, Any], fake: JSONAPIFake | None) -> str:
    """Start the control plane, wait until it hangs (in a create call or the bootstrap), kill
    it with SIGKILL; returns where it stopped ("fake", "hung", "boot")."""
    hanging = fake.hang_after(spec["hang_at"]) if fake is not None else threading.Event()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(spec)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    lines: list[str] = []

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.decode().strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 90
    while not (hanging.is_set() or lines) and time.monotonic() < deadline:
        if child.poll() is not None:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    reader.join(5)
    if fake is not None:
        fake.hang_after(None)  # release the request that never answered
    where = "fake" if hanging.is_set() else (lines[0] if lines else f"exit {child.returncode}")
    assert where in ("fake", "hung", "boot"), f"the control plane stopped elsewhere: {where}"
    return where


def _until(check: Callable[..., bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.2)


def _deprovision(backend: str, tid: str, options: dict[str, Any], tmp_path: Path) -> None:
    """``skyplane-ops deprovision --transfer-id``: from the pending record (and tags)."""
    path = tmp_path / "options.json"
    path.write_text(json.dumps({backend: options}))
    argv = ["deprovision", "--transfer-id", tid, "--backend", backend, "--options", str(path)]
    assert cli.main(argv) == 0
    assert not records.load_fleets(transfer_id=tid, backend=backend)


def _pending(tid: str, backend: str) -> None:
    (fleet,) = records.load_fleets(transfer_id=tid, backend=backend)
    assert fleet.resources.get("pending"), "the record was written before the first create"


# ---- GCP ---------------------------------------------------------------------------------------


@pytest.fixture
def gce() -> Iterator[FakeGCE]:
    fake = FakeGCE().start()
    try:
        yield fake
    finally:
        fake.close()


def _gce_options(gce: FakeGCE) -> dict[str, Any]:
    return {"project": gce.project, "endpoint": gce.url, "credentials": "anonymous"}


def test_gcp_killed_at_every_step_leaves_no_vm_after_the_limit_and_a_record(
    gce: FakeGCE, tmp_path: Path
) -> None:
    opts = {**_gce_options(gce), "client_cidr": CIDR, "machine_type": "n2-standard-8", **LIMITS}
    for n in range(1, 30):
        tid = f"gk{n}"
        spec = {"backend": "gcp", "options": opts, "vms": {"gcp:us-central1": 1}}
        where = _run_and_kill({**spec, "transfer_id": tid, "hang_at": n}, gce)
        _pending(tid, "gcp")
        # The limit: the guest's deadline powers it off, maxRunDuration deletes the instance.
        _until(lambda: not gce.leftovers()["instances"], 15, f"{tid}: instances deleted")
        _deprovision("gcp", tid, _gce_options(gce), tmp_path)
        assert gce.leftovers() == {k: [] for k in gce.leftovers()}, f"leftovers after step {n}"
        if where == "boot":
            break
    else:
        pytest.fail("provisioning never reached the bootstrap")
    assert n >= 7, "network, 2 firewalls, subnetwork, instance, firewall update, bootstrap"
    assert any(name.startswith("skyplane-ops-gk") for name in gce.expired)


def test_gcp_deletion_tries_everything_and_reports_each_failure(
    gce: FakeGCE, tmp_path: Path
) -> None:
    prov = GCPProvisioner(
        **_gce_options(gce), client_cidr=CIDR, machine_type="n2-standard-8", bootstrap=Recording()
    )
    fleet = prov.provision({"gcp:us-central1": 2}, transfer_id="gdel")
    gce.fail_deletes = {"skyplane-ops-gdel-us-central1-0"}
    with pytest.raises(ProvisionError) as err:
        prov.deprovision(fleet)
    text = str(err.value)
    assert "instance skyplane-ops-gdel-us-central1-0" in text
    assert "subnetwork skyplane-ops-gdel-us-central1" in text  # still in use by the one left
    left = gce.leftovers()
    assert left["instances"] == ["skyplane-ops-gdel-us-central1-0"], "the other was deleted"
    assert left["firewalls"] == [], "the firewalls were deleted after the failure"
    gce.fail_deletes = set()
    prov.deprovision(fleet)
    assert gce.leftovers() == {k: [] for k in left}


def test_gcp_sweeper_matches_name_tag_and_creator_and_honours_expiry(gce: FakeGCE) -> None:
    prov = GCPProvisioner(
        **_gce_options(gce), client_cidr=CIDR, machine_type="n2-standard-8", bootstrap=Recording()
    )
    expiring = GCPProvisioner(
        **_gce_options(gce),
        client_cidr=CIDR,
        machine_type="n2-standard-8",
        bootstrap=Recording(),
        ttl_seconds=1,
    )
    records.forget_fleet(expiring.provision({"gcp:us-central1": 1}, transfer_id="gexp"))
    records.forget_fleet(prov.provision({"gcp:us-central1": 1}, transfer_id="gfresh"))
    # Someone else's network that merely carries our tags (another creator), and one that
    # carries our name prefix and tag key but no creator: neither is ours.
    for name, tags in (
        ("skyplane-ops-theirs", {TAG_TRANSFER: "x", TAG_CREATOR: "someone@else"}),
        ("skyplane-ops-tagkey", {TAG_TRANSFER: "x"}),
    ):
        gce.networks[name] = {"name": name, "description": json.dumps(tags)}
    time.sleep(1.5)
    deleted = prov.sweep(older_than_seconds=3600)  # gexp is past expires-at, gfresh is not
    assert any("gexp" in d for d in deleted) and not any("gfresh" in d for d in deleted)
    deleted = prov.sweep()  # --all: everything of ours
    left = gce.leftovers()
    assert left["networks"] == ["skyplane-ops-tagkey", "skyplane-ops-theirs"]
    assert left["instances"] == [] and left["subnetworks"] == []


# ---- Azure -------------------------------------------------------------------------------------


@pytest.fixture
def arm() -> Iterator[FakeARM]:
    fake = FakeARM().start()
    try:
        yield fake
    finally:
        fake.close()


def _arm_options(arm: FakeARM) -> dict[str, Any]:
    return {
        "subscription_id": arm.subscription,
        "base_url": arm.url,
        "ca_bundle": arm.ca_bundle,
        "credential": "fake",
    }


def _billed(arm: FakeARM, tid: str) -> list[str]:
    """What bills in the fake after the VMs are gone: VMs (any state), NICs' IPs, public IPs."""
    kinds = ("virtualMachines", "publicIPAddresses", "networkInterfaces")
    return [r["id"] for k in kinds for r in arm.of_type(k) if f"-{tid}-" in r["id"]]


def test_azure_killed_at_every_step_leaves_no_vm_after_the_limit_and_a_record(
    arm: FakeARM, tmp_path: Path
) -> None:
    opts = {**_arm_options(arm), "client_cidr": CIDR, "vm_size": "Standard_D8_v5", **LIMITS}
    stopped: list[int] = []
    for n in range(1, 30):
        tid = f"ak{n}"
        spec = {"backend": "azure", "options": opts, "vms": {"azure:westus2": 1}}
        where = _run_and_kill({**spec, "transfer_id": tid, "hang_at": n}, arm)
        _pending(tid, "azure")
        vms = [r["id"] for r in arm.of_type("virtualMachines") if f"-{tid}-" in r["id"]]
        if vms:  # the limit: the guest's deadline runs the self-delete, then powers off
            can_delete = any(f"-{tid}-" in r["id"] for r in arm.of_type("roleAssignments"))
            _until(
                lambda: all(v.powered_off or v._stopped.is_set() for v in list(arm.vms.values())),
                15,
                f"{tid}: every guest powered off",
            )
            if can_delete:
                _until(lambda t=tid: not _billed(arm, t), 10, f"{tid}: the VM deleted itself")
            else:  # killed before the VM's identity got its role: it can only power off
                stopped.append(n)
        _deprovision("azure", tid, _arm_options(arm), tmp_path)
        assert arm.leftovers() == [], f"leftovers after step {n}"
        if where == "boot":
            break
    else:
        pytest.fail("provisioning never reached the bootstrap")
    assert n >= 9, "group, nsg, vnet, ip, nic, vm, role, nsg rule, bootstrap"
    assert len(stopped) <= 1, f"only the VM-to-role window can leave a stopped VM: {stopped}"


def test_azure_sweeper_keeps_a_group_that_only_carries_the_tag_key(arm: FakeARM) -> None:
    prov = AzureProvisioner(
        **_arm_options(arm), client_cidr=CIDR, vm_size="Standard_D8_v5", bootstrap=Recording()
    )
    records.forget_fleet(prov.provision({"azure:westus2": 1}, transfer_id="aown"))
    prov.resources.resource_groups.create_or_update(
        "skyplane-ops-not-ours", {"location": "westus2", "tags": {TAG_TRANSFER: "aown"}}
    )
    prov.resources.resource_groups.create_or_update(
        "data-team", {"location": "westus2", "tags": {TAG_TRANSFER: "aown", TAG_CREATOR: "x"}}
    )
    deleted = prov.sweep(transfer_id="aown")
    assert deleted == ["azure:resourceGroups/skyplane-ops-aown-westus2"]
    assert sorted(r["name"] for r in arm.of_type("resourceGroups")) == [
        "data-team",
        "skyplane-ops-not-ours",
    ]


# ---- AWS (moto) --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_ec2() -> Iterator[str]:
    port = free_port()
    exe = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def endpoint(moto_ec2: str) -> str:
    req = urllib.request.Request(f"{moto_ec2}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return moto_ec2


def _ec2(endpoint: str) -> Any:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    return session.client("ec2", endpoint_url=endpoint)


def _live(ec2: Any, tid: str) -> list[str]:
    return [
        i["InstanceId"]
        for r in ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_TRANSFER}", "Values": [tid]}])[
            "Reservations"
        ]
        for i in r["Instances"]
        if i["State"]["Name"] not in ("terminated", "shutting-down")
    ]


def _boot_guests(ec2: Any, tid: str) -> list[LoopbackVM]:
    """MOCKED guest: boot each instance's user-data; on power-off EC2 applies the instance's
    shutdown behaviour (terminate or stop)."""
    guests = []
    for iid in _live(ec2, tid):
        data = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        value = (data.get("UserData") or {}).get("Value") or ""
        try:
            text = base64.b64decode(value, validate=True).decode()
        except ValueError:
            text = value
        if not text:
            continue  # no cloud-init: nothing in the guest ever powers it off

        def powered_off(_: LoopbackVM, iid: str = iid) -> None:
            attr = ec2.describe_instance_attribute(
                InstanceId=iid, Attribute="instanceInitiatedShutdownBehavior"
            )["InstanceInitiatedShutdownBehavior"]["Value"]
            if attr == "terminate":
                ec2.terminate_instances(InstanceIds=[iid])
            else:
                ec2.stop_instances(InstanceIds=[iid])

        guests.append(LoopbackVM.boot(next_address(67), None, text, on_poweroff=powered_off))
    return guests


def test_aws_killed_at_every_step_leaves_no_instance_after_the_limit_and_a_record(
    endpoint: str, tmp_path: Path
) -> None:
    ec2 = _ec2(endpoint)
    opts = {"endpoint_url": endpoint, "image_id": "ami-1e749f67", "client_cidr": CIDR,
            "poll_interval": 0.05, **LIMITS}  # fmt: skip
    for n in range(1, 30):
        tid = f"wk{n}"
        spec = {"backend": "aws", "options": opts, "vms": {"aws:us-east-1": 1}}
        where = _run_and_kill({**spec, "transfer_id": tid, "hang_at": n}, None)
        _pending(tid, "aws")
        guests = _boot_guests(ec2, tid)
        try:
            _until(lambda t=tid: not _live(ec2, t), 15, f"{tid}: the instance terminated itself")
        finally:
            for guest in guests:
                guest.stop()
        options = {"endpoint_url": endpoint}
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        _deprovision("aws", tid, options, tmp_path)
        assert not [g for g in ec2.describe_security_groups()["SecurityGroups"]
                    if g["GroupName"] != "default"], f"groups left after step {n}"  # fmt: skip
        assert not ec2.describe_key_pairs()["KeyPairs"], f"key pairs left after step {n}"
        if where == "boot":
            break
    else:
        pytest.fail("provisioning never reached the bootstrap")
    assert n >= 5, "key pair, group, ingress, instances, peers, bootstrap"


# ---- the agent and the guest's deadline ----------------------------------------------------------


def test_a_lapsed_lease_powers_the_guest_off_through_the_granted_helper_only(
    tmp_path: Path,
) -> None:
    """A real agent in a fake guest: its lease lapses and it powers the VM off through the
    root helper (plain ``shutdown`` is refused to its non-root login); renewals extend the
    root deadline, never past its cap."""
    key = KeyPair.generate()
    user_data = cloud_init(
        user="ubuntu",
        authorized_key=key.public,
        host_key=key,
        extra=deadline_cloud_init("ubuntu", 60, 90),
    )
    off = threading.Event()
    vm = LoopbackVM.boot("127.0.0.1", None, user_data, on_poweroff=lambda _: off.set())
    assert vm.guest is not None
    env = {"PATH": vm.guest.path, "HOME": str(tmp_path)}  # what ``env -i`` leaves the agent
    refused = subprocess.run(["shutdown", "-h", "now"], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "Interactive authentication required" in refused.stderr
    assert Path(f"{vm.guest.root}{DEADLINE_HELPER}").exists()
    state = vm.guest.root / "var/lib/skyplane-ops"
    cap = int((state / "cap").read_text())
    secret = new_secret()
    write_secret(str(tmp_path / "secret"), secret)
    ready = tmp_path / "ready.json"
    agent = subprocess.Popen(
        [sys.executable, "-m", "gateway_agent", "serve", "--host", "127.0.0.1",
         "--secret-file", str(tmp_path / "secret"), "--ready-file", str(ready),
         "--gateway-id", "g0", "--region", "gcp:x", "--lease", "4", "--idle-timeout", "0",
         "--poweroff-on-idle", "--deadline-command", DEADLINE_COMMAND],
        env={**env, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    try:
        _until(ready.exists, 20, "the agent is ready")
        port = json.loads(ready.read_text())["control_port"]
        before = int((state / "deadline").read_text())
        GatewayClient("127.0.0.1", port, secret, gateway_id="g0").renew_lease(
            3600
        )  # more than the cap allows
        _until(lambda: int((state / "deadline").read_text()) == cap, 10, "deadline at the cap")
        assert int((state / "deadline").read_text()) > before
        GatewayClient("127.0.0.1", port, secret, gateway_id="g0").renew_lease(
            2
        )  # shorter: the deadline stays
        time.sleep(1)
        assert int((state / "deadline").read_text()) == cap, "a renewal never brings it closer"
        assert off.wait(20), "the lapsed lease powered the guest off"
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait()
        vm.stop()


def test_the_fallback_sweep_by_transfer_id_is_given_the_regions(endpoint: str) -> None:
    """What the Airflow tasks fall back to when no fleet came back (``api.deprovision`` with a
    transfer id, as ``SkyplaneHook.deprovision`` calls it): an aws backend configured with no
    sweep regions looks in the plan's regions (here the record is lost: only tags remain)."""
    from skyplane_ops import api
    from skyplane_ops.provision.aws import AWSProvisioner

    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    prov = AWSProvisioner(session=session, endpoint_url=endpoint, image_id="ami-1e749f67",
                          client_cidr=CIDR, poll_interval=0.05, bootstrap=Recording())  # fmt: skip
    records.forget_fleet(prov.provision({"aws:eu-west-1": 1}, transfer_id="wfall"))
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    deleted = api.deprovision(
        backend="aws",
        backend_options={"endpoint_url": endpoint},
        transfer_id="wfall",
        regions=["aws:eu-west-1"],
    )
    assert sum(":i-" in d for d in deleted) == 1 and any("key-pair/" in d for d in deleted)


def test_aws_sweeper_keeps_what_only_carries_the_tag_key(endpoint: str) -> None:
    """A security group and a key pair named like ours and tagged with the transfer tag key but
    not created by this creator (anyone who may tag could forge that) survive every sweep."""
    from skyplane_ops.provision.aws import AWSProvisioner

    ec2 = _ec2(endpoint)
    tags = [{"Key": TAG_TRANSFER, "Value": "wforeign"}, {"Key": "Name", "Value": "skyplane-ops-x"}]
    group = ec2.create_security_group(
        GroupName="skyplane-ops-wforeign",
        Description="not ours",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )["GroupId"]
    ec2.create_key_pair(
        KeyName="skyplane-ops-wforeign",
        TagSpecifications=[{"ResourceType": "key-pair", "Tags": tags}],
    )
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    prov = AWSProvisioner(session=session, endpoint_url=endpoint, image_id="ami-1e749f67",
                          client_cidr=CIDR, poll_interval=0.05, bootstrap=Recording(),
                          sweep_regions=["us-east-1"])  # fmt: skip
    records.forget_fleet(prov.provision({"aws:us-east-1": 1}, transfer_id="wmine"))
    deleted = prov.sweep()  # --all
    assert any("key-pair/skyplane-ops-wmine" in d for d in deleted)
    assert not any(group in d or "wforeign" in d for d in deleted)
    assert [g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"] != "default"] == [group]  # fmt: skip
    assert [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]] == ["skyplane-ops-wforeign"]
