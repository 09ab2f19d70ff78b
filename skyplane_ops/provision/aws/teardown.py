"""EC2 records and tear-down for the ``aws`` backend: the tags every resource carries, what one
region created so far, and deleting it (by that record, or by tag for the sweeper) in dependency
order: instances, then security groups, then key pairs."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.cloudhosts import run_all as _run_all

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_name": self.key_name,
            "key_path": self.key_path,
            "group_id": self.group_id,
            "instance_ids": list(self.instance_ids),
        }


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

    def _ec2(self, region: str) -> Any:
        raise NotImplementedError

    def _cleanup_region(self, state: _RegionState) -> list[str]:
        """Delete one region's resources in dependency order; returns what was deleted."""
        ec2 = self._ec2(state.region)
        deleted: list[str] = []
        if state.instance_ids:
            ec2.terminate_instances(InstanceIds=state.instance_ids)
            self._wait_terminated(ec2, state.instance_ids)
            deleted += [f"aws:{state.region}:{i}" for i in state.instance_ids]
        if state.group_id:
            self._delete_group(ec2, state.group_id)
            deleted.append(f"aws:{state.region}:{state.group_id}")
        if state.key_name:
            ec2.delete_key_pair(KeyName=state.key_name)
            deleted.append(f"aws:{state.region}:key-pair/{state.key_name}")
        if state.key_path:
            Path(state.key_path).unlink(missing_ok=True)
        return deleted

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
                code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                if code == "InvalidGroup.NotFound":
                    return
                if code != "DependencyViolation" or time.monotonic() > deadline:
                    raise
                time.sleep(self.poll_interval)

    def _cleanup(self, states: Iterable[_RegionState]) -> list[str]:
        results = _run_all(self._cleanup_region, list(states), raise_first=False)
        errors = [str(r) for r in results if isinstance(r, BaseException)]
        if errors:
            raise ProvisionError("AWS clean-up incomplete: " + "; ".join(errors))
        return [item for r in results if isinstance(r, list) for item in r]

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Delete tagged leftovers in ``sweep_regions``: instances, then groups, then keys."""
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
        cutoff = (
            datetime.now(UTC) - timedelta(seconds=older_than_seconds)
            if older_than_seconds is not None
            else None
        )

        def wanted(tags: list[dict[str, str]] | None) -> bool:
            values = {t["Key"]: t["Value"] for t in tags or []}
            if TAG_TRANSFER not in values:
                return False
            if cutoff is None:
                return True
            try:
                return datetime.fromisoformat(values.get(TAG_CREATED, "")) <= cutoff
            except ValueError:
                return True  # tagged by us but undated: treat as old

        state = _RegionState(region=region)
        for res in ec2.describe_instances(
            Filters=[*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}]
        )["Reservations"]:
            state.instance_ids += [
                i["InstanceId"] for i in res["Instances"] if wanted(i.get("Tags"))
            ]
        groups = [
            g
            for g in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
            if wanted(g.get("Tags"))
        ]
        keys = [
            k for k in ec2.describe_key_pairs(Filters=filters)["KeyPairs"] if wanted(k.get("Tags"))
        ]
        deleted = self._cleanup_region(state)
        for group in groups:
            self._delete_group(ec2, group["GroupId"])
            deleted.append(f"aws:{region}:{group['GroupId']}")
        for key in keys:
            ec2.delete_key_pair(KeyName=key["KeyName"])
            deleted.append(f"aws:{region}:key-pair/{key['KeyName']}")
        return deleted
