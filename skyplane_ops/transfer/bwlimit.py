"""The bandwidth cap (``--bwlimit``): a rate with its unit, and its live value while a run goes.

A rate is a number and a unit, read per second: bits (``bit``, ``kbit``, ``Mbit``, ``Gbit``;
SI, ``Kibit``... binary) or bytes (``B``, ``kB``, ``MB``, ``GB``; SI, ``KiB``, ``MiB``,
``GiB``: binary), optionally followed by ``/s`` or ``ps``. A bare number is refused: ``200``
is 200 what?

The cap of a running transfer can be changed (``skyplane-ops bwlimit ID RATE``,
``api.set_bwlimit``, an Airflow/Dagster step on the same host): the new rate is written to
``$SKYPLANE_OPS_HOME/bwlimit/<transfer id>`` and the run's dispatcher, which watches that
file, hands every gateway its hops' new shares. A run on another machine (the Airflow
driver, a Dagster step with a state store) is reached through the transfer's state store
(``state_uri``): the run follows ``bwlimit.json`` there into its local file
(``bwlimit_remote``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyplane_ops.errors import TransferError
from skyplane_ops.provision.secrets import ops_home

_UNITS = {
    "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
    "kibit": 1024 / 8, "mibit": 1024**2 / 8, "gibit": 1024**3 / 8,
    "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9,
    "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3,
}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+?)\s*(/s|ps)?\s*$")
EXAMPLE = "such as 200Mbit, 1.5Gbit or 25MiB (per second)"


def _factor(unit: str, bps: bool) -> float | None:
    """Bytes per unit: ``...bit`` is bits; ``B`` bytes; a lowercase ``b`` (``Mb``) is bits
    only as ``Mbps``, else ambiguous (refused)."""
    low = unit.lower()
    if low.endswith("bit"):
        return _UNITS.get(low)
    if unit.endswith("B"):
        return _UNITS.get(low)
    if unit.endswith("b") and bps:
        return _UNITS.get(low + "it")
    return None


def parse_rate(text: object, name: str = "bwlimit (--bwlimit)") -> float:
    """Bytes per second in ``text``; a bare number or an unknown unit is a one-line error."""
    if not isinstance(text, str):
        raise TransferError(f"{name} must be a rate with its unit, {EXAMPLE}, not {text!r}")
    match = _RATE.match(text)
    if match is None:
        raise TransferError(f"{name} must be a rate with its unit, {EXAMPLE}, not {text!r}")
    number, unit, per = match.groups()
    factor = _factor(unit, bool(per and per.lower() == "ps"))
    if factor is None:
        raise TransferError(
            f"{name}: unknown unit {unit!r} in {text!r}; use bit, kbit, Mbit, Gbit (or Mbps) "
            "or B, kB, MB, GB, KiB, MiB, GiB"
        )
    rate = float(number) * factor
    if rate <= 0:
        raise TransferError(f"{name} must be above 0, got {text!r}")
    return rate


# A capped hop sends a frame (a part, or a batch of small objects up to ``BATCH_BYTES``) whole,
# then waits until it is paid for: at a low cap that is a long quiet time on the hop, and a
# hop that moves nothing for the hop timeout (30 s) counts as dead. So a frame must move
# within ``MAX_FRAME_S`` at the cap.
MAX_FRAME_S = 10.0
BATCH_BYTES = 8 << 20  # ``manifest.DEFAULT_BATCH_BYTES``


def check_frame_time(bytes_per_s: float, part_size: int) -> None:
    """Refuse a cap under which one frame takes longer than ``MAX_FRAME_S``, saying which
    part size (``--chunk-mib``) would do."""
    frame = max(part_size, BATCH_BYTES)
    if frame / bytes_per_s <= MAX_FRAME_S:
        return
    fits = int(bytes_per_s * MAX_FRAME_S) >> 20
    advice = (
        f"give --chunk-mib {fits} or less (part_size {fits << 20})"
        if fits >= BATCH_BYTES >> 20
        else f"the least cap is {format_rate(BATCH_BYTES / MAX_FRAME_S)}"
    )
    raise TransferError(
        f"bwlimit (--bwlimit) {format_rate(bytes_per_s)} takes {frame / bytes_per_s:.0f} s per "
        f"{frame >> 20} MiB frame (a part or a batch of small objects), more than "
        f"{MAX_FRAME_S:.0f} s (a quiet hop counts as dead): {advice}"
    )


def format_rate(bytes_per_s: float) -> str:
    """``25.0 MB/s (200.0 Mbit/s)``: both units, for messages."""
    return f"{bytes_per_s / 1e6:.1f} MB/s ({bytes_per_s * 8 / 1e6:.1f} Mbit/s)"


def live_path(transfer_id: str, home: Path | None = None) -> Path:
    """Where a running transfer's dispatcher looks for a new cap."""
    if not transfer_id:
        raise TransferError("a transfer id is required")
    name = transfer_id.replace("/", "_").replace(os.sep, "_")
    return (home or ops_home()) / "bwlimit" / ("_" + name if name.startswith(".") else name)


def set_bwlimit(
    transfer_id: str,
    rate: str,
    home: Path | None = None,
    *,
    state_uri: str | None = None,
    state_options: Mapping[str, Any] | None = None,
) -> float:
    """Change the cap of the running transfer ``transfer_id`` to ``rate``; bytes per second.

    Without ``state_uri``: written atomically (a reader never sees half a value) to this
    host's live file; the run applies it within a second (and a run that starts later with
    this id starts with it). With ``state_uri``: written to the transfer's state store, which
    a run on any host with that store follows (within a few seconds)."""
    value = parse_rate(rate, "rate")
    if state_uri is not None:
        from skyplane_ops.transfer.state import TransferState

        TransferState(state_uri, transfer_id, state_options).set_bwlimit(rate.strip())
        return value
    write_live(live_path(transfer_id, home), rate)
    return value


def write_live(path: Path, rate: str) -> None:
    """Write ``rate`` at ``path`` atomically (a reader never sees half a value)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(rate.strip())
    os.replace(tmp, path)


def read_live(path: Path) -> float | None:
    """The cap written at ``path``, or None (no file, or a value that does not parse)."""
    try:
        return parse_rate(path.read_text())
    except (OSError, TransferError):
        return None
