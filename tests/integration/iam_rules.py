"""What each cloud API call the backends make needs from IAM, and whether the files in
``docs/iam/`` grant it, and nothing more.

No cloud is reachable here, so the policy engines are modelled, narrowly: the AWS IAM evaluation
of Allow/Deny statements with the condition operators the files use; Azure RBAC actions derived
from the REST path and method (plus the linked "join" actions ARM checks for ids in the body)
and the ABAC condition on the role assignment; GCP permissions per Compute REST route with the
IAM Condition evaluated on the resource name. Each table row says which permission a request
needs; a request no row knows fails the test with the row to add.

When a backend starts calling something new, the test that records the calls says which
permission is missing and which file to edit; add a row here only if the call is new to the
tables too.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
IAM = REPO / "docs" / "iam"
AWS_POLICY = IAM / "aws-control-plane-policy.json"
AZURE_ROLE = IAM / "azure-control-plane-role.json"
AZURE_ASSIGNMENT = IAM / "azure-control-plane-assignment.json"
GCP_ROLE = IAM / "gcp-control-plane-role.yaml"
GCP_CONDITION = IAM / "gcp-control-plane-condition.yaml"
GCP_LIST_ROLE = IAM / "gcp-control-plane-list-role.yaml"

TAG = "skyplane-ops:transfer-id"
ACCOUNT = "123456789012"  # moto's account


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


# ====================================================================================== AWS

# Describe calls that take no resource-level permission in EC2: they can only be granted on "*".
AWS_UNSCOPABLE = {
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeKeyPairs",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
}
# Resource types the backend creates or deletes: a statement naming them must be conditioned
# on the transfer tag (or, for CreateTags, on the creating action).
AWS_OWNED_TYPES = ("instance/", "volume/", "security-group/", "key-pair/")


@dataclass(frozen=True)
class AWSCall:
    """One EC2/STS operation as the backend sent it, with the tags its targets carried then."""

    service: str
    op: str
    region: str
    params: Mapping[str, Any]
    target_tags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # arn -> tags

    def __str__(self) -> str:
        return f"{self.service}:{self.op} ({self.region})"


@dataclass(frozen=True)
class Need:
    """One (action, resource) authorization a call needs, with its condition context."""

    action: str
    resource: str
    context: Mapping[str, Any]
    call: str


def ec2_arn(region: str, kind: str, ident: str) -> str:
    account = "" if kind == "image" else ACCOUNT
    return f"arn:aws:ec2:{region}:{account}:{kind}/{ident}"


_ID_KINDS = {"i-": "instance", "sg-": "security-group", "vol-": "volume", "key-": "key-pair"}


def aws_targets(op: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The existing resources (kind, id or name) an operation acts on: their tags are what
    ``ec2:ResourceTag`` conditions see."""
    if op == "TerminateInstances":
        return [("instance", i) for i in params.get("InstanceIds", [])]
    if op in ("GetConsoleOutput", "ModifyInstanceAttribute", "DescribeInstanceAttribute"):
        return [("instance", params["InstanceId"])]
    if op in ("AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress", "DeleteSecurityGroup"):
        return [("security-group", params["GroupId"])]
    if op == "DeleteKeyPair":
        return [("key-pair", params["KeyName"])]
    if op == "RunInstances":
        groups = list(params.get("SecurityGroupIds", []))
        groups += [g for nic in params.get("NetworkInterfaces", []) for g in nic.get("Groups", [])]
        keys = [("key-pair", params["KeyName"])] if params.get("KeyName") else []
        return keys + [("security-group", g) for g in groups]
    if op == "CreateTags":
        return [
            (kind, rid)
            for rid in params.get("Resources", [])
            for prefix, kind in _ID_KINDS.items()
            if rid.startswith(prefix)
        ]
    return []


