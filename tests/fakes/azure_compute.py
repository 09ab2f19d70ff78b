"""A FAKE of Azure Resource Manager: the resource group, network, compute and role-assignment
calls the azure backend makes, nothing more.

Real HTTPS on loopback (ARM's bearer-token policy refuses plain HTTP; the test trusts the fake's
self-signed certificate), ARM's JSON shapes and PUT-is-idempotent semantics, resources that
need their resource group, and a group delete that removes everything in it. Faults: the n-th
mutating request can fail (``fail_request``), a VM PUT can be answered with a 500 *after* the VM
was created (``lose_vm_answer``: the SDK retries), zones can have no capacity and a core quota
can be enforced. Each VM is a ``LoopbackVM``: sshd keyed from its custom data.

Lifetimes as Azure has them: a guest that powers off leaves its VM *stopped* (still billed), and
nothing on the provider side ever deletes a VM. A VM may act on ARM with its system-assigned
identity (the guest's ``curl`` hands it a token naming its principal): only where a role
assignment gives that principal a scope containing the target AND the assigned role's
``actions`` hold the request's action (``Microsoft.Compute/virtualMachines/delete`` for a
``DELETE`` of a VM, ``.../deallocate/action`` for ``POST .../deallocate``; Virtual Machine
Contributor holds ``Microsoft.Compute/virtualMachines/*``). ``POST .../deallocate`` deallocates
(the VM, its disk, NIC and IP stay); ``DELETE`` of a VM also deletes its NICs whose
``deleteOption`` is Delete and their public IPs whose ``deleteOption`` is Delete, as part of the
VM's delete (no permission on them is checked). Custom role definitions live at subscription
scope (``role_definitions``: not resources of a group, so not ``leftovers``); a role assignment
must name a known role (a custom one, or Virtual Machine Contributor) whose
``assignableScopes`` cover its scope, and a principal that scope holds.
"""

from __future__ import annotations

import base64
import datetime
import fnmatch
import ipaddress
import ssl
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from skyplane_ops.provision.azure.arm import VM_CONTRIBUTOR
from tests.fakes.jsonapi import JSONAPIFake
from tests.fakes.vm import LoopbackVM, next_address

