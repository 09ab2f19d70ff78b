"""The ``gcp`` backend: ephemeral Compute Engine gateways, bootstrapped over SSH, leak-proof.

Per fleet it creates one VPC network (``skyplane-ops-<transfer>``) with two firewall rules (SSH
from the control plane only; the gateway ports from the control plane and the fleet's own
addresses only), and per region one subnetwork and the instances, labelled with transfer id,
creator, creation and expiry time (networks, subnets and firewalls take no labels: they carry the
``skyplane-ops-<transfer>`` name and the tags in their description). Instances boot Ubuntu LTS
with cloud-init user-data holding only public material: the fleet's client key for the one,
unprivileged login user (its only privilege: the deadline helper's ``extend``/``poweroff``) and
the VM's root-owned deadline (``cloudvm.common``: the agent's lease can push it later, never
past ``ttl_seconds``). Metadata is readable by every process on the VM and by anyone with
``compute.instances.get``, so no secret goes there: the VM generates its own SSH host key and
cloud-init prints it on serial port 1, which the backend reads back through the API (as the aws
backend reads the console output) and paramiko then verifies strictly. ``block-project-ssh-
keys`` keeps project-wide SSH keys off the VMs. Boot disks are encrypted at rest by Google (or
with ``disk_kms_key``, a customer-managed Cloud KMS key). ``max_run_duration`` with
``instance_termination_action=DELETE`` deletes every VM (and its auto-delete boot disk) at its
expiry whatever happens to the control plane or the guest; a VM whose deadline powered it off
stops billing for CPU until then, and the sweeper deletes it once its ``expires-at`` passes. A
pending fleet record is written before the first create call and names every network,
firewall, subnetwork and instance (with its zone) before its insert, so a control plane killed
at any point leaves a record ``deprovision`` acts on. Regions go in parallel, zones are tried in
order when one has no capacity, and any failure deletes everything created so far; deleting
tries every resource and reports every error.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.cancel import check as check_cancel
from skyplane_ops.provision.cancel import pause
from skyplane_ops.provision.cloudhosts import InstanceHost, provision_regions
from skyplane_ops.provision.cloudhosts import run_all as _run_all
from skyplane_ops.provision.cloudvm.boot import CloudBoot
from skyplane_ops.provision.cloudvm.common import (
    NAME_PREFIX,
    KeyPair,
    QuotaError,
    cloud_init,
    deadline_cloud_init,
    default_creator,
    gcp_labels,
    merge_cloud_config,
    parse_console_host_key,
    region_of,
    save_client_key,
    sweepable,
)
from skyplane_ops.provision.cloudvm.prelude import requested
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.gcp.api import ComputeAPI, NoCapacity
from skyplane_ops.provision.records import PendingRecord
from skyplane_ops.provision.secrets import delete_secret

# The package's name, as when this was the module skyplane_ops.provision.gcp.
log = logging.getLogger("skyplane_ops.provision.gcp")

UBUNTU_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
# cloud-init makes the host key and prints it on the console; Google's guest agent would make
# new ones on first boot (``[InstanceSetup] set_host_keys``), so the printed key would not be the
# one sshd presents. write_files runs in cloud-init's init stage, before the guest agent starts.
KEEP_HOST_KEYS = {
    "write_files": [
        {
            "path": "/etc/default/instance_configs.cfg",
            "append": True,
            "content": "[InstanceSetup]\nset_host_keys = false\n",
        }
    ]
}


@dataclass
class _Region:
    """What was created in one region so far: exactly what clean-up must delete."""

    region: str
    index: int
    subnet: str | None = None
    instances: dict[str, str] = field(default_factory=dict)  # name -> zone
    public_ips: dict[str, str] = field(default_factory=dict)
    key_path: str | None = None
    host_keys: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"subnet": self.subnet, "instances": dict(self.instances), "key_path": self.key_path}


class GCPProvisioner(CloudBoot):
    """Gateways on fresh Compute Engine VMs, torn down (and swept) by name and label."""

    name = "gcp"
    provider = "gcp"

    def __init__(
        self,
        *,
        project: str,
        machine_type: str = "n2-standard-32",
        image: str = UBUNTU_IMAGE,
        disk_gb: int = 20,
        spot: bool = False,
        credentials_file: str | None = None,
        credentials: Any = None,
        endpoint: str | None = None,
        sweep_regions: Sequence[str] = (),
        op_timeout: float = 600.0,
        boot_limit_s: float | None = None,
        creator: str | None = None,
        disk_kms_key: str | None = None,
        host_key_timeout: float = 300.0,
        poll_interval: float = 5.0,
        **boot: Any,
    ) -> None:
        super().__init__(**boot)
        self.boot_limit_s = (
            boot_limit_s if boot_limit_s is not None else min(self.ttl_seconds, 3600.0)
        )
        self.creator = creator or default_creator()
        self._pending: PendingRecord | None = None
        self.project = project
        self.disk_kms_key = disk_kms_key
        self.host_key_timeout = host_key_timeout
        self.poll_interval = poll_interval
        self.machine_type = machine_type
        self.image = image
        self.disk_gb = disk_gb
        self.spot = spot
        self.api = ComputeAPI(credentials, credentials_file, endpoint, op_timeout)
        self.compute = self.api.compute
        self.sweep_regions = [region_of(r, "gcp") if ":" in r else r for r in sweep_regions]

    # ------------------------------------------------------------------ provision

    def _network(self, tid: str) -> str:
        """Compute names allow ``[a-z0-9-]`` only: ``Nightly_42`` -> ``skyplane-ops-nightly-42``."""
        return f"{NAME_PREFIX}{tid}".lower().replace("_", "-")

    def _record(self) -> None:
        """Rewrite the pending record (called before each create call); a cancelled
        provisioning stops here, before it creates anything more."""
        check_cancel(self._cancel, "GCP provisioning")
        if self._pending is not None:
            self._pending.save()

    def _create_network(self, tid: str, tags: Mapping[str, str], created: dict) -> None:
        net = self._network(tid)
        created["network"] = net  # named before the call: a lost answer must not leak it
        self._record()
        self.api.wait(
            self.api.mutate(
                "NetworksClient",
                "insert",
                project=self.project,
                network_resource=self.compute.Network(
                    name=net, auto_create_subnetworks=False, description=json.dumps(tags)
                ),
            ),
            f"network {net}",
            "global",
        )
        ports = [str(p) for p in self.gateway_ports()]
        for suffix, allowed, ranges in (
            ("ssh", ["22"], list(self.resolve_client_cidr())),
            ("gw", ports, list(self.resolve_client_cidr())),
        ):
            name = f"{net}-{suffix}"
            created.setdefault("firewalls", []).append(name)
            self._record()
            self.api.wait(
                self.api.mutate(
                    "FirewallsClient",
                    "insert",
                    project=self.project,
                    firewall_resource=self.compute.Firewall(
                        name=name,
                        network=f"projects/{self.project}/global/networks/{net}",
                        direction="INGRESS",
                        allowed=[self.compute.Allowed(I_p_protocol="tcp", ports=allowed)],
                        source_ranges=ranges,
                        target_tags=[net],
                        description=json.dumps(tags),
                    ),
                ),
                f"firewall {name}",
                "global",
            )

    def _zones(self, region: str) -> list[str]:
        got = self.api.client("RegionsClient").get(project=self.project, region=region)
        zones = sorted(z.rsplit("/", 1)[-1] for z in got.zones)
        if not zones:
            raise ProvisionError(f"gcp region {region} lists no zones")
        return zones

    def _provision_region(self, state: _Region, count: int, tid: str, tags: dict) -> None:
        region, net = state.region, self._network(tid)
        labels = gcp_labels(tags)
        subnet = f"{net}-{region}"
        state.subnet = subnet  # named before the call
        self._record()
        self.api.wait(
            self.api.mutate(
                "SubnetworksClient",
                "insert",
                project=self.project,
                region=region,
                subnetwork_resource=self.compute.Subnetwork(
                    name=subnet,
                    network=f"projects/{self.project}/global/networks/{net}",
                    ip_cidr_range=f"10.{64 + state.index}.0.0/20",
                    description=json.dumps(tags),
                ),
            ),
            f"subnetwork {subnet}",
            region,
        )
        client_key = KeyPair.generate()
        state.key_path = str(save_client_key("gcp", tid, region, client_key))
        zones = self._zones(region)
        # Public material only: the VM makes its own host key (see the module's docstring).
        user_data = cloud_init(
            user=self.ssh_user,
            authorized_key=client_key.public,
            extra=merge_cloud_config(
                KEEP_HOST_KEYS,
                deadline_cloud_init(self.ssh_user, self.boot_limit_s, self.ttl_seconds),
            ),
        )
        for i in range(count):
            name = f"{subnet}-{i}"
            self._insert_instance(state, name, zones, subnet, labels, user_data, net, tags)
        for name, zone in state.instances.items():
            inst = self.api.client("InstancesClient").get(
                project=self.project, zone=zone, instance=name
            )
            state.public_ips[name] = inst.network_interfaces[0].access_configs[0].nat_i_p
        keys = _run_all(lambda item: self._console_host_key(*item), list(state.instances.items()))
        state.host_keys.update(zip(state.instances, keys, strict=True))

    def _console_host_key(self, name: str, zone: str) -> str:
        """The VM's ed25519 host key as cloud-init printed it on serial port 1."""
        deadline = time.monotonic() + self.host_key_timeout
        client = self.api.client("InstancesClient")
        while True:
            output = client.get_serial_port_output(
                request={"project": self.project, "zone": zone, "instance": name, "port": 1}
            )
            key = parse_console_host_key(output.contents or "")
            if key:
                return key
            if time.monotonic() > deadline:
                raise ProvisionError(
                    f"no SSH host key on the serial console of gcp instance {name} after "
                    f"{self.host_key_timeout:.0f}s"
                )
            pause(self._cancel, self.poll_interval, "GCP provisioning")

    def _insert_instance(
        self,
        state: _Region,
        name: str,
        zones: list[str],
        subnet: str,
        labels: dict[str, str],
        user_data: str,
        net: str,
        tags: Mapping[str, str],
    ) -> None:
        """Create one VM in the first zone with capacity (recorded, with the zone tried, before
        each insert)."""
        c = self.compute
        region = state.region
        scheduling = c.Scheduling(
            instance_termination_action="DELETE",
            max_run_duration=c.Duration(seconds=int(self.ttl_seconds)),
            provisioning_model="SPOT" if self.spot else "STANDARD",
        )
        tried: list[str] = []
        for zone in zones:
            instance = c.Instance(
                name=name,
                machine_type=f"zones/{zone}/machineTypes/{self.machine_type}",
                labels=labels,
                tags=c.Tags(items=[net]),
                description=json.dumps(tags),
                disks=[
                    c.AttachedDisk(
                        boot=True,
                        auto_delete=True,
                        initialize_params=c.AttachedDiskInitializeParams(
                            source_image=self.image, disk_size_gb=self.disk_gb, labels=labels
                        ),
                        **self._disk_key(),
                    )
                ],
                network_interfaces=[
                    c.NetworkInterface(
                        subnetwork=f"projects/{self.project}/regions/{region}/subnetworks/{subnet}",
                        access_configs=[c.AccessConfig(name="external", type_="ONE_TO_ONE_NAT")],
                    )
                ],
                metadata=c.Metadata(
                    items=[
                        c.Items(key=key, value=value)
                        for key, value in instance_metadata(user_data).items()
                    ]
                ),
                scheduling=scheduling,
            )
            state.instances[name] = zone
            self._record()
            try:
                self.api.wait(
                    self.api.mutate(
                        "InstancesClient",
                        "insert",
                        project=self.project,
                        zone=zone,
                        instance_resource=instance,
                    ),
                    f"instance {name} ({self.machine_type})",
                    region,
                )
                return
            except NoCapacity as exc:
                del state.instances[name]
                log.info("gcp zone %s has no capacity for %s: %s", zone, self.machine_type, exc)
                tried.append(zone)
        raise QuotaError(
            f"gcp {region}: no capacity for {self.machine_type} in zones {', '.join(tried)}"
        )

    def _disk_key(self) -> dict[str, Any]:
        """Boot disks are encrypted by Google; with ``disk_kms_key``, by that Cloud KMS key."""
        if not self.disk_kms_key:
            return {}
        key = self.compute.CustomerEncryptionKey(kms_key_name=self.disk_kms_key)
        return {"disk_encryption_key": key}

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Create and bootstrap the VMs. ``cancel`` set (``provision.cancel``): the steps and
        waits stop and everything the pending record names is deleted."""
        self._cancel = cancel
        wanted, by_name = requested(vms, "gcp", transfer_id)
        longest = max((f"{r}-{n - 1}" for r, n in zip(by_name, wanted.values(), strict=True)),
                      key=len, default="")  # fmt: skip
        if len(f"{self._network(transfer_id)}-{longest}") > 63:
            raise ProvisionError(
                f"transfer id {transfer_id!r} is too long for Compute Engine names "
                f"({self._network(transfer_id)}-{longest} > 63 characters): use a shorter one"
            )
        self.resolve_client_cidr()
        created: dict[str, Any] = {}
        start = self.open_fleet(
            transfer_id,
            (wanted, by_name),
            tags,
            _Region,
            lambda st: {
                **json.loads(json.dumps(created)),
                "project": self.project,
                "regions": st.regions(),
            },
        )
        states = start.states
        with self.creating(start, lambda: self._cleanup(created, states)):
            self._create_network(transfer_id, start.tags, created)
            provision_regions(
                self._provision_region, states, wanted, by_name, transfer_id, start.tags
            )
            hosts = self._hosts(states, by_name)
            self.set_peer_ranges(transfer_id, [h.ssh.address for h in hosts])
            check_cancel(cancel, "GCP provisioning")
            gateways = self._bootstrap(hosts, transfer_id, start.secret_ref)
        zones = {n: z for s in states for n, z in s.instances.items()}
        return self.save_fleet(
            start,
            hosts,
            gateways,
            lambda h: {"instance": h.instance_id, "zone": zones[h.instance_id]},
            {**created, "project": self.project},
        )

    def _hosts(self, states: Sequence[_Region], by_name: Mapping[str, str]) -> list[InstanceHost]:
        return self.launched_hosts(states, by_name, lambda s: s.instances)

    def set_peer_ranges(self, transfer_id: str, addresses: Sequence[str]) -> None:
        """Open the gateway ports to exactly the control plane and these gateway addresses."""
        net = self._network(transfer_id)
        ranges = sorted({*self.resolve_client_cidr(), *(f"{a}/32" for a in addresses)})
        self.api.wait(
            self.api.mutate(
                "FirewallsClient",
                "patch",
                project=self.project,
                firewall=f"{net}-gw",
                firewall_resource=self.compute.Firewall(source_ranges=ranges),
            ),
            f"firewall {net}-gw",
            "global",
        )

    def admit(self, fleet: GatewayFleet, addresses: Sequence[str]) -> None:
        """Mixed fleets: admit the gateways of the other clouds too."""
        self.set_peer_ranges(fleet.transfer_id, [*(g.host for g in fleet.gateways), *addresses])

    def describe(self, vms: Mapping[str, int], transfer_id: str) -> list[tuple[str, float]]:
        """Every resource ``provision`` would create, with its hourly list price (dry run)."""
        from skyplane_ops.provision.prices import vm_price

        net = f"{NAME_PREFIX}{transfer_id}"
        out: list[tuple[str, float]] = [
            (f"gcp network {net}", 0.0),
            (f"gcp firewall {net}-ssh (tcp:22 from {_cidrs_text(self.client_cidrs)})", 0.0),
            (f"gcp firewall {net}-gw (tcp:{self.ports_text()} from control plane + fleet)", 0.0),
        ]
        price = vm_price("gcp", self.machine_type, self.spot)
        for region, n in sorted(vms.items()):
            name = region_of(region, "gcp")
            out.append((f"gcp subnetwork {net}-{name}", 0.0))
            for i in range(n):
                out.append((f"gcp instance {net}-{name}-{i} {self.machine_type}", price))
                out.append((f"gcp external IPv4 of {net}-{name}-{i}", 0.005))
        return out

    # ------------------------------------------------------------------ tear-down

    def _cleanup(self, created: Mapping[str, Any], states: Sequence[_Region]) -> list[str]:
        """Delete instances, then firewalls, subnets and the network; returns what was deleted."""
        deleted: list[str] = []
        inst = self.api.client("InstancesClient")
        pairs = [(s.region, n, z) for s in states for n, z in s.instances.items()]
        results = _run_all(
            lambda p: self.api.delete(
                lambda: inst.delete(project=self.project, zone=p[2], instance=p[1]),
                f"instance {p[1]}",
                p[0],
            ),
            pairs,
            raise_first=False,
        )
        errors = [
            f"instance {p[1]}: {r}"
            for p, r in zip(pairs, results, strict=True)
            if isinstance(r, BaseException)
        ]
        deleted += [
            f"gcp:{p[2]}:instance/{p[1]}" for p, r in zip(pairs, results, strict=True) if r is True
        ]

        def attempt(what: str, ident: str, op: Any, region: str) -> None:
            try:  # every resource is tried: one failure does not keep the others
                if self.api.delete(op, what, region):
                    deleted.append(ident)
            except Exception as exc:
                errors.append(f"{what}: {exc}")

        fws = self.api.client("FirewallsClient")
        for fw in created.get("firewalls", []):
            attempt(
                f"firewall {fw}",
                f"gcp:global:firewall/{fw}",
                partial(fws.delete, project=self.project, firewall=fw),
                "global",
            )
        subs = self.api.client("SubnetworksClient")
        for s in states:
            if s.subnet:
                attempt(
                    f"subnetwork {s.subnet}",
                    f"gcp:{s.region}:subnetwork/{s.subnet}",
                    partial(
                        subs.delete, project=self.project, region=s.region, subnetwork=s.subnet
                    ),
                    s.region,
                )
        if created.get("network"):
            nets = self.api.client("NetworksClient")
            attempt(
                f"network {created['network']}",
                f"gcp:global:network/{created['network']}",
                partial(nets.delete, project=self.project, network=created["network"]),
                "global",
            )
        for s in states:
            self.forget_key(s.key_path)
        if errors:
            raise ProvisionError(
                "GCP clean-up incomplete: "
                + "; ".join(errors)
                + f" (deleted: {', '.join(deleted) or 'none'})"
            )
        return deleted

    def deprovision(self, fleet: GatewayFleet) -> list[str]:
        self.stop_agents(fleet)
        regions = fleet.resources.get("regions", {})
        states = [
            _Region(
                region=r,
                index=0,
                subnet=info.get("subnet"),
                instances=dict(info.get("instances", {})),
                key_path=info.get("key_path"),
            )
            for r, info in regions.items()
        ]
        deleted = self._cleanup(fleet.resources, states)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)
        return deleted

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Delete our instances and networks (with their firewalls and subnetworks): named
        ``skyplane-ops-``, labelled (instances) or described (the rest) with a transfer id AND
        this creator, of ``transfer_id`` if given, old enough or past ``expires-at``. Every
        resource is tried; the errors are reported together."""

        def ours(name: str, tags: Mapping[str, str], labels: bool = False) -> bool:
            return sweepable(
                name,
                tags,
                creator=self.creator,
                transfer_id=transfer_id,
                older_than_seconds=older_than_seconds,
                labels=labels,
            )

        states: dict[str, _Region] = {}
        for zone, scoped in self.api.client("InstancesClient").aggregated_list(
            project=self.project
        ):
            for inst in scoped.instances:
                if not ours(inst.name, dict(inst.labels), labels=True):
                    continue
                z = zone.rsplit("/", 1)[-1]
                region = z.rsplit("-", 1)[0]
                states.setdefault(region, _Region(region=region, index=0)).instances[inst.name] = z
        names = {
            n.name
            for n in self.api.client("NetworksClient").list(project=self.project)
            if ours(n.name, _described_tags(n.description))
        }
        created: dict[str, Any] = {
            "firewalls": [
                f.name
                for f in self.api.client("FirewallsClient").list(project=self.project)
                if f.network.rsplit("/", 1)[-1] in names
                and ours(f.name, _described_tags(f.description))
            ]
        }
        extra: list[_Region] = []
        for region, scoped in self.api.client("SubnetworksClient").aggregated_list(
            project=self.project
        ):
            for sub in scoped.subnetworks:
                if sub.network.rsplit("/", 1)[-1] in names and ours(
                    sub.name, _described_tags(sub.description)
                ):
                    r = region.rsplit("/", 1)[-1]
                    states.setdefault(r, _Region(region=r, index=0))
                    if states[r].subnet:  # one subnet per record: delete extra ones directly
                        extra.append(_Region(region=r, index=0, subnet=sub.name))
                    else:
                        states[r].subnet = sub.name
        deleted: list[str] = []
        errors: list[str] = []
        for what, regions in (
            (created, list(states.values())),
            ({}, extra),
            *(({"network": net}, []) for net in sorted(names)),
        ):
            try:
                deleted += self._cleanup(what, regions)
            except ProvisionError as exc:
                errors.append(str(exc))
        if errors:
            raise ProvisionError(
                "GCP sweep incomplete: "
                + "; ".join(errors)
                + f" (deleted: {', '.join(deleted) or 'none'})"
            )
        return deleted


def instance_metadata(user_data: str) -> dict[str, str]:
    """A gateway VM's metadata: public material only (readable on the VM and by anyone with
    ``compute.instances.get``), project-wide SSH keys refused, the legacy endpoints off."""
    return {
        "user-data": user_data,
        "block-project-ssh-keys": "TRUE",
        "disable-legacy-endpoints": "TRUE",
    }


def _cidrs_text(cidrs: Sequence[str] | None) -> str:
    return ", ".join(cidrs) if cidrs else "this host (detected)"


def _described_tags(description: str) -> dict[str, str]:
    """The tags a network, subnetwork or firewall carries in its description (JSON)."""
    try:
        tags = json.loads(description or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}
