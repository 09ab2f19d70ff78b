"""EC2 records and tear-down for the ``aws`` backend: the tags every resource carries, what one
region created so far, and deleting it (by that record, or by tag for the sweeper) in dependency
order: instances, then security groups, then key pairs. A step that fails does not stop the
others: every error is collected and reported together."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudhosts import run_all as _run_all
from skyplane_ops.provision.cloudvm.common import sweepable

TAG_TRANSFER = "skyplane-ops:transfer-id"
TAG_CREATOR = "skyplane-ops:creator"
TAG_CREATED = "skyplane-ops:created-at"
TAG_EXPIRES = "skyplane-ops:expires-at"
UBUNTU_OWNER = "099720109477"  # Canonical
UBUNTU_2204 = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


@dataclass
class _RegionState:
    """What was created in one region so far: exactly what cleanup must delete."""

    region: str
    key_name: str | None = None
    key_path: str | None = None
    group_id: str | None = None
    instance_ids: list[str] = field(default_factory=list)
    public_ips: dict[str, str] = field(default_factory=dict)
    # Named before their create calls (the ids come back only in the answers):
    group_name: str | None = None
    client_token: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_name": self.key_name,
            "key_path": self.key_path,
            "group_id": self.group_id,
            "group_name": self.group_name,
            "client_token": self.client_token,
            "instance_ids": list(self.instance_ids),
        }

    @classmethod
    def from_dict(cls, region: str, info: Mapping[str, Any]) -> _RegionState:
        return cls(
            region=region,
            key_name=info.get("key_name"),
            key_path=info.get("key_path"),
            group_id=info.get("group_id"),
            group_name=info.get("group_name"),
            client_token=info.get("client_token"),
            instance_ids=list(info.get("instance_ids", [])),
        )


def aws_region(region: str) -> str:
    """``aws:us-east-1`` -> ``us-east-1``; other providers are refused clearly."""
    provider, _, name = region.rpartition(":")
    if provider not in ("", "aws"):
        raise ProvisionError(
            f"region {region!r} is not an AWS region; the aws backend cannot host it"
        )
    return name


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


class EC2Teardown:
    """Deleting what a transfer created in EC2; ``AWSProvisioner`` supplies the clients."""

    poll_interval: float
    start_timeout: float
    sweep_regions: list[str]
    creator: str

    def _ec2(self, region: str) -> Any:
        raise NotImplementedError

    def _resolve(self, ec2: Any, state: _RegionState, transfer_id: str | None) -> None:
        """Ids of what the record only names: the instances of its ``RunInstances`` (tagged
        at creation with this transfer and creator) and its security group by name."""
        if transfer_id and (state.client_token or state.instance_ids):
            filters = [{"Name": f"tag:{TAG_TRANSFER}", "Values": [transfer_id]}]
            for res in ec2.describe_instances(
                Filters=[*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}]
            )["Reservations"]:
                for inst in res["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
                    mine = tags.get(TAG_CREATOR) == self.creator and (
                        transfer_id is None or tags.get(TAG_TRANSFER) == transfer_id
                    )
                    if mine and inst["InstanceId"] not in state.instance_ids:
                        state.instance_ids.append(inst["InstanceId"])
        if state.group_name and not state.group_id:
            groups = ec2.describe_security_groups(
                Filters=[{"Name": "group-name", "Values": [state.group_name]}]
            )["SecurityGroups"]
            for group in groups:
                tags = {t["Key"]: t["Value"] for t in group.get("Tags") or []}
                if tags.get(TAG_CREATOR) == self.creator:
                    state.group_id = group["GroupId"]

    def _cleanup_region(self, state: _RegionState, transfer_id: str | None = None) -> list[str]:
        """Delete one region's resources in dependency order; returns what was deleted.
        Every step is tried; the errors are raised together at the end."""
        ec2 = self._ec2(state.region)
        deleted: list[str] = []
        errors: list[str] = []

        def step(what: str, fn: Any, *args: Any) -> bool:
            try:
                fn(*args)
                return True
            except Exception as exc:
                errors.append(f"{state.region} {what}: {exc}")
                return False

        step("looking up recorded resources", self._resolve, ec2, state, transfer_id)
        if state.instance_ids and step(
            "terminating instances", self._terminate, ec2, state.instance_ids
        ):
            deleted += [f"aws:{state.region}:{i}" for i in state.instance_ids]
        if state.group_id and step(
            f"deleting {state.group_id}", self._delete_group, ec2, state.group_id
        ):
            deleted.append(f"aws:{state.region}:{state.group_id}")
        if state.key_name and step(
            f"deleting key pair {state.key_name}", self._delete_key, ec2, state.key_name
        ):
            deleted.append(f"aws:{state.region}:key-pair/{state.key_name}")
        if state.key_path:
            Path(state.key_path).unlink(missing_ok=True)
        if errors:
            raise ProvisionError("; ".join(errors))
        return deleted

    def _terminate(self, ec2: Any, instance_ids: list[str]) -> None:
        """Terminate and wait; an instance that no longer exists (swept, or deleted by hand,
        long gone from EC2's answers) is what was wanted, not an error: one such id must not
        keep a record, and the instances beside it, from ever being cleaned up."""
        try:
            ec2.terminate_instances(InstanceIds=instance_ids)
            live = list(instance_ids)
        except Exception as exc:
            if _error_code(exc) != "InvalidInstanceID.NotFound":
                raise
            live = []
            for instance_id in instance_ids:  # one by one: which ones are gone
                try:
                    ec2.terminate_instances(InstanceIds=[instance_id])
                    live.append(instance_id)
                except Exception as one:
                    if _error_code(one) != "InvalidInstanceID.NotFound":
                        raise
        if live:
            self._wait_terminated(ec2, live)

    @staticmethod
    def _delete_key(ec2: Any, name: str) -> None:
        ec2.delete_key_pair(KeyName=name)

    def _wait_terminated(self, ec2: Any, instance_ids: list[str]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            states = [
                inst["State"]["Name"]
                for res in ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
                for inst in res["Instances"]
            ]
            if all(s == "terminated" for s in states):
                return
            time.sleep(self.poll_interval)
        raise ProvisionError(f"instances {instance_ids} not terminated in time")

    def _delete_group(self, ec2: Any, group_id: str) -> None:
        """Security groups stay referenced by terminating ENIs for a while: retry."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                ec2.delete_security_group(GroupId=group_id)
                return
            except Exception as exc:
                code = _error_code(exc)
                if code == "InvalidGroup.NotFound":
                    return
                if code != "DependencyViolation" or time.monotonic() > deadline:
                    raise
                time.sleep(self.poll_interval)

    def _cleanup(self, states: Iterable[_RegionState], transfer_id: str | None = None) -> list[str]:
        results = _run_all(
            lambda s: self._cleanup_region(s, transfer_id), list(states), raise_first=False
        )
        errors = [str(r) for r in results if isinstance(r, BaseException)]
        if errors:
            raise ProvisionError("AWS clean-up incomplete: " + "; ".join(errors))
        return [item for r in results if isinstance(r, list) for item in r]

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Delete our leftovers in ``sweep_regions`` (instances, then groups, then keys): named
        ``skyplane-ops-``, tagged with a transfer id AND this creator, and of ``transfer_id``,
        older than ``older_than_seconds`` or past their ``expires-at`` (``sweepable``)."""
        if not self.sweep_regions:
            raise ProvisionError("the aws sweeper needs sweep_regions (e.g. --aws-regions)")
        results = _run_all(
            lambda r: self._sweep_region(r, transfer_id, older_than_seconds),
            self.sweep_regions,
            raise_first=False,
        )
        errors = [str(r) for r in results if isinstance(r, BaseException)]
        if errors:
            raise ProvisionError("AWS sweep incomplete: " + "; ".join(errors))
        return [item for r in results if isinstance(r, list) for item in r]

    def _sweep_region(
        self, region: str, transfer_id: str | None, older_than_seconds: float | None
    ) -> list[str]:
        ec2 = self._ec2(region)
        filters = [
            {"Name": f"tag:{TAG_TRANSFER}", "Values": [transfer_id]}
            if transfer_id
            else {"Name": "tag-key", "Values": [TAG_TRANSFER]}
        ]

        def wanted(name: str, tags: list[dict[str, str]] | None) -> bool:
            values = {t["Key"]: t["Value"] for t in tags or []}
            return sweepable(
                values.get("Name", name),
                values,
                creator=self.creator,
                transfer_id=transfer_id,
                older_than_seconds=older_than_seconds,
            )

        state = _RegionState(region=region)
        for res in ec2.describe_instances(
            Filters=[*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}]
        )["Reservations"]:
            state.instance_ids += [
                i["InstanceId"] for i in res["Instances"] if wanted("", i.get("Tags"))
            ]
        groups = [
            g
            for g in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
            if wanted(g["GroupName"], g.get("Tags"))
        ]
        keys = [
            k
            for k in ec2.describe_key_pairs(Filters=filters)["KeyPairs"]
            if wanted(k["KeyName"], k.get("Tags"))
        ]
        errors: list[str] = []
        deleted: list[str] = []
        try:
            deleted += self._cleanup_region(state)
        except ProvisionError as exc:
            errors.append(str(exc))
        for group in groups:
            try:
                self._delete_group(ec2, group["GroupId"])
                deleted.append(f"aws:{region}:{group['GroupId']}")
            except Exception as exc:
                errors.append(f"{region} deleting {group['GroupId']}: {exc}")
        for key in keys:
            try:
                ec2.delete_key_pair(KeyName=key["KeyName"])
                deleted.append(f"aws:{region}:key-pair/{key['KeyName']}")
            except Exception as exc:
                errors.append(f"{region} deleting key pair {key['KeyName']}: {exc}")
        if errors:
            raise ProvisionError("; ".join(errors) + f" (deleted: {', '.join(deleted) or 'none'})")
        return deleted


def _error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` ("" for anything else)."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
