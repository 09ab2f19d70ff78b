"""The transfer report: a record of every object a run considered, written where the user
asked (``TransferRequest.report_uri``, any store).

``<report_uri>/<transfer id>/<job id>/objects.parquet`` holds one row per object (``schema``): key,
size, source version and ETag, destination ETag, checksum and its kind, the plan paths it
took, its outcome (copied, skipped_up_to_date, skipped_by_rule, failed with the error,
deleted) and times; ``summary.json`` beside it counts them. Rows stream from the run's catalog
in row groups, so memory stays flat at millions of objects (``writer``). ``reader`` finds and
summarises a report for ``skyplane-ops report``.
"""

from skyplane_ops.transfer.report.reader import find_reports, load_summary, summary_text
from skyplane_ops.transfer.report.schema import OUTCOMES, arrow_schema
from skyplane_ops.transfer.report.writer import ReportRun, report_location, write_report

__all__ = [
    "OUTCOMES",
    "ReportRun",
    "arrow_schema",
    "find_reports",
    "load_summary",
    "report_location",
    "summary_text",
    "write_report",
]
