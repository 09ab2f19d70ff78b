"""Find and summarise a transfer report (``skyplane-ops report TRANSFER_ID|URI``)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gateway_agent.stores import open_store
from gateway_agent.stores.errors import ObjectNotFoundError, StoreError
from skyplane_ops.errors import TransferError
from skyplane_ops.transfer.report import schema as S
from skyplane_ops.transfer.report.writer import _default_home
from skyplane_ops.transfer.request import to_uri


def find_reports(
    what: str, reports_uri: str | None = None, options: Mapping[str, Any] | None = None
) -> list[str]:
    """The summary URIs ``what`` names, oldest first: a summary's URI, a folder's (every
    report under it), or a transfer id (its runs' reports under ``reports_uri``, default
    ``$SKYPLANE_OPS_HOME/reports``). A one-line ``TransferError`` when there is none."""
    if what.endswith(S.SUMMARY):
        return [to_uri(what)]
    if "://" in what or "/" in what:
        folder = to_uri(what).rstrip("/")
    else:
        base = reports_uri or to_uri(str(_default_home() / "reports"))
        folder = f"{to_uri(base).rstrip('/')}/{what}"
    try:
        found = sorted(
            (info.modified.timestamp() if info.modified else 0.0, info.key)
            for info in open_store(folder, dict(options or {})).list()
            if info.key.endswith(S.SUMMARY)
        )
    except ObjectNotFoundError:
        found = []
    except (StoreError, ValueError, OSError) as exc:
        raise TransferError(f"cannot list transfer reports at {folder}: {exc}") from exc
    if not found:
        raise TransferError(f"no transfer report at {folder}")
    return [f"{folder}/{key}" for _, key in found]


def _split(uri: str) -> tuple[str, str]:
    folder, _, name = uri.rpartition("/")
    return folder, name


def load_summary(uri: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary JSON at ``uri``; a one-line ``TransferError`` when there is none."""
    folder, name = _split(uri)
    try:
        data = open_store(folder, dict(options or {})).read(name)
    except ObjectNotFoundError as exc:
        raise TransferError(f"no transfer report at {uri}") from exc
    except (StoreError, ValueError, OSError) as exc:
        raise TransferError(f"cannot read the transfer report {uri}: {exc}") from exc
    try:
        summary = json.loads(data)
    except ValueError as exc:
        raise TransferError(f"{uri} is not a transfer report: {exc}") from exc
    if not isinstance(summary, dict) or "outcomes" not in summary:
        raise TransferError(f"{uri} is not a transfer report")
    return summary


def failed_rows(
    summary: Mapping[str, Any], options: Mapping[str, Any] | None = None, limit: int = 10
) -> list[tuple[str, str]]:
    """Up to ``limit`` (key, error) of the failed objects, read a row group at a time."""
    if not summary.get("objects_uri"):  # an up-to-date run: counted, no rows
        return []
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder, name = _split(str(summary["objects_uri"]))
    data = open_store(folder, dict(options or {})).read(name)
    out: list[tuple[str, str]] = []
    parquet = pq.ParquetFile(io.BytesIO(data))
    for i in range(parquet.num_row_groups):
        table = parquet.read_row_group(i, columns=["key", "outcome", "error"])
        failed = table.filter(pc.equal(table["outcome"].cast("string"), S.FAILED))
        out += list(zip(failed["key"].to_pylist(), failed["error"].to_pylist(), strict=True))
        if len(out) >= limit:
            break
    return out[:limit]


def summary_text(summary: Mapping[str, Any], failed: Sequence[tuple[str, str]] = ()) -> str:
    """A few lines for a person: the run, then objects and bytes per outcome."""
    lines = [
        f"transfer {summary['transfer_id']} ({summary['job_id']}): {summary['status']}, "
        f"{summary['src_uri']} -> {summary['dst_uri']}",
        f"  {summary['started']} .. {summary['finished']}, {summary['seconds']} s, "
        f"{summary['gbps']} Gbit/s, verification {summary.get('verification') or 'n/a'}",
    ]
    for outcome in S.OUTCOMES:
        tally = summary["outcomes"].get(outcome, {})
        if tally.get("objects"):
            lines.append(f"  {outcome:<20} {tally['objects']:>10,} objects {tally['bytes']:>16,} B")
    if summary.get("up_to_date_unlisted"):
        lines.append(
            f"  {'up to date (unlisted)':<20} {summary['up_to_date_unlisted']:>10,} objects"
        )
    for key, error in failed:
        lines.append(f"  failed: {key}: {error}")
    if summary.get("objects_uri"):
        lines.append(f"  every object: {summary['objects_uri']} (Parquet; pyarrow or DuckDB)")
    else:
        lines.append("  every object was up to date: counted, not listed (no per-object rows)")
    return "\n".join(lines)
