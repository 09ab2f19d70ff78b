"""``skyplane-ops report TRANSFER_ID|URI``: what a transfer did to each object, summarised.

Every run writes a report (``--report-uri`` of ``cp``/``sync``, default
``$SKYPLANE_OPS_HOME/reports``): ``objects.parquet`` (one row per object) and
``summary.json``. This prints the summary and the first failed objects; ``--json`` prints the
summary as it is stored.
"""

from __future__ import annotations

import json

import click

from skyplane_ops import api
from skyplane_ops.commands.options import json_option

EPILOG = """
\b
Examples:
  skyplane-ops report cp-4877bbd37020
  skyplane-ops report s3://ops/reports/nightly-42/ --options '{"region": "eu-west-1"}'
  skyplane-ops report cp-4877bbd37020 --reports-uri s3://ops/reports --json
"""


@click.command(epilog=EPILOG)
@click.argument("what", metavar="TRANSFER_ID|URI")
@click.option(
    "--reports-uri",
    default=None,
    help="where reports are kept when TRANSFER_ID is given (the runs' --report-uri; "
    "default $SKYPLANE_OPS_HOME/reports)",
)
@click.option(
    "--options",
    "options_json",
    default=None,
    help="store options of the report's store as JSON (credentials come from the SDK chain)",
)
@click.option("--failed", default=10, show_default=True, help="failed objects to list")
@json_option("the summary")
def report(
    what: str, reports_uri: str | None, options_json: str | None, failed: int, as_json: bool
) -> None:
    """Print the reports of a transfer (one per run: a retry adds one): objects and bytes per
    outcome, and the first failed objects."""
    try:
        options = json.loads(options_json) if options_json else {}
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--options") from exc
    if not isinstance(options, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--options")
    summaries = [api.load_summary(u, options) for u in api.find_reports(what, reports_uri, options)]
    # Oldest first by the runs' own start times (a store's modification times have whole
    # seconds on S3: two runs in one second would come in the order of their job ids).
    summaries.sort(key=lambda s: (str(s.get("started") or ""), str(s.get("finished") or "")))
    if as_json:
        click.echo(json.dumps(summaries if len(summaries) > 1 else summaries[0], indent=2))
        return
    for summary in summaries:  # oldest first: a retry's report comes after the attempt's
        rows = api.failed_rows(summary, options, failed) if failed > 0 else []
        click.echo(api.summary_text(summary, rows))
