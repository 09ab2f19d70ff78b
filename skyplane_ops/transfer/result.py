"""``TransferResult``: the small summary that goes to XCom, Dagster metadata and the CLI, and
``PartialTransferError``: some objects were copied and verified, others failed or changed;
``plan_costs``: the modelled $ of the bytes a run moved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from skyplane_ops.errors import TransferError

if TYPE_CHECKING:
    from skyplane_ops.planner.plan import TransferPlan

# Exit status of ``skyplane-ops cp``/``sync`` when the run was partial (see README).
EXIT_PARTIAL = 3


@dataclass
class TransferResult:
    """What happened, in numbers; never lists of keys (those stay in the journal/logs)."""

    transfer_id: str
    job_id: str
    src_uri: str
    dst_uri: str
    objects: int
    bytes: int
    seconds: float
    gbps: float
    chunks: int = 0
    chunks_resent: int = 0
    chunks_resumed: int = 0
    objects_skipped: int = 0
    route: list[str] = field(default_factory=list)
    predicted_gbps: float = 0.0
    predicted_cost_usd: float = 0.0
    actual_cost_usd: float = 0.0
    verification: dict[str, Any] = field(default_factory=dict)
    uris: dict[str, str] = field(default_factory=dict)
    status: str = "ok"  # ok | partial (some objects failed or changed; the rest is verified)
    objects_failed: int = 0
    objects_changed: int = 0
    objects_deleted: int = 0  # by sync --delete
    objects_moved: int = 0  # deleted at the source after their verified copy (mv)
    first_errors: list[str] = field(default_factory=list)  # at most 5, one line each
    # Hops and gateways that died during the run and were routed around (at most 5 lines).
    routed_around: list[str] = field(default_factory=list)
    # Per path: predicted vs achieved Gbit/s ("under": below 0.7 of the prediction).
    paths: list[dict[str, Any]] = field(default_factory=list)
    # Seconds per engine step: list, prepare, move, check_source, commit, verify, record.
    steps: dict[str, float] = field(default_factory=dict)
    # A warm fleet (docs/vmless.md): "claimed" with the idle it was billed ("idle_s",
    # "idle_usd", in actual_cost_usd), and/or "parked" with "idle_usd_if_unclaimed".
    warm: dict[str, Any] = field(default_factory=dict)
    # A run of both the worker and the overlay: what became of the overlay ("joined",
    # "cancelled", "unused", "failed"), when it was up and bytes per kind of path.
    schedule: dict[str, Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.verification.get("status") == "passed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A few human lines for the CLI."""
        v = self.verification
        lines = [
            f"transfer {self.transfer_id}: {self.objects} objects, {_size(self.bytes)} in "
            f"{self.seconds:.2f} s = {self.gbps:.3f} Gbit/s",
            f"route: {' | '.join(self.route) or '-'}",
            f"cost: predicted ${self.predicted_cost_usd:.4f}, actual ${self.actual_cost_usd:.4f}"
            f" (predicted {self.predicted_gbps:.2f} Gbit/s)",
            f"verification: {v.get('status', 'n/a')} ({v.get('objects', 0)} objects, "
            f"{v.get('method', '-')})",
        ]
        extra = []
        if self.objects_skipped:
            extra.append(f"{self.objects_skipped} already up to date")
        if self.chunks_resumed:
            extra.append(f"{self.chunks_resumed} segments resumed from the journal")
        if self.chunks_resent:
            extra.append(f"{self.chunks_resent} chunks re-sent")
        if self.objects_deleted:
            extra.append(f"{self.objects_deleted} deleted (absent from the source)")
        if self.objects_moved:
            extra.append(f"{self.objects_moved} moved (deleted at the source once verified)")
        if self.status != "ok":
            extra.append(
                f"PARTIAL: {self.objects_failed} failed, {self.objects_changed} changed during "
                "the run (re-run to copy them)"
            )
        if extra:
            lines.append("; ".join(extra))
        lines += [f"routed around: {line}" for line in self.routed_around]
        if self.schedule:
            s = self.schedule
            lines.append(
                f"schedule: worker {_size(s['worker_bytes'])}, overlay {_size(s['overlay_bytes'])}"
                f" ({s['overlay']}" + (f" at {s['joined_s']:.1f} s)" if s.get("joined_s") else ")")
            )
        lines += path_warnings(self.paths)
        lines += warm_lines(self.warm)
        return "\n".join(lines)