def _request_tags(params: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    return {
        spec["ResourceType"]: {t["Key"]: t["Value"] for t in spec.get("Tags", [])}
        for spec in params.get("TagSpecifications", [])
    }


def _tag_context(tags: Mapping[str, str], prefix: str) -> dict[str, Any]:
    ctx: dict[str, Any] = {f"{prefix}/{k}": v for k, v in tags.items()}
    if prefix == "aws:RequestTag":
        ctx["aws:TagKeys"] = list(tags)
    return ctx


def aws_needs(call: AWSCall) -> list[Need]:
    """Every authorization ``call`` needs (AWS evaluates each resource of a call separately)."""
    op, p, region, name = call.op, call.params, call.region, str(call)
    action = f"{call.service}:{op}"
    if call.service == "sts":
        if op == "GetFederationToken":
            arn = f"arn:aws:sts::{ACCOUNT}:federated-user/{p['Name']}"
            return [Need(action, arn, {}, name)]
        if op == "AssumeRole":
            return [Need(action, p["RoleArn"], {}, name)]
        if op == "GetCallerIdentity":
            return []  # needs no permission
        return [Need(action, "?", {}, name)]
    if action in AWS_UNSCOPABLE or (op.startswith("Describe") and not aws_targets(op, p)):
        return [Need(action, "*", {}, name)]

    def existing(kind: str, ident: str) -> Need:
        arn = ec2_arn(region, kind, ident)
        tags = call.target_tags.get(arn, {})
        ctx = {**_tag_context(tags, "ec2:ResourceTag"), **_tag_context(tags, "aws:ResourceTag")}
        return Need(action, arn, ctx, name)

    created = _request_tags(p)

    def new(kind: str, ident: str = "*") -> list[Need]:
        tags = created.get(kind, {})
        arn = ec2_arn(region, kind, ident)
        needs = [Need(action, arn, _tag_context(tags, "aws:RequestTag"), name)]
        if tags:  # tagging at creation is authorized as ec2:CreateTags with ec2:CreateAction
            ctx = {**_tag_context(tags, "aws:RequestTag"), "ec2:CreateAction": op}
            needs.append(Need("ec2:CreateTags", arn, ctx, name))
        return needs

    targets = [existing(kind, ident) for kind, ident in aws_targets(op, p)]
    if op == "ImportKeyPair":
        return new("key-pair", p["KeyName"])
    if op == "CreateSecurityGroup":
        vpc = ec2_arn(region, "vpc", p.get("VpcId", "*"))
        return [*new("security-group"), Need(action, vpc, {}, name)]
    if op == "RunInstances":
        subnets = [p.get("SubnetId")] + [n.get("SubnetId") for n in p.get("NetworkInterfaces", [])]
        subnet = next((s for s in subnets if s), "*")
        return [
            *new("instance"),
            *new("volume"),
            *new("network-interface"),
            Need(action, ec2_arn(region, "image", p["ImageId"]), {}, name),
            Need(action, ec2_arn(region, "subnet", subnet), {}, name),
            *targets,
        ]
    if op == "CreateTags":  # on its own, i.e. not while creating: no ec2:CreateAction
        tags = {t["Key"]: t["Value"] for t in p.get("Tags", [])}
        return [
            Need(action, t.resource, {**t.context, **_tag_context(tags, "aws:RequestTag")}, name)
            for t in targets
        ]
    if targets:
        return targets
    return [Need(action, "?", {}, name)]  # no row above: the test names the call


def _condition_holds(operator: str, key: str, wanted: list[str], ctx: Mapping[str, Any]) -> bool:
    lowered = {k.lower(): v for k, v in ctx.items()}
    present = key.lower() in lowered
    if operator == "Null":
        return (str(wanted[0]).lower() == "true") != present
    qualifier, _, base = operator.rpartition(":")
    if base not in ("StringEquals", "StringLike", "StringNotEquals", "StringNotLike"):
        raise AssertionError(
            f"the test cannot evaluate the condition operator {operator!r}: teach "
            "tests/integration/iam_rules.py _condition_holds() or use Null/String* operators"
        )
    values = _listed(lowered.get(key.lower(), []))
    if not present:
        return qualifier == "ForAllValues" or base.startswith("StringNot")

    def one(value: str) -> bool:
        if base in ("StringEquals", "StringNotEquals"):
            hit = value in wanted
        else:
            hit = any(fnmatch.fnmatchcase(value, w) for w in wanted)
        return not hit if base.startswith("StringNot") else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in values)
    return any(one(v) for v in values)


