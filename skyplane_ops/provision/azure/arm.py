"""ARM request bodies of the azure backend (REST JSON, as the SDKs send it) and its constants."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

UBUNTU = {
    "publisher": "Canonical",
    "offer": "0001-com-ubuntu-server-jammy",
    "sku": "22_04-lts-gen2",
    "version": "latest",
}
# Built-in "Virtual Machine Contributor" (run-command, resize, extensions...): NOT given to the
# VMs any more; kept as a name the tests and fakes know.
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
# What a gateway VM's own identity may do to itself, and nothing else: exactly the calls of its
# dead-man switch (RELEASE_SCRIPT: one ``DELETE`` of the VM, assigned at the VM's own scope).
# The OS disk, NIC and public IP go with the VM because their ``deleteOption`` is Delete, set by
# the control plane at create time: ARM deletes them as part of the VM's delete, so the role
# holds no disk, NIC or IP action and no scope beyond the VM. Whoever changes that script
# changes this line with it.
SELF_RELEASE_ACTIONS = ("Microsoft.Compute/virtualMachines/delete",)
_ROLE_NAMESPACE = uuid.UUID("5b1f3c2e-7d0a-4a51-9a43-0c7e2f6d9b11")
CAPACITY_CODES = {
    "ZonalAllocationFailed",
    "AllocationFailed",
    "OverconstrainedZonalAllocationRequest",
    "SkuNotAvailable",
}
# The VM deletes itself (with its OS disk, NIC and public IP: their deleteOption is Delete) with
# its managed identity, before its root deadline powers it off and whenever it shuts down: a
# stopped or deallocated VM still bills its disk and static IP, a deleted one bills nothing.
RELEASE_SCRIPT = """#!/bin/sh
# skyplane-ops: delete this VM (and its disk, NIC, public IP) with its managed identity.
md=http://169.254.169.254/metadata
arm=https://management.azure.com
q="api-version=2018-02-01&resource=$arm/"
tok=$(curl -sf -H Metadata:true "$md/identity/oauth2/token?$q" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
id=$(curl -sf -H Metadata:true \
  "$md/instance/compute/resourceId?api-version=2021-02-01&format=text")
curl -sf -X DELETE -H "Authorization: Bearer $tok" \
  "$arm$id?forceDeletion=true&api-version=2024-07-01"
"""
RELEASE_UNIT = """[Unit]
Description=skyplane-ops: delete this VM when it shuts down
Wants=network-online.target
After=network-online.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
ExecStop=/usr/local/sbin/skyplane-ops-release
TimeoutStopSec=60
[Install]
WantedBy=multi-user.target
"""
API = {"network": "2024-05-01", "compute": "2024-07-01", "authorization": "2022-04-01"}


class StaticToken:
    """A credential for emulators and fakes only (``credential="fake"``)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("fake-token", 4102444800)


def self_release_role(subscription_id: str) -> tuple[str, dict[str, Any]]:
    """The custom role a gateway VM's identity gets, assigned at the VM's own scope: its id
    (the same for every fleet of a subscription, so an ABAC condition on the control plane's
    ``roleAssignments/write`` can name it) and its definition (PUT is idempotent)."""
    guid = uuid.uuid5(_ROLE_NAMESPACE, f"{subscription_id}/{','.join(SELF_RELEASE_ACTIONS)}")
    scope = f"/subscriptions/{subscription_id}"
    role_id = f"{scope}/providers/Microsoft.Authorization/roleDefinitions/{guid}"
    body = {
        "properties": {
            # Role names are unique per tenant: one per subscription and action set.
            "roleName": f"skyplane-ops gateway self-release {str(guid)[:8]}",
            "description": "A skyplane-ops gateway VM ends itself (assigned at the VM's scope)",
            "type": "CustomRole",
            "permissions": [
                {
                    "actions": list(SELF_RELEASE_ACTIONS),
                    "notActions": [],
                    "dataActions": [],
                    "notDataActions": [],
                }
            ],
            "assignableScopes": [scope],
        }
    }
    return role_id, body


def vnet(base: Mapping[str, Any], prefix: str, nsg_id: str) -> dict[str, Any]:
    """A /16 with one /24 subnet ``gateways`` that uses the fleet's NSG."""
    subnet = {"addressPrefix": f"{prefix}/24", "networkSecurityGroup": {"id": nsg_id}}
    return {
        **base,
        "properties": {
            "addressSpace": {"addressPrefixes": [f"{prefix}/16"]},
            "subnets": [{"name": "gateways", "properties": subnet}],
        },
    }


def public_ip(base: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **base,
        "sku": {"name": "Standard"},
        # deleted with the VM that uses it (a VM that deletes itself leaves no billed IP)
        "properties": {"publicIPAllocationMethod": "Static", "deleteOption": "Delete"},
    }


def nic(base: Mapping[str, Any], subnet_id: str, pip_id: str) -> dict[str, Any]:
    config = {"subnet": {"id": subnet_id}, "publicIPAddress": {"id": pip_id}}
    return {
        **base,
        "properties": {"ipConfigurations": [{"name": "ipconfig", "properties": config}]},
    }


def nsg_rules(
    client_cidrs: Sequence[str], ports: Sequence[int], peers: Sequence[str]
) -> list[dict[str, Any]]:
    """SSH from the control plane only; gateway ports from it and the fleet's addresses only
    (Azure's default rules deny the rest of the internet)."""

    def rule(name: str, priority: int, dports: list[str], sources: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "properties": {
                "protocol": "Tcp",
                "direction": "Inbound",
                "access": "Allow",
                "priority": priority,
                "sourceAddressPrefixes": sources,
                "sourcePortRange": "*",
                "destinationAddressPrefix": "*",
                "destinationPortRanges": dports,
            },
        }

    fleet = sorted({*client_cidrs, *(f"{a}/32" for a in peers)})
    return [
        rule("ssh-from-control-plane", 100, ["22"], sorted(client_cidrs)),
        rule("gateways-from-fleet", 110, [str(p) for p in ports], fleet),
    ]


def release_on_shutdown() -> dict[str, Any]:
    """cloud-init that installs the unit deleting the VM when it shuts down (the deadline helper
    runs the same script before it powers off: ``deadline_cloud_init(before_poweroff=...)``)."""
    return {
        "write_files": [
            {
                "path": "/usr/local/sbin/skyplane-ops-release",
                "permissions": "0755",
                "content": RELEASE_SCRIPT,
            },
            {"path": "/etc/systemd/system/skyplane-ops-release.service", "content": RELEASE_UNIT},
        ],
        "runcmd": [["systemctl", "enable", "--now", "skyplane-ops-release.service"]],
    }


def vm_properties(
    size: str,
    image: Mapping[str, str],
    name: str,
    user: str,
    authorized_key: str,
    custom_data_b64: str,
    nic_id: str,
) -> dict[str, Any]:
    """Ubuntu VM, key-only SSH, OS disk and NIC deleted with the VM."""
    return {
        "hardwareProfile": {"vmSize": size},
        "storageProfile": {
            "imageReference": dict(image),
            "osDisk": {
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
            },
        },
        "osProfile": {
            "computerName": name[-63:],
            "adminUsername": user,
            "customData": custom_data_b64,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {"path": f"/home/{user}/.ssh/authorized_keys", "keyData": authorized_key}
                    ]
                },
            },
        },
        "networkProfile": {
            "networkInterfaces": [{"id": nic_id, "properties": {"deleteOption": "Delete"}}]
        },
    }
