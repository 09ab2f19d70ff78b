"""How a cloud VM backend's ``provision`` starts and ends (Azure, GCP): one place, so the
record the sweeper works from is written the same way by each.

``requested`` checks the transfer id and maps the plan's regions to the cloud's names;
``start_fleet`` makes the tags every resource carries, one state per region, the transfer's
secret and the *pending* fleet record (what may exist, named before each create call);
``CloudBoot.creating`` saves that record first and deletes everything on any failure;
``CloudBoot.save_fleet`` writes the finished fleet with the regions' states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from skyplane_ops.provision.cloudvm.common import TAG_CREATED, fleet_tags, region_of
from skyplane_ops.provision.records import PendingRecord
from skyplane_ops.provision.secrets import check_transfer_id, create_secret


class RegionState(Protocol):
    """What a backend keeps per region while it provisions (its ``_Region``)."""

    region: str

    def to_dict(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=RegionState)


@dataclass
class FleetStart(Generic[S]):
    """A fleet being provisioned: its regions, tags, per-region states, secret and record."""

    transfer_id: str
    wanted: dict[str, int]  # the plan's region -> VMs
    by_name: dict[str, str]  # the cloud's region name -> the plan's region
    tags: dict[str, str]
    states: list[S]
    secret_ref: str
    pending: PendingRecord

    def regions(self) -> dict[str, Any]:
        """Each region's state, as the pending record and the fleet's resources keep it."""
        return {s.region: s.to_dict() for s in self.states}


def requested(
    vms: Mapping[str, int], provider: str, transfer_id: str
) -> tuple[dict[str, int], dict[str, str]]:
    """(the regions with VMs -> count, the cloud's region name -> the plan's region), after
    the transfer id is checked: nothing is created yet."""
    check_transfer_id(transfer_id)
    wanted = {r: n for r, n in vms.items() if n > 0}
    return wanted, {region_of(r, provider): r for r in wanted}


def start_fleet(
    *,
    backend: str,
    transfer_id: str,
    wanted: dict[str, int],
    by_name: dict[str, str],
    tags: Mapping[str, str] | None,
    ttl_seconds: float,
    creator: str,
    make_state: Callable[[str, int], S],
    snapshot: Callable[[FleetStart[S]], dict[str, Any]],
) -> FleetStart[S]:
    """Tags, one state per cloud region (``make_state(name, index)``, names sorted), the
    transfer's secret and the pending record, whose snapshot is ``snapshot(start)``."""
    all_tags = fleet_tags(transfer_id, ttl_seconds, tags, creator)
    states = [make_state(r, i) for i, r in enumerate(sorted(by_name))]
    secret_ref = create_secret(transfer_id)
    pending = PendingRecord(
        transfer_id=transfer_id,
        backend=backend,
        secret_ref=secret_ref,
        tags=all_tags,
        created_at=all_tags[TAG_CREATED],
        snapshot=lambda: snapshot(start),  # called once ``start`` exists: at ``save()``
    )
    start = FleetStart(transfer_id, wanted, by_name, all_tags, states, secret_ref, pending)
    return start