CORES = {"standard_d32_v5": 32, "standard_d8_v5": 8, "standard_d4_v5": 4, "standard_d2_v5": 2}


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (the test trusts exactly this certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-arm")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "arm.crt", directory / "arm.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class FakeARM(JSONAPIFake):
    """State and fault injection; ``url`` is the ``base_url``, ``ca_bundle`` the cert to trust."""

    PROTOCOL = "HTTP/1.1"

    def __init__(
        self,
        subscription: str = "00000000-0000-0000-0000-000000000001",
        ssh_port: int | None = None,
        gateway_role: bool = True,
    ) -> None:
        self.subscription = subscription
        self.ssh_port = ssh_port
        self.vm_env: dict[str, str] = {}  # the environment the VMs' processes get
        self.vm_net: Any = None  # a tests.fakes.netvm.CloudNet: VMs that obey the NSG
        self._netns: dict[str, str] = {}  # public address -> the VM's namespace
        self.lock = threading.RLock()
        self.store: dict[str, dict[str, Any]] = {}  # lower-cased resource id -> resource
        self.vms: dict[str, LoopbackVM] = {}
        self.mutations: list[str] = []
        self.fail_at: int | None = None
        self.lose_vm_answer = False
        self.exhausted_zones: set[str] = set()
        self.core_quota: int | None = None
        self.vm_creations = 0
        self.role_definitions: dict[str, dict[str, Any]] = {}  # lower-cased id -> definition
        if gateway_role:  # the subscription as an administrator left it after ``setup --apply``
            from skyplane_ops.provision.azure.arm import self_release_role

            role, body = self_release_role(subscription)
            self._role_definition("PUT", role.lower(), role, body)
        self._dir = Path(tempfile.mkdtemp(prefix="fake-arm-"))
        cert, key = self_signed(self._dir)
        self.ca_bundle = str(cert)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.listen(context)

    def start(self) -> FakeARM:
        super().start()
        return self

    def refuse(self, headers: Any, method: str = "", path: str = "") -> tuple[int, Any] | None:
        """ARM's bearer-token policy: no token, no routing; a VM identity's token only where a
        role assignment gives that principal a scope containing the target."""
        auth = headers.get("Authorization") or ""
        if not auth.startswith("Bearer "):
            return 401, _err("AuthenticationFailed", "no bearer token")
        if auth.startswith("Bearer vm-identity:"):
            principal = auth.split(":", 1)[1]
            target = urlparse(path).path.lower().removesuffix("/deallocate")
            action = arm_action(method, urlparse(path).path)
            with self.lock:
                granted = [
                    self._role_actions(str(r["properties"].get("roleDefinitionId", "")))
                    for r in self.of_type("roleAssignments")
                    if r["properties"].get("principalId") == principal
                    and _covers(r["id"].lower().split("/providers/microsoft.authorization/")[0],
                                target)
                ]  # fmt: skip
            if not any(fnmatch.fnmatch(action, a.lower()) for actions in granted for a in actions):
                return 403, _err("AuthorizationFailed", f"{principal} may not {method} {path}")
        return None

    def _role_actions(self, role_id: str) -> list[str]:
        """The ``actions`` of an assigned role (Virtual Machine Contributor: the VMs' all)."""
        if role_id.lower().endswith(VM_CONTRIBUTOR):
            return ["Microsoft.Compute/virtualMachines/*"]
        role = self.role_definitions.get(role_id.lower()) or {}
        perms = role.get("properties", {}).get("permissions", [])
        return [a for p in perms for a in p.get("actions", [])]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """Resources whose type ends with ``kind`` (e.g. ``virtualMachines``)."""
        with self.lock:
            return [r for r in self.store.values() if r["type"].lower().endswith(kind.lower())]

    def leftovers(self) -> list[str]:
        with self.lock:
            return sorted(r["id"] for r in self.store.values())

    # ------------------------------------------------------------------ request handling

    def handle(self, method: str, raw: str, body: dict[str, Any]) -> tuple[int, Any]:
        path = urlparse(raw).path.rstrip("/")
        key = path.lower()
        with self.lock:
            if method in ("PUT", "DELETE", "POST", "PATCH"):
                self.mutations.append(f"{method} {path}")
                if self.fail_at is not None and len(self.mutations) == self.fail_at:
                    return 400, _err("InjectedFailure", f"injected failure of {method} {path}")
            if method == "GET" and key == f"/subscriptions/{self.subscription}/resourcegroups":
                return 200, {
                    "value": [
                        r
                        for r in self.store.values()
                        if r["type"] == "Microsoft.Resources/resourceGroups"
                    ]
                }
            if "/providers/microsoft.authorization/roledefinitions/" in key and (
                self._group_key(key) is None
            ):
                return self._role_definition(method, key, path, body)
            if method == "GET":
                found = self.store.get(key)
                return (200, found) if found else (404, _err("ResourceNotFound", path))
            if method == "DELETE":
                return self._delete(key, path)
            if method == "POST" and key.endswith("/deallocate"):
                return self._deallocate(key.removesuffix("/deallocate"), path)
            if method == "PUT":
                return self._put(key, path, body)
        return 405, _err("MethodNotAllowed", f"{method} {path}")

    def _group_key(self, key: str) -> str | None:
        parts = key.split("/")
        if len(parts) >= 5 and parts[3] == "resourcegroups":
            return "/".join(parts[:5])
        return None

    def _put(self, key: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        parts = path.split("/")
        group = self._group_key(key)
        if group is None:
            return 400, _err("InvalidResourceId", path)
        if key != group and group not in self.store:
            return 404, _err("ResourceGroupNotFound", f"resource group of {path} not found")
        kind = (
            "Microsoft.Resources/resourceGroups"
            if key == group
            else "/".join(
                [parts[parts.index("providers") + 1], *parts[parts.index("providers") + 2 :: 2]]
            )
            if "providers" in parts
            else "unknown"
        )
        existing = self.store.get(key)
        props = {**(existing or {}).get("properties", {}), **body.get("properties", {})}
        props["provisioningState"] = "Succeeded"
        res = {
            **(existing or {}),
            **body,
            "id": path,
            "name": parts[-1],
            "type": kind,
            "properties": props,
        }
        if existing and "principalId" in existing.get("identity", {}):  # ARM keeps the identity
            res["identity"] = {**res.get("identity", {}), **existing["identity"]}
        low = kind.lower()
        if low.endswith("virtualnetworks"):
            for sub in props.get("subnets", []):
                sub["id"] = f"{path}/subnets/{sub['name']}"
        elif low.endswith("publicipaddresses") and "ipAddress" not in props:
            if self.vm_net is not None:  # the VM will be this namespace on the fake network
                ns, props["ipAddress"] = self.vm_net.attach()
                self._netns[props["ipAddress"]] = ns
            else:
                props["ipAddress"] = next_address(65)
        elif low.endswith("securityrules"):
            nsg = self.store["/".join(key.split("/")[:-2])]
            rules = [r for r in nsg["properties"]["securityRules"] if r["name"] != parts[-1]]
            nsg["properties"]["securityRules"] = [*rules, {"name": parts[-1], "properties": props}]
        elif low.endswith("roleassignments"):
            target = key.rsplit("/providers/microsoft.authorization/", 1)[0]
            vm = self.store.get(target)
            if not vm or vm.get("identity", {}).get("principalId") != props.get("principalId"):
                return 400, _err("PrincipalNotFound", "no such principal on that scope")
            role_id = str(props.get("roleDefinitionId", "")).lower()
            role = self.role_definitions.get(role_id)
            if role is None and not role_id.endswith(VM_CONTRIBUTOR):
                return 400, _err("RoleDefinitionDoesNotExist", f"no role {role_id}")
            scopes = (role or {}).get("properties", {}).get("assignableScopes", ["/"])
            if not any(target.startswith(scope.lower().rstrip("/") + "/") for scope in scopes):
                return 403, _err("RoleAssignmentScopeNotAssignable", f"{role_id} at {target}")
        elif low.endswith("virtualmachines") and existing is None:
            status = self._create_vm(key, res)
            if status is not None:
                return status
            if self.lose_vm_answer:
                self.lose_vm_answer = False
                self.store[key] = res
                return 500, _err("InternalServerError", "the answer was lost (injected)")
        self.store[key] = res
        if low.endswith(("securityrules", "networksecuritygroups", "virtualmachines")):
            self._enforce()
        return (201 if existing is None else 200), res

    def _role_definition(
        self, method: str, key: str, path: str, body: dict[str, Any]
    ) -> tuple[int, Any]:
        """Custom role definitions (subscription scope): PUT is idempotent, GET reads back."""
        if method == "GET":
            found = self.role_definitions.get(key)
            return (200, found) if found else (404, _err("RoleDefinitionDoesNotExist", path))
        if method != "PUT":
            return 405, _err("MethodNotAllowed", f"{method} {path}")
        props = body.get("properties", {})
        taken = [
            r
            for k, r in self.role_definitions.items()
            if k != key and r["properties"]["roleName"] == props.get("roleName")
        ]
        if taken or not props.get("assignableScopes") or not props.get("permissions"):
            return 409 if taken else 400, _err("RoleDefinitionInvalid", path)
        existed = key in self.role_definitions
        res = {
            "id": path,
            "name": path.rsplit("/", 1)[-1],
            "type": "Microsoft.Authorization/roleDefinitions",
            "properties": {**props, "provisioningState": "Succeeded"},
        }
        self.role_definitions[key] = res
        return (200 if existed else 201), res

    def _enforce(self) -> None:
        """Give every VM the inbound Allow rules of the NSG on its subnet (default: deny)."""
        for key, vm in self.vms.items():
            res = self.store.get(key)
            if res is None:
                continue
            nic = self.store[
                res["properties"]["networkProfile"]["networkInterfaces"][0]["id"].lower()
            ]
            subnet_id = nic["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"]
            vnet = self.store[subnet_id.lower().rsplit("/subnets/", 1)[0]]
            subnet = next(
                s for s in vnet["properties"]["subnets"] if s["id"].lower() == subnet_id.lower()
            )
            nsg_id = subnet["properties"].get("networkSecurityGroup", {}).get("id", "")
            nsg = self.store.get(nsg_id.lower(), {"properties": {"securityRules": []}})
            allowed: dict[int, list[str]] = {}
            for rule in nsg["properties"]["securityRules"]:
                r = rule["properties"]
                if r["access"] != "Allow" or r["direction"] != "Inbound":
                    continue
                for port in r.get("destinationPortRanges", []):
                    allowed.setdefault(int(port), []).extend(r.get("sourceAddressPrefixes", []))
            vm.enforce(allowed)

    def _create_vm(self, key: str, res: dict[str, Any]) -> tuple[int, Any] | None:
        props = res["properties"]
        zone = (res.get("zones") or [""])[0]
        location = res["location"]
        if f"{location}-{zone}" in self.exhausted_zones:
            msg = f"Allocation failed in zone {zone} of {location}: no capacity for this size."
            return 409, _err("ZonalAllocationFailed", msg)
        size = props["hardwareProfile"]["vmSize"].lower()
        used = sum(
            CORES.get(v["properties"]["hardwareProfile"]["vmSize"].lower(), 0)
            for v in self.of_type("virtualMachines")
            if v["location"] == location
        )
        if self.core_quota is not None and used + CORES.get(size, 0) > self.core_quota:
            msg = (
                "Operation could not be completed as it results in exceeding approved "
                f"standardDSv5Family Cores quota. Location: {location}, Current Limit: "
                f"{self.core_quota}, Current Usage: {used}, Additional Required: "
                f"{CORES.get(size, 0)}."
            )
            return 409, _err("OperationNotAllowed", msg)
        nic = self.store.get(props["networkProfile"]["networkInterfaces"][0]["id"].lower())
        if nic is None:
            return 404, _err("NotFound", "network interface not found")
        pip_id = nic["properties"]["ipConfigurations"][0]["properties"]["publicIPAddress"]["id"]
        address = self.store[pip_id.lower()]["properties"]["ipAddress"]
        user_data = base64.b64decode(props["osProfile"]["customData"]).decode()
        self.vms[key] = vm = LoopbackVM.boot(
            address,
            self.ssh_port,
            user_data,
            self.vm_env,
            netns=self._netns.get(address),
            on_poweroff=lambda _: self._power_state(key, "stopped"),
        )
        if res.get("identity", {}).get("type") == "SystemAssigned":
            res["identity"]["principalId"] = principal = str(uuid.uuid4())
            vm.set_imds(
                token=f"vm-identity:{principal}", resource_id=res["id"], arm=self.url,
                ca=self.ca_bundle,
            )  # fmt: skip
        self.vm_creations += 1
        return None

    def _power_state(self, key: str, state: str) -> None:
        with self.lock:
            if key in self.store:
                self.store[key]["properties"]["powerState"] = state

    def _deallocate(self, key: str, path: str) -> tuple[int, Any]:
        """Deallocated: no compute, but the VM, its disk, NIC and static IP stay (and bill)."""
        vm = self.vms.get(key)
        if key not in self.store or vm is None:
            return 404, _err("ResourceNotFound", path)
        vm.stop()
        self._power_state(key, "deallocated")
        return 202, {}

    def _with_deleted_parts(self, key: str) -> list[str]:
        """A VM goes with its NICs whose deleteOption is Delete, and their public IPs whose
        own deleteOption is Delete (the OS disk is part of the VM record here)."""
        res = self.store.get(key) or {}
        if not res.get("type", "").lower().endswith("virtualmachines"):
            return [key]
        parts = [key]
        for ref in res["properties"].get("networkProfile", {}).get("networkInterfaces", []):
            nic_key = ref["id"].lower()
            nic = self.store.get(nic_key)
            if nic is None or (ref.get("properties") or {}).get("deleteOption") != "Delete":
                continue
            parts.append(nic_key)
            for conf in nic["properties"].get("ipConfigurations", []):
                pip_id = ((conf.get("properties") or {}).get("publicIPAddress") or {}).get("id")
                pip = self.store.get((pip_id or "").lower())
                if pip and pip["properties"].get("deleteOption") == "Delete":
                    parts.append(pip_id.lower())
        return parts

    def _delete(self, key: str, path: str) -> tuple[int, Any]:
        if key not in self.store:
            return 404, _err("ResourceNotFound", path)
        tops = self._with_deleted_parts(key)
        doomed = [k for k in self.store if any(k == t or k.startswith(t + "/") for t in tops)]
        for k in doomed:
            del self.store[k]
            vm = self.vms.pop(k, None)
            if vm:
                vm.stop()
        return 200, {}


def _covers(scope: str, target: str) -> bool:
    return target == scope or target.startswith(scope + "/")


def arm_action(method: str, path: str) -> str:
    """The RBAC action of an ARM request (lower case): ``DELETE .../virtualMachines/vm`` ->
    ``microsoft.compute/virtualmachines/delete``, ``POST .../vm/deallocate`` ->
    ``microsoft.compute/virtualmachines/deallocate/action``."""
    segs = path.lower().rstrip("/").split("/providers/")[-1].split("/")
    namespace, rest = segs[0], segs[1:]  # rest: type, name, type, name, ... [, action]
    if method == "POST" and len(rest) >= 3 and len(rest) % 2 == 1:
        return "/".join([namespace, *rest[0:-1:2], rest[-1], "action"])
    verb = {"GET": "read", "DELETE": "delete"}.get(method, "write")
    return "/".join([namespace, *rest[0::2], verb])


def _err(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
