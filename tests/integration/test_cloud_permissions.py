"""The least-privilege files in ``docs/iam/`` against every API call the cloud backends make.

Each backend provisions (with a zone out of capacity, so the retry path runs), admits peer
addresses, deprovisions, fails mid-provision (the clean-up path) and sweeps leftovers, against
moto's EC2 server (AWS) or the REST fakes in ``tests/fakes/`` (Azure, GCE). Every call is
recorded: the boto3 operations and their parameters through botocore's event system
(``before-parameter-build``, with the tags the targets carry at that moment), and every request
the Azure and GCE SDKs send, as the fakes receive it. ``iam_rules`` says what each call needs;
the tests check that the files grant all of it, and nothing that no call needs.

No cloud's policy engine runs here: the evaluation is a model of AWS IAM, Azure RBAC/ABAC and
GCP IAM Conditions (see ``iam_rules``), and the SSH bootstrap is replaced by a stand-in (the
moto and fake VMs run no agents; the permission calls are the same either way).

When a backend starts making a new call, a test here fails with the call and the file to edit.
A permission the files grant for a call no backend makes yet goes into FORESEEN with its reason.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.aws import AWSProvisioner, InstanceHost
from skyplane_ops.provision.azure import AzureProvisioner
from skyplane_ops.provision.fleet import Gateway
from skyplane_ops.provision.gcp import GCPProvisioner
from skyplane_ops.testing.emulators import MOTO_ENV, run_moto
from tests.fakes.azure_compute import FakeARM
from tests.fakes.gce import FakeGCE
from tests.integration import iam_rules as iam
from tests.integration.provision_helpers import Recording

pytestmark = pytest.mark.emulator

CLIENT_CIDR = "198.51.100.7/32"  # TEST-NET-2: only written into emulated rules
PEER = "203.0.113.9"  # a gateway of another cloud (mixed fleets): TEST-NET-3

# Granted for calls the backends do not make yet, each with why (issue 36 names them).
FORESEEN = {
    "aws": {
        "ec2:ModifyInstanceAttribute": "VM lifetimes/hardening may change a tagged instance's "
        "attributes after launch (shutdown behaviour)",
        "ec2:DescribeInstanceAttribute": "reading back a tagged instance's shutdown behaviour",
        "ec2:DescribeSubnets": "hardening (issue 36): gateways in a given subnet, private "
        "addresses; a describe, on * as EC2 requires",
        "sts:GetFederationToken": "per-transfer store credentials (issue 36 item 1), "
        "restricted by a session policy; minted in transfer/dispatch, not while provisioning",
        "sts:AssumeRole": "per-transfer store credentials from a skyplane-ops-* role (the store "
        "option role_arn), restricted by a session policy",
    },
    "azure": {
        # Real ARM answers a PUT with 201 and provisioningState Creating plus an
        # Azure-AsyncOperation header; the SDK's poller then reads the operation's status and,
        # when it is done, the resource. The fake answers Succeeded at once, so the SDK never
        # polls it. (A delete answers 202 with a Location under the subscription's operation
        # results.)
        **dict.fromkeys(
            [
                "Microsoft.Network/networkSecurityGroups/read",
                "Microsoft.Network/networkSecurityGroups/securityRules/read",
                "Microsoft.Network/virtualNetworks/read",
                "Microsoft.Network/networkInterfaces/read",
                "Microsoft.Compute/virtualMachines/read",
                "Microsoft.Network/locations/operations/read",
                "Microsoft.Compute/locations/operations/read",
                "Microsoft.Resources/subscriptions/operationresults/read",
            ],
            "long-running operations polled on real ARM, not on the fake",
        )
    },
    "gcp": {
        "compute.instances.setScheduling": "VM lifetimes: changing a skyplane-ops instance's "
        "max run duration after insert",
    },
}

# The calls a provision + deprovision + sweep must include, or the recording is broken.
CORE = {
    "aws": {
        "ec2:ImportKeyPair", "ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RunInstances", "ec2:DescribeInstances", "ec2:GetConsoleOutput",
        "ec2:TerminateInstances", "ec2:DeleteSecurityGroup", "ec2:DeleteKeyPair",
        "ec2:DescribeSecurityGroups", "ec2:DescribeKeyPairs",
    },
    "azure": {
        "Microsoft.Resources/subscriptions/resourceGroups/write",
        "Microsoft.Resources/subscriptions/resourceGroups/delete",
        "Microsoft.Resources/subscriptions/resourceGroups/read",
        "Microsoft.Compute/virtualMachines/write",
        "Microsoft.Compute/virtualMachines/delete",
        "Microsoft.Authorization/roleAssignments/write",
        "Microsoft.Network/networkSecurityGroups/securityRules/write",
    },
    "gcp": {
        "compute.networks.create", "compute.firewalls.create", "compute.firewalls.update",
        "compute.subnetworks.create", "compute.instances.create", "compute.instances.delete",
        "compute.instances.list", "compute.networks.delete", "compute.zoneOperations.get",
    },
}  # fmt: skip


# ================================================================================ recording


class RecordingSession:
    """A boto3 session whose clients report every operation before it is sent, with its
    parameters and the tags of the resources it acts on (read from moto at that moment with
    a client that is not recorded)."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        self._session = boto3.session.Session(
            aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        self._plain = boto3.session.Session(
            aws_access_key_id=MOTO_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=MOTO_ENV["AWS_SECRET_ACCESS_KEY"],
        )
        self.endpoint = endpoint
        self.calls: list[iam.AWSCall] = []
        self._lock = threading.Lock()

    def client(self, service: str, region_name: str | None = None, **kw: Any) -> Any:
        client = self._session.client(service, region_name=region_name, **kw)
        region = region_name or "us-east-1"
        client.meta.events.register(
            f"before-parameter-build.{service}", partial(self._record, service, region)
        )
        return client

    def _record(self, service: str, region: str, params: dict, model: Any, **_: Any) -> None:
        tags = {
            iam.ec2_arn(region, kind, ident): self._tags(region, kind, ident)
            for kind, ident in iam.aws_targets(model.name, params)
        }
        call = iam.AWSCall(service, model.name, region, copy.deepcopy(params), tags)
        with self._lock:
            self.calls.append(call)

    def _tags(self, region: str, kind: str, ident: str) -> dict[str, str]:
        ec2 = self._plain.client("ec2", region_name=region, endpoint_url=self.endpoint)
        try:
            if kind == "instance":
                found = [
                    i
                    for r in ec2.describe_instances(InstanceIds=[ident])["Reservations"]
                    for i in r["Instances"]
                ]
            elif kind == "security-group":
                found = ec2.describe_security_groups(GroupIds=[ident])["SecurityGroups"]
            elif kind == "key-pair":
                found = ec2.describe_key_pairs(KeyNames=[ident])["KeyPairs"]
            else:
                found = []
        except Exception:  # gone already: it carries no tags any more
            return {}
        return {t["Key"]: t["Value"] for f in found for t in f.get("Tags") or []}