def _statement_matches(stmt: Mapping[str, Any], need: Need) -> bool:
    if not any(
        fnmatch.fnmatchcase(need.action.lower(), a.lower()) for a in _listed(stmt["Action"])
    ):
        return False
    if not any(fnmatch.fnmatchcase(need.resource, r) for r in _listed(stmt.get("Resource", []))):
        return False
    for operator, pairs in (stmt.get("Condition") or {}).items():
        for key, wanted in pairs.items():
            if not _condition_holds(operator, key, [str(w) for w in _listed(wanted)], need.context):
                return False
    return True


def aws_allows(policy: Mapping[str, Any], need: Need) -> bool:
    stmts = _listed(policy["Statement"])
    if any(s["Effect"] == "Deny" and _statement_matches(s, need) for s in stmts):
        return False
    return any(s["Effect"] == "Allow" and _statement_matches(s, need) for s in stmts)


def aws_denied(policy: Mapping[str, Any], calls: Iterable[AWSCall], path: Path) -> list[str]:
    """One line per authorization a recorded call needs that the policy does not grant."""
    problems: list[str] = []
    for call in calls:
        for need in aws_needs(call):
            if need.resource == "?":
                problems.append(
                    f"{call}: no row in tests/integration/iam_rules.py aws_needs() says which "
                    "resources it acts on; add one (and its permission to "
                    f"{path.relative_to(REPO)})"
                )
            elif not aws_allows(policy, need):
                problems.append(
                    f"{call} needs {need.action} on {need.resource} with {dict(need.context)}: "
                    f"not allowed by {path.relative_to(REPO)}"
                )
    return sorted(set(problems))


def aws_too_broad(
    policy: Mapping[str, Any], used: set[str], foreseen: Mapping[str, str]
) -> list[str]:
    """One line per grant broader than the recorded calls need."""
    problems: list[str] = []
    granted: set[str] = set()
    for stmt in _listed(policy["Statement"]):
        sid = stmt.get("Sid", "?")
        if "NotAction" in stmt or "NotResource" in stmt:
            problems.append(f"{sid}: NotAction/NotResource grant everything else")
            continue
        if stmt["Effect"] != "Allow":
            continue
        actions = [str(a) for a in _listed(stmt["Action"])]
        resources = [str(r) for r in _listed(stmt.get("Resource", []))]
        granted |= set(actions)
        problems += [f"{sid}: wildcard action {a}" for a in actions if "*" in a]
        unscoped = [r for r in resources if r == "*" or r.rstrip("*").endswith(":")]
        if unscoped:
            problems += [
                f"{sid}: {a} on {unscoped[0]} (only describes that take no resource-level "
                "permission may be granted on *: AWS_UNSCOPABLE in tests/integration/iam_rules.py)"
                for a in actions
                if a not in AWS_UNSCOPABLE
            ]
        owned = [r for r in resources if any(f":{t}" in r for t in AWS_OWNED_TYPES)]
        keys = {k for pairs in (stmt.get("Condition") or {}).values() for k in pairs}
        if owned and not any(k.endswith(f"Tag/{TAG}") for k in keys):
            problems.append(f"{sid}: acts on {owned[0]} without a {TAG} tag condition")
        if "ec2:CreateTags" in actions and "ec2:CreateAction" not in keys:
            problems.append(f"{sid}: ec2:CreateTags without ec2:CreateAction (tags any resource)")
    problems += [
        f"grants {a}, which no recorded call needs (nor is it foreseen in FORESEEN)"
        for a in sorted(granted - used - set(foreseen))
        if "*" not in a
    ]
    return problems


# ==================================================================================== Azure

# Built-in roles that would let an identity take over the subscription (or grant anything).
AZURE_PRIVILEGED = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": "Owner",
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": "User Access Administrator",
    "b24988ac-6180-42a0-ab88-20f7382dd24c": "Contributor",
    "f58310d9-a9f6-439a-9e8d-f62e7b41a168": "Role Based Access Control Administrator",
}
ROLE_WRITE = "Microsoft.Authorization/roleAssignments/write"
_VERBS = {"GET": "read", "PUT": "write", "PATCH": "write", "DELETE": "delete"}


