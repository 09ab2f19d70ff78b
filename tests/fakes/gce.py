"""A FAKE of the Compute Engine v1 REST API: the calls the gcp backend makes, nothing more.

Real HTTP on loopback, real JSON shapes (camelCase as the API sends them), operations that are
RUNNING when returned and DONE when polled, ``requestId`` de-duplication, and the API's refusal
to delete a network or subnetwork that is still in use. Faults are injected by the tests:
``fail_request(n)`` makes the n-th mutating call fail (HTTP 400, not retried), ``lose_answer``
answers 503 after doing the work, ``exhausted_zones`` answer ZONE_RESOURCE_POOL_EXHAUSTED and
``cpu_quota`` caps vCPUs with QUOTA_EXCEEDED. Each instance is a ``LoopbackVM`` (sshd on its own
loopback address) when ``ssh_port`` is set, or a namespace on ``vm_net`` obeying the firewall;
its serial port 1 (``serialPort``) shows what its cloud-init printed, host keys included.

Lifetimes as Compute Engine has them: ``scheduling.maxRunDuration`` with
``instanceTerminationAction`` DELETE deletes the instance (STOP: TERMINATED) that long after it
was created, whatever the control plane does; a guest that powers off leaves the instance
TERMINATED (its disk and the record remain).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from tests.fakes.jsonapi import JSONAPIFake
from tests.fakes.vm import LoopbackVM, next_address

VCPUS = {"n2-standard-32": 32, "n2-standard-8": 8, "n2-standard-4": 4, "n2-standard-2": 2}


class FakeGCE(JSONAPIFake):
    """State and fault injection of the fake; ``url`` is the endpoint to configure."""

    def __init__(self, project: str = "test-project", ssh_port: int | None = None) -> None:
        self.project = project
        self.ssh_port = ssh_port
        self.vm_env: dict[str, str] = {}  # the environment the VMs' processes get
        self.vm_net: Any = None  # a tests.fakes.netvm.CloudNet: VMs that obey the firewall
        self.lock = threading.RLock()
        self.networks: dict[str, dict[str, Any]] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.subnetworks: dict[tuple[str, str], dict[str, Any]] = {}
        self.instances: dict[tuple[str, str], dict[str, Any]] = {}
        self.vms: dict[tuple[str, str], LoopbackVM] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        self.by_request_id: dict[str, dict[str, Any]] = {}
        self.mutations: list[str] = []  # "POST /global/networks" ... in order
        self.fail_at: int | None = None
        self.lose_answer = False  # the next successful POST answers 503 after doing its work
        self.exhausted_zones: set[str] = set()
        self.cpu_quota: int | None = None
        self.inserts = 0  # instance inserts that created something
        self.expired: list[str] = []
        self.fail_deletes: set[str] = set()  # names whose DELETE is refused (HTTP 400)
        self._timers: list[threading.Timer] = []
        self._ops = itertools.count(1)
        self.listen()

    def start(self) -> FakeGCE:
        super().start()
        return self

    def leftovers(self) -> dict[str, list[str]]:
        with self.lock:
            return {
                "networks": sorted(self.networks),
                "firewalls": sorted(self.firewalls),
                "subnetworks": sorted(n for _, n in self.subnetworks),
                "instances": sorted(n for _, n in self.instances),
            }

    def _enforce(self) -> None:
        """Give every VM the INGRESS rules whose target tags it carries (VPC firewall)."""
        for key, inst in self.instances.items():
            vm_tags = set((inst.get("tags") or {}).get("items", []))
            allowed: dict[int, list[str]] = {}
            for fw in self.firewalls.values():
                if fw.get("direction", "INGRESS") != "INGRESS":
                    continue
                if not vm_tags & set(fw.get("targetTags", [])):
                    continue
                for rule in fw.get("allowed", []):
                    for port in rule.get("ports", []):
                        allowed.setdefault(int(port), []).extend(fw.get("sourceRanges", []))
            if key in self.vms:
                self.vms[key].enforce(allowed)

    # ------------------------------------------------------------------ operations

    def op(self, scope: str, target: str, error: tuple[int, str, str] | None = None) -> dict:
        name = f"operation-{next(self._ops)}"
        done: dict[str, Any] = {"kind": "compute#operation", "name": name, "status": "DONE"}
        done["targetLink"] = target
        if scope.startswith("zones/"):
            done["zone"] = scope
        elif scope.startswith("regions/"):
            done["region"] = scope
        if error:
            status, code, message = error
            done["httpErrorStatusCode"] = status
            done["httpErrorMessage"] = message
            done["error"] = {"errors": [{"code": code, "message": message}]}
        self.operations[name] = done
        return {**done, "status": "RUNNING", "error": None, "httpErrorStatusCode": None}

    # ------------------------------------------------------------------ request handling

    def handle(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        prefix = f"/compute/v1/projects/{self.project}/"
        if not path.startswith(prefix):
            return 404, _err(404, f"unknown path {path}")
        rest = urlparse(path).path[len(prefix) :]
        query = urlparse(path).query
        rid = re.search(r"requestId=([^&]+)", query)
        with self.lock:
            if method != "GET":
                if rid and rid[1] in self.by_request_id:
                    return 200, self.by_request_id[rid[1]]  # an idempotent retry
                if method == "DELETE" and rest.rsplit("/", 1)[-1] in self.fail_deletes:
                    return 400, _err(400, f"injected failure of DELETE {rest}", "invalid")
                self.mutations.append(f"{method} {rest}")
                if self.fail_at is not None and len(self.mutations) == self.fail_at:
                    return 400, _err(400, f"injected failure of {method} {rest}", "invalid")
            status, result = self._route(method, rest, body)
            if self.lose_answer and method == "POST" and status == 200:
                self.lose_answer = False  # done, remembered under its requestId, answer lost
                if rid:
                    self.by_request_id[rid[1]] = result
                return 503, _err(503, "backend error (injected: the answer was lost)")
            if rid and method != "GET" and status == 200:
                self.by_request_id[rid[1]] = result
            return status, result

    def _route(self, method: str, rest: str, body: dict[str, Any]) -> tuple[int, Any]:
        parts = rest.split("/")
        match (method, parts):
            case ("GET", [_, _, "operations", name]) | ("GET", ["global", "operations", name]):
                op = self.operations.get(name)
                return (200, op) if op else (404, _err(404, f"operation {name}"))
            case ("GET", ["regions", region]):
                zones = [
                    f"{self.url}/compute/v1/projects/{self.project}/zones/{region}-{z}"
                    for z in "abc"
                ]
                return 200, {"name": region, "zones": zones}
            case ("POST", ["global", "networks"]):
                return self._create(self.networks, body["name"], body, "global")
            case ("GET", ["global", "networks"]):
                return 200, {"items": list(self.networks.values())}
            case ("DELETE", ["global", "networks", name]):
                users = [s for s in self.subnetworks.values() if s["network"].endswith(name)]
                users += [f for f in self.firewalls.values() if f["network"].endswith(name)]
                if users:
                    return 400, _err(
                        400, f"network {name} is in use", "resourceInUseByAnotherResource"
                    )
                return self._delete(self.networks, name, "global")
            case ("POST", ["global", "firewalls"]):
                if body["network"].rsplit("/", 1)[-1] not in self.networks:
                    return 404, _err(404, f"network of firewall {body['name']} not found")
                created = self._create(self.firewalls, body["name"], body, "global")
                self._enforce()
                return created
            case ("GET", ["global", "firewalls"]):
                return 200, {"items": list(self.firewalls.values())}
            case ("PATCH", ["global", "firewalls", name]):
                if name not in self.firewalls:
                    return 404, _err(404, f"firewall {name}")
                self.firewalls[name].update(body)
                self._enforce()
                return 200, self.op("global", name)
            case ("DELETE", ["global", "firewalls", name]):
                return self._delete(self.firewalls, name, "global")
            case ("POST", ["regions", region, "subnetworks"]):
                if body["network"].rsplit("/", 1)[-1] not in self.networks:
                    return 404, _err(404, "network not found")
                body["region"] = region
                return self._create(
                    self.subnetworks, (region, body["name"]), body, f"regions/{region}"
                )
            case ("DELETE", ["regions", region, "subnetworks", name]):
                if any(i["_subnet"] == name for i in self.instances.values()):
                    return 400, _err(
                        400, f"subnetwork {name} in use", "resourceInUseByAnotherResource"
                    )
                return self._delete(self.subnetworks, (region, name), f"regions/{region}")
            case ("GET", ["aggregated", "subnetworks"]):
                items: dict[str, Any] = {}
                for (region, _), sub in self.subnetworks.items():
                    items.setdefault(f"regions/{region}", {"subnetworks": []})[
                        "subnetworks"
                    ].append(sub)
                return 200, {"items": items}
            case ("POST", ["zones", zone, "instances"]):
                return self._insert_instance(zone, body)
            case ("GET", ["zones", zone, "instances", name, "serialPort"]):
                vm = self.vms.get((zone, name))
                if vm is None:
                    return 404, _err(404, f"instance {name}")
                contents = vm.console  # serial port 1: what cloud-init printed at boot
                return 200, {"contents": contents, "start": "0", "next": str(len(contents))}
            case ("GET", ["zones", zone, "instances", name]):
                inst = self.instances.get((zone, name))
                return (200, _public(inst)) if inst else (404, _err(404, f"instance {name}"))
            case ("DELETE", ["zones", zone, "instances", name]):
                vm = self.vms.pop((zone, name), None)
                if vm:
                    vm.stop()
                return self._delete(self.instances, (zone, name), f"zones/{zone}")
            case ("GET", ["aggregated", "instances"]):
                items = {}
                for (zone, _), inst in self.instances.items():
                    items.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(
                        _public(inst)
                    )
                return 200, {"items": items}
        return 404, _err(404, f"the fake does not implement {method} {rest}")

    def _create(self, table: dict, key: Any, body: dict, scope: str) -> tuple[int, Any]:
        if key in table:
            return 409, _err(409, f"{key} already exists", "alreadyExists")
        table[key] = body
        return 200, self.op(scope, body["name"])

    def _delete(self, table: dict, key: Any, scope: str) -> tuple[int, Any]:
        if table.pop(key, None) is None:
            return 404, _err(404, f"{key} not found", "notFound")
        return 200, self.op(scope, str(key))

    def _insert_instance(self, zone: str, body: dict[str, Any]) -> tuple[int, Any]:
        region = zone.rsplit("-", 1)[0]
        machine = body["machineType"].rsplit("/", 1)[-1]
        if zone in self.exhausted_zones:
            msg = f"The zone '{zone}' does not have enough resources available."
            return 200, self.op(
                f"zones/{zone}", body["name"], (503, "ZONE_RESOURCE_POOL_EXHAUSTED", msg)
            )
        used = sum(
            VCPUS.get(i["machineType"].rsplit("/", 1)[-1], 0)
            for (z, _), i in self.instances.items()
            if z.startswith(region)
        )
        if self.cpu_quota is not None and used + VCPUS.get(machine, 0) > self.cpu_quota:
            msg = f"Quota 'N2_CPUS' exceeded.  Limit: {self.cpu_quota}.0 in region {region}."
            return 200, self.op(f"zones/{zone}", body["name"], (403, "QUOTA_EXCEEDED", msg))
        subnet = body["networkInterfaces"][0]["subnetwork"].rsplit("/", 1)[-1]
        if (region, subnet) not in self.subnetworks:
            return 404, _err(404, f"subnetwork {subnet} not found in {region}")
        if (zone, body["name"]) in self.instances:
            return 409, _err(409, f"instance {body['name']} already exists", "alreadyExists")
        user_data = next(i["value"] for i in body["metadata"]["items"] if i["key"] == "user-data")
        key = (zone, body["name"])
        off = lambda vm: self._guest_powered_off(key)  # noqa: E731
        if self.vm_net is not None:
            vm = self.vm_net.boot(self.ssh_port, user_data, self.vm_env, on_poweroff=off)
        else:
            vm = LoopbackVM.boot(
                next_address(64), self.ssh_port, user_data, self.vm_env, on_poweroff=off
            )
        self.vms[(zone, body["name"])] = vm
        body["networkInterfaces"][0]["accessConfigs"][0]["natIP"] = vm.address
        body.update(status="RUNNING", zone=zone, _subnet=subnet)
        self.instances[(zone, body["name"])] = body
        self._enforce()
        self.inserts += 1
        sched = body.get("scheduling") or {}
        limit = (sched.get("maxRunDuration") or {}).get("seconds")
        if limit is not None:
            action = sched.get("instanceTerminationAction", "STOP")
            timer = threading.Timer(float(limit), self._run_out, args=(key, action))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
        return 200, self.op(f"zones/{zone}", body["name"])

    def _guest_powered_off(self, key: tuple[str, str]) -> None:
        with self.lock:
            if key in self.instances:
                self.instances[key]["status"] = "TERMINATED"

    def _run_out(self, key: tuple[str, str], action: str) -> None:
        """The instance's maxRunDuration passed: DELETE deletes it, STOP stops it."""
        with self.lock:
            vm = self.vms.pop(key, None) if action == "DELETE" else self.vms.get(key)
            if vm is not None:
                vm.stop()
            if action == "DELETE" and self.instances.pop(key, None) is not None:
                self.expired.append(key[1])
            elif key in self.instances:
                self.instances[key]["status"] = "TERMINATED"

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        super().close()


def _public(inst: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inst.items() if not k.startswith("_")}


def _err(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"message": message, "reason": reason or "error"}],
        }
    }


@contextmanager
def running_gce(**kw: Any) -> Iterator[FakeGCE]:
    fake = FakeGCE(**kw).start()
    try:
        yield fake
    finally:
        fake.close()