def warm_lines(warm: dict[str, Any]) -> list[str]:
    """The cost summary's warm-fleet lines: idle billed to this run, idle a parking may cost."""
    lines = []
    if "claimed" in warm:
        lines.append(
            f"warm fleet: claimed {warm['claimed']}, idle {warm.get('idle_s', 0):.0f} s billed "
            f"${warm.get('idle_usd', 0):.4f} (in the actual cost)"
        )
    if "parked" in warm:
        lines.append(
            f"warm fleet: parked {warm['parked']} for {warm.get('keep_warm_s', 0):g} s, up to "
            f"${warm.get('idle_usd_if_unclaimed', 0):.4f} idle if nobody claims it"
        )
    return lines


class PartialTransferError(TransferError):
    """Some objects failed (``failed``: key -> why) or changed during the run (``changed``).

    Everything else was copied and verified (``result``, with ``status="partial"``); the
    destination keeps its existing version of every object that was not copied, and the
    journal is kept, so re-running the same call copies only the rest.
    """

    def __init__(self, result: TransferResult, failed: dict[str, str], changed: list[str]) -> None:
        self.result = result
        self.failed = dict(sorted(failed.items()))
        self.keys = sorted(changed)
        self.failures, self.changed = self.failed, self.keys  # the names ObjectsFailedError used
        parts = []
        if self.failed:
            shown = "; ".join(f"{k!r}: {why}" for k, why in list(self.failed.items())[:3])
            more = f" (and {len(self.failed) - 3} more)" if len(self.failed) > 3 else ""
            parts.append(f"{len(self.failed)} object(s) could not be copied: {shown}{more}")
        if self.keys:
            shown = ", ".join(self.keys[:3]) + (" ..." if len(self.keys) > 3 else "")
            parts.append(
                f"{len(self.keys)} source object(s) changed during the transfer and were not "
                f"committed: {shown}"
            )
        super().__init__(
            "partial: "
            + "; ".join(parts)
            + f"; {result.objects} other object(s) were copied and verified, the rest keep "
            "their previous copies: re-run the same command to copy them"
        )


# The name the stores branch gave it; one class, so callers may catch either.
ObjectsFailedError = PartialTransferError


class SourceChangedError(PartialTransferError):
    """Partial, and only because source objects changed while they were copied."""


def partial_error(
    result: TransferResult, failed: dict[str, str], changed: list[str]
) -> PartialTransferError:
    cls = PartialTransferError if failed else SourceChangedError
    return cls(result, failed, changed)


def path_warnings(paths: list[dict[str, Any]]) -> list[str]:
    """One line per path that delivered well under its prediction (``PathReport.under``)."""
    return [
        f"warning: path {' -> '.join(p['regions'])} delivered {p['achieved_gbps']:.3f} of "
        f"{p['predicted_gbps']:.3f} Gbit/s predicted ({p['ratio']:.0%})"
        + ("; recorded for the next plan" if p.get("recorded") else "")
        for p in paths
        if p.get("under")
    ]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def plan_costs(plan: TransferPlan, nbytes: int, seconds: float) -> tuple[float, float]:
    """(predicted, actual) $ for the bytes moved.

    Egress scales with bytes. The plan's VM $ covers ``volume/throughput + provisioning``
    seconds; its per-second rate is recovered from that and applied to the predicted and
    to the measured transfer time (provisioning time counted the same on both sides).
    """
    gb = nbytes / 1e9
    scale = gb / plan.volume_gb if plan.volume_gb > 0 else 0.0
    egress = plan.egress_cost_usd * scale
    prov_s = float(plan.details.get("provisioning_seconds", 60.0))
    plan_s = plan.volume_gb * 8 / plan.predicted_gbps if plan.predicted_gbps > 0 else 0.0
    rate = plan.vm_cost_usd / (plan_s + prov_s) if plan_s + prov_s > 0 else 0.0
    predicted_s = gb * 8 / plan.predicted_gbps if plan.predicted_gbps > 0 else 0.0
    predicted = egress + rate * (predicted_s + prov_s)
    actual = egress + rate * (seconds + prov_s)
    return round(predicted, 6), round(actual, 6)
