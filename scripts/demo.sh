#!/usr/bin/env bash
# `make demo`: the main job on the embedded default profile, with no cloud account.
# 1. Plan a transfer from the Skyplane paper on the default profile and print the plan next to
#    the direct path (and RON's best relay) with throughput, time and cost.
# 2. Run the example Airflow ETL DAG (examples/airflow_etl_dag.py) with `airflow dags test` on
#    the local backend: it writes a Parquet dataset, plans a route, provisions local gateway
#    processes (setup), replicates the data through them, deprovisions (teardown), reads the
#    replica back and checks it; the transfer summary is printed at the end.
# scripts/demo_cp.sh does the same replication from the CLI (`skyplane-ops cp`).
set -euo pipefail
cd "$(dirname "$0")/.."

banner() { printf '\n==== %s ====\n\n' "$*"; }

banner "Plan: Azure canadacentral -> GCP asia-northeast1, 100 GB, 1 VM per region, at least 12 Gbps"
skyplane-ops plan --src azure:canadacentral --dst gcp:asia-northeast1 --volume-gb 100 \
  --max-vms-per-region 1 --min-throughput-gbps 12

banner "Plan: Azure eastus -> AWS ap-northeast-1, 16 GB, up to 4 VMs per region, at most \$2.00"
skyplane-ops plan --src azure:eastus --dst aws:ap-northeast-1 --volume-gb 16 \
  --max-vms-per-region 4 --max-cost-usd 2 --mermaid

banner "Airflow: replicate a Parquet dataset through a planned route of local gateways"
bash scripts/demo_airflow.sh
