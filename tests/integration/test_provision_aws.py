"""The aws backend against moto's EC2 emulator running as a REAL ``moto_server`` process.

This is the one place where a cloud API is emulated: we cannot create EC2 resources here.
moto's instances have no SSH daemon, so the SSH bootstrap step is injected (``bootstrap=``)
with a recorder that returns gateway records without starting agents. One test keeps the
default bootstrap and lets a real sshd on 127.0.0.1 stand in for the instance (moto's fictitious
instance addresses are never contacted); the SSH bootstrap is covered in test_provision_ssh.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest

from gateway_agent.client import GatewayClient
from skyplane_ops import cli
from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.aws import (
    TAG_CREATED,
    TAG_CREATOR,
    TAG_EXPIRES,
    TAG_TRANSFER,
    AWSProvisioner,
    InstanceHost,
    parse_console_host_key,
)
from skyplane_ops.provision.aws.teardown import _RegionState
from skyplane_ops.provision.cancel import ProvisionCancelled
from skyplane_ops.provision.cloudvm import AGENT_USER, DEADLINE_HELPER, parse_cloud_init
from skyplane_ops.provision.cloudvm.common import deadline_grant
from skyplane_ops.provision.fleet import Gateway
from skyplane_ops.provision.secrets import secret_bytes
from skyplane_ops.testing.sshd import SshdServer
from tests.fixtures.ports import free_port, wait_for_port

pytestmark = pytest.mark.emulator

CLIENT_CIDR = "198.51.100.7/32"  # TEST-NET-2: only written into emulated rules, never contacted
REGIONS = {"aws:us-east-1": 2, "aws:eu-west-1": 1, "aws:ap-southeast-2": 1}


@pytest.fixture(scope="module")
def moto_ec2() -> Iterator[str]:
    """A real moto_server process on a free loopback port; yields its endpoint URL."""
    port = free_port()
    exe = Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "moto_server"
    if not exe.exists():
        exe = Path(".venv/bin/moto_server")
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
    """Reset moto's state so that every test starts from an empty account."""
    req = urllib.request.Request(f"{moto_ec2}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return moto_ec2


def _session() -> boto3.session.Session:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )


class RecordingBootstrap:
    """Stands in for the SSH bootstrap (moto instances have no sshd); records what it was given."""

    def __init__(self, fail: bool = False) -> None:
        self.hosts: list[InstanceHost] = []
        self.fail = fail

    def __call__(
        self, hosts: Sequence[InstanceHost], transfer_id: str, secret_ref: str
    ) -> list[Gateway]:
        self.hosts = list(hosts)
        for h in hosts:
            assert h.ssh.key_path and stat.S_IMODE(os.stat(h.ssh.key_path).st_mode) == 0o600
        if self.fail:
            raise ProvisionError("injected bootstrap failure")
        return [
            Gateway(h.gateway_id, h.region, h.ssh.address, h.ssh.control_port, h.ssh.data_port)
            for h in hosts
        ]


def _provisioner(
    endpoint: str, cls: type[AWSProvisioner] = AWSProvisioner, **kw: Any
) -> AWSProvisioner:
    """The backend (or a subclass that injects a fault) on the moto server."""
    return cls(
        endpoint_url=endpoint,
        session=_session(),
        image_id="ami-1e749f67",  # one of moto's built-in images
        client_cidr=CLIENT_CIDR,
        poll_interval=0.05,
        sweep_regions=list(REGIONS),
        **kw,
    )


def _ec2(endpoint: str, region: str) -> Any:
    return _session().client("ec2", region_name=region, endpoint_url=endpoint)


def _leftovers(endpoint: str) -> dict[str, list[str]]:
    """Everything in the emulated account that is not terminated / not a default group."""
    out: dict[str, list[str]] = {"instances": [], "groups": [], "keys": []}
    for region in ("us-east-1", "eu-west-1", "ap-southeast-2"):
        ec2 = _ec2(endpoint, region)
        for res in ec2.describe_instances()["Reservations"]:
            out["instances"] += [
                i["InstanceId"] for i in res["Instances"] if i["State"]["Name"] != "terminated"
            ]
        out["groups"] += [
            g["GroupId"]
            for g in ec2.describe_security_groups()["SecurityGroups"]
            if g["GroupName"] != "default"
        ]
        out["keys"] += [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]]
    return out


