"""The ``azure`` backend: ephemeral Azure VMs as gateways, bootstrapped over SSH, leak-proof.

Per fleet and region it creates one resource group ``skyplane-ops-<transfer>-<region>`` holding
everything else: a network security group (SSH from the control plane only; the gateway ports
from the control plane and the fleet's own addresses only; Azure's default rules deny the rest
of the internet), a virtual network whose subnet uses that NSG, and per VM a public IP, a NIC
and the VM (Ubuntu 22.04 LTS; OS disk and NIC deleted with it). Every resource carries the
transfer id, creator, creation and expiry tags; deleting the group deletes all of it, which is
how tear-down, the failure path and the sweeper work.

The VM's SSH host key is generated here and passed in its custom data (cloud-init), so it is
known before boot: Azure keeps custom data root-only on the VM and returns it neither from the
instance metadata service nor from the API. It also carries the VM's root-owned deadline
(``cloudvm.common``: the agent's lease can push it later, never past ``ttl_seconds``). The VM's
one login user is unprivileged: its only privilege is the deadline helper's ``extend`` and
``poweroff``. OS disks are encrypted at rest by Azure (platform-managed keys), or with a
customer-managed key through ``disk_encryption_set_id``. Azure's metadata service needs a
``Metadata: true`` header and refuses forwarded requests; it has no hop-limit setting to
configure.

Azure keeps billing a stopped VM (compute) and a deallocated one (disk, static IP), so with
``self_delete`` (the default; ``self_deallocate`` is its old name) each VM gets a
system-assigned identity and deletes itself, with its OS disk, NIC and public IP
(``deleteOption: Delete``), before its deadline powers it off and whenever it shuts down. Azure
has no provider-side run limit for regular VMs, so this guest-side delete is the limit; the
sweeper deletes the rest of the group (NSG, virtual network: free) once ``expires-at`` passes.
That identity holds one custom role (``arm.self_release_role``: exactly
``arm.SELF_RELEASE_ACTIONS``, the calls of the release script) assigned at the VM's own scope;
not Virtual Machine Contributor, which would let anything on the VM run commands, resize or
re-image it. An administrator defines the role once per subscription
(``define_self_release_role``, ``skyplane-ops setup --backend azure --apply``); the backend
only reads it, so the control plane's identity needs no ``roleDefinitions/write``.
``self_delete=False`` gives the VMs no identity at all.

A pending fleet record naming each region's resource group is written before the group is
created, so a control plane killed at any point leaves a record ``deprovision`` acts on.
"""

from __future__ import annotations

import base64
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import records
from skyplane_ops.provision.azure import arm
from skyplane_ops.provision.azure.arm import (
    API,
    CAPACITY_CODES,
    UBUNTU,
    StaticToken,
)
from skyplane_ops.provision.cancel import check as check_cancel
from skyplane_ops.provision.cancel import pause
from skyplane_ops.provision.cloudhosts import provision_regions
from skyplane_ops.provision.cloudhosts import run_all as _run_all
from skyplane_ops.provision.cloudvm.boot import CloudBoot
from skyplane_ops.provision.cloudvm.common import (
    NAME_PREFIX,
    KeyPair,
    QuotaError,
    cloud_init,
    deadline_cloud_init,
    default_creator,
    merge_cloud_config,
    region_of,
    save_client_key,
    sweepable,
)
from skyplane_ops.provision.cloudvm.prelude import requested
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.secrets import delete_secret

# The package's name, as when this was the module skyplane_ops.provision.azure.
log = logging.getLogger("skyplane_ops.provision.azure")


@dataclass
class _Region:
    """What was created in one region so far (the resource group holds all of it)."""

    region: str
    index: int
    group: str | None = None
    vms: list[str] = field(default_factory=list)
    public_ips: dict[str, str] = field(default_factory=dict)
    host_keys: dict[str, str] = field(default_factory=dict)
    key_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "vms": list(self.vms), "key_path": self.key_path}