@dataclass(frozen=True)
class AzureNeed:
    action: str
    scope: str  # the ARM id the action is checked on
    call: str


def azure_type(path: str) -> tuple[str, bool]:
    """``(resource type, is a single resource)`` of an ARM path, e.g.
    ``Microsoft.Network/networkSecurityGroups/securityRules``; the last ``providers`` wins."""
    parts = [p for p in path.split("/") if p]
    low = [p.lower() for p in parts]
    if "providers" in low:
        i = len(low) - 1 - low[::-1].index("providers")
        rest = parts[i + 1 :]
        namespace, segments = rest[0], rest[1:]
        return "/".join([namespace, *segments[::2]]), len(segments) % 2 == 0
    if len(parts) >= 3 and low[2] == "resourcegroups":
        return "Microsoft.Resources/subscriptions/resourceGroups", len(parts) >= 4
    return "Microsoft.Resources/subscriptions", True


def azure_needs(method: str, path: str, body: Mapping[str, Any]) -> list[AzureNeed]:
    """The RBAC actions one ARM request needs: the verb on its type (a POST to a resource's
    child is that child's action), and for a PUT the linked actions ARM checks: ``join`` on
    every other resource referenced by id in the body, and the managed OS disk a VM creates."""
    path = path.split("?", 1)[0].rstrip("/")
    call = f"{method} {path}"
    kind, single = azure_type(path)
    if method == "POST":
        parent, _, verb = path.rpartition("/")
        kind, _ = azure_type(parent)
        return [AzureNeed(f"{kind}/{verb}/action", parent, call)]
    if method == "GET" and not single:  # a list: read on the collection's type
        return [AzureNeed(f"{kind}/read", path, call)]
    needs = [AzureNeed(f"{kind}/{_VERBS[method]}", path, call)]
    if method in ("PUT", "PATCH"):
        for ref in sorted(r for r in _referenced_ids(body) if r.lower() != path.lower()):
            needs.append(AzureNeed(f"{azure_type(ref)[0]}/join/action", ref, call))
        os_disk = body.get("properties", {}).get("storageProfile", {}).get("osDisk", {})
        if kind == "Microsoft.Compute/virtualMachines" and os_disk.get("managedDisk"):
            needs.append(AzureNeed("Microsoft.Compute/disks/write", path, call))
    return needs


