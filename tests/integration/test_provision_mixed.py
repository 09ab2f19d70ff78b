"""Mixed fleets across three providers: AWS on moto's EC2 emulator (a real ``moto_server``),
Azure and GCP on the FAKE ARM and Compute APIs of ``tests/fakes`` (real HTTP servers; there is
no emulator for them). The last test runs real gateway agents on all three: the fakes' VMs are
sshd processes keyed from their cloud-init data, the AWS instance is an sshd on 127.0.0.1 whose
host key stands in for the one cloud-init prints on the EC2 console.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.aws import AWSProvisioner, InstanceHost
from skyplane_ops.provision.aws.teardown import _RegionState
from skyplane_ops.provision.azure import AzureProvisioner
from skyplane_ops.provision.cloudvm import KeyPair, cloud_init
from skyplane_ops.provision.fleet import Gateway
from skyplane_ops.provision.gcp import GCPProvisioner
from skyplane_ops.provision.mixed import MixedProvisioner
from skyplane_ops.testing.emulators import Emulator
from tests.fakes.azure_compute import FakeARM
from tests.fakes.gce import FakeGCE
from tests.fakes.vm import LoopbackVM, next_address
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.emulator

CLIENT_CIDR = "198.51.100.7/32"  # TEST-NET-2: only written into emulated rules
ROUTE = ["aws:us-east-1", "azure:westus2", "gcp:asia-northeast1"]
AMI = "ami-1e749f67"  # one of moto's built-in images


class Recording:
    """Stands in for the SSH bootstrap where a test is about the cloud resources only."""

    def __init__(self, fail: bool = False, hang: bool = False) -> None:
        self.fail = fail

    def __call__(self, hosts: Sequence[InstanceHost], tid: str, ref: str) -> list[Gateway]:
        if self.fail:
            raise ProvisionError("injected bootstrap failure")
        return [Gateway(h.gateway_id, h.region, h.ssh.address, 8701, 8702) for h in hosts]


@pytest.fixture
def clouds(moto_s3: Emulator) -> Iterator[tuple[str, FakeARM, FakeGCE]]:
    arm, gce = FakeARM().start(), FakeGCE().start()
    try:
        yield moto_s3.options["endpoint_url"], arm, gce
    finally:
        arm.close()
        gce.close()


def _session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )


def _parts(
    moto: str,
    arm: FakeARM,
    gce: FakeGCE,
    aws_cls: type[AWSProvisioner] = AWSProvisioner,
    **kw: dict[str, Any],
) -> dict[str, Any]:
    common = {"client_cidr": CLIENT_CIDR}
    return {
        "aws": aws_cls(endpoint_url=moto, session=_session(), image_id=AMI, poll_interval=0.05,
                       sweep_regions=["us-east-1"], **{**common, **kw.get("aws", {})}),
        "azure": AzureProvisioner(subscription_id=arm.subscription, base_url=arm.url,
                                  ca_bundle=arm.ca_bundle, credential="fake",
                                  vm_size="Standard_D8_v5", **{**common, **kw.get("azure", {})}),
        "gcp": GCPProvisioner(project=gce.project, endpoint=gce.url, credentials="anonymous",
                              machine_type="n2-standard-8", **{**common, **kw.get("gcp", {})}),
    }  # fmt: skip


def _aws_leftovers(moto: str) -> list[str]:
    ec2 = _session().client("ec2", region_name="us-east-1", endpoint_url=moto)
    out = [
        i["InstanceId"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
        and any(t["Key"] == "skyplane-ops:transfer-id" for t in i.get("Tags", []))
    ]
    out += [g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"].startswith("skyplane-ops-")]  # fmt: skip
    return out + [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]
                  if k["KeyName"].startswith("skyplane-ops-")]  # fmt: skip


def _nothing_left(moto: str, arm: FakeARM, gce: FakeGCE) -> None:
    assert _aws_leftovers(moto) == []
    assert arm.leftovers() == []
    assert all(not v for v in gce.leftovers().values()), gce.leftovers()


def _boot(kind: Callable[[], Any]) -> dict[str, dict[str, Any]]:
    return {p: {"bootstrap": kind()} for p in ("aws", "azure", "gcp")}


def test_each_region_goes_to_its_cloud_and_firewalls_admit_the_other_clouds(
    clouds: tuple[str, FakeARM, FakeGCE],
) -> None:
    moto, arm, gce = clouds
    mixed = MixedProvisioner(backends=_parts(moto, arm, gce, **_boot(Recording)))
    fleet = mixed.provision({r: 1 for r in ROUTE}, transfer_id="mx-t1")
    assert fleet.regions == sorted(ROUTE) and fleet.backend == "mixed"
    by_cloud = {g.region.split(":")[0]: g.host for g in fleet.gateways}
    assert len(arm.of_type("virtualMachines")) == 1 and len(gce.instances) == 1
    every = {f"{ip}/32" for ip in by_cloud.values()}
    assert set(gce.firewalls["skyplane-ops-mx-t1-gw"]["sourceRanges"]) == {CLIENT_CIDR} | every
    (nsg,) = arm.of_type("networkSecurityGroups")
    rule = next(r for r in nsg["properties"]["securityRules"] if r["name"] == "gateways-from-fleet")
    assert set(rule["properties"]["sourceAddressPrefixes"]) == {CLIENT_CIDR} | every
    ec2 = _session().client("ec2", region_name="us-east-1", endpoint_url=moto)
    (group,) = ec2.describe_security_groups(GroupNames=["skyplane-ops-mx-t1"])["SecurityGroups"]
    port = next(p for p in group["IpPermissions"] if p["FromPort"] == 8701)
    assert {r["CidrIp"] for r in port["IpRanges"]} >= every
    mixed.deprovision(fleet)
    _nothing_left(moto, arm, gce)


def test_a_failure_in_one_cloud_deprovisions_the_others(
    clouds: tuple[str, FakeARM, FakeGCE],
) -> None:
    moto, arm, gce = clouds
    gce.cpu_quota = 4  # n2-standard-8 does not fit
    mixed = MixedProvisioner(backends=_parts(moto, arm, gce, **_boot(Recording)))
    with pytest.raises(ProvisionError, match=r"failed in gcp.*N2_CPUS.*were deprovisioned"):
        mixed.provision({r: 1 for r in ROUTE}, transfer_id="mx-fail")
    _nothing_left(moto, arm, gce)


def test_dry_run_lists_every_resource_with_its_price_and_creates_nothing(
    clouds: tuple[str, FakeARM, FakeGCE], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moto, arm, gce = clouds
    options = tmp_path / "clouds.json"
    options.write_text(json.dumps({
        "aws": {"instance_type": "m5.8xlarge", "endpoint_url": moto},
        "azure": {"subscription_id": arm.subscription, "base_url": arm.url, "credential": "fake",
                  "ca_bundle": arm.ca_bundle},
        "gcp": {"project": gce.project, "endpoint": gce.url, "credentials": "anonymous"},
    }))  # fmt: skip
    argv = ["provision", "--backend", "mixed", "--dry-run", "--options", str(options)]
    argv += ["--transfer-id", "mx-dry", "--vms", "aws:us-east-1=1", "--vms", "azure:westus2=2"]
    assert cli.main([*argv, "--vms", "gcp:asia-northeast1=1"]) == 0
    out = capsys.readouterr().out
    assert "1.536  aws us-east-1 instance 0 m5.8xlarge" not in out  # + public IPv4
    assert "1.541  aws us-east-1 instance 0 m5.8xlarge" in out
    assert (
        out.count("Standard_D32_v5") == 2 and "1.536  azure VM skyplane-ops-mx-dry-westus2-1" in out
    )
    assert "1.554  gcp instance skyplane-ops-mx-dry-asia-northeast1-0 n2-standard-32" in out
    assert "azure NSG" in out and "gcp firewall skyplane-ops-mx-dry-gw" in out
    total = 1.541 + 2 * (1.536 + 0.005) + 1.554 + 0.005
    assert f"{total:8.3f}  total per hour" in out
    assert arm.mutations == [] and gce.mutations == [], "a dry run calls no cloud API"
    _nothing_left(moto, arm, gce)


_KILLED_CHILD = """
import json, sys, time
import boto3
from skyplane_ops.provision.aws import AWSProvisioner
from skyplane_ops.provision.azure import AzureProvisioner
from skyplane_ops.provision.cloudvm import KeyPair, cloud_init
from skyplane_ops.provision.gcp import GCPProvisioner
from skyplane_ops.provision.mixed import MixedProvisioner
o = json.loads(sys.argv[1])
def hang(hosts, tid, ref):
    print("up", hosts[0].region, flush=True)
    time.sleep(3600)