NOTHING: dict[str, list[str]] = {"instances": [], "groups": [], "keys": []}


def test_fleet_tags_rules_and_clean_teardown(endpoint: str) -> None:
    boot = RecordingBootstrap()
    prov = _provisioner(endpoint, bootstrap=boot)
    fleet = prov.provision(REGIONS, transfer_id="aws-t1", tags={"team": "data"})
    assert len(fleet.gateways) == 4
    assert sorted(fleet.regions) == sorted(REGIONS)
    assert all(g.resources["instance_id"].startswith("i-") for g in fleet.gateways)

    ec2 = _ec2(endpoint, "us-east-1")
    instances = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert len(instances) == 2
    for inst in instances:
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert tags[TAG_TRANSFER] == "aws-t1" and tags["team"] == "data"
        assert tags[TAG_CREATOR] and tags[TAG_EXPIRES] > tags[TAG_CREATED]
        attr = ec2.describe_instance_attribute(
            InstanceId=inst["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
        )
        assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"

    (group,) = ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{TAG_TRANSFER}", "Values": ["aws-t1"]}]
    )["SecurityGroups"]
    peer_ips = {f"{g.host}/32" for g in fleet.gateways}
    by_port = {p["FromPort"]: p for p in group["IpPermissions"]}
    # Control, data and the profiler's probe port (which the fleet names for the profiler).
    assert set(by_port) == {22, 8701, 8702, 8703} and fleet.resources["probe_port"] == 8703
    # SSH only from the client; nothing is open to the world.
    assert [r["CidrIp"] for r in by_port[22]["IpRanges"]] == [CLIENT_CIDR]
    assert not by_port[22].get("UserIdGroupPairs")
    for port in (8701, 8702, 8703):
        cidrs = {r["CidrIp"] for r in by_port[port]["IpRanges"]}
        assert cidrs == {CLIENT_CIDR} | peer_ips, "gateway ports: client + this fleet's gateways"
        assert [p["GroupId"] for p in by_port[port]["UserIdGroupPairs"]] == [group["GroupId"]]
    assert all(r["CidrIp"] != "0.0.0.0/0" for p in group["IpPermissions"] for r in p["IpRanges"])
    key_paths = [s["key_path"] for s in fleet.resources["regions"].values()]
    assert all(Path(p).exists() for p in key_paths)

    prov.deprovision(fleet)
    assert _leftovers(endpoint) == NOTHING
    assert not any(Path(p).exists() for p in key_paths)
    prov.deprovision(fleet)  # idempotent


def test_deprovision_of_a_record_naming_an_instance_that_no_longer_exists(endpoint: str) -> None:
    """An instance deleted elsewhere (the sweeper, a person, EC2 forgetting a terminated one)
    is gone, as wanted: the record's other instances, group and key are still deleted and the
    record dropped, instead of every later ``deprovision --all`` failing on it."""
    prov = _provisioner(endpoint, bootstrap=RecordingBootstrap())
    fleet = prov.provision({"aws:us-east-1": 2}, transfer_id="aws-gone")
    region = fleet.resources["regions"]["us-east-1"]
    region["instance_ids"] = ["i-0123456789abcdef0", *region["instance_ids"]]  # never existed
    prov.deprovision(fleet)
    assert _leftovers(endpoint) == NOTHING


