"""``RunEvents``: what a run tells the face that started it.

The run sequence is written once; each face shows it its own way (the CLI's live display or
plain lines, the Airflow task log and its plan links, Dagster's log). A face subclasses
``RunEvents`` and overrides what it shows; the base shows nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from skyplane_ops.planner.plan import TransferPlan
from skyplane_ops.provision.fleet import GatewayFleet


class RunEvents:
    """Hooks a run calls as it goes; every one a no-op here."""

    #: Whether ``progress`` wants the engine's updates (building them costs a little).
    wants_progress: bool = False

    def locked(self, request: Any) -> None:
        """The journal lock is held and nothing is listed yet: the place to bring back a
        journal snapshot kept elsewhere (the Airflow state store), so the run resumes."""

    @contextmanager
    def phase(self, name: str, detail: str) -> Iterator[dict[str, str]]:
        """One phase (``list``, ``plan``, ``provision``, ``transfer``, ``teardown``): the run
        puts a one-line outcome in the yielded dict's ``"done"`` before the phase ends."""
        yield {}

    def listing(self, src_objects: int, dst_objects: int) -> None:
        """Objects listed so far on each side."""

    def progress(self, update: Any) -> None:
        """A ``transfer.Progress`` update while data moves (only with ``wants_progress``)."""

    def planned(self, plan: TransferPlan) -> None:
        """The plan the run will follow (made now or given)."""

    def provisioned(self, fleet: GatewayFleet) -> None:
        """The fleet the run will use (started now or given)."""
