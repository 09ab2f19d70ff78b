#!/usr/bin/env bash
# Installs the non-Python parts the tests use: OpenSSH sshd (SSH bootstrap tests), iperf3 and
# rclone (benchmarks' reference points), iproute2 (netns testbed), PostgreSQL and Redis (the
# deployed Airflow/Dagster e2e tests run them as private processes, never as services) and
# Azurite (Azure Blob emulator, from npm into ./.cache/node, never globally). Idempotent and
# quiet when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v rclone >/dev/null 2>&1 || need+=(rclone)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)  # fake clouds enforce firewalls
# Debian keeps initdb/postgres under /usr/lib/postgresql/<version>/bin (skyplane_ops/testing/services.py)
command -v pg_ctl >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-test-tools: apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "install-test-tools: not root, cannot install ${need[*]}; tests needing them will skip" >&2
  fi
fi

AZURITE_DIR=.cache/node
if [ ! -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "install-test-tools: npm install azurite@3.35 into $AZURITE_DIR"
    mkdir -p "$AZURITE_DIR"
    npm install --silent --no-audit --no-fund --prefix "$AZURITE_DIR" azurite@3.35 >/dev/null
  else
    echo "install-test-tools: npm not found; Azure tests will skip" >&2
  fi
fi
