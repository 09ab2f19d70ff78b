"""The options ``skyplane-ops cp`` and ``skyplane-ops sync`` share, and their help epilogs.

A module of its own so that ``cp.py`` holds only what a run does.
"""

from __future__ import annotations

from typing import Any

import click

from skyplane_ops.commands.options import (
    DURATION,
    JSON_OBJECT,
    backend_option,
    backend_options_option,
    compose,
    deprecated_alias,
    dry_run_option,
    fleet_option,
    json_option,
    plan_options,
    store_options,
)

EXIT_STATUS = """
\b
Exit status: 0 done; 2 error (nothing lost: re-run to resume); 3 partial (some objects
failed or changed, the rest is verified: re-run to copy them); 130/143 interrupted by
SIGINT/SIGTERM (the gateways are torn down first).
"""


def selection_options() -> Any:
    """What to copy beyond globs, and when to overwrite (names as in the API and operators)."""
    return compose(
        click.option(
            "--max-age",
            type=DURATION,
            default=None,
            metavar="DURATION",
            help="copy only objects changed within DURATION before the run (90s, 30m, 2h, 3d, "
            "1w; a number is seconds), e.g. --max-age 1h",
        ),
        click.option(
            "--min-age",
            type=DURATION,
            default=None,
            metavar="DURATION",
            help="copy only objects unchanged for at least DURATION, e.g. --min-age 10m",
        ),
        click.option(
            "--changed-since",
            default=None,
            metavar="TIME",
            help="copy only objects changed at or after TIME (ISO 8601; no zone: UTC), "
            "e.g. 2026-01-31T00:00:00Z",
        ),
        click.option(
            "--changed-before",
            default=None,
            metavar="TIME",
            help="copy only objects changed before TIME (ISO 8601; no zone: UTC)",
        ),
        click.option(
            "--files-from",
            default=None,
            metavar="FILE|URI|-",
            help="copy only the keys listed (one per line, relative to SRC; # comments) in "
            "FILE, an object URI or standard input (-): each is looked up, nothing is listed",
        ),
        click.option(
            "--ignore-existing",
            is_flag=True,
            help="never replace an object that exists at DST",
        ),
        click.option(
            "--update",
            is_flag=True,
            help="skip objects that are newer at DST than at SRC",
        ),
    )


