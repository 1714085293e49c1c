#!/usr/bin/env bash
# Side-by-side drain of the `hare-outbox relay` daemon against txoutbox 0.2.2 (PyPI) and
# pg-transactional-outbox 0.5.7 (npm) on the same backlogs (scripts/bench/relay_peers.py).
# Installs both peers into a scratch folder (default ~/.cache/hare-outbox-peers), builds the
# release binary, and passes every argument on, e.g.:
#
#   scripts/bench_relay_peers.sh --rounds 3
#   scripts/bench_relay_peers.sh --workloads "20k/1 key" --systems hare,txoutbox-strict
#
#   HARE_OUTBOX_BENCH_PG_URL  server to use (default postgres://postgres@127.0.0.1:5432/test)
#   HARE_OUTBOX_PEERS_DIR     scratch folder for the peers
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hare-outbox-target}"
peers="${HARE_OUTBOX_PEERS_DIR:-$HOME/.cache/hare-outbox-peers}"
dsn="${HARE_OUTBOX_BENCH_PG_URL:-postgres://postgres@127.0.0.1:5432/test}"
mkdir -p "$peers"

if [ ! -x "$peers/venv/bin/python" ]; then
  python3 -m venv "$peers/venv"
fi
"$peers/venv/bin/python" -m pip install -q "txoutbox==0.2.2" "asyncpg==0.32.0"

if [ ! -d "$peers/node/node_modules/pg-transactional-outbox" ]; then
  mkdir -p "$peers/node"
  (cd "$peers/node" && npm init -y >/dev/null &&
    npm install --silent --no-audit --no-fund "pg-transactional-outbox@0.5.7" "pg@8")
fi

cargo build --release -q -p hare-outbox-cli

exec "$peers/venv/bin/python" scripts/bench/relay_peers.py \
  --dsn "$dsn" \
  --hare "$CARGO_TARGET_DIR/release/hare-outbox" \
  --python "$peers/venv/bin/python" \
  --node-dir "$peers/node" \
  "$@"
