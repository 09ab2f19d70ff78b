"""Plumbing the cloud backends (aws, azure, gcp) share: the launched-host record, parallel
per-region work, the cached wheelhouse and the fleet record they all end with.

One home so that a fix to how a cloud fleet is recorded or bootstrapped reaches every cloud.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from skyplane_ops.provision import records
from skyplane_ops.provision.bundle import build_wheelhouse
from skyplane_ops.provision.cloudvm.common import TAG_CREATED
from skyplane_ops.provision.fleet import Gateway, GatewayFleet
from skyplane_ops.provision.secrets import private_dir
from skyplane_ops.provision.ssh.hosts import SSHHost


@dataclass(frozen=True)
class InstanceHost:
    """A launched instance, what the (injectable) bootstrap step receives."""

    gateway_id: str
    region: str
    instance_id: str
    ssh: SSHHost


# bootstrap(hosts, transfer_id, secret_ref) -> gateways (same order); must clean up on failure.
Bootstrap = Callable[[Sequence[InstanceHost], str, str], list[Gateway]]


def run_all(
    fn: Callable[[Any], Any], items: Sequence[Any], *, raise_first: bool = True
) -> list[Any]:
    """Run ``fn`` over items in parallel threads; results (or exceptions) in order."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(items))) as pool:
        futures = [pool.submit(fn, item) for item in items]
        results: list[Any] = []
        for fut in futures:
            exc = fut.exception()
            results.append(exc if exc is not None else fut.result())
    if raise_first:
        for r in results:
            if isinstance(r, BaseException):
                raise r
    return results


def provision_regions(
    provision_region: Callable[[Any, int, str, dict[str, str]], None],
    states: Sequence[Any],
    wanted: Mapping[str, int],
    by_name: Mapping[str, str],
    transfer_id: str,
    tags: dict[str, str],
) -> None:
    """Provision every region at once: ``provision_region(state, count, transfer_id, tags)``
    per region state, ``by_name`` mapping the cloud's region name back to the plan's."""
    run_all(
        lambda s: provision_region(s, wanted[by_name[s.region]], transfer_id, tags),
        states,
    )


def cached_wheelhouse(lock: threading.Lock, python_version: str) -> str:
    """Wheels for the image's python, downloaded once (only if a host lacks the deps)."""
    with lock:
        cache = private_dir("wheelhouse", f"py{python_version}")
        if not any(cache.glob("*.whl")):
            build_wheelhouse(cache, python_version=python_version)
        return str(cache)


def save_cloud_fleet(
    *,
    backend: str,
    transfer_id: str,
    hosts: Sequence[InstanceHost],
    gateways: Sequence[Gateway],
    per_gateway: Callable[[InstanceHost], Mapping[str, Any]],
    secret_ref: str,
    tags: dict[str, str],
    resources: dict[str, Any],
) -> GatewayFleet:
    """The fleet record of bootstrapped cloud gateways, saved before it is returned.

    ``per_gateway`` adds each gateway's cloud resource ids (from the host it runs on) so that
    deprovisioning and the sweeper can find it again.
    """
    by_gw = {h.gateway_id: h for h in hosts}
    fleet = GatewayFleet(
        transfer_id=transfer_id,
        backend=backend,
        gateways=[
            replace(g, resources={**g.resources, **per_gateway(by_gw[g.gateway_id])})
            for g in gateways
        ],
        secret_ref=secret_ref,
        tags=tags,
        created_at=tags[TAG_CREATED],
        resources=resources,
    )
    records.save_fleet(fleet)
    return fleet