def transfer_options(verb: str) -> Any:
    """Every option ``cp`` and ``sync`` share, in the order ``--help`` shows them."""
    return compose(
        click.argument("src", metavar="SRC"),
        click.argument("dst", metavar="DST...", nargs=-1, required=True),
        click.option(
            "--src-region",
            required=True,
            metavar="REGION",
            help="region of the source, e.g. aws:us-east-1 (a local folder: the catalog "
            "region nearest to it)",
        ),
        click.option(
            "--dst-region",
            required=True,
            multiple=True,
            metavar="REGION",
            help="region of the destination; several DSTs: one --dst-region each, in order",
        ),
        store_options("src"),
        store_options("dst"),
        click.option(
            "--plan", "plan_file", metavar="FILE", help="use this plan JSON instead of planning"
        ),
        plan_options(),
        backend_option(default="local"),
        backend_options_option(),
        fleet_option(
            "run on this fleet (the JSON of skyplane-ops provision --output) instead of "
            "starting one; it is left running for the next run (skyplane-ops deprovision "
            "--fleet FILE ends it) and the plan uses only its regions and gateways"
        ),
        click.option(
            "--keep-warm",
            metavar="DURATION",
            default=None,
            help="park the fleet this long after the run (e.g. 15m) for the next run with the "
            "same regions to claim instead of booting; its idle time is in the cost summary",
        ),
        click.option(
            "--local-gateways-per-region",
            type=int,
            metavar="N",
            default=1,
            show_default=True,
            help="local backend only: gateway processes per region at most",
        ),
        click.option(
            "--connections-per-hop",
            "connections",
            type=int,
            default=None,
            metavar="N",
            help="TCP connections per hop, i.e. per pair of gateways on a path (per hop; "
            "default: the plan's). The per-VM cap is --max-connections-per-vm",
        ),
        deprecated_alias("--connections", "--connections-per-hop", "connections", type=int),
        click.option(
            "--chunk-mib",
            type=int,
            metavar="MIB",
            default=64,
            show_default=True,
            help="chunk and multipart part size, in MiB (1 to 1024: one wire frame)",
        ),
        click.option(
            "--include",
            multiple=True,
            metavar="GLOB",
            help="copy only keys matching GLOB (repeatable)",
        ),
        click.option(
            "--exclude", multiple=True, metavar="GLOB", help="skip keys matching GLOB (repeatable)"
        ),
        selection_options(),
        click.option(
            "--encrypt",
            type=click.Choice(["auto", "all", "none", "cross-cloud"]),
            is_flag=False,
            flag_value="all",
            default="auto",
            show_default=True,
            help="AES-GCM on hops that leave a network you own: between providers or regions, "
            "or to a public address (auto; cross-cloud is its old name), on every hop (all, "
            "what --encrypt alone means) or on none (none: clear frames, each chunk still "
            "authenticated by its tag)",
        ),
        click.option("--compress", is_flag=True, help="zstd on every hop"),
        click.option(
            "--bwlimit",
            default=None,
            metavar="RATE",
            help="cap the transfer at RATE per second, summed over all paths: a number with "
            "its unit (200Mbit, 1.5Gbit, 25MiB; a bare number is refused); the planner plans "
            "for it and the gateways enforce it. Change it while it runs: skyplane-ops "
            "bwlimit TRANSFER_ID RATE",
        ),
        click.option(
            "--no-metadata",
            "no_metadata",
            is_flag=True,
            help="copy bytes only: no content type/encoding, cache control, user metadata, tags "
            "or times (default: objects keep them, see docs/metadata.md)",
        ),
        click.option(
            "--metadata-set",
            "metadata_set",
            multiple=True,
            metavar="KEY=VALUE",
            help="add or override metadata on every object (repeatable; content-type, "
            "content-encoding, cache-control... set the property, other keys user metadata)",
        ),
        click.option(
            "--storage-class",
            default=None,
            metavar="CLASS",
            help="destination storage class / access tier (S3 STANDARD_IA, GLACIER_IR...; GCS "
            "NEARLINE...; Azure Cool...): the destination option storage_class",
        ),
        click.option(
            "--kms-key",
            default=None,
            metavar="KEY",
            help="encrypt at the destination with this key: S3 kms_key_id (SSE-KMS), GCS "
            "kms_key_name (CMEK), Azure encryption_scope",
        ),
        click.option(
            "-L",
            "--copy-links",
            "copy_links",
            is_flag=True,
            help="local source: follow symbolic links (default: skip them with a warning)",
        ),
        click.option(
            "-l",
            "--links",
            "store_links",
            is_flag=True,
            help="local stores: copy symbolic links as NAME.rclonelink objects (and back)",
        ),
        click.option(
            "--verify",
            type=click.Choice(["full", "read-back", "size"]),
            default="full",
            show_default=True,
            help="end check of every object: full (size + CRC32C from the store's checksum or "
            "a checked write, else read back), read-back (read back whatever the store has no "
            "checksum for) or size only",
        ),
        click.option(
            "--journal-dir", metavar="DIR", default=None, help="where resume journals live"
        ),
        click.option(
            "--report-uri",
            metavar="URI",
            default=None,
            help="folder (any store) the transfer report goes to: <URI>/<transfer id>/"
            "objects.parquet and summary.json (default $SKYPLANE_OPS_HOME/reports)",
        ),
        click.option(
            "--report-options",
            type=JSON_OBJECT,
            default=None,
            help="store options of --report-uri, as --dst-options",
        ),
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            default=None,
            help="serve Prometheus metrics of the run on this port while it runs (0: any free "
            "port, printed on stderr): bytes, objects and chunks by outcome, per-path Gbit/s, "
            "retries, each gateway's byte-budget use",
        ),
        click.option(
            "--metrics-addr",
            default="127.0.0.1",
            show_default=True,
            help="address the metrics server binds to",
        ),
        click.option(
            "--metrics-textfile",
            metavar="FILE",
            default=None,
            help="write the run's final metrics to FILE (node_exporter textfile collector)",
        ),
        click.option(
            "--wait-lock",
            is_flag=True,
            help="wait for another run of the same transfer instead of stopping",
        ),
        dry_run_option(f"list what {verb} would copy (and delete) without starting anything"),
        json_option("the result (and progress events on stderr)"),
        click.option(
            "--no-progress", is_flag=True, help="print no progress on stderr, only the summary"
        ),
        # Tests only: JSON {region-or-gateway-id: hooks}; local gateways then honour them.
        click.option("--gateway-test-hooks", default=None, hidden=True),
    )


CP_EPILOG = (
    """
\b
Examples:
  skyplane-ops cp ./data s3://bucket/data --src-region aws:us-east-1 --dst-region aws:eu-west-1 \\
      --dst-options '{"endpoint_url": "http://127.0.0.1:9000"}'
  skyplane-ops cp s3://a/x gs://b/x --src-region aws:us-east-1 --dst-region gcp:us-central1 \\
      --min-throughput-gbps 10 --max-vms-per-region 4
  skyplane-ops cp s3://a/x ./copy --src-region aws:us-east-1 --dst-region aws:us-east-1 --dry-run
  skyplane-ops provision --vms aws:us-east-1=1 --vms aws:eu-west-1=1 --output fleet.json
  skyplane-ops cp s3://a/x s3://b/x --src-region aws:us-east-1 --dst-region aws:eu-west-1 \\
      --fleet fleet.json   # again and again; then: skyplane-ops deprovision --fleet fleet.json
"""
    + EXIT_STATUS
)
SYNC_EPILOG = (
    """
\b
Examples:
  skyplane-ops sync ./site az://web/site --src-region azure:northeurope \\
      --dst-region azure:westeurope
  skyplane-ops sync s3://a/x s3://b/x --src-region aws:us-east-1 --dst-region aws:eu-west-1 \\
      --delete --max-delete 100 --dry-run
"""
    + EXIT_STATUS
)
MV_EPILOG = (
    """
\b
Examples:
  skyplane-ops mv s3://landing/in s3://lake/raw --src-region aws:us-east-1 \\
      --dst-region aws:eu-west-1 --min-age 10m --max-delete 5000
  skyplane-ops mv ./outbox s3://bucket/inbox --src-region aws:us-east-1 \\
      --dst-region aws:us-east-1 --files-from done.txt --dry-run
"""
    + EXIT_STATUS
)
