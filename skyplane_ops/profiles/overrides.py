"""User overrides of the price document: a partial JSON file and/or keyword arguments.

An override is any subset of ``prices.json``: nested objects are merged key by key, every other
value (numbers, strings, lists) replaces the default. Keys are checked against the default
document so a typo fails loudly instead of silently doing nothing; maps keyed by region,
continent or pair (``by_source``, ``pair_overrides`` ...) accept new keys.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyplane_ops.errors import ProfileError
from skyplane_ops.profiles._data import read_json

# Objects whose keys are data (regions, continents, providers, pairs), not schema.
OPEN_MAPS = frozenset(
    {
        "aws.inter_region.by_source",
        "aws.internet.by_source",
        "aws.volume_tiers",
        "gcp.inter_region.same_continent",
        "gcp.internet.premium.to_continent",
        "gcp.internet.premium.by_source_continent",
        "gcp.internet.premium.by_source",
        "gcp.internet.standard.by_source_continent",
        "azure.intra_continent",
        "azure.inter_continent",
        "azure.internet",
        "pair_overrides",
    }
)


def _merge(base: dict[str, Any], patch: Mapping[str, Any], path: str, source: str) -> None:
    for key, value in patch.items():
        if not isinstance(key, str):
            raise ProfileError(f"{source}: key {key!r} at {path or 'top level'} is not a string")
        dotted = f"{path}.{key}" if path else key
        if key not in base:
            if path not in OPEN_MAPS:
                known = ", ".join(sorted(base))
                raise ProfileError(f"{source}: unknown key {dotted!r} (known here: {known})")
            base[key] = copy.deepcopy(value)
            continue
        if isinstance(base[key], dict) and dotted not in OPEN_MAPS | {"vm_classes"}:
            if not isinstance(value, Mapping):
                raise ProfileError(f"{source}: {dotted!r} must be an object")
            _merge(base[key], value, dotted, source)
        elif isinstance(base[key], dict) and isinstance(value, Mapping):
            # Open maps and vm_classes: merge per entry (a VM class may be patched field by field).
            for sub_key, sub_value in value.items():
                current = base[key].get(sub_key)
                if isinstance(current, dict) and isinstance(sub_value, Mapping):
                    _merge(current, sub_value, f"{dotted}.{sub_key}", source)
                else:
                    base[key][sub_key] = copy.deepcopy(sub_value)
        else:
            base[key] = copy.deepcopy(value)


def _normalise_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Allow ``pair_overrides={(src, dst): usd}`` in Python; JSON files use ``"src->dst"``."""
    out = dict(kwargs)
    pairs = out.get("pair_overrides")
    if isinstance(pairs, Mapping):
        out["pair_overrides"] = {
            (f"{k[0]}->{k[1]}" if isinstance(k, tuple) and len(k) == 2 else k): v
            for k, v in pairs.items()
        }
    return out


def apply_overrides(
    document: dict[str, Any],
    *,
    file: str | Path | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Return (merged copy, list of what was applied) with the file first, then the kwargs."""
    merged = copy.deepcopy(document)
    applied: list[str] = []
    if file is not None:
        _merge(merged, read_json(file), "", str(file))
        applied.append(f"file:{file}")
    if kwargs:
        _merge(merged, _normalise_kwargs(kwargs), "", "keyword arguments")
        applied.extend(f"kwarg:{k}" for k in sorted(kwargs))
    return merged, applied
