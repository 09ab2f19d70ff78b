"""``TransferResult``: the small summary that goes to XCom, Dagster metadata and the CLI."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    # Per path: predicted vs achieved Gbit/s ("under": below 0.7 of the prediction).
    paths: list[dict[str, Any]] = field(default_factory=list)

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
        if extra:
            lines.append("; ".join(extra))
        for p in self.paths:
            if p.get("under"):
                lines.append(
                    f"warning: path {' -> '.join(p['regions'])} delivered "
                    f"{p['achieved_gbps']:.3f} of {p['predicted_gbps']:.3f} Gbit/s predicted "
                    f"({p['ratio']:.0%}); recorded for the next plan"
                )
        return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"
