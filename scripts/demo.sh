#!/usr/bin/env bash
# `make demo`: the main job on the embedded default profile, with no cloud account.
set -euo pipefail
cd "$(dirname "$0")/.."
skyplane-ops plan --src azure:canadacentral --dst gcp:asia-northeast1 --volume-gb 100 \
  --min-throughput-gbps 10 --max-vms 4
