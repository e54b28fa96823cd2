#!/usr/bin/env bash
# Instructions the bridge executes per request, from valgrind's callgrind (no drift with machine
# noise, unlike req/s): `serve --demo` runs under callgrind (the demo child is not traced) while
# h2load sends N1 and then, in a second run, N2 identical 2026-07-28 `tools/call echo` requests
# (100-byte text, 16 HTTP/1.1 clients); (Ir(N2) - Ir(N1)) / (N2 - N1) removes start-up and
# shutdown. Needs valgrind and h2load (Debian: valgrind, nghttp2-client), curl, python3.
#
# Usage: benches/callgrind/ir-per-request.sh [BRIDGE_BIN] [N1] [N2]
#        (default: target/release/mcp-bridge 1000 3000)
set -euo pipefail
bin="${1:-target/release/mcp-bridge}"
n1="${2:-1000}"
n2="${3:-3000}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/body.json" <<'PY'
import json, sys
body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo",
        "arguments": {"text": "x" * 100}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}
open(sys.argv[1], "w").write(json.dumps(body, separators=(",", ":")))
PY
total_ir() { # N -> total Ir of the bridge process
  local n=$1 port out vp
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  out="$work/cg.$n"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve --demo --port "$port" \
    --log-level warn 2>"$work/vg.$n.log" &
  vp=$!
  for _ in $(seq 1 300); do curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break; sleep 0.2; done
  h2load --h1 -n "$n" -c 16 -m 1 -d "$work/body.json" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' \
    -H 'mcp-method: tools/call' -H 'mcp-name: echo' "http://127.0.0.1:$port/mcp" |
    grep -E "^status codes" >&2
  kill -INT "$vp"
  wait "$vp" || true
  sed -nE 's/^summary: ([0-9]+)/\1/p' "$out"
}
a=$(total_ir "$n1")
b=$(total_ir "$n2")
echo "Ir($n1)=$a Ir($n2)=$b per request: $(( (b - a) / (n2 - n1) ))"