def test_profiler_probes_on_the_port_the_security_group_opens(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The profiler asks the agents to take probes on the fleet's probe port, which is open.

    Moto's instances run no agent, so the probe driver is a stand-in that records the port it
    was built with and which gateway pairs it probed; provisioning is the real backend.
    """
    from gateway_agent.probe import ProbeResult
    from skyplane_ops.profiler import refresh_grid, run

    used: dict[str, Any] = {}

    class RecordingDriver:
        def start(self, fleet: Any) -> None:
            (group,) = _ec2(endpoint, "us-east-1").describe_security_groups(
                Filters=[{"Name": f"tag:{TAG_TRANSFER}", "Values": [fleet.transfer_id]}]
            )["SecurityGroups"]
            used["open"] = {p["FromPort"] for p in group["IpPermissions"]}

        def probe(self, src: Gateway, dst: Gateway, connections: int, seconds: float) -> Any:
            return ProbeResult(dst.host, connections, seconds, 1, 1, 1.0, 1.0, 10.0, "now")

        def close(self) -> None:
            pass

    def default_driver(backend: str, probe_port: int = 0) -> RecordingDriver:
        used["backend"], used["probe_port"] = backend, probe_port
        return RecordingDriver()

    monkeypatch.setattr(run, "_default_driver", default_driver)
    prov = _provisioner(endpoint, bootstrap=RecordingBootstrap(), probe_port=9123)
    result = refresh_grid(
        ["aws:us-east-1", "aws:eu-west-1"],
        backend="aws",
        provisioner=prov,
        store_uri=str(tmp_path / "grid"),
        duration_s=0.1,
        run_id="aws-prof",
    )
    assert result.measured == 4  # 2 directed pairs, each probed at 4 and 64 connections
    assert used["backend"] == "aws" and used["probe_port"] == 9123
    assert used["open"] == {22, 8701, 8702, 9123}
    assert _leftovers(endpoint) == NOTHING


class _SlowRegions(AWSProvisioner):
    """Measures how many regions are being provisioned at the same time."""

    active = 0
    peak = 0
    lock = threading.Lock()

    def _provision_region(self, state: _RegionState, *args: Any) -> None:
        with self.lock:
            type(self).active += 1
            type(self).peak = max(type(self).peak, type(self).active)
        try:
            time.sleep(0.3)
            super()._provision_region(state, *args)
        finally:
            with self.lock:
                type(self).active -= 1


def test_regions_are_provisioned_in_parallel(endpoint: str) -> None:
    prov = _provisioner(endpoint, _SlowRegions, bootstrap=RecordingBootstrap())
    fleet = prov.provision(REGIONS, transfer_id="aws-par")
    try:
        assert _SlowRegions.peak == 3
    finally:
        prov.deprovision(fleet)
    assert _leftovers(endpoint) == NOTHING


def test_bootstrap_failure_after_instances_leaves_nothing(endpoint: str) -> None:
    boot = RecordingBootstrap(fail=True)
    prov = _provisioner(endpoint, bootstrap=boot)
    with pytest.raises(ProvisionError, match=r"injected bootstrap failure.*deleted"):
        prov.provision(REGIONS, transfer_id="aws-fail")
    assert len(boot.hosts) == 4, "the failure came after all instances had started"
    assert _leftovers(endpoint) == NOTHING
    assert not list((Path(os.environ["SKYPLANE_OPS_HOME"]) / "keys").glob("aws-fail-*"))


class _FailsInOneRegion(AWSProvisioner):
    def _provision_region(self, state: _RegionState, *args: Any) -> None:
        super()._provision_region(state, *args)
        if state.region == "eu-west-1":
            raise RuntimeError("injected failure after the eu-west-1 instance started")


def test_failure_in_one_region_cleans_all_regions(endpoint: str) -> None:
    prov = _provisioner(endpoint, _FailsInOneRegion, bootstrap=RecordingBootstrap())
    with pytest.raises(ProvisionError, match="injected failure"):
        prov.provision(REGIONS, transfer_id="aws-half")
    assert _leftovers(endpoint) == NOTHING


def test_sweeper_finds_leftovers_by_tag(endpoint: str) -> None:
    prov = _provisioner(endpoint, bootstrap=RecordingBootstrap())
    prov.provision({"aws:us-east-1": 1, "aws:eu-west-1": 1}, transfer_id="aws-leak")
    other = prov.provision({"aws:us-east-1": 1}, transfer_id="aws-keep")
    # Someone else's untagged instance must never be touched.
    foreign = _ec2(endpoint, "us-east-1").run_instances(
        ImageId="ami-1e749f67", MinCount=1, MaxCount=1
    )["Instances"][0]["InstanceId"]

    assert prov.sweep(older_than_seconds=3600) == []  # both are fresh
    deleted = prov.sweep(transfer_id="aws-leak")
    assert sum(":i-" in d for d in deleted) == 2
    assert sum(":sg-" in d for d in deleted) == 2
    assert sum("key-pair/" in d for d in deleted) == 2
    left = _leftovers(endpoint)
    assert sorted(left["instances"]) == sorted(
        [foreign, other.gateways[0].resources["instance_id"]]
    )
    assert left["keys"] == ["skyplane-ops-aws-keep"]

    deleted = prov.sweep()  # --all
    assert any("aws-keep" in d for d in deleted)
    assert _leftovers(endpoint)["instances"] == [foreign]
    for fleet in records.load_fleets(backend="aws"):
        if fleet.transfer_id in ("aws-leak", "aws-keep"):
            records.forget_fleet(fleet)


def test_non_aws_region_is_refused(endpoint: str) -> None:
    prov = _provisioner(endpoint, bootstrap=RecordingBootstrap())
    with pytest.raises(ProvisionError, match="not an AWS region"):
        prov.provision({"gcp:us-central1": 1}, transfer_id="aws-bad")
    assert _leftovers(endpoint) == NOTHING


def test_console_host_key_parsing() -> None:
    console = (
        "cloud-init: ...\n-----BEGIN SSH HOST KEY KEYS-----\n"
        "ecdsa-sha2-nistp256 AAAAE2Vj root@ip\nssh-ed25519 AAAAC3Nza root@ip\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )
    assert parse_console_host_key(console) == "ssh-ed25519 AAAAC3Nza"
    assert parse_console_host_key("booting...") is None


def test_deprovision_command_sweeps_aws_by_tag(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prov = _provisioner(endpoint, bootstrap=RecordingBootstrap())
    fleet = prov.provision({"aws:us-east-1": 1, "aws:eu-west-1": 1}, transfer_id="aws-cli")
    records.forget_fleet(fleet)  # lost: only the tags remain
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    argv = ["deprovision", "--transfer-id", "aws-cli", "--backend", "aws"]
    argv += ["--aws-regions", "us-east-1,eu-west-1", "--aws-endpoint-url", endpoint]
    assert cli.main(argv) == 0
    assert "6 resource(s) deleted from aws" in capsys.readouterr().out
    assert _leftovers(endpoint) == NOTHING


class _LoopbackInstances(AWSProvisioner):
    """The full default path (key pair, SSH bootstrap of the real agent) with one substitution:
    moto's instances have fictitious addresses that we never contact, so each instance's address
    becomes 127.0.0.1 where a real sshd plays the VM, the host key cloud-init would print on the
    console is that sshd's, and the imported key pair is authorized there."""

    server: SshdServer

    def _provision_region(self, state: _RegionState, *args: Any) -> None:
        super()._provision_region(state, *args)
        assert state.key_path
        public = subprocess.run(
            ["ssh-keygen", "-y", "-f", state.key_path], capture_output=True, text=True, check=True
        ).stdout
        with open(self.server.workdir / "authorized_keys", "a") as fh:
            fh.write(public)

    def _wait_running(self, ec2: Any, instance_ids: list[str]) -> dict[str, str]:
        super()._wait_running(ec2, instance_ids)
        return {i: "127.0.0.1" for i in instance_ids}

    def _console_host_key(self, region: str, instance_id: str) -> str:
        return self.server.host_key


@pytest.mark.sshd
@pytest.mark.slow
def test_default_ssh_bootstrap_of_an_instance(
    endpoint: str, sshd_factory: Callable[[int], list[SshdServer]]
) -> None:
    (server,) = sshd_factory(1)
    prov = _LoopbackInstances(
        endpoint_url=endpoint,
        session=_session(),
        image_id="ami-1e749f67",
        client_cidr=CLIENT_CIDR,
        poll_interval=0.05,
        ssh_user=server.user,
        ssh_port=server.port,
        remote_python=sys.executable,
        control_port=free_port(),
        data_port=free_port(),
        poweroff_on_idle=False,  # this "VM" is the test machine
        idle_timeout=120,
    )
    prov.server = server
    fleet = prov.provision({"aws:us-east-1": 1}, transfer_id="aws-boot")
    (gw,) = fleet.gateways
    remote_dir = Path(gw.resources["remote_dir"])
    try:
        assert GatewayClient(gw.host, gw.control_port, secret_bytes(fleet.secret_ref)).health()
        assert gw.resources["instance_id"].startswith("i-") and remote_dir.is_dir()
    finally:
        prov.deprovision(fleet)
    assert not remote_dir.exists()
    assert _leftovers(endpoint) == NOTHING


class _CapturedRunInstances:
    """The RunInstances parameters the backend sends (botocore's ``provide-client-params``
    event on the backend's own session: the real request, not a mock)."""

    def __init__(self, session: boto3.session.Session) -> None:
        self.calls: list[dict[str, Any]] = []
        session.events.register("provide-client-params.ec2.RunInstances", self._record)

    def _record(self, params: dict[str, Any], **kwargs: Any) -> None:
        self.calls.append(dict(params))


def _instances(endpoint: str, region: str) -> list[dict[str, Any]]:
    ec2 = _ec2(endpoint, region)
    return [
        i
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]


def test_instances_require_imdsv2_encrypt_their_disk_and_log_in_unprivileged(
    endpoint: str,
) -> None:
    """IMDSv2 only with a hop limit of 1, the root volume encrypted (the account's default key,
    or ``ebs_kms_key_id``), and cloud-init making one login user without sudo whose host key
    is generated on the instance. moto enforces none of this (it has no metadata service and
    no KMS): the test checks the request sent and what moto's describe calls record."""
    session = _session()
    sent = _CapturedRunInstances(session)
    kms = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    prov = AWSProvisioner(
        endpoint_url=endpoint,
        session=session,
        image_id="ami-1e749f67",
        client_cidr=CLIENT_CIDR,
        poll_interval=0.05,
        ebs_kms_key_id=kms,
        bootstrap=RecordingBootstrap(),
    )
    fleet = prov.provision({"aws:us-east-1": 2}, transfer_id="aws-hard")
    (call,) = sent.calls
    assert call["MetadataOptions"] == {
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
        "HttpEndpoint": "enabled",
    }
    ec2 = _ec2(endpoint, "us-east-1")
    (image,) = ec2.describe_images(ImageIds=["ami-1e749f67"])["Images"]
    (root,) = [
        m for m in image["BlockDeviceMappings"] if m["DeviceName"] == image["RootDeviceName"]
    ]
    assert call["BlockDeviceMappings"] == [
        {
            "DeviceName": image["RootDeviceName"],
            "Ebs": {
                "Encrypted": True,
                "DeleteOnTermination": True,
                "VolumeSize": root["Ebs"]["VolumeSize"],
                "KmsKeyId": kms,
            },
        }
    ], "the image's root device itself, not an extra volume"
    config = parse_cloud_init(call["UserData"])
    (login,) = config["users"]
    assert login["name"] == AGENT_USER and not {"sudo", "groups"} & set(login)
    assert "ssh_keys" not in config
    # No sudo except the deadline helper's one rule (``extend``/``poweroff``), in the same
    # cloud-init as the login user and the root-owned deadline it guards.
    assert call["UserData"].count("NOPASSWD") == 1
    (sudoers,) = [f for f in config["write_files"] if f["path"].startswith("/etc/sudoers")]
    assert sudoers["content"] == deadline_grant(AGENT_USER)
    assert config["runcmd"] == [[DEADLINE_HELPER, "start", "3600", str(6 * 3600)]]
    assert call["ClientToken"] and call["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert [h.ssh.user for h in prov._bootstrap.hosts] == [AGENT_USER] * 2  # type: ignore[attr-defined]
    for inst in _instances(endpoint, "us-east-1"):
        options = inst["MetadataOptions"]
        assert options["HttpTokens"] == "required" and options["HttpPutResponseHopLimit"] == 1
        (volume,) = ec2.describe_volumes(
            Filters=[{"Name": "attachment.instance-id", "Values": [inst["InstanceId"]]}]
        )["Volumes"]
        assert volume["Encrypted"] is True
    prov.deprovision(fleet)
    assert _leftovers(endpoint) == NOTHING


def test_private_instances_get_no_public_address(endpoint: str) -> None:
    """With ``subnet_ids`` and ``private=True`` the instances go into the user's subnet with
    no public address and the fleet uses their private ones; ``private`` without a subnet for
    every region is refused before anything is created."""
    ec2 = _ec2(endpoint, "us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.1.0/24")["Subnet"]["SubnetId"]
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    session = _session()
    sent = _CapturedRunInstances(session)

    def prov(**kw: Any) -> AWSProvisioner:
        return AWSProvisioner(
            endpoint_url=endpoint,
            session=session,
            image_id="ami-1e749f67",
            client_cidr=CLIENT_CIDR,
            poll_interval=0.05,
            bootstrap=RecordingBootstrap(),
            **kw,
        )

    with pytest.raises(ProvisionError, match="private=True needs subnet_ids for every region"):
        prov(private=True, subnet_ids={"aws:us-east-1": subnet}).provision(
            {"aws:us-east-1": 1, "aws:eu-west-1": 1}, transfer_id="aws-priv-bad"
        )
    assert sent.calls == [] and _leftovers(endpoint) == NOTHING

    private = prov(private=True, subnet_ids={"aws:us-east-1": subnet})
    fleet = private.provision({"aws:us-east-1": 2}, transfer_id="aws-priv")
    (call,) = sent.calls
    assert "SecurityGroupIds" not in call
    (nic,) = call["NetworkInterfaces"]
    assert nic["SubnetId"] == subnet and nic["AssociatePublicIpAddress"] is False
    instances = _instances(endpoint, "us-east-1")
    assert all(not i.get("PublicIpAddress") for i in instances), "no public address"
    assert sorted(g.host for g in fleet.gateways) == sorted(
        i["PrivateIpAddress"] for i in instances
    )
    (group,) = ec2.describe_security_groups(GroupIds=[nic["Groups"][0]])["SecurityGroups"]
    assert group["VpcId"] == vpc
    peers = {
        r["CidrIp"] for p in group["IpPermissions"] if p["FromPort"] == 8701 for r in p["IpRanges"]
    }
    assert peers == {CLIENT_CIDR} | {f"{g.host}/32" for g in fleet.gateways}
    private.deprovision(fleet)

    public = prov(subnet_ids={"aws:us-east-1": subnet})  # the user's subnet, public addresses
    fleet = public.provision({"aws:us-east-1": 1}, transfer_id="aws-pub")
    assert sent.calls[-1]["NetworkInterfaces"][0]["AssociatePublicIpAddress"] is True
    (inst,) = _instances(endpoint, "us-east-1")
    assert fleet.gateways[0].host == inst["PublicIpAddress"]
    public.deprovision(fleet)
    assert _leftovers(endpoint) == NOTHING


def test_a_cancel_while_the_instances_boot_deletes_them_and_the_record(endpoint: str) -> None:
    """A run of both cancels the overlay its copy outran (``provision.cancel``): the cancel
    lands while the instances boot (their host keys not yet on the console: the default
    bootstrap waits for them there), the wait ends at once and nothing is left running,
    billed or recorded. moto stands in for EC2 (its console never shows a key)."""
    prov = _provisioner(endpoint)  # the default bootstrap: it waits for the console's key
    cancel = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            prov.provision({"aws:us-east-1": 1}, transfer_id="aws-cancel", cancel=cancel)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not _leftovers(endpoint)["instances"]:  # the VM exists: it is booting
        assert time.monotonic() < deadline and thread.is_alive(), "no instance came"
        time.sleep(0.05)
    assert records.load_fleets(transfer_id="aws-cancel"), "the pending record names it"
    cancel.set()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the boot wait did not end on cancel"
    (exc,) = outcome
    assert isinstance(exc, ProvisionCancelled) and "deleted" in str(exc)
    assert _leftovers(endpoint) == NOTHING
    assert records.load_fleets(transfer_id="aws-cancel") == []
    assert not list((Path(os.environ["SKYPLANE_OPS_HOME"]) / "keys").glob("aws-cancel-*"))
