"""The local backend's options, checked by name, type and range before anything starts.

``--backend-options '{"idle_timeout": NaN}'`` or ``{"buffer_mib": 0}`` must not reach a gateway
(an agent that idles out at once, or holds no buffer); each is refused in one line naming the
option, where the options are read (``backend_options_for``) and when the provisioner is made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from skyplane_ops.errors import ProvisionError
from skyplane_ops.provision.boot_delay import check_boot_delay

_BAD = "bad options for backend 'local': "  # as get_provisioner says it
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# name -> (kind, lowest, highest); kind "seconds" is a finite float > lowest.
_NUMBERS: dict[str, tuple[str, float, float]] = {
    "idle_timeout": ("seconds", 0, 365 * 86400),
    "start_timeout": ("seconds", 0, 86400),
    "initial_lease_s": ("seconds", 0, 365 * 86400),
    "lease_s": ("seconds", 0, 365 * 86400),
    "buffer_mib": ("int", 1, 1 << 20),
    "boot_delay": ("delay", 0, 3600),
}
_STRINGS = ("host", "python")
LOCAL_OPTIONS = frozenset({*_NUMBERS, *_STRINGS, "extra_args", "log_level"})


def _number(name: str, value: Any) -> None:
    kind, low, high = _NUMBERS[name]
    if name in ("initial_lease_s", "lease_s") and value is None:
        return
    if kind == "delay":
        check_boot_delay(value, "local")
        return
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProvisionError(_BAD + f"{name} must be a whole number, not {value!r}")
        if not low <= value <= high:
            raise ProvisionError(_BAD + f"{name} must be {low:.0f}..{high:,.0f}, got {value}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProvisionError(_BAD + f"{name} must be a number of seconds, not {value!r}")
    if not low < value <= high:
        raise ProvisionError(
            _BAD + f"{name} must be above {low:.0f} and at most {high:,.0f} seconds, got {value}"
        )


def check_local_options(options: Mapping[str, Any]) -> None:
    """Raise ``ProvisionError`` (one line) for an unknown name, a wrong type or a bad range."""
    unknown = sorted(set(options) - LOCAL_OPTIONS)
    if unknown:
        raise ProvisionError(_BAD + f"unknown option(s) {unknown}; known: {sorted(LOCAL_OPTIONS)}")
    for name, value in options.items():
        if name in _NUMBERS:
            _number(name, value)
        elif name in _STRINGS:
            if not isinstance(value, str) or not value or "\x00" in value:
                raise ProvisionError(_BAD + f"{name} must be a non-empty string")
        elif name == "extra_args":
            if (
                isinstance(value, str)
                or not isinstance(value, list | tuple)
                or not all(isinstance(a, str) for a in value)
            ):
                raise ProvisionError(_BAD + "extra_args must be a list of strings")
        elif name == "log_level" and str(value).upper() not in LOG_LEVELS:
            raise ProvisionError(
                _BAD + f"log_level must be one of {', '.join(LOG_LEVELS)}, not {value!r}"
            )
