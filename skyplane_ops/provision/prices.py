"""Hourly list prices of the VM classes the cloud backends start, for ``provision --dry-run``.

On-demand Linux list prices in US regions (AWS, Azure and GCP price pages, 2023-2024); the
32-vCPU classes match ``profiles/prices.json``. Spot prices vary by the hour: the dry run shows
the on-demand price as the ceiling and says so. Unknown classes show as ``nan``.
"""

from __future__ import annotations

VM_USD_PER_HOUR: dict[str, dict[str, float]] = {
    "aws": {"m5.8xlarge": 1.536, "m5.4xlarge": 0.768, "m5.2xlarge": 0.384, "m5.xlarge": 0.192},
    "azure": {
        "Standard_D32_v5": 1.536,
        "Standard_D16_v5": 0.768,
        "Standard_D8_v5": 0.384,
        "Standard_D4_v5": 0.192,
        "Standard_D2_v5": 0.096,
    },
    "gcp": {
        "n2-standard-32": 1.554,
        "n2-standard-16": 0.777,
        "n2-standard-8": 0.388,
        "n2-standard-4": 0.194,
        "n2-standard-2": 0.097,
    },
}


def vm_price(provider: str, vm_class: str, spot: bool = False) -> float:
    """The on-demand $/hour of ``vm_class`` (also shown for spot: the most it can cost)."""
    del spot  # spot is cheaper by a varying discount; the on-demand price is the ceiling
    return VM_USD_PER_HOUR.get(provider, {}).get(vm_class, float("nan"))
