"""The ``mixed`` backend: a plan whose regions span clouds, provisioned per region by that
cloud's backend, with one option table per provider (``aws``, ``azure``, ``gcp``).

All parts share the transfer's secret (created before any part starts) so that gateways in
different clouds authenticate each other; after all parts are up, each cloud's firewall admits
the other clouds' gateway addresses. If one part fails, the parts already up are deprovisioned
before the error is raised. The combined fleet records its parts, so ``deprovision`` (and the
sweeper, per provider) works from the record alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import get_provisioner, records
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.prices import vm_price
from skyplane_ops.provision.secrets import check_transfer_id, create_secret, delete_secret

log = logging.getLogger(__name__)

PROVIDERS = ("aws", "azure", "gcp")


def provider_of(region: str) -> str:
    """``azure:westus2`` -> ``azure``; bare names are refused (the provider must be explicit)."""
    provider, sep, _ = region.partition(":")
    if not sep or provider not in PROVIDERS:
        raise ProvisionError(
            f"region {region!r} names no cloud; write it as aws:NAME, azure:NAME or gcp:NAME"
        )
    return provider


def split_by_provider(vms: Mapping[str, int]) -> dict[str, dict[str, int]]:
    parts: dict[str, dict[str, int]] = {}
    for region, n in vms.items():
        if n > 0:
            parts.setdefault(provider_of(region), {})[region] = n
    return parts


class MixedProvisioner:
    """Dispatches each region to its cloud's backend; ``aws=``/``azure=``/``gcp=`` options."""

    name = "mixed"

    def __init__(
        self,
        *,
        aws: Mapping[str, Any] | None = None,
        azure: Mapping[str, Any] | None = None,
        gcp: Mapping[str, Any] | None = None,
        backends: Mapping[str, Any] | None = None,
    ) -> None:
        self.options = {"aws": dict(aws or {}), "azure": dict(azure or {}), "gcp": dict(gcp or {})}
        # Tests (or callers with their own objects) may pass ready provisioners per provider.
        self._given = dict(backends or {})
        self._made: dict[str, Any] = {}

    def backend(self, provider: str) -> Any:
        if provider in self._given:
            return self._given[provider]
        if provider not in self._made:
            self._made[provider] = get_provisioner(provider, **self.options[provider])
        return self._made[provider]

    def provision(
        self,
        vms: Mapping[str, int],
        *,
        transfer_id: str,
        tags: Mapping[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GatewayFleet:
        """Each provider's part in parallel (all sharing one secret); ``cancel`` is handed to
        each part (``provision.cancel``), whose failure deprovisions the others."""
        check_transfer_id(transfer_id)
        parts = split_by_provider(vms)
        more = {"cancel": cancel} if cancel is not None else {}
        secret_ref = create_secret(transfer_id)  # before the parts: all of them share it
        fleets: dict[str, GatewayFleet] = {}
        errors: dict[str, BaseException] = {}
        with ThreadPoolExecutor(max_workers=len(parts) or 1) as pool:
            futures = {
                p: pool.submit(
                    self.backend(p).provision, part, transfer_id=transfer_id, tags=tags, **more
                )
                for p, part in parts.items()
            }
            for p, fut in futures.items():
                exc = fut.exception()
                if exc is None:
                    fleets[p] = fut.result()
                else:
                    errors[p] = exc
        try:
            if errors:
                raise next(iter(errors.values()))
            for p, fleet in fleets.items():
                others = [g.host for q, f in fleets.items() if q != p for g in f.gateways]
                if others:
                    self.backend(p).admit(fleet, others)
        except BaseException as exc:
            self._deprovision_parts(fleets)
            delete_secret(secret_ref)
            where = ", ".join(sorted(errors)) or "cross-cloud firewall rules"
            if isinstance(exc, Exception):
                raise ProvisionError(
                    f"mixed provisioning failed in {where}: {exc} "
                    f"(the parts in {', '.join(sorted(fleets)) or 'no cloud'} were deprovisioned)"
                ) from exc
            raise
        fleet = GatewayFleet(
            transfer_id=transfer_id,
            backend=self.name,
            gateways=[g for p in sorted(fleets) for g in fleets[p].gateways],
            secret_ref=secret_ref,
            tags=next(iter(fleets.values())).tags if fleets else {},
            created_at=min((f.created_at for f in fleets.values()), default=""),
            resources={
                "parts": {p: f.to_dict() for p, f in fleets.items()},
                "probe_port": next(iter(fleets.values())).resources.get("probe_port")
                if fleets
                else None,
            },
        )
        records.save_fleet(fleet)
        return fleet

    def _deprovision_parts(self, fleets: Mapping[str, GatewayFleet]) -> None:
        failed = []
        for p, fleet in fleets.items():
            try:
                self.backend(p).deprovision(fleet)
            except Exception as exc:
                log.error("deprovisioning the %s part of %s failed: %s", p, fleet.transfer_id, exc)
                failed.append(f"{p}: {exc}")
        if failed:
            raise ProvisionError("mixed clean-up incomplete: " + "; ".join(failed))

    def deprovision(self, fleet: GatewayFleet) -> None:
        parts = {p: GatewayFleet.from_dict(d) for p, d in fleet.resources.get("parts", {}).items()}
        self._deprovision_parts(parts)
        delete_secret(fleet.secret_ref)
        records.forget_fleet(fleet)

    def sweep(
        self, *, transfer_id: str | None = None, older_than_seconds: float | None = None
    ) -> list[str]:
        """Sweep every configured provider (those with an option table or a given backend)."""
        deleted: list[str] = []
        errors = []
        for p in PROVIDERS:
            if not self.options[p] and p not in self._given:
                continue
            try:
                deleted += self.backend(p).sweep(
                    transfer_id=transfer_id, older_than_seconds=older_than_seconds
                )
            except Exception as exc:
                errors.append(f"{p}: {exc}")
        if errors:
            raise ProvisionError("mixed sweep incomplete: " + "; ".join(errors))
        return deleted

    def describe(self, vms: Mapping[str, int], transfer_id: str) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        for p, part in split_by_provider(vms).items():
            out += describe(p, self.options[p], part, transfer_id)
        return out


def describe(
    backend: str, options: Mapping[str, Any], vms: Mapping[str, int], transfer_id: str
) -> list[tuple[str, float]]:
    """What ``backend`` would create for ``vms``, with hourly list prices; calls no cloud API."""
    opts = dict(options)
    if backend == "aws":
        return _describe_aws(opts, vms, transfer_id)
    if backend == "gcp":
        opts.setdefault("project", "PROJECT")
        opts.setdefault("credentials", "anonymous")
    if backend == "azure":
        opts.setdefault("subscription_id", "SUBSCRIPTION")
        opts.setdefault("credential", "fake")  # describe() never calls Azure
    if backend in ("gcp", "azure", "mixed"):
        prov: Any = get_provisioner(backend, **opts)
        result: list[tuple[str, float]] = prov.describe(vms, transfer_id)
        return result
    return [
        (f"{backend}: {n} gateway process(es) in {r} (no cloud resources)", 0.0)
        for r, n in sorted(vms.items())
    ]


def _describe_aws(
    opts: Mapping[str, Any], vms: Mapping[str, int], transfer_id: str
) -> list[tuple[str, float]]:
    kind = str(opts.get("instance_type", "m5.xlarge"))
    name = f"skyplane-ops-{transfer_id}"
    out: list[tuple[str, float]] = []
    for region, n in sorted(vms.items()):
        short = region.rpartition(":")[2]
        out += [
            (f"aws {short} key pair {name}", 0.0),
            (f"aws {short} security group {name} (22 from control plane; gateways fleet)", 0.0),
        ]
        out += [
            (f"aws {short} instance {i} {kind} (+ public IPv4)", vm_price("aws", kind) + 0.005)
            for i in range(n)
        ]
    return out


def format_dry_run(rows: Sequence[tuple[str, float]]) -> str:
    """The dry run as a table with a total $/hour."""
    lines = [f"{'$/hour':>8}  resource"]
    lines += [f"{price:8.3f}  {what}" for what, price in rows]
    total = sum(p for _, p in rows)
    lines.append(f"{total:8.3f}  total per hour (on-demand list prices; spot costs less)")
    return "\n".join(lines)