s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
parts = {
    "aws": AWSProvisioner(session=s, image_id="ami-1e749f67", bootstrap=hang, poll_interval=0.05,
                          client_cidr="198.51.100.7/32", endpoint_url=o["aws"]["endpoint_url"]),
    "azure": AzureProvisioner(bootstrap=hang, client_cidr="198.51.100.7/32", **o["azure"]),
    "gcp": GCPProvisioner(bootstrap=hang, client_cidr="198.51.100.7/32", **o["gcp"]),
}
MixedProvisioner(backends=parts).provision(
    {"aws:us-east-1": 1, "azure:westus2": 1, "gcp:asia-northeast1": 1}, transfer_id="mx-killed")
"""


def test_sweeper_after_sigkill_cleans_all_three_clouds(
    clouds: tuple[str, FakeARM, FakeGCE], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    moto, arm, gce = clouds
    opts = {
        "aws": {"endpoint_url": moto, "sweep_regions": ["us-east-1"]},
        "azure": {"subscription_id": arm.subscription, "base_url": arm.url, "credential": "fake",
                  "ca_bundle": arm.ca_bundle},
        "gcp": {"project": gce.project, "endpoint": gce.url, "credentials": "anonymous"},
    }  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, json.dumps(opts)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert child.stdout is not None
    up = {child.stdout.readline().split()[1].decode() for _ in range(3)}
    assert up == set(ROUTE), "all three clouds had their VMs when the control plane died"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert _aws_leftovers(moto) and arm.leftovers() and gce.instances
    options = tmp_path / "clouds.json"
    options.write_text(json.dumps(opts))
    argv = ["deprovision", "--all", "--options", str(options)]
    assert cli.main([*argv, "--backend", "aws", "--backend", "azure", "--backend", "gcp"]) == 0
    out = capsys.readouterr().out
    assert "azure:resourceGroups/skyplane-ops-mx-killed-westus2" in out
    assert "gcp:asia-northeast1-a:instance/skyplane-ops-mx-killed-asia-northeast1-0" in out
    _nothing_left(moto, arm, gce)


class _LoopbackEC2(AWSProvisioner):
    """moto's instances have fictitious addresses and no SSH: each instance becomes a
    ``LoopbackVM`` (sshd on its own loopback address) with the imported key pair authorized and
    a host key that stands in for the one cloud-init prints on the EC2 console."""

    vm_ssh_port: int
    vm_env: dict[str, str]

    def _wait_running(self, ec2: Any, instance_ids: list[str]) -> dict[str, str]:
        super()._wait_running(ec2, instance_ids)
        return {i: next_address(66) for i in instance_ids}

    def _provision_region(self, state: _RegionState, *args: Any) -> None:
        super()._provision_region(state, *args)
        assert state.key_path
        public = subprocess.run(
            ["ssh-keygen", "-y", "-f", state.key_path], capture_output=True, text=True, check=True
        ).stdout.strip()
        self.booted = getattr(self, "booted", {})
        for iid in state.instance_ids:
            host_key = KeyPair.generate()
            user_data = cloud_init(user=self.ssh_user, authorized_key=public, host_key=host_key)
            vm = LoopbackVM.boot(state.public_ips[iid], self.vm_ssh_port, user_data, self.vm_env)
            self.booted[iid] = (vm, host_key.public)

    def _console_host_key(self, region: str, instance_id: str) -> str:
        return str(self.booted[instance_id][1])

    def stop_vms(self) -> None:
        for vm, _ in getattr(self, "booted", {}).values():
            vm.stop()


@pytest.mark.sshd
@pytest.mark.slow
def test_transfer_aws_to_gcp_through_an_azure_relay_is_byte_identical(
    moto_s3: Emulator,
    gcs_emulator: Emulator,
    tmp_path: Path,
) -> None:
    from gateway_agent.stores import open_store
    from skyplane_ops.testing.transfer import make_plan
    from skyplane_ops.transfer import run_transfer

    vm_ssh = free_port()
    arm, gce = FakeARM(ssh_port=vm_ssh).start(), FakeGCE(ssh_port=vm_ssh).start()
    env = {**moto_s3.env, **gcs_emulator.env}  # what instance roles/metadata give real VMs
    arm.vm_env = gce.vm_env = env
    agent = {"remote_python": sys.executable, "poweroff_on_idle": False, "idle_timeout": 120,
             "ssh_port": vm_ssh, "ssh_user": os.environ.get("USER") or "root"}  # fmt: skip
    fake_vm = {**agent, "bind_host": "public", "bootstrap": None,
               "control_port": free_port(), "data_port": free_port()}  # fmt: skip
    ec2_vm = {**agent, "control_port": free_port(), "data_port": free_port()}
    moto = moto_s3.options["endpoint_url"]
    parts = _parts(moto, arm, gce, _LoopbackEC2, aws=ec2_vm, azure=fake_vm, gcp=fake_vm)
    parts["aws"].vm_ssh_port, parts["aws"].vm_env = vm_ssh, env
    try:
        plan = make_plan(ROUTE)
        fleet = MixedProvisioner(backends=parts).provision(plan.vms, transfer_id="mx-e2e")
        try:
            assert {g.region: g.host.split(".")[1] for g in fleet.gateways} == {
                "aws:us-east-1": "66", "azure:westus2": "65", "gcp:asia-northeast1": "64"
            }  # fmt: skip
            # What the fake VMs give their logins (``SetEnv``, standing in for an instance
            # role) reaches no agent: its store credentials come sealed from this process.
            for gw in fleet.gateways:
                environ = Path(f"/proc/{gw.resources['pid']}/environ").read_bytes()
                names = {item.partition(b"=")[0].decode() for item in environ.split(b"\0")}
                assert not names & set(env), (gw.gateway_id, sorted(names & set(env)))
            bucket = f"mx{uuid.uuid4().hex[:10]}"
            src_uri = moto_s3.make_bucket(bucket + "src")
            dst_uri = gcs_emulator.make_bucket(bucket + "dst")
            src = open_store(src_uri, moto_s3.options)
            data = {"big.bin": os.urandom(9 * 1024 * 1024 + 5), "a.txt": b"alpha", "empty": b""}
            data.update({f"small/{i:02d}": os.urandom(2000) for i in range(12)})
            for key, blob in data.items():
                src.write(key, blob)
            result = run_transfer(
                plan,
                fleet,
                src_uri,
                dst_uri,
                src_options=moto_s3.options,
                dst_options=gcs_emulator.options,
                journal_dir=tmp_path / "journal",
                part_size=5 * 1024 * 1024,
            )
            assert result.verified, result.verification
            dst = open_store(dst_uri, gcs_emulator.options)
            assert {o.key: dst.read(o.key) for o in dst.list()} == data
        finally:
            MixedProvisioner(backends=parts).deprovision(fleet)
        _nothing_left(moto, arm, gce)
    finally:
        parts["aws"].stop_vms()
        arm.close()
        gce.close()