class AzureProvisioner(CloudBoot):
    """Gateways on fresh Azure VMs, one resource group per fleet and region."""

    name = "azure"

    def __init__(
        self,
        *,
        subscription_id: str,
        vm_size: str = "Standard_D32_v5",
        image: Mapping[str, str] = UBUNTU,
        zones: Sequence[str] = ("1", "2", "3"),
        spot: bool = False,
        self_delete: bool = True,
        self_deallocate: bool | None = None,
        boot_limit_s: float | None = None,
        creator: str | None = None,
        credential: Any = "default",
        base_url: str | None = None,
        ca_bundle: str | None = None,
        sweep_regions: Sequence[str] = (),
        disk_encryption_set_id: str | None = None,
        self_release_role_id: str | None = None,
        **boot: Any,
    ) -> None:
        super().__init__(**boot)
        self.disk_encryption_set_id = disk_encryption_set_id
        self._role_ready = False
        # The self-delete role an administrator defined once (``define_self_release_role``);
        # by default the deterministic id that ``arm.self_release_role`` gives.
        self.self_release_role_id = self_release_role_id
        from azure.mgmt.compute import ComputeManagementClient  # lazily: only azure needs them
        from azure.mgmt.network import NetworkManagementClient
        from azure.mgmt.resource.resources import ResourceManagementClient

        if credential == "default":
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        elif credential == "fake":
            credential = StaticToken()
        kw: dict[str, Any] = {}
        if base_url:
            kw["base_url"] = base_url
        if ca_bundle:
            kw["connection_verify"] = ca_bundle
        self.subscription_id = subscription_id
        # Bodies are ARM's REST JSON (what the SDKs send as-is), so the clients are used untyped.
        self.resources: Any = ResourceManagementClient(credential, subscription_id, **kw)
        self.network: Any = NetworkManagementClient(credential, subscription_id, **kw)
        self.compute: Any = ComputeManagementClient(credential, subscription_id, **kw)
        self.vm_size = vm_size
        self.image = dict(image)
        self.zones = list(zones)
        self.spot = spot
        # ``self_deallocate`` is the old name of ``self_delete`` (the VM now deletes itself).
        self.self_delete = self_delete if self_deallocate is None else self_deallocate
        self.boot_limit_s = (
            boot_limit_s if boot_limit_s is not None else min(self.ttl_seconds, 3600.0)
        )
        self.creator = creator or default_creator()
        self._pending: records.PendingRecord | None = None
        self.sweep_regions = list(sweep_regions)  # unused: groups are listed subscription-wide
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ provision

    def _group(self, transfer_id: str, region: str) -> str:
        return f"{NAME_PREFIX}{transfer_id}-{region}".replace("_", "-")  # VM names: no "_"

    def _sub(self, group: str) -> str:
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{group}"

    def _provision_region(self, state: _Region, count: int, tid: str, tags: dict) -> None:
        region, group = state.region, self._group(tid, state.region)
        base = {"location": region, "tags": tags}
        state.group = group  # before the call: an answer lost on the way must not leak it
        check_cancel(self._cancel, "Azure provisioning")
        if self._pending is not None:
            self._pending.save()
        self.resources.resource_groups.create_or_update(group, base)
        prefix = f"10.{state.index}.0.0"
        nsg = self.network.network_security_groups.begin_create_or_update(
            group, f"{group}-nsg", {**base, "properties": {"securityRules": self._rules([])}}
        ).result()
        vnet = self.network.virtual_networks.begin_create_or_update(
            group, f"{group}-vnet", arm.vnet(base, prefix, nsg["id"])
        ).result()
        subnet_id = vnet["properties"]["subnets"][0]["id"]
        client_key = KeyPair.generate()
        state.key_path = str(save_client_key("azure", tid, region, client_key))
        for i in range(count):
            name = f"{group}-{i}"
            pip = self.network.public_ip_addresses.begin_create_or_update(
                group, f"{name}-ip", arm.public_ip(base)
            ).result()
            nic = self.network.network_interfaces.begin_create_or_update(
                group, f"{name}-nic", arm.nic(base, subnet_id, pip["id"])
            ).result()
            host_key = KeyPair.generate()
            if self.self_delete:  # defined before any VM: the VM-to-role window is one call
                self._self_release_role()
            check_cancel(self._cancel, "Azure provisioning")
            state.vms.append(name)  # named (with the key path) before the create call
            if self._pending is not None:
                self._pending.save()
            vm = self._create_vm(group, name, region, base, nic["id"], client_key, host_key)
            state.host_keys[name] = host_key.public
            if self.self_delete:
                self._allow_self_delete(vm)
            got = self.network.public_ip_addresses.get(group, f"{name}-ip")
            state.public_ips[name] = got["properties"]["ipAddress"]

    def _rules(self, peers: Sequence[str]) -> list[dict[str, Any]]:
        return arm.nsg_rules(self.resolve_client_cidr(), self.gateway_ports(), peers)

    def _user_data(self, client_key: KeyPair, host_key: KeyPair) -> str:
        release = arm.RELEASE_SCRIPT if self.self_delete else None
        extra = merge_cloud_config(
            deadline_cloud_init(self.ssh_user, self.boot_limit_s, self.ttl_seconds, release),
            arm.release_on_shutdown() if self.self_delete else {},
        )
        return cloud_init(
            user=self.ssh_user, authorized_key=client_key.public, host_key=host_key, extra=extra
        )

    def _create_vm(
        self,
        group: str,
        name: str,
        region: str,
        base: dict[str, Any],
        nic_id: str,
        client_key: KeyPair,
        host_key: KeyPair,
    ) -> Any:
        """Create the VM in the first zone with capacity; quota errors name region and quota."""
        from azure.core.exceptions import HttpResponseError

        custom = base64.b64encode(self._user_data(client_key, host_key).encode()).decode()
        props = arm.vm_properties(
            self.vm_size, self.image, name, self.ssh_user, client_key.public, custom, nic_id
        )
        if self.disk_encryption_set_id:  # a customer-managed key (platform-managed otherwise)
            props["storageProfile"]["osDisk"]["managedDisk"]["diskEncryptionSet"] = {
                "id": self.disk_encryption_set_id
            }
        if self.spot:
            props.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
        body: dict[str, Any] = {**base, "properties": props}
        if self.self_delete:
            body["identity"] = {"type": "SystemAssigned"}
        tried: list[str] = []
        zones: list[str | None] = list(self.zones) or [None]
        for zone in zones:
            attempt = {**body, **({"zones": [zone]} if zone else {})}
            try:
                poller = self.compute.virtual_machines.begin_create_or_update(group, name, attempt)
                while not poller.done():  # the VM boots: a cancel ends the wait
                    pause(self._cancel, 0.2, "Azure provisioning")
                return poller.result()
            except HttpResponseError as exc:
                code = getattr(getattr(exc, "error", None), "code", "") or ""
                if code in CAPACITY_CODES:
                    log.info("azure %s zone %s has no %s: %s", region, zone, self.vm_size, exc)
                    tried.append(str(zone))
                    self._delete_vm_quietly(group, name)
                    continue
                if "quota" in str(exc).lower():
                    raise QuotaError(
                        f"azure {region}: quota exceeded creating {self.vm_size}: {exc.message}"
                    ) from exc
                raise
        raise QuotaError(
            f"azure {region}: no capacity for {self.vm_size} in zones {', '.join(tried)}"
        )

    def _delete_vm_quietly(self, group: str, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.compute.virtual_machines.begin_delete(group, name).result()
        except ResourceNotFoundError:
            pass

    def _self_release_role(self) -> str:
        """The self-delete role's id, read (never written) once per provisioner.

        Defining a role needs ``roleDefinitions/write``, which would let this identity rewrite
        the one role its ``roleAssignments/write`` condition allows: so an administrator
        defines it once (``skyplane-ops setup --backend azure --apply``) and the control plane
        only checks that it is there, before the first VM (a missing role fails the fleet
        with nothing of it created)."""
        from azure.core.exceptions import ResourceNotFoundError

        role = self._self_release_role_id()
        with self._lock:
            if not self._role_ready:
                try:
                    self.resources.resources.get_by_id(role, api_version=API["authorization"])
                except ResourceNotFoundError as exc:
                    raise ProvisionError(
                        f"azure: the gateway self-delete role {role.rsplit('/', 1)[-1]} is not "
                        f"defined in subscription {self.subscription_id}; an administrator "
                        "defines it once with `skyplane-ops setup --backend azure --apply` "
                        "(see docs/cloud-permissions.md), or pass self_delete=False"
                    ) from exc
                self._role_ready = True
        return role

    def _self_release_role_id(self) -> str:
        given = self.self_release_role_id
        if not given:
            return arm.self_release_role(self.subscription_id)[0]
        if "/" in given:
            return given
        scope = f"/subscriptions/{self.subscription_id}"
        return f"{scope}/providers/Microsoft.Authorization/roleDefinitions/{given}"

    def self_release_role_definition(self) -> tuple[str, dict[str, Any]]:
        """The role gateway VMs need (id and definition), for the one-time setup."""
        return arm.self_release_role(self.subscription_id)

    def define_self_release_role(self) -> str:
        """Define the self-delete role (an idempotent PUT): run once per subscription by an
        identity with ``roleDefinitions/write`` (an administrator, not the control plane)."""
        role, body = self.self_release_role_definition()
        self.resources.resources.begin_create_or_update_by_id(
            role, body, api_version=API["authorization"]
        ).result()
        return role

    def _allow_self_delete(self, vm: Any) -> None:
        """Let the VM's own identity delete the VM (and nothing else)."""
        principal = (vm.get("identity") or {}).get("principalId")
        if not principal:
            raise ProvisionError(f"VM {vm['id']} has no managed identity to delete itself")
        role = self._self_release_role()
        self.resources.resources.begin_create_or_update_by_id(
            f"{vm['id']}/providers/Microsoft.Authorization/roleAssignments/{uuid.uuid4()}",
            {
                "properties": {
                    "roleDefinitionId": role,
                    "principalId": principal,
                    "principalType": "ServicePrincipal",
                }
            },
            api_version=API["authorization"],
        ).result()

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Create and bootstrap the VMs. ``cancel`` set (``provision.cancel``): checked before
        each create and while a VM boots; the resource groups the record names are deleted."""
        self._cancel = cancel
        wanted, by_name = requested(vms, "azure", transfer_id)
        self.resolve_client_cidr()
        if self.self_delete and wanted:  # before anything is created: a missing role is one error
            self._self_release_role()
        start = self.open_fleet(
            transfer_id,
            (wanted, by_name),
            tags,
            _Region,
            lambda st: {"subscription_id": self.subscription_id, "regions": st.regions()},
        )
        states = start.states
        with self.creating(start, lambda: self._cleanup(states)):
            provision_regions(
                self._provision_region, states, wanted, by_name, transfer_id, start.tags
            )
            hosts = self.launched_hosts(states, by_name, lambda s: s.vms)
            self._set_peers([s.group for s in states if s.group], [h.ssh.address for h in hosts])
            check_cancel(cancel, "Azure provisioning")
            gateways = self._bootstrap(hosts, transfer_id, start.secret_ref)
        return self.save_fleet(
            start,
            hosts,
            gateways,
            lambda h: {
                "vm": h.instance_id,
                "resource_group": self._group(transfer_id, region_of(h.region, "azure")),
            },
            {"subscription_id": self.subscription_id},
        )

    def _set_peers(self, groups: Sequence[str], addresses: Sequence[str]) -> None:
        """Open the gateway ports to exactly the control plane and these gateway addresses."""
        (ssh_rule, gw_rule) = self._rules(addresses)
        del ssh_rule
        for group in groups:
            self.network.security_rules.begin_create_or_update(
                group, f"{group}-nsg", gw_rule["name"], {"properties": gw_rule["properties"]}
            ).result()

    def admit(self, fleet: GatewayFleet, addresses: Sequence[str]) -> None:
        """Mixed fleets: admit the gateways of the other clouds too."""
        groups = [i["group"] for i in fleet.resources.get("regions", {}).values() if i["group"]]
        self._set_peers(groups, [*(g.host for g in fleet.gateways), *addresses])

    def describe(self, vms: Mapping[str, int], transfer_id: str) -> list[tuple[str, float]]:
        """Every resource ``provision`` would create, with its hourly list price (dry run)."""
        from skyplane_ops.provision.prices import vm_price

        out: list[tuple[str, float]] = []
        price = vm_price("azure", self.vm_size, self.spot)
        for region, n in sorted(vms.items()):
            group = self._group(transfer_id, region_of(region, "azure"))
            out += [
                (f"azure resource group {group}", 0.0),
                (f"azure NSG {group}-nsg (22 from control plane; {self.ports_text()} fleet)", 0.0),
                (f"azure virtual network {group}-vnet", 0.0),
            ]
            for i in range(n):
                out += [
                    (f"azure public IP {group}-{i}-ip (Standard, static)", 0.005),
                    (f"azure NIC {group}-{i}-nic", 0.0),
                    (f"azure VM {group}-{i} {self.vm_size} + StandardSSD OS disk", price),
                ]
        return out

    # ------------------------------------------------------------------ tear-down

    def _delete_group(self, group: str) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.resources.resource_groups.begin_delete(group).result()
            return True
        except ResourceNotFoundError:
            return False

    def _cleanup(self, states: Sequence[_Region]) -> list[str]:
        """Delete every group (each one tried: the errors are reported together)."""
        groups = [s.group for s in states if s.group]
        results = _run_all(self._delete_group, groups, raise_first=False)
        for s in states:
            self.forget_key(s.key_path)
        deleted = [
            f"azure:resourceGroups/{g}" for g, r in zip(groups, results, strict=True) if r is True
        ]
        errors = [
            f"{g}: {r}"
            for g, r in zip(groups, results, strict=True)
            if isinstance(r, BaseException)
        ]
        if errors:
            raise ProvisionError(
                "Azure clean-up incomplete: "
                + "; ".join(errors)
                + f" (deleted: {', '.join(deleted) or 'none'})"
            )
        return deleted

    def deprovision(self, fleet: GatewayFleet) -> list[str]:
        self.stop_agents(fleet)
        states = [
            _Region(region=r, index=0, group=i.get("group"), key_path=i.get("key_path"))
            for r, i in fleet.resources.get("regions", {}).items()
        ]
        deleted = self._cleanup(states)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)
        return deleted

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Delete our resource groups: named ``skyplane-ops-``, tagged with a transfer id AND
        this creator, of ``transfer_id`` (if given), old enough or past ``expires-at``."""
        states = [
            _Region(region=group["location"], index=0, group=group["name"])
            for group in self.resources.resource_groups.list()
            if sweepable(
                group["name"],
                group.get("tags") or {},
                creator=self.creator,
                transfer_id=transfer_id,
                older_than_seconds=older_than_seconds,
            )
        ]
        return self._cleanup(states)
