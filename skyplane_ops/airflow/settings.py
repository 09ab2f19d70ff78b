"""The settings a ``skyplane`` Airflow connection carries, parsed without importing Airflow.

Kept free of Airflow imports so that the parsing rules (and their tests) do not need an
Airflow environment, and so the detached transfer driver can import this package cheaply.
The one secret a connection may hold (the password field) is kept apart from everything
that can be logged, rendered or pushed to XCom.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyplane_ops.api import SkyplaneOpsError

CONN_TYPE = "skyplane"
DEFAULT_CONN_ID = "skyplane_default"

# Extra fields the connection form shows (see provider_info.CONN_FIELDS); anything else in the
# extra is rejected so that a typo does not silently fall back to a default.
KNOWN_EXTRA = frozenset(
    {
        "backend",
        "backend_options",
        "secret_option",
        "max_vms_per_region",
        "max_connections_per_vm",
        "max_cost_usd",
        "tags",
        "grid_store",
        "profile_overrides",
        "work_dir",
        "state_store",
        "state_store_options",
    }
)


class SkyplaneConnectionError(SkyplaneOpsError):
    """The ``skyplane`` connection's extra is malformed (unknown key, wrong type)."""


def default_work_dir() -> str:
    """Where plans, journals and driver status files go when the connection names no place."""
    home = os.environ.get("SKYPLANE_OPS_HOME") or os.path.join(
        os.path.expanduser("~"), ".skyplane-ops"
    )
    return os.path.join(home, "airflow")


@dataclass(frozen=True)
class SkyplaneSettings:
    """Non-secret settings of one ``skyplane`` connection; safe to log."""

    backend: str = "local"
    backend_options: dict[str, Any] = field(default_factory=dict)
    # The name of the backend option that receives the connection password, if any.
    secret_option: str | None = None
    max_vms_per_region: int | None = None
    max_connections_per_vm: int | None = None
    max_cost_usd: float | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # The profiler's grid store (path or URI; default <work_dir>/grid): the grid-refresh DAG
    # publishes there and plans use its latest version over the modelled grid.
    grid_store: str | None = None
    profile_overrides: str | None = None
    work_dir: str = field(default_factory=default_work_dir)
    # Where each transfer's status, journal snapshot and fleet secret live (any store URI all
    # workers and the triggerer reach; default file://<work_dir>/state, i.e. one host or a
    # shared volume). Options are store options (endpoint, region), never credentials.
    state_store: str | None = None
    state_store_options: dict[str, Any] = field(default_factory=dict)

    @property
    def state_uri(self) -> str:
        """The state store's URI (the default under ``work_dir``)."""
        from pathlib import Path

        return self.state_store or Path(self.work_dir, "state").resolve().as_uri()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (no secret: the password is never part of the settings)."""
        return {
            "backend": self.backend,
            "backend_options": dict(self.backend_options),
            "secret_option": self.secret_option,
            "max_vms_per_region": self.max_vms_per_region,
            "max_connections_per_vm": self.max_connections_per_vm,
            "max_cost_usd": self.max_cost_usd,
            "tags": dict(self.tags),
            "grid_store": self.grid_store,
            "profile_overrides": self.profile_overrides,
            "work_dir": self.work_dir,
            "state_store": self.state_store,
            "state_store_options": dict(self.state_store_options),
        }


def _strip_prefix(extra: Mapping[str, Any]) -> dict[str, Any]:
    """Accept both ``key`` and the UI form's ``extra__skyplane__key`` spelling."""
    prefix = f"extra__{CONN_TYPE}__"
    out: dict[str, Any] = {}
    for key, value in extra.items():
        name = key[len(prefix) :] if key.startswith(prefix) else key
        if value in ("", None):
            continue
        out[name] = value
    return out


def _as_mapping(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SkyplaneConnectionError(f"{name} must be a JSON object: {exc}") from None
    if not isinstance(value, Mapping):
        raise SkyplaneConnectionError(f"{name} must be a JSON object, got {type(value).__name__}")
    return dict(value)


def _as_number(name: str, value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SkyplaneConnectionError(f"{name} must be a {kind.__name__}, got {value!r}") from None
    if number <= 0:
        raise SkyplaneConnectionError(f"{name} must be positive, got {value!r}")
    return number


def parse_extra(extra: Mapping[str, Any] | str | None) -> SkyplaneSettings:
    """Turn a connection's extra (dict or JSON text) into validated settings."""
    if extra is None or extra == "":
        raw: dict[str, Any] = {}
    else:
        raw = _strip_prefix(_as_mapping("extra", extra))
    unknown = sorted(set(raw) - KNOWN_EXTRA)
    if unknown:
        raise SkyplaneConnectionError(
            f"unknown key(s) in the skyplane connection extra: {', '.join(unknown)}; "
            f"known: {', '.join(sorted(KNOWN_EXTRA))}"
        )
    kwargs: dict[str, Any] = {}
    if "backend" in raw:
        kwargs["backend"] = str(raw["backend"])
    if "backend_options" in raw:
        kwargs["backend_options"] = _as_mapping("backend_options", raw["backend_options"])
    if "secret_option" in raw:
        kwargs["secret_option"] = str(raw["secret_option"])
    for name in ("max_vms_per_region", "max_connections_per_vm"):
        if name in raw:
            kwargs[name] = _as_number(name, raw[name], int)
    if "max_cost_usd" in raw:
        kwargs["max_cost_usd"] = _as_number("max_cost_usd", raw["max_cost_usd"], float)
    if "tags" in raw:
        kwargs["tags"] = {str(k): str(v) for k, v in _as_mapping("tags", raw["tags"]).items()}
    if "state_store_options" in raw:
        kwargs["state_store_options"] = _as_mapping(
            "state_store_options", raw["state_store_options"]
        )
    for name in ("grid_store", "profile_overrides", "work_dir", "state_store"):
        if name in raw:
            kwargs[name] = str(raw[name])
    return SkyplaneSettings(**kwargs)


def backend_options_with_secret(settings: SkyplaneSettings, password: str | None) -> dict[str, Any]:
    """The options handed to the provisioner: the settings' options plus the secret, if named.

    The result must never be logged or returned from a task.
    """
    options = dict(settings.backend_options)
    if password and settings.secret_option:
        options[settings.secret_option] = password
    return options


_ID_UNSAFE = re.compile(r"[^a-z0-9-]+")


def make_transfer_id(raw: str, max_len: int = 48) -> str:
    """A tag-safe, deterministic transfer id for a DAG run's transfer.

    Deterministic so that a retry of any task of the run (provision, transfer, deprovision)
    finds the same tags, journal and driver; short and ``[a-z0-9-]`` so that every backend
    accepts it as a tag value and a path component.
    """
    digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
    slug = _ID_UNSAFE.sub("-", raw.lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug)[: max_len - 9].strip("-")
    return f"{slug}-{digest}" if slug else f"t-{digest}"
