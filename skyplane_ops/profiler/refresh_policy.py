"""Where a scheduled grid refresh may publish, and what it cleans up after itself.

The grid store is what plans read. Figures measured between emulated "regions" (gateway
processes on one machine, network namespaces, SSH hosts on loopback) say nothing about real
links: 25 Gbit/s between two loopback gateways labelled us-east-1 and eu-west-1 would make
every later plan wrong. So a scheduled refresh publishes into the planning store only with a
backend that reaches real remote hosts; otherwise it writes to a scratch store and says so.
Scheduled jobs also delete their own leftovers by age: per-transfer driver folders
(``<work_dir>/runs/<id>``) and empty journal folders (``<work_dir>/journals/<id>``).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EMULATED_BACKENDS = frozenset({"local", "netns"})


@dataclass(frozen=True)
class PublishTarget:
    """The store a refresh writes to and why (``scratch`` is False for the planning store)."""

    store_uri: str
    scratch: bool
    reason: str


def _addresses(value: Any) -> list[str]:
    """Every ``address``/``host`` string found in (nested) backend options."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key in ("address", "host") and isinstance(item, str):
                found.append(item)
            else:
                found += _addresses(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found += _addresses(item)
    return found


def _backends(value: Any) -> list[str]:
    """Every nested ``backend`` name in (mixed) backend options."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "backend" and isinstance(item, str):
                found.append(item)
            else:
                found += _backends(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found += _backends(item)
    return found


def _is_loopback(address: str) -> bool:
    if address in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def reaches_remote_hosts(backend: str, backend_options: Mapping[str, Any] | None) -> str | None:
    """None when ``backend`` measures real links; else why its figures are not real."""
    if backend in EMULATED_BACKENDS:
        return f"the {backend!r} backend runs every 'region' on this machine"
    nested = [b for b in _backends(dict(backend_options or {})) if b in EMULATED_BACKENDS]
    if nested:
        return f"part of the fleet runs on the emulated {nested[0]!r} backend"
    addresses = _addresses(dict(backend_options or {}))
    if backend == "ssh" and addresses and all(_is_loopback(a) for a in addresses):
        return "every SSH host of the inventory is a loopback address"
    return None


def publish_target(
    backend: str,
    backend_options: Mapping[str, Any] | None,
    *,
    grid_store: str,
    scratch_store: str,
    allow_emulated: bool = False,
) -> PublishTarget:
    """The planning store for real links (or when explicitly allowed), else the scratch one."""
    why_not = reaches_remote_hosts(backend, backend_options)
    if why_not is None:
        return PublishTarget(grid_store, False, f"backend {backend!r} reaches remote hosts")
    if allow_emulated:
        return PublishTarget(grid_store, False, f"{why_not}; publishing anyway as asked")
    return PublishTarget(
        scratch_store,
        True,
        f"{why_not}: its figures go to the scratch store {scratch_store}, not to the grid "
        "that plans read (configure a backend that reaches real hosts to publish)",
    )


def clean_leftovers(work_dir: str | Path, max_age_s: float, now: float | None = None) -> list[str]:
    """Delete ``runs/<id>`` folders and empty ``journals/<id>`` folders older than
    ``max_age_s`` under ``work_dir``; returns what was removed. Journals that still hold
    records are kept whatever their age: they are what a retry resumes from."""
    now = time.time() if now is None else now
    removed: list[str] = []
    root = Path(work_dir)
    for kind in ("runs", "journals"):
        folder = root / kind
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            try:
                if not entry.is_dir() or now - entry.stat().st_mtime < max_age_s:
                    continue
                if kind == "journals":
                    if any(entry.iterdir()):
                        continue
                    entry.rmdir()
                else:
                    if any(now - p.stat().st_mtime < max_age_s for p in entry.rglob("*")):
                        continue
                    shutil.rmtree(entry)
            except OSError:
                continue  # gone meanwhile, or not ours to delete
            removed.append(os.path.join(kind, entry.name))
    return sorted(removed)
