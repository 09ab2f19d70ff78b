#!/usr/bin/env bash
# The CLI data-plane demo: replicate a generated dataset between two local "regions" along a
# planned route through local gateway processes (`skyplane-ops cp`), and check the replica.
set -euo pipefail
cd "$(dirname "$0")/.."

banner() { printf '\n==== %s ====\n\n' "$*"; }

banner "Replicate a sample dataset azure:canadacentral -> gcp:asia-northeast1 through local gateways"
DEMO_DIR="$(mktemp -d "${TMPDIR:-/tmp}/skyplane-demo.XXXXXX")"
trap 'rm -rf "$DEMO_DIR"' EXIT
python - "$DEMO_DIR/src" <<'PY'
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "events"), exist_ok=True)
for i in range(4):  # a few large objects: split into parts, sent over parallel connections
    with open(os.path.join(root, f"part-{i:02d}.parquet"), "wb") as fh:
        fh.write(os.urandom(24 * 1024 * 1024))
for i in range(2000):  # many tiny objects: batched into a few chunks
    with open(os.path.join(root, "events", f"{i:05d}.json"), "wb") as fh:
        fh.write(b'{"event": %d, "pad": "%s"}' % (i, os.urandom(1500).hex().encode()))
print(f"generated {root}: 4 x 24 MiB + 2000 small files")
PY
mkdir -p "$DEMO_DIR/dst"
skyplane-ops cp "file://$DEMO_DIR/src" "file://$DEMO_DIR/dst" \
  --src-region azure:canadacentral --dst-region gcp:asia-northeast1 --max-vms-per-region 1 \
  --min-throughput-gbps 12 --chunk-mib 8 --journal-dir "$DEMO_DIR/journal"
diff -r "$DEMO_DIR/src" "$DEMO_DIR/dst" && echo "destination is byte-for-byte identical to the source"