def _referenced_ids(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        ref = value.get("id")
        if isinstance(ref, str) and ref.startswith("/subscriptions/"):
            found.add(ref)
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found |= _referenced_ids(item)
    return found


def _assignable(scope: str, role: Mapping[str, Any], subscription: str) -> bool:
    return any(
        scope.lower().startswith(_subscribe(s, subscription).lower().rstrip("/") + "/")
        or scope.lower() == _subscribe(s, subscription).lower()
        for s in role.get("AssignableScopes", [])
    )


def _subscribe(text: str, subscription: str) -> str:
    return re.sub(r"<[^>]*subscription[^>]*>", subscription, text)


def gateway_role_guid(subscription: str) -> str:
    """What ``skyplane-ops setup --backend azure`` prints for a subscription: the GUID of the
    gateways' self-delete role, which the assignment file names as ``<gateway-role-guid>``."""
    from skyplane_ops.provision.azure.arm import self_release_role

    return self_release_role(subscription)[0].rsplit("/", 1)[-1]


def abac_allowed_roles(
    condition: str, subscription: str | None = None
) -> tuple[set[str], set[str]] | None:
    """``(role definition GUIDs, principal types)`` a roleAssignments/write condition allows,
    or None when the condition does not constrain roleAssignments/write by role definition.
    With a subscription, ``<gateway-role-guid>`` is that subscription's self-delete role."""
    if subscription is not None:
        condition = condition.replace("<gateway-role-guid>", gateway_role_guid(subscription))
    if not re.search(r"!\(ActionMatches\{'" + re.escape(ROLE_WRITE) + r"'\}\)", condition):
        return None
    m = re.search(
        r"@Request\[Microsoft\.Authorization/roleAssignments:RoleDefinitionId\]\s+"
        r"ForAnyOfAnyValues:GuidEquals\s*\{([^}]*)\}",
        condition,
    )
    if not m:
        return None
    guids = {g.strip().lower() for g in m[1].split(",") if g.strip()}
    types = re.findall(
        r"@Request\[Microsoft\.Authorization/roleAssignments:PrincipalType\]\s+"
        r"StringEqualsIgnoreCase\s+'([^']+)'",
        condition,
    )
    return guids, {t.lower() for t in types}


def _grants(actions: Sequence[str], action: str) -> bool:
    return any(fnmatch.fnmatch(action.lower(), a.lower()) for a in actions)


def azure_denied(
    role: Mapping[str, Any],
    assignment: Mapping[str, Any] | None,
    requests: Iterable[tuple[str, str, Mapping[str, Any]]],
    subscription: str,
) -> list[str]:
    """One line per action a recorded ARM request needs that the role does not grant, or a
    role assignment the assignment's condition refuses."""
    problems: list[str] = []
    where = AZURE_ROLE.relative_to(REPO)
    condition = (assignment or {}).get("properties", {}).get("condition") or ""
    allowed = abac_allowed_roles(condition, subscription)
    for method, path, body in requests:
        for need in azure_needs(method, path, body):
            if not _grants(role["Actions"], need.action):
                problems.append(f"{need.call} needs {need.action}: missing from {where}")
            elif not _assignable(need.scope, role, subscription):
                problems.append(f"{need.call}: {need.scope} is outside the role's scopes")
            if need.action == ROLE_WRITE:
                props = body.get("properties", {})
                guid = str(props.get("roleDefinitionId", "")).rsplit("/", 1)[-1].lower()
                ptype = str(props.get("principalType", "")).lower()
                if allowed is None:
                    problems.append(f"{need.call}: no condition constrains {ROLE_WRITE}")
                elif guid not in allowed[0] or (allowed[1] and ptype not in allowed[1]):
                    problems.append(
                        f"{need.call} assigns role {guid} to a {ptype}: the condition in "
                        f"{AZURE_ASSIGNMENT.relative_to(REPO)} allows {sorted(allowed[0])} "
                        f"to {sorted(allowed[1])}"
                    )
    return sorted(set(problems))


def azure_too_broad(
    role: Mapping[str, Any],
    assignment: Mapping[str, Any] | None,
    used: set[str],
    foreseen: Mapping[str, str],
) -> list[str]:
    problems = [f"wildcard action {a}" for a in role.get("Actions", []) if "*" in a]
    problems += [f"data action {a}" for a in role.get("DataActions", [])]
    scopes = role.get("AssignableScopes", [])
    if len(scopes) != 1 or not re.fullmatch(
        r"/subscriptions/[^/]+(/resourceGroups/[^/]+)?", scopes[0] if scopes else ""
    ):
        problems.append(f"assignable scopes {scopes}: one subscription or resource group only")
    if assignment is None or assignment.get("scope") != (scopes or [None])[0]:
        problems.append("no role assignment file at the role's one assignable scope")
    if _grants(role.get("Actions", []), ROLE_WRITE):
        condition = (assignment or {}).get("properties", {}).get("condition") or ""
        allowed = abac_allowed_roles(condition)
        if allowed is None:
            problems.append(f"{ROLE_WRITE} without an ABAC condition on the role definitions")
        else:
            problems += [
                f"the condition lets it assign {AZURE_PRIVILEGED[g]}"
                for g in sorted(allowed[0] & set(AZURE_PRIVILEGED))
            ]
            if not allowed[1]:
                problems.append(f"{ROLE_WRITE}: the condition does not constrain principal types")
    known = {a.lower() for a in used | set(foreseen)}
    problems += [
        f"grants {a}, which no recorded request needs (nor is it foreseen in FORESEEN)"
        for a in sorted(role.get("Actions", []))
        if "*" not in a and a.lower() not in known
    ]
    return problems


# ====================================================================================== GCP


@dataclass(frozen=True)
class GCPNeed:
    permission: str
    resource: str  # the resource name the permission is checked on
    call: str


class CelStr(str):
    """A string with the CEL methods IAM Conditions use on ``resource.name``/``type``."""

    def startsWith(self, prefix: str) -> bool:  # CEL's name
        return self.startswith(prefix)

    def endsWith(self, suffix: str) -> bool:
        return self.endswith(suffix)

    def extract(self, template: str) -> CelStr:
        prefix, _, rest = template.partition("{")
        suffix = rest.partition("}")[2]
        i = self.find(prefix)
        if i < 0:
            return CelStr("")
        tail = self[i + len(prefix) :]
        if suffix:
            j = tail.find(suffix)
            return CelStr(tail[:j] if j >= 0 else "")
        return CelStr(tail)


GCE_TYPES = [
    ("/global/networks/", "Network"),
    ("/global/firewalls/", "Firewall"),
    ("/subnetworks/", "Subnetwork"),
    ("/instances/", "Instance"),
    ("/disks/", "Disk"),
]


def gce_type(name: str) -> str:
    for marker, kind in GCE_TYPES:
        if marker in name:
            return f"compute.googleapis.com/{kind}"
    if "/operations/" in name:
        return "compute.googleapis.com/Operation"
    return "compute.googleapis.com/Project" if name.count("/") == 1 else ""


def cel_holds(expression: str, resource_name: str) -> bool:
    """Evaluate the subset of CEL IAM Conditions use here (==, !=, &&, ||, !, startsWith,
    endsWith, extract) on one resource name."""
    if re.search(r"\b(request|api)\.|matches\(|\bin\b", expression):
        raise AssertionError("the test cannot evaluate this condition: teach cel_holds()")
    python = " ".join(expression.split()).replace("&&", " and ").replace("||", " or ")
    python = re.sub(r"!(?!=)", " not ", python)
    resource = SimpleNamespace(name=CelStr(resource_name), type=CelStr(gce_type(resource_name)))
    names = {"resource": resource, "true": True, "false": False}
    return bool(eval(f"({python})", {"__builtins__": {}}, names))


Route = Callable[[dict[str, str], Mapping[str, Any], Any], list[tuple[str, str]]]


def _insert_instance(
    m: dict[str, str], body: Mapping[str, Any], state: Any
) -> list[tuple[str, str]]:
    p, zone, name = m["project"], m["zone"], body["name"]
    inst = f"projects/{p}/zones/{zone}/instances/{name}"
    out = [("compute.instances.create", inst)]
    for disk in body.get("disks", []):
        init = disk.get("initializeParams") or {}
        if init:  # a new disk, named after the instance unless named
            dname = f"projects/{p}/zones/{zone}/disks/{init.get('diskName') or name}"
            out.append(("compute.disks.create", dname))
            if init.get("labels"):
                out.append(("compute.disks.setLabels", dname))
    for nic in body.get("networkInterfaces", []):
        sub = nic["subnetwork"]
        sub = sub[sub.index("projects/") :] if "projects/" in sub else sub
        out.append(("compute.subnetworks.use", sub))
        if nic.get("accessConfigs"):
            out.append(("compute.subnetworks.useExternalIp", sub))
    if body.get("metadata", {}).get("items"):
        out.append(("compute.instances.setMetadata", inst))
    if body.get("tags", {}).get("items"):
        out.append(("compute.instances.setTags", inst))
    if body.get("labels"):
        out.append(("compute.instances.setLabels", inst))
    if body.get("serviceAccounts"):
        out.append(("compute.instances.setServiceAccount", inst))
        out += [("iam.serviceAccounts.actAs", sa["email"]) for sa in body["serviceAccounts"]]
    return out


def _delete_instance(
    m: dict[str, str], body: Mapping[str, Any], state: Any
) -> list[tuple[str, str]]:
    p, zone, name = m["project"], m["zone"], m["name"]
    out = [("compute.instances.delete", f"projects/{p}/zones/{zone}/instances/{name}")]
    inst = (state or {}).get("instance") or {}
    for disk in inst.get("disks", []):
        if disk.get("autoDelete"):  # the disk goes with it
            dname = (disk.get("initializeParams") or {}).get("diskName") or name
            out.append(("compute.disks.delete", f"projects/{p}/zones/{zone}/disks/{dname}"))
    return out


def _network_of(body: Mapping[str, Any], state: Any) -> str:
    network = body.get("network") or (state or {}).get("network") or ""
    return network[network.index("projects/") :] if "projects/" in network else network


# (method, path under projects/P/, what it needs): (permission, resource name) templates over
# the path's {fields}, {p} (projects/P), {new} (the body's name) and {network} (the network a
# firewall rule or subnetwork attaches to), or a function for the requests that need more.
GCE_ROUTES: list[tuple[str, str, list[tuple[str, str]] | Route]] = [
    # the operations the SDK polls after each mutation; a region's zones
    ("GET", "global/operations/{op}",
     [("compute.globalOperations.get", "{p}/global/operations/{op}")]),
    ("GET", "regions/{r}/operations/{op}",
     [("compute.regionOperations.get", "{p}/regions/{r}/operations/{op}")]),
    ("GET", "zones/{z}/operations/{op}",
     [("compute.zoneOperations.get", "{p}/zones/{z}/operations/{op}")]),
    ("GET", "regions/{r}", [("compute.regions.get", "{p}/regions/{r}")]),
    # networks
    ("POST", "global/networks", [("compute.networks.create", "{p}/global/networks/{new}")]),
    ("GET", "global/networks", [("compute.networks.list", "{p}")]),
    ("DELETE", "global/networks/{n}", [("compute.networks.delete", "{p}/global/networks/{n}")]),
    # firewall rules: also updatePolicy on the network they attach to
    ("POST", "global/firewalls", [("compute.firewalls.create", "{p}/global/firewalls/{new}"),
                                  ("compute.networks.updatePolicy", "{network}")]),
    ("GET", "global/firewalls", [("compute.firewalls.list", "{p}")]),
    ("PATCH", "global/firewalls/{n}", [("compute.firewalls.update", "{p}/global/firewalls/{n}"),
                                       ("compute.networks.updatePolicy", "{network}")]),
    ("DELETE", "global/firewalls/{n}", [("compute.firewalls.delete", "{p}/global/firewalls/{n}"),
                                        ("compute.networks.updatePolicy", "{network}")]),
    # subnetworks: also updatePolicy on their network
    ("POST", "regions/{r}/subnetworks",
     [("compute.subnetworks.create", "{p}/regions/{r}/subnetworks/{new}"),
      ("compute.networks.updatePolicy", "{network}")]),
    ("DELETE", "regions/{r}/subnetworks/{n}",
     [("compute.subnetworks.delete", "{p}/regions/{r}/subnetworks/{n}")]),
    ("GET", "aggregated/subnetworks", [("compute.subnetworks.list", "{p}")]),
    # instances
    ("POST", "zones/{zone}/instances", _insert_instance),
    ("GET", "zones/{z}/instances/{n}", [("compute.instances.get", "{p}/zones/{z}/instances/{n}")]),
    # the host key the VM prints on its serial console (read back, as AWS's console output)
    ("GET", "zones/{z}/instances/{n}/serialPort",
     [("compute.instances.getSerialPortOutput", "{p}/zones/{z}/instances/{n}")]),
    ("DELETE", "zones/{zone}/instances/{name}", _delete_instance),
    ("POST", "zones/{z}/instances/{n}/{verb}",
     [("compute.instances.{verb}", "{p}/zones/{z}/instances/{n}")]),
    ("GET", "aggregated/instances", [("compute.instances.list", "{p}")]),
]  # fmt: skip


def gce_needs(
    method: str, path: str, body: Mapping[str, Any], state: Any = None
) -> list[GCPNeed] | None:
    """The permissions one Compute REST request needs (None: no row in GCE_ROUTES knows it).
    ``state`` is what the API knew of the target before the request (a firewall's network,
    an instance's disks)."""
    path = path.split("?", 1)[0]
    m = re.fullmatch(r"/compute/v1/projects/([^/]+)/(.*)", path)
    if not m:
        return None
    project, rest = m[1], m[2].split("/")
    for verb, template, route in GCE_ROUTES:
        parts = template.split("/")
        if verb != method or len(parts) != len(rest):
            continue
        found: dict[str, str] = {"project": project}
        for want, got in zip(parts, rest, strict=True):
            if want.startswith("{"):
                found[want[1:-1]] = got
            elif want != got:
                break
        else:
            call = f"{method} {m[2]}"
            if callable(route):
                return [GCPNeed(perm, res, call) for perm, res in route(found, body, state)]
            fields = {
                **found,
                "p": f"projects/{project}",
                "new": str(body.get("name", "")),
                "network": _network_of(body, state),
            }
            return [
                GCPNeed(perm.format(**fields), res.format(**fields), call) for perm, res in route
            ]
    return None


def gcp_denied(
    role: Mapping[str, Any],
    condition: Mapping[str, Any] | None,
    list_role: Mapping[str, Any] | None,
    requests: Iterable[tuple[str, str, Mapping[str, Any], Any]],
) -> list[str]:
    problems: list[str] = []
    conditioned = set(role.get("includedPermissions", []))
    free = set((list_role or {}).get("includedPermissions", []))
    for method, path, body, state in requests:
        needs = gce_needs(method, path, body, state)
        if needs is None:
            problems.append(
                f"{method} {path}: no row in tests/integration/iam_rules.py GCE_ROUTES says "
                f"which permission it needs; add one (and the permission to "
                f"{GCP_ROLE.relative_to(REPO)})"
            )
            continue
        for need in needs:
            if need.permission in free:
                continue
            if need.permission not in conditioned:
                problems.append(
                    f"{need.call} needs {need.permission}: missing from "
                    f"{GCP_ROLE.relative_to(REPO)} (or, if it names no resource of ours, "
                    f"{GCP_LIST_ROLE.relative_to(REPO)})"
                )
            elif condition is not None and not cel_holds(condition["expression"], need.resource):
                problems.append(
                    f"{need.call} needs {need.permission} on {need.resource}: the condition in "
                    f"{GCP_CONDITION.relative_to(REPO)} refuses it"
                )
    return sorted(set(problems))


# Names a leak would give away: the condition must refuse each of them.
GCE_FOREIGN = [
    "projects/{p}/global/networks/default",
    "projects/{p}/global/firewalls/default-allow-ssh",
    "projects/{p}/regions/us-central1/subnetworks/default",
    "projects/{p}/zones/us-central1-a/instances/prod-db-1",
    "projects/{p}/zones/us-central1-a/disks/prod-db-1",
    "projects/{p}",
]
GCE_READ_ONLY = re.compile(r"compute\.(\w+\.list|\w*[oO]perations\.get|regions\.get|zones\.get)")


def gcp_too_broad(
    role: Mapping[str, Any],
    condition: Mapping[str, Any] | None,
    list_role: Mapping[str, Any] | None,
    used: set[str],
    foreseen: Mapping[str, str],
    project: str,
) -> list[str]:
    conditioned = list(role.get("includedPermissions", []))
    free = list((list_role or {}).get("includedPermissions", []))
    problems = [f"wildcard permission {p}" for p in conditioned + free if "*" in p]
    problems += [
        f"{p}: project-wide metadata (every VM's ssh keys and startup scripts)"
        for p in conditioned + free
        if p.startswith("compute.projects.")
    ]
    problems += [
        f"{p} is granted without a condition but changes or reveals a resource "
        f"(only lists, region reads and operation polls may be)"
        for p in free
        if not GCE_READ_ONLY.fullmatch(p)
    ]
    if condition is None:
        problems.append("the role is granted without a condition on the skyplane-ops- prefix")
    else:
        problems += [
            f"the condition allows {name}"
            for name in (f.format(p=project) for f in GCE_FOREIGN)
            if cel_holds(condition["expression"], name)
        ]
    problems += [
        f"grants {p}, which no recorded request needs (nor is it foreseen in FORESEEN)"
        for p in sorted(set(conditioned + free) - used - set(foreseen))
    ]
    return problems
