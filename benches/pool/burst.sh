#!/usr/bin/env bash
# One burst for benches/pool/run.sh: CALLS concurrent 2026 `tools/call spin(n=N)` to PORT;
# fails if any call fails.
set -euo pipefail
port=$1 calls=$2 n=$3
body="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"spin\",\"arguments\":{\"n\":$n},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}"
one() {
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/mcp" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: spin' \
    --data "$body"
}
pids=()
for _ in $(seq "$calls"); do one & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
