"""The human summary after ``cp``/``sync``: what was measured and what was only modelled."""

from __future__ import annotations

from skyplane_ops import api


def _size(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n / 2**20:.2f} MiB"


def summary_lines(result: api.TransferResult, phases: dict[str, float]) -> list[str]:
    """Measured figures first (objects, bytes, times, Gbit/s, verification), then the
    modelled ones (cost: computed from list prices and the VM time, not a bill)."""
    v = result.verification
    lines = [
        f"transfer {result.transfer_id}: {result.status}",
        f"  measured: {result.objects} object(s), {_size(result.bytes)} in "
        f"{result.seconds:.2f} s = {result.gbps:.3f} Gbit/s "
        f"(predicted {result.predicted_gbps:.2f} Gbit/s)",
    ]
    if phases:
        lines.append(
            "  measured phases: " + ", ".join(f"{k} {secs:.1f}s" for k, secs in phases.items())
        )
    lines.append(
        f"  verification: {v.get('status', 'n/a')} ({v.get('objects', 0)} object(s), "
        f"{v.get('method', '-')})"
    )
    lines.append(f"  route: {' | '.join(result.route) or '-'}")
    lines.append(
        f"  modelled cost: ${result.actual_cost_usd:.4f} for this run (list prices x bytes "
        f"moved and VM time; not a bill), ${result.predicted_cost_usd:.4f} predicted by the plan"
    )
    for p in result.paths:
        lines.append(
            f"  path {' -> '.join(p['regions'])}: measured {p.get('achieved_gbps', 0):.3f} of "
            f"{p.get('predicted_gbps', 0):.3f} Gbit/s predicted"
        )
    extra = []
    if result.objects_skipped:
        extra.append(f"{result.objects_skipped} already up to date")
    if result.chunks_resumed:
        extra.append(f"{result.chunks_resumed} segments resumed from the journal")
    if result.chunks_resent:
        extra.append(f"{result.chunks_resent} chunks re-sent")
    if result.objects_deleted:
        extra.append(f"{result.objects_deleted} deleted (absent from the source)")
    if result.objects_moved:
        extra.append(f"{result.objects_moved} moved (deleted at the source once verified)")
    if result.status != "ok":
        extra.append(
            f"PARTIAL: {result.objects_failed} failed, {result.objects_changed} changed during "
            "the run (re-run to copy them)"
        )
    if extra:
        lines.append("  " + "; ".join(extra))
    if result.uris.get("report"):
        report = result.uris["report"]
        lines.append(f"  report: {report} (skyplane-ops report {result.transfer_id})")
    return lines + api.path_warnings(result.paths)
