"""The ``aws`` backend: ephemeral EC2 gateways, bootstrapped over SSH, leak-proof.

Per region it creates one key pair (generated locally; only the public half is sent), one
security group (SSH from the client only; the gateway ports, control, data and the profiler's
probe port, from the client and the fleet's own gateways only) and the instances, every one
tagged with the transfer id, the creator and an expiry, with
``InstanceInitiatedShutdownBehavior=terminate`` so that a power-off ends the bill, and
user-data (cloud-init) that sets the VM's root-owned deadline at boot (``cloudvm.common``):
the agent's lease can push it later, never past ``ttl_seconds``, so every instance powers off,
hence terminates, whatever happens to the control plane. A pending fleet record is written
before the first create call and names each resource before its create call (instances by
the transfer's tags and the ``ClientToken`` of their ``RunInstances``), so a control plane
killed at any point leaves a record ``deprovision`` acts on. Instances are hardened: IMDSv2
only, with a hop limit of 1 (a container or a forwarded request on the VM cannot reach the
metadata credentials); the root volume encrypted (the account's default EBS key, or
``ebs_kms_key_id``); one unprivileged login user made by cloud-init (``AGENT_USER``: its only
privilege the deadline helper's ``extend``/``poweroff``; the image's ``ubuntu`` user is not
created); the SSH host key generated on the instance and read back from its console output.
With ``subnet_ids`` (region -> subnet) the instances go into those subnets, and with
``private=True`` they get no public address at all: the control plane and the peers reach them
by their private addresses (the user's VPCs must route to each other and to the control
plane). The control plane's address(es) come from ``client_cidr`` (see
``provision.control_cidrs``). Regions are provisioned in parallel. Any failure deletes
everything created so far before raising. The SSH bootstrap is injectable (the tests run
against moto's EC2 emulator, whose instances have no SSH).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.aws.teardown import (
    TAG_CREATED,
    UBUNTU_2204,
    UBUNTU_OWNER,
    EC2Teardown,
    _RegionState,
    _tag_list,
    aws_region,
)
from skyplane_ops.provision.cancel import check as check_cancel
from skyplane_ops.provision.cancel import pause
from skyplane_ops.provision.cloudhosts import (
    Bootstrap,
    InstanceHost,
    cached_wheelhouse,
    provision_regions,
    save_cloud_fleet,
)
from skyplane_ops.provision.cloudhosts import run_all as _run_all
from skyplane_ops.provision.cloudvm.common import (
    AGENT_USER,
    DEADLINE_COMMAND,
    cloud_init,
    deadline_cloud_init,
    default_creator,
    fleet_tags,
    parse_console_host_key,
)
from skyplane_ops.provision.control_cidrs import detect_client_cidr, parse_cidrs
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.secrets import (
    check_transfer_id,
    create_secret,
    delete_secret,
    private_dir,
    write_private,
)
from skyplane_ops.provision.ssh.bootstrap import (
    BootstrapOptions,
    bootstrap_gateways,
    teardown_gateways,
)
from skyplane_ops.provision.ssh.hosts import SSHHost, gateway_id

# The package's name, as when this was the module skyplane_ops.provision.aws.
log = logging.getLogger("skyplane_ops.provision.aws")


# IMDSv2 only, and its answers do not survive a second hop (a container, a forwarded request).
METADATA_OPTIONS = {
    "HttpTokens": "required",
    "HttpPutResponseHopLimit": 1,
    "HttpEndpoint": "enabled",
}


class AWSProvisioner(EC2Teardown):
    """Gateways on fresh EC2 instances, torn down (and swept) by tag."""

    name = "aws"

    def __init__(
        self,
        *,
        instance_type: str = "m5.xlarge",
        image_id: str | Mapping[str, str] | None = None,
        client_cidr: str | Sequence[str] | None = None,
        ssh_user: str = AGENT_USER,
        ssh_port: int = 22,
        remote_python: str = "python3",
        remote_python_version: str = "3.10",
        control_port: int = 8701,
        data_port: int = 8702,
        probe_port: int = 8703,
        ttl_seconds: float = 6 * 3600,
        idle_timeout: float = 900.0,
        poweroff_on_idle: bool = True,
        endpoint_url: str | None = None,
        session: Any = None,
        bootstrap: Bootstrap | None = None,
        wheelhouse: str | None = None,
        accept_unknown_host_keys: bool = False,
        host_key_timeout: float = 300.0,
        sweep_regions: Sequence[str] = (),
        poll_interval: float = 2.0,
        start_timeout: float = 600.0,
        boot_limit_s: float | None = None,
        creator: str | None = None,
        subnet_ids: Mapping[str, str] | None = None,
        private: bool = False,
        ebs_kms_key_id: str | None = None,
    ) -> None:
        import boto3  # lazily: only this backend needs it

        self.session = session or boto3.session.Session()
        self.instance_type = instance_type
        self.image_id = image_id
        # The control plane's address(es), validated now; detected (and logged) only when absent.
        self.client_cidrs = parse_cidrs(client_cidr)
        self.subnet_ids = {aws_region(r): s for r, s in (subnet_ids or {}).items()}
        self.private = private
        self.ebs_kms_key_id = ebs_kms_key_id
        self.ssh_user = ssh_user
        self.ssh_port = ssh_port
        self.poweroff_on_idle = poweroff_on_idle
        self._wheel_lock = threading.Lock()
        self.remote_python = remote_python
        self.remote_python_version = remote_python_version
        self.control_port = control_port
        self.data_port = data_port
        self.probe_port = probe_port
        self.ttl_seconds = ttl_seconds
        # The root deadline at boot: until the agent's first lease renewal extends it.
        self.boot_limit_s = boot_limit_s if boot_limit_s is not None else min(ttl_seconds, 3600.0)
        self.creator = creator or default_creator()
        self.idle_timeout = idle_timeout
        self.endpoint_url = endpoint_url
        self.wheelhouse = wheelhouse
        self.accept_unknown_host_keys = accept_unknown_host_keys
        self.host_key_timeout = host_key_timeout
        self.sweep_regions = [aws_region(r) for r in sweep_regions]
        self.poll_interval = poll_interval
        self.start_timeout = start_timeout
        self._bootstrap: Bootstrap = bootstrap or self._ssh_bootstrap
        self._clients: dict[str, Any] = {}
        self._pending: records.PendingRecord | None = None
        self._cancel: threading.Event | None = None

    # ------------------------------------------------------------------ helpers

    def _ec2(self, region: str) -> Any:
        """One EC2 client per region, shared by threads (clients are thread-safe; creating
        them from one session is not, hence the lock)."""
        with _SESSION_LOCK:
            if region not in self._clients:
                self._clients[region] = self.session.client(
                    "ec2", region_name=region, endpoint_url=self.endpoint_url
                )
            return self._clients[region]

    def _image_for(self, region: str) -> str:
        if isinstance(self.image_id, str):
            return self.image_id
        if isinstance(self.image_id, Mapping) and region in self.image_id:
            return self.image_id[region]
        images = self._ec2(region).describe_images(
            Owners=[UBUNTU_OWNER],
            Filters=[
                {"Name": "name", "Values": [UBUNTU_2204]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
        if not images:
            raise ProvisionError(f"no Ubuntu 22.04 image found in {region}; pass image_id")
        return str(max(images, key=lambda i: i.get("CreationDate", ""))["ImageId"])

    def _root_volume(self, ec2: Any, image_id: str) -> list[dict[str, Any]]:
        """The image's root device, encrypted (an unencrypted snapshot is encrypted on copy)."""
        (image,) = ec2.describe_images(ImageIds=[image_id])["Images"]
        device = image.get("RootDeviceName") or "/dev/sda1"
        ebs: dict[str, Any] = {"Encrypted": True, "DeleteOnTermination": True}
        for mapping in image.get("BlockDeviceMappings") or []:
            size = (mapping.get("Ebs") or {}).get("VolumeSize")
            if mapping.get("DeviceName") == device and size:
                ebs["VolumeSize"] = size  # the image's own size (moto insists on one)
        if self.ebs_kms_key_id:
            ebs["KmsKeyId"] = self.ebs_kms_key_id
        return [{"DeviceName": device, "Ebs": ebs}]

    def _network(self, ec2: Any, region: str, group_id: str) -> dict[str, Any]:
        """Where the instances go: the default VPC with a public address, or the user's subnet
        (with a public address only when not ``private``)."""
        subnet = self.subnet_ids.get(region)
        if not subnet:
            return {"SecurityGroupIds": [group_id]}
        interface = {
            "DeviceIndex": 0,
            "SubnetId": subnet,
            "Groups": [group_id],
            "AssociatePublicIpAddress": not self.private,
            "DeleteOnTermination": True,
        }
        return {"NetworkInterfaces": [interface]}

    def _tags(self, transfer_id: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        return fleet_tags(transfer_id, self.ttl_seconds, extra, self.creator)

    def _user_data(self, client_public: str) -> str:
        """cloud-init: the one unprivileged login user (its only privilege: the deadline
        helper), the host key made on the instance, the root-owned deadline (boot limit, hard
        cap at the expiry tag)."""
        deadline = deadline_cloud_init(self.ssh_user, self.boot_limit_s, self.ttl_seconds)
        return cloud_init(user=self.ssh_user, authorized_key=client_public, extra=deadline)

    def _record(self) -> None:
        """Rewrite the pending record (called before each create call); a cancelled
        provisioning stops here, before it creates anything more."""
        check_cancel(self._cancel, "AWS provisioning")
        if self._pending is not None:
            self._pending.save()

    # ------------------------------------------------------------------ provision

    def _provision_region(
        self, state: _RegionState, count: int, transfer_id: str, tags: dict[str, str]
    ) -> None:
        region = state.region
        ec2 = self._ec2(region)
        name = f"skyplane-ops-{transfer_id}"

        key = ed25519.Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        state.key_name = name  # recorded before the call: a lost answer must not leak it
        self._record()
        ec2.import_key_pair(
            KeyName=name,
            PublicKeyMaterial=public,
            TagSpecifications=[
                {"ResourceType": "key-pair", "Tags": _tag_list({**tags, "Name": name})}
            ],
        )
        key_path = private_dir("keys") / f"{transfer_id}-{region}.pem"
        write_private(
            key_path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            ),
        )
        state.key_path = str(key_path)

        state.group_name = name
        self._record()
        vpc: dict[str, str] = {}
        if self.subnet_ids.get(region):
            (subnet,) = ec2.describe_subnets(SubnetIds=[self.subnet_ids[region]])["Subnets"]
            vpc = {"VpcId": subnet["VpcId"]}
        group = ec2.create_security_group(
            **vpc,
            GroupName=name,
            Description=f"skyplane-ops gateways of transfer {transfer_id}",
            TagSpecifications=[
                {"ResourceType": "security-group", "Tags": _tag_list({**tags, "Name": name})}
            ],
        )
        state.group_id = group_id = str(group["GroupId"])
        self._record()
        client = [
            {"CidrIp": cidr, "Description": "skyplane-ops control plane"}
            for cidr in self.client_cidrs or ()
        ]
        own = [{"GroupId": group_id, "Description": "this fleet's gateways"}]
        ec2.authorize_security_group_ingress(
            GroupId=group_id,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": client},
                *(
                    {
                        "IpProtocol": "tcp",
                        "FromPort": port,
                        "ToPort": port,
                        "IpRanges": client,
                        "UserIdGroupPairs": own,
                    }
                    for port in self._gateway_ports()
                ),
            ],
        )

        image_id = self._image_for(region)
        state.client_token = str(uuid.uuid4())  # names the instances before they exist
        self._record()
        reservation = ec2.run_instances(
            ClientToken=state.client_token,
            ImageId=image_id,
            InstanceType=self.instance_type,
            MinCount=count,
            MaxCount=count,
            KeyName=name,
            **self._network(ec2, region, group_id),
            MetadataOptions=dict(METADATA_OPTIONS),
            BlockDeviceMappings=self._root_volume(ec2, image_id),
            InstanceInitiatedShutdownBehavior="terminate",  # a power-off ends the bill
            UserData=self._user_data(public.decode()),
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": _tag_list({**tags, "Name": name})},
                {"ResourceType": "volume", "Tags": _tag_list({**tags, "Name": name})},
            ],
        )
        state.instance_ids = [str(i["InstanceId"]) for i in reservation["Instances"]]
        self._record()
        state.public_ips = self._wait_running(ec2, state.instance_ids)

    def _gateway_ports(self) -> list[int]:
        """Ports gateways listen on: control, data, and the one they take throughput probes
        on (the profiler asks the agents to listen there, see ``GatewayFleet.resources``)."""
        return sorted({self.control_port, self.data_port, self.probe_port})

    def _wait_running(self, ec2: Any, instance_ids: list[str]) -> dict[str, str]:
        deadline = time.monotonic() + self.start_timeout
        while True:
            found = {
                inst["InstanceId"]: inst
                for res in ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
                for inst in res["Instances"]
            }
            states = {i: found[i]["State"]["Name"] for i in instance_ids if i in found}
            bad = {i: s for i, s in states.items() if s in ("shutting-down", "terminated")}
            if bad:
                raise ProvisionError(f"instances ended while starting: {bad}")
            field = "PrivateIpAddress" if self.private else "PublicIpAddress"
            ips = {i: found[i].get(field) for i in instance_ids if i in found}
            if len(ips) == len(instance_ids) and all(
                states[i] == "running" and ips[i] for i in instance_ids
            ):
                return {i: str(ip) for i, ip in ips.items()}
            if time.monotonic() > deadline:
                raise ProvisionError(f"instances not running after {self.start_timeout:.0f}s")
            pause(self._cancel, self.poll_interval, "AWS provisioning")

    def _admit_peers(self, states: Sequence[_RegionState]) -> None:
        """Let every gateway reach every other gateway's ports over the addresses they use."""
        ips = sorted({ip for s in states for ip in s.public_ips.values()})
        if not ips:
            return
        ranges = [{"CidrIp": f"{ip}/32", "Description": "skyplane-ops peer gateway"} for ip in ips]
        for state in states:
            self._ec2(state.region).authorize_security_group_ingress(
                GroupId=state.group_id,
                IpPermissions=[
                    {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": ranges}
                    for p in self._gateway_ports()
                ],
            )

    def admit(self, fleet: GatewayFleet, addresses: Sequence[str]) -> None:
        """Mixed fleets: open the gateway ports to gateways in other clouds too."""
        ranges = [
            {"CidrIp": f"{ip}/32", "Description": "skyplane-ops peer gateway"}
            for ip in sorted(set(addresses))
        ]
        for region, info in fleet.resources.get("regions", {}).items():
            if ranges and info.get("group_id"):
                self._ec2(region).authorize_security_group_ingress(
                    GroupId=info["group_id"],
                    IpPermissions=[
                        {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": ranges}
                        for p in self._gateway_ports()
                    ],
                )

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Create and bootstrap the instances. ``cancel`` set (``provision.cancel``): the
        steps and waits stop and everything the pending record names is deleted."""
        check_transfer_id(transfer_id)
        self._cancel = cancel
        wanted = {region: n for region, n in vms.items() if n > 0}
        by_aws = {aws_region(r): r for r in wanted}
        if self.private:
            missing = sorted(set(by_aws) - set(self.subnet_ids))
            if missing:
                raise ProvisionError(
                    f"private=True needs subnet_ids for every region; missing: {', '.join(missing)}"
                )
        if self.client_cidrs is None:
            self.client_cidrs = detect_client_cidr()
        all_tags = self._tags(transfer_id, tags)
        states = [_RegionState(region=r) for r in sorted(by_aws)]
        secret_ref = create_secret(transfer_id)
        self._pending = records.PendingRecord(
            transfer_id=transfer_id,
            backend=self.name,
            secret_ref=secret_ref,
            tags=all_tags,
            created_at=all_tags[TAG_CREATED],
            snapshot=lambda: {"regions": {s.region: s.to_dict() for s in states}},
        )
        try:
            self._pending.save()  # before the first create call
            provision_regions(self._provision_region, states, wanted, by_aws, transfer_id, all_tags)
            self._admit_peers(states)
            hosts = [
                InstanceHost(
                    gateway_id=gateway_id(by_aws[s.region], i),
                    region=by_aws[s.region],
                    instance_id=iid,
                    ssh=SSHHost(
                        address=s.public_ips[iid],
                        region=by_aws[s.region],
                        port=self.ssh_port,
                        user=self.ssh_user,
                        key_path=s.key_path,
                        python=self.remote_python,
                        control_port=self.control_port,
                        data_port=self.data_port,
                    ),
                )
                for s in states
                for i, iid in enumerate(s.instance_ids)
            ]
            check_cancel(cancel, "AWS provisioning")
            gateways = self._bootstrap(hosts, transfer_id, secret_ref)
        except BaseException as exc:
            log.warning("provisioning %s failed (%s); deleting what was created", transfer_id, exc)
            pending, self._pending = self._pending, None
            self._cleanup(states, transfer_id)  # raises if incomplete: the record stays
            delete_secret(secret_ref)
            pending.forget()
            if isinstance(exc, ProvisionError):
                raise type(exc)(f"{exc} (everything created was deleted)") from exc
            if isinstance(exc, Exception):
                raise ProvisionError(
                    f"AWS provisioning failed: {exc} (everything created was deleted)"
                ) from exc
            raise
        self._pending = None
        return save_cloud_fleet(
            backend=self.name,
            transfer_id=transfer_id,
            hosts=hosts,
            gateways=gateways,
            per_gateway=lambda h: {
                "instance_id": h.instance_id,
                "aws_region": aws_region(h.region),
            },
            secret_ref=secret_ref,
            tags=all_tags,
            resources={
                "regions": {s.region: s.to_dict() for s in states},
                "probe_port": self.probe_port,
            },
        )

    def _ssh_bootstrap(
        self, hosts: Sequence[InstanceHost], transfer_id: str, secret_ref: str
    ) -> list[Gateway]:
        """Default bootstrap: host keys from the console output, then the SSH bootstrap."""
        keys: list[str | None] = [None] * len(hosts)
        if not self.accept_unknown_host_keys:  # cloud-init prints them on the serial console
            keys = _run_all(lambda h: self._console_host_key(h.region, h.instance_id), hosts)
        with_keys = [
            (h.gateway_id, replace(h.ssh, host_key=key)) for h, key in zip(hosts, keys, strict=True)
        ]
        return bootstrap_gateways(with_keys, transfer_id, secret_ref, self._bootstrap_options())

    def _default_wheelhouse(self) -> str:
        """Wheels for the image's python, downloaded once (only if a host lacks the deps)."""
        return cached_wheelhouse(self._wheel_lock, self.remote_python_version)

    def _bootstrap_options(self) -> BootstrapOptions:
        return BootstrapOptions(
            accept_unknown_host_keys=self.accept_unknown_host_keys,
            wheelhouse=self.wheelhouse,
            wheelhouse_builder=self._default_wheelhouse,
            idle_timeout=self.idle_timeout,
            poweroff_on_idle=self.poweroff_on_idle,
            deadline_command=DEADLINE_COMMAND,
            connect_timeout=20.0,
            ready_timeout=120.0,
            cancel=self._cancel,
        )

    def _console_host_key(self, region: str, instance_id: str) -> str:
        """The instance's ed25519 host key as cloud-init printed it on the serial console."""
        deadline = time.monotonic() + self.host_key_timeout
        ec2 = self._ec2(aws_region(region))
        while time.monotonic() < deadline:
            output = ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output", "")
            key = parse_console_host_key(output)
            if key:
                return key
            pause(self._cancel, max(self.poll_interval, 5.0), "AWS provisioning")
        raise ProvisionError(
            f"no SSH host key in the console output of {instance_id} after "
            f"{self.host_key_timeout:.0f}s; pass accept_unknown_host_keys=True to trust it"
        )

    # ------------------------------------------------------------------ tear-down

    def deprovision(self, fleet: GatewayFleet) -> list[str]:
        try:
            teardown_gateways(fleet.gateways, fleet.transfer_id, self._bootstrap_options())
        except ProvisionError as exc:  # the instances are terminated next anyway
            log.info("agent tear-down before termination failed: %s", exc)
        states = [
            _RegionState.from_dict(region, info)
            for region, info in fleet.resources.get("regions", {}).items()
        ]
        deleted = self._cleanup(states, fleet.transfer_id)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)
        return deleted


_SESSION_LOCK = threading.Lock()
