"""Whole-object CRC32C from per-range CRC32Cs: the stores package's math, re-exported here
(the agent stands alone, the control plane imports it)."""

from __future__ import annotations

from gateway_agent.stores.crc32c_math import combine_ranges, crc32c_b64, crc32c_combine

__all__ = ["combine_ranges", "crc32c_b64", "crc32c_combine"]
