#!/usr/bin/env bash
# `make demo`: the main job on the embedded default profile, with no cloud account.
# For now: plan two transfers from the Skyplane paper on the default profile and print each
# plan next to the direct path (and RON's best relay) with throughput, time and cost.
set -euo pipefail
cd "$(dirname "$0")/.."

banner() { printf '\n==== %s ====\n\n' "$*"; }

banner "Azure canadacentral -> GCP asia-northeast1, 100 GB, 1 VM per region, at least 12 Gbps"
skyplane-ops plan --src azure:canadacentral --dst gcp:asia-northeast1 --volume-gb 100 \
  --max-vms 1 --min-throughput-gbps 12

banner "Azure eastus -> AWS ap-northeast-1, 16 GB, up to 4 VMs per region, at most \$2.00"
skyplane-ops plan --src azure:eastus --dst aws:ap-northeast-1 --volume-gb 16 \
  --max-vms 4 --max-cost-usd 2 --mermaid
