"""Find and delete leftovers of transfers: recorded fleets first, then resources by tag.

Two passes, because either alone can miss something: (1) every fleet recorded in
``$SKYPLANE_OPS_HOME/fleets`` that matches is deprovisioned from its record (works for any
backend, even from another process; cloud backends write a *pending* record before their first
create call, so a control plane killed mid-provision leaves one); (2) each backend's ``sweep``
looks for resources that are ours (``skyplane-ops-`` name, transfer tag AND creator tag: a
resource that merely carries the tag key is never touched) and have no record. Both passes
take what is older than ``older_than_seconds`` or past its ``expires-at``. A fleet or resource
that fails is reported; the others are still deleted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision import BACKENDS, get_provisioner, records
from skyplane_ops.provision.documents import parse_document, read_document
from skyplane_ops.provision.fleet import GatewayFleet
from skyplane_ops.provision.local_options import check_local_options
from skyplane_ops.provision.warm import claimed_elsewhere

log = logging.getLogger(__name__)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ProvisionError(f"bad duration {text!r}: use e.g. 90s, 30m, 2h or 1d")
    return float(m[1]) * _UNITS[m[2]]


def _read_document(path: Path) -> Any:
    try:
        return read_document(path)
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"cannot read backend options {path}: {exc}") from exc


def load_backend_options(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Per-backend options from a JSON or TOML file: ``{"ssh": {"inventory": ...}, ...}``."""
    if path is None:
        return {}
    data = _read_document(Path(path))
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ProvisionError(f"{path} must map backend names to option tables")
    if "local" in data:
        check_local_options(data["local"])
    return data


def backend_options_for(value: str | None, backend: str) -> dict[str, Any]:
    """The options of ``backend`` from a ``--backend-options`` value: inline JSON or a file.

    Both spellings of a file work: the backend's own options (``{"inventory": "hosts.toml"}``)
    or a per-backend file as ``load_backend_options`` reads it (``{"ssh": {...}, ...}``), of
    which ``backend``'s table is taken. For ``ssh``, an SSH inventory itself
    (``{"regions": {...}}``) is accepted as the inventory.
    """
    if value is None or not value.strip():
        return {}
    text = value.strip()
    if text.startswith("{"):
        try:
            data = parse_document(text)
        except ValueError as exc:
            raise ProvisionError(f"backend options are not valid JSON: {exc}") from exc
        where = "inline backend options"
    elif Path(text).is_file():
        data, where = _read_document(Path(text)), text
    else:
        raise ProvisionError(
            f"backend options {text!r} are neither a JSON object nor an existing file"
        )
    if not isinstance(data, dict):
        raise ProvisionError(f"{where} must be a JSON/TOML object, got {type(data).__name__}")
    tables = {k: v for k, v in data.items() if k in BACKENDS and isinstance(v, dict)}
    if tables:
        if len(tables) != len(data):
            raise ProvisionError(
                f"{where} mixes per-backend tables ({', '.join(sorted(tables))}) with options"
            )
        if backend == "mixed" and "mixed" not in tables:  # mixed takes the clouds' tables
            return {k: v for k, v in tables.items() if k in ("aws", "azure", "gcp")}
        data = tables.get(backend, {})
    elif backend == "ssh" and "inventory" not in data and isinstance(data.get("regions"), dict):
        return {"inventory": data}
    if backend == "local":
        check_local_options(data)
    return dict(data)


def _expired(fleet: GatewayFleet) -> bool:
    from skyplane_ops.provision.cloudvm.common import TAG_EXPIRES, expired

    return expired(fleet.tags.get(TAG_EXPIRES))


def record_regions(fleets: Sequence[GatewayFleet]) -> list[str]:
    """The regions recorded fleets name (where a backend's sweep must look)."""
    return sorted({r for f in fleets for r in f.resources.get("regions", {})})


def with_sweep_regions(prov: Any, regions: Sequence[str]) -> Any:
    """A backend that sweeps per region (aws) and was given none looks in ``regions``."""
    if regions and hasattr(prov, "sweep_regions") and not prov.sweep_regions:
        prov.sweep_regions = list(regions)
    return prov


@dataclass
class SweepReport:
    """What a sweep deleted, per backend, and what it could not do."""

    deleted: dict[str, list[str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.deleted.values())


def _age_ok(created_at: str, older_than_seconds: float | None) -> bool:
    if older_than_seconds is None or not created_at:
        return True
    age = (datetime.now(UTC) - datetime.fromisoformat(created_at)).total_seconds()
    return age >= older_than_seconds


def _sweep_parked(
    prov: Any,
    backend: str,
    transfer_id: str | None,
    older_than_seconds: float | None,
    errors: list[str],
) -> list[str]:
    """Parked (warm) fleets of the state store's pool that nobody claimed: deleted by their
    pool record, which may come from another host, and the record forgotten."""
    from skyplane_ops.provision.warm import WarmPool, default_state_uri

    try:
        pool = WarmPool(default_state_uri())
        parked = pool.records()
    except ProvisionError as exc:
        errors.append(f"warm fleets: {exc}")
        return []
    deleted: list[str] = []
    now = datetime.now(UTC).timestamp()
    for record in parked:
        if record.backend != backend or transfer_id not in (None, record.fleet_id):
            continue
        old = older_than_seconds is None or now - record.parked_at >= older_than_seconds
        if pool.claimed(record) or not (old or record.expires_at <= now):
            continue  # in use by the run that claimed it, or parked too recently
        fleet = record.gateway_fleet()
        try:
            prov.deprovision(fleet)
            pool.forget(record.fleet_id)
        except Exception as exc:
            errors.append(f"warm fleet {record.fleet_id}: {exc}")
            continue
        deleted += [f"{backend}:{fleet.transfer_id}:{g.gateway_id}" for g in fleet.gateways]
    return deleted


def sweep(
    backends: Sequence[str],
    *,
    transfer_id: str | None = None,
    older_than_seconds: float | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> SweepReport:
    """Deprovision matching recorded fleets, then sweep each backend by tag; never stops early."""
    options = options or {}
    report = SweepReport()
    for backend in backends:
        deleted = report.deleted.setdefault(backend, [])
        errors: list[str] = []
        try:
            prov = get_provisioner(backend, **options.get(backend, {}))
            fleets = records.load_fleets(transfer_id=transfer_id, backend=backend)
            for fleet in fleets:
                if claimed_elsewhere(fleet):  # the claimant's now: this host forgets it
                    records.forget_fleet(fleet)
                    continue
                if not (_age_ok(fleet.created_at, older_than_seconds) or _expired(fleet)):
                    continue
                try:  # one fleet failing does not keep the others
                    gone = prov.deprovision(fleet)
                except Exception as exc:
                    errors.append(f"fleet {fleet.transfer_id}: {exc}")
                    continue
                deleted += (gone if isinstance(gone, list) else []) or [
                    f"{backend}:{fleet.transfer_id}:{g.gateway_id}" for g in fleet.gateways
                ]
            parked = _sweep_parked(prov, backend, transfer_id, older_than_seconds, errors)
            deleted += [name for name in parked if name not in deleted]
            with_sweep_regions(prov, record_regions(fleets))
            deleted += prov.sweep(transfer_id=transfer_id, older_than_seconds=older_than_seconds)
        except ProvisionError as exc:
            errors.append(str(exc))
        except Exception as exc:  # keep sweeping the other backends; report this one
            log.exception("sweeping %s failed", backend)
            errors.append(repr(exc))
        if errors:
            report.errors[backend] = "; ".join(errors)
    return report
