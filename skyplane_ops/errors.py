"""Typed errors of the control plane.

Every error a user can cause (bad input, infeasible bounds, missing resources) derives from
``SkyplaneOpsError`` so that the CLI and the Airflow/Dagster faces can report it cleanly
instead of showing a traceback.
"""

from __future__ import annotations


class SkyplaneOpsError(Exception):
    """Base class of every error skyplane-ops raises on purpose."""


class ProfileError(SkyplaneOpsError):
    """A profile file (regions, prices, throughput grid) is missing or malformed."""


class UnknownRegionError(SkyplaneOpsError):
    """A region name is not in the catalog; ``suggestions`` holds the closest names."""

    def __init__(self, region: str, suggestions: list[str] | None = None) -> None:
        self.region = region
        self.suggestions = suggestions or []
        hint = f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        if not hint and ":" not in region:  # e.g. "local": an id names its provider
            hint = "; region ids are provider:region from the catalog, e.g. aws:us-east-1"
        super().__init__(f"unknown region {region!r}{hint}")


class PlanningError(SkyplaneOpsError):
    """The planner could not produce a plan (bad problem or solver failure)."""


class InfeasibleError(PlanningError):
    """The bound asked for cannot be met; the message says what is feasible."""


class ProvisionError(SkyplaneOpsError):
    """Gateways could not be provisioned (partial state has been cleaned up)."""


class TransferError(SkyplaneOpsError):
    """A transfer failed; nothing partial is visible at the destination."""
