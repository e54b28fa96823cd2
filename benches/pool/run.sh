#!/usr/bin/env bash
# What a pool of children buys a CPU-bound, single-threaded stdio server (issue 13: "one child
# is one core"). For each pool size in POOL_SIZES, starts
#   mcp-bridge serve --pool-min N --pool-max N -- python3 benches/pool/cpu_server.py
# on a free port, then times (hyperfine, RUNS runs after a warm-up) CALLS concurrent 2026
# `tools/call spin` requests sent with curl. Prints hyperfine's table per size; quote medians
# and the ratio between sizes from one run (benches/RESULTS.md).
#
# Env: MCP_BRIDGE_BIN (default target/release/mcp-bridge), POOL_SIZES (default "1 2 4"),
#      CALLS (default 16), RUNS (default 10), SPIN_N (default 2000000, ~0.1 s of CPU per call).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
CALLS="${CALLS:-16}"
RUNS="${RUNS:-10}"
N="${SPIN_N:-2000000}"
command -v hyperfine >/dev/null || { echo "hyperfine is required (apt-get install hyperfine)" >&2; exit 2; }
for size in ${POOL_SIZES:-1 2 4}; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  log=$(mktemp)
  "$BIN" serve --port "$port" --pool-min "$size" --pool-max "$size" -- python3 benches/pool/cpu_server.py >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    sleep 0.1
  done
  echo "== pool of $size: $CALLS concurrent calls of spin(n=$N)"
  json=$(mktemp)
  hyperfine --style basic --warmup 1 --runs "$RUNS" --export-json "$json" \
    "bash benches/pool/burst.sh $port $CALLS $N"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("median %.3f s (min %.3f, max %.3f, %d runs)" % (r["median"], r["min"], r["max"], len(r["times"])))' "$json"
  rm -f "$json"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$log"
done