def record_requests(fake: Any, log: list[tuple], state: Any = None) -> None:
    """Record every request the fake receives (method, path, body, what it knew before)."""
    original = fake.handle
    lock = threading.Lock()

    def handle(method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            before = state(method, path) if state else None
            log.append((method, path, copy.deepcopy(body), before))
        return original(method, path, body)

    fake.handle = handle


class ConsoleKeyBootstrap:
    """The AWS bootstrap's cloud side: it reads each instance's console output (where cloud-init
    prints the host key; moto's holds none), then stands in for the SSH part."""

    def __init__(self, fail: bool = False) -> None:
        self.prov: AWSProvisioner | None = None
        self.fail = fail

    def __call__(self, hosts: Sequence[InstanceHost], tid: str, ref: str) -> list[Gateway]:
        assert self.prov is not None
        for h in hosts:
            self.prov._ec2(h.region.split(":")[-1]).get_console_output(
                InstanceId=h.instance_id, Latest=True
            )
        return Recording(fail=self.fail)(hosts, tid, ref)


def _scenario(make: Any, regions: dict[str, int], sweep: Any) -> None:
    """provision, admit, deprovision; a failing provision; leftovers swept by id and all."""
    prov = make(fail=False)
    fleet = prov.provision(regions, transfer_id="perm-a")
    prov.admit(fleet, [PEER])
    prov.deprovision(fleet)
    with pytest.raises(ProvisionError):
        make(fail=True).provision(regions, transfer_id="perm-b")
    make(fail=False).provision(regions, transfer_id="perm-c")
    make(fail=False).provision(regions, transfer_id="perm-d")
    sweep(make(fail=False), "perm-c")
    sweep(make(fail=False), None)


@pytest.fixture(scope="module")
def own_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state home of this module's own: the fleet records its scenarios leave (swept
    fleets keep theirs) must not reach later tests' ``deprovision --all``."""
    home = tmp_path_factory.mktemp("permissions-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SKYPLANE_OPS_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def aws_calls(own_home: Path) -> Iterator[list[iam.AWSCall]]:
    with run_moto() as emu:
        endpoint = emu.options["endpoint_url"]
        session = RecordingSession(endpoint)
        regions = {"aws:us-east-1": 2, "aws:eu-west-1": 1}

        def make(fail: bool) -> AWSProvisioner:
            boot = ConsoleKeyBootstrap(fail)
            prov = AWSProvisioner(
                endpoint_url=endpoint,
                session=session,
                image_id="ami-1e749f67",  # one of moto's built-in images
                client_cidr=CLIENT_CIDR,
                poll_interval=0.05,
                sweep_regions=list(regions),
                bootstrap=boot,
            )
            boot.prov = prov
            return prov

        _scenario(
            make,
            regions,
            lambda prov, tid: prov.sweep(transfer_id=tid) if tid else prov.sweep(),
        )
        # Without an image_id the backend looks Ubuntu up; moto has no Canonical images.
        lookup = make(fail=False)
        lookup.image_id = None
        with pytest.raises(ProvisionError, match="no Ubuntu 22"):
            lookup._image_for("us-east-1")
        yield session.calls


@pytest.fixture(scope="module")
def azure_requests(own_home: Path) -> Iterator[tuple[FakeARM, list[tuple]]]:
    fake = FakeARM().start()
    log: list[tuple] = []
    record_requests(fake, log)
    fake.exhausted_zones = {"westus2-1"}  # the VM PUT fails there: deleted, next zone
    try:

        def make(fail: bool) -> AzureProvisioner:
            return AzureProvisioner(
                subscription_id=fake.subscription,
                base_url=fake.url,
                ca_bundle=fake.ca_bundle,
                credential="fake",
                vm_size="Standard_D8_v5",
                client_cidr=CLIENT_CIDR,
                bootstrap=Recording(fail=fail),
            )

        _scenario(
            make,
            {"azure:westus2": 2, "azure:canadacentral": 1},
            lambda prov, tid: prov.sweep(transfer_id=tid) if tid else prov.sweep(),
        )
        yield fake, log
    finally:
        fake.close()


@pytest.fixture(scope="module")
def gce_requests(own_home: Path) -> Iterator[tuple[FakeGCE, list[tuple]]]:
    fake = FakeGCE().start()
    log: list[tuple] = []
    prefix = f"/compute/v1/projects/{fake.project}/"

    def state(method: str, path: str) -> dict[str, Any]:
        parts = path.split("?", 1)[0][len(prefix) :].split("/")
        with fake.lock:
            if parts[:2] == ["global", "firewalls"] and len(parts) == 3:
                return {"network": fake.firewalls.get(parts[2], {}).get("network")}
            if parts[0] == "zones" and len(parts) == 4 and parts[2] == "instances":
                return {"instance": copy.deepcopy(fake.instances.get((parts[1], parts[3])))}
        return {}

    record_requests(fake, log, state)
    fake.exhausted_zones = {"us-central1-a"}  # the insert fails there: next zone
    try:

        def make(fail: bool) -> GCPProvisioner:
            return GCPProvisioner(
                project=fake.project,
                endpoint=fake.url,
                credentials="anonymous",
                client_cidr=CLIENT_CIDR,
                machine_type="n2-standard-8",
                bootstrap=Recording(fail=fail),
            )

        _scenario(
            make,
            {"gcp:us-central1": 2, "gcp:europe-west1": 1},
            lambda prov, tid: prov.sweep(transfer_id=tid) if tid else prov.sweep(),
        )
        yield fake, log
    finally:
        fake.close()


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


# ===================================================================================== AWS


def _aws_used(calls: list[iam.AWSCall]) -> set[str]:
    return {n.action for c in calls for n in iam.aws_needs(c)}


def test_aws_policy_allows_every_call_the_backend_makes(aws_calls: list[iam.AWSCall]) -> None:
    used = _aws_used(aws_calls)
    assert used >= CORE["aws"], f"the recording missed {CORE['aws'] - used}"
    assert "ec2:DescribeImages" in used  # the image lookup without an image_id
    # Creates carry the transfer tag on every resource they make (what the policy requires).
    runs = [c for c in aws_calls if c.op == "RunInstances"]
    assert runs and all(
        {"instance", "volume"} <= {s["ResourceType"] for s in c.params["TagSpecifications"]}
        for c in runs
    )
    # Terminate targets carried the tag when they were terminated (seen by the recorder).
    terms = [c for c in aws_calls if c.op == "TerminateInstances"]
    assert terms and all(iam.TAG in tags for c in terms for tags in c.target_tags.values())
    policy = iam.load_json(iam.AWS_POLICY)
    problems = iam.aws_denied(policy, aws_calls, iam.AWS_POLICY)
    assert not problems, _report(problems)


def test_aws_policy_grants_nothing_the_backend_does_not_need(
    aws_calls: list[iam.AWSCall],
) -> None:
    policy = iam.load_json(iam.AWS_POLICY)
    problems = iam.aws_too_broad(policy, _aws_used(aws_calls), FORESEEN["aws"])
    assert not problems, _report(problems)


def test_aws_policy_refuses_untagged_targets_and_late_tags() -> None:
    """The conditions bite: no terminating, opening or deleting what does not carry the
    transfer tag, no creating without it, and no tagging after creation."""
    policy = iam.load_json(iam.AWS_POLICY)
    region, tagged = "us-east-1", {iam.TAG: "t1"}
    instance = iam.ec2_arn(region, "instance", "i-0123")
    group = iam.ec2_arn(region, "security-group", "sg-0123")

    def call(op: str, params: dict[str, Any], targets: dict[str, dict[str, str]]) -> list[str]:
        return iam.aws_denied(
            policy, [iam.AWSCall("ec2", op, region, params, targets)], iam.AWS_POLICY
        )

    assert not call("TerminateInstances", {"InstanceIds": ["i-0123"]}, {instance: tagged})
    assert call("TerminateInstances", {"InstanceIds": ["i-0123"]}, {instance: {"Name": "prod"}})
    assert call("AuthorizeSecurityGroupIngress", {"GroupId": "sg-0123"}, {group: {}})
    assert call("DeleteSecurityGroup", {"GroupId": "sg-0123"}, {group: {}})
    assert call("DeleteKeyPair", {"KeyName": "prod-key"}, {})
    untagged_run = {"ImageId": "ami-1", "SecurityGroupIds": ["sg-0123"], "MinCount": 1}
    assert call("RunInstances", untagged_run, {group: tagged})
    group_spec = [{"ResourceType": "security-group", "Tags": [{"Key": "Name", "Value": "x"}]}]
    assert call("CreateSecurityGroup", {"GroupName": "x", "TagSpecifications": group_spec}, {})
    late = {"Resources": ["i-0123"], "Tags": [{"Key": iam.TAG, "Value": "t1"}]}
    assert call("CreateTags", late, {instance: {}}), "tagging an existing instance"
    assert call("CreateTags", late, {instance: tagged})


# =================================================================================== Azure


def _azure_used(log: list[tuple]) -> set[str]:
    return {n.action for m, p, b, _ in log for n in iam.azure_needs(m, p, b)}


def test_azure_role_allows_every_request_the_backend_sends(
    azure_requests: tuple[FakeARM, list[tuple]],
) -> None:
    fake, log = azure_requests
    used = _azure_used(log)
    assert used >= CORE["azure"], f"the recording missed {CORE['azure'] - used}"
    role = iam.load_json(iam.AZURE_ROLE)
    assignment = iam.load_json(iam.AZURE_ASSIGNMENT)
    problems = iam.azure_denied(
        role, assignment, [(m, p, b) for m, p, b, _ in log], fake.subscription
    )
    assert not problems, _report(problems)


def test_azure_role_grants_nothing_the_backend_does_not_need(
    azure_requests: tuple[FakeARM, list[tuple]],
) -> None:
    _, log = azure_requests
    role = iam.load_json(iam.AZURE_ROLE)
    assignment = iam.load_json(iam.AZURE_ASSIGNMENT)
    problems = iam.azure_too_broad(role, assignment, _azure_used(log), FORESEEN["azure"])
    assert not problems, _report(problems)


def test_azure_condition_refuses_privileged_roles() -> None:
    role = iam.load_json(iam.AZURE_ROLE)
    assignment = iam.load_json(iam.AZURE_ASSIGNMENT)
    sub = "00000000-0000-0000-0000-000000000001"
    group = f"/subscriptions/{sub}/resourceGroups/skyplane-ops-t-westus2"
    vm = f"{group}/providers/Microsoft.Compute/virtualMachines/v"
    path = f"{vm}/providers/Microsoft.Authorization/roleAssignments/1"

    def assign(role_id: str, ptype: str = "ServicePrincipal") -> list[str]:
        body = {
            "properties": {
                "roleDefinitionId": f"/x/roleDefinitions/{role_id}",
                "principalType": ptype,
            }
        }
        return iam.azure_denied(role, assignment, [("PUT", path, body)], sub)

    own = iam.gateway_role_guid(sub)
    assert not assign(own)
    for guid in iam.AZURE_PRIVILEGED:
        assert assign(guid), iam.AZURE_PRIVILEGED[guid]
    assert assign("9980e02c-c2be-4d73-94e8-173b1dc7cf3c"), "not Virtual Machine Contributor"
    assert assign(iam.gateway_role_guid("00000000-0000-0000-0000-000000000002")), "another sub's"
    assert assign(own, "User"), "only service principals"


def test_azure_control_plane_cannot_define_roles() -> None:
    """The one role the condition allows is defined by an administrator (``skyplane-ops setup
    --backend azure --apply``): an identity that could rewrite it could put any action in it."""
    role = iam.load_json(iam.AZURE_ROLE)
    assert not iam._grants(role["Actions"], "Microsoft.Authorization/roleDefinitions/write")
    assert iam._grants(role["Actions"], "Microsoft.Authorization/roleDefinitions/read")


# ===================================================================================== GCP


def _gcp_used(log: list[tuple]) -> set[str]:
    return {n.permission for m, p, b, s in log for n in iam.gce_needs(m, p, b, s) or []}


def _gcp_files() -> tuple[Any, Any, Any]:
    return (
        iam.load_yaml(iam.GCP_ROLE),
        iam.load_yaml(iam.GCP_CONDITION),
        iam.load_yaml(iam.GCP_LIST_ROLE),
    )


def test_gcp_roles_allow_every_request_the_backend_sends(
    gce_requests: tuple[FakeGCE, list[tuple]],
) -> None:
    _, log = gce_requests
    used = _gcp_used(log)
    assert used >= CORE["gcp"], f"the recording missed {CORE['gcp'] - used}"
    problems = iam.gcp_denied(*_gcp_files(), log)
    assert not problems, _report(problems)


def test_gcp_roles_grant_nothing_the_backend_does_not_need(
    gce_requests: tuple[FakeGCE, list[tuple]],
) -> None:
    fake, log = gce_requests
    problems = iam.gcp_too_broad(*_gcp_files(), _gcp_used(log), FORESEEN["gcp"], fake.project)
    assert not problems, _report(problems)


def test_gcp_condition_refuses_resources_not_named_skyplane_ops() -> None:
    role, condition, list_role = _gcp_files()
    fw = {
        "name": "default-allow-all",
        "network": "projects/p/global/networks/default",
        "sourceRanges": ["0.0.0.0/0"],
    }
    problems = iam.gcp_denied(
        role, condition, list_role, [("POST", "/compute/v1/projects/p/global/firewalls", fw, {})]
    )
    assert len(problems) == 2, problems  # the rule's name and the network it would attach to
    meta = "/compute/v1/projects/p/zones/us-central1-a/instances/prod-db/setMetadata"
    assert iam.gcp_denied(role, condition, list_role, [("POST", meta, {}, {})])


# ========================================================================= the old examples

# The examples docs/cloud-permissions.md showed before issue 36 (verbatim lists).
OLD_AWS = {
    "Version": "2012-10-17",
    "Statement": [{
        "Effect": "Allow",
        "Action": [
            "ec2:DescribeImages", "ec2:DescribeInstances", "ec2:DescribeSecurityGroups",
            "ec2:DescribeKeyPairs", "ec2:GetConsoleOutput", "ec2:ImportKeyPair",
            "ec2:DeleteKeyPair", "ec2:CreateSecurityGroup", "ec2:AuthorizeSecurityGroupIngress",
            "ec2:DeleteSecurityGroup", "ec2:RunInstances", "ec2:TerminateInstances",
            "ec2:CreateTags",
        ],
        "Resource": "*",
    }],
}  # fmt: skip
OLD_AZURE = {
    "Name": "skyplane-ops provisioner",
    "IsCustom": True,
    "Actions": [
        "Microsoft.Resources/subscriptions/resourceGroups/read",
        "Microsoft.Resources/subscriptions/resourceGroups/write",
        "Microsoft.Resources/subscriptions/resourceGroups/delete",
        "Microsoft.Network/networkSecurityGroups/*",
        "Microsoft.Network/virtualNetworks/read",
        "Microsoft.Network/virtualNetworks/write",
        "Microsoft.Network/virtualNetworks/delete",
        "Microsoft.Network/virtualNetworks/subnets/*",
        "Microsoft.Network/publicIPAddresses/*",
        "Microsoft.Network/networkInterfaces/*",
        "Microsoft.Compute/virtualMachines/*",
        "Microsoft.Compute/disks/*",
        "Microsoft.Authorization/roleAssignments/read",
        "Microsoft.Authorization/roleAssignments/write",
        "Microsoft.Authorization/roleAssignments/delete",
    ],
    "NotActions": [],
    "AssignableScopes": ["/subscriptions/<subscription-id>"],
}
OLD_GCP = {
    "includedPermissions": [
        "compute.networks.create", "compute.networks.delete", "compute.networks.get",
        "compute.networks.list", "compute.networks.updatePolicy", "compute.firewalls.create",
        "compute.firewalls.delete", "compute.firewalls.get", "compute.firewalls.list",
        "compute.firewalls.update", "compute.subnetworks.create", "compute.subnetworks.delete",
        "compute.subnetworks.list", "compute.subnetworks.use", "compute.subnetworks.useExternalIp",
        "compute.instances.create", "compute.instances.delete", "compute.instances.get",
        "compute.instances.list", "compute.instances.setLabels", "compute.instances.setMetadata",
        "compute.instances.setTags", "compute.instances.setScheduling", "compute.disks.create",
        "compute.disks.setLabels", "compute.images.useReadOnly", "compute.regions.get",
        "compute.zones.get", "compute.globalOperations.get", "compute.regionOperations.get",
        "compute.zoneOperations.get",
    ]
}  # fmt: skip


def test_the_checks_refuse_the_old_examples(
    aws_calls: list[iam.AWSCall],
    azure_requests: tuple[FakeARM, list[tuple]],
    gce_requests: tuple[FakeGCE, list[tuple]],
) -> None:
    """The examples the docs showed before: every check above would have failed on them."""
    aws = iam.aws_too_broad(OLD_AWS, _aws_used(aws_calls), FORESEEN["aws"])
    assert any("ec2:TerminateInstances on *" in p for p in aws), aws
    assert any("without a skyplane-ops:transfer-id tag condition" in p for p in aws) or any(
        "ec2:CreateTags without ec2:CreateAction" in p for p in aws
    ), aws
    azure = iam.azure_too_broad(OLD_AZURE, None, _azure_used(azure_requests[1]), {})
    assert "roleAssignments/write without an ABAC condition" in " ".join(azure), azure
    assert any(p.startswith("wildcard action") for p in azure), azure
    assert any("roleAssignments/delete, which no recorded" in p for p in azure), azure
    fake, log = gce_requests
    gcp = iam.gcp_too_broad(OLD_GCP, None, None, _gcp_used(log), {}, fake.project)
    assert "the role is granted without a condition on the skyplane-ops- prefix" in gcp, gcp
    assert any("compute.firewalls.get, which no recorded" in p for p in gcp), gcp


def test_the_docs_point_at_the_files() -> None:
    page = (iam.REPO / "docs" / "cloud-permissions.md").read_text()
    for path in sorted(iam.IAM.iterdir()):
        assert f"iam/{path.name}" in page, f"docs/cloud-permissions.md does not cite {path.name}"
