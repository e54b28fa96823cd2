#!/usr/bin/env bash
# Optional cross-check of `cargo bench --bench e2e` with independent load generators:
# wrk (HTTP/1.1) and h2load (HTTP/2 cleartext with prior knowledge, and --h1).
# Not part of `cargo bench`. Needs: apt-get install -y wrk nghttp2-client
# Usage: benches/wrk/compare.sh [BRIDGE_BIN] [CHILD CMD...]
#   default bridge: $CARGO_TARGET_DIR/release/mcp-bridge (or target/release/mcp-bridge)
#   default child:  BRIDGE_BIN demo-server
# Only 127.0.0.1; each run is bounded by SECS (default 3) seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${CARGO_TARGET_DIR:-$here/../../target}"
bridge="${1:-$target/release/mcp-bridge}"
shift || true
if [ "$#" -gt 0 ]; then child=("$@"); else child=("$bridge" demo-server); fi
secs="${SECS:-3}"
port="${PORT:-18950}"
url="http://127.0.0.1:$port/mcp"
tmp="$(mktemp -d)"
"$bridge" serve --host 127.0.0.1 --port "$port" -- "${child[@]}" 2>"$tmp/bridge.log" &
bpid=$!
trap 'kill "$bpid" 2>/dev/null || true; wait "$bpid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
body() { # $1 = bytes of echo text
  python3 - "$1" <<'PY'
import sys
n = int(sys.argv[1]); a = "abcdefghijklmnopqrstuvwxyz0123456789 "
t = "".join(a[i % len(a)] for i in range(n))
sys.stdout.write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}' % t)
PY
}
hdrs=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream'
      -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo')
printf '%-8s %-7s %-6s %12s %10s %10s\n' tool payload conns 'req/s' 'p50' 'p99'
for bytes in 100 65536; do
  body "$bytes" >"$tmp/body-$bytes.json"
  for c in 1 16; do
    if command -v wrk >/dev/null; then
      out="$(ECHO_BYTES=$bytes wrk -t1 -c"$c" -d"${secs}s" -s "$here/echo.lua" "$url")"
      rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
      p50="$(awk '/latency p50/ {print $3 $4}' <<<"$out")"
      p99="$(awk '/latency p99/ {print $3 $4}' <<<"$out")"
      bad="$(awk '/non-200/ {print $3}' <<<"$out")"
      printf '%-8s %-7s %-6s %12s %10s %10s %s\n' wrk "$bytes" "$c" "$rps" "$p50" "$p99" "${bad:+non-200: $bad}"
    fi
    if command -v h2load >/dev/null; then
      for proto in h2c h1; do
        extra=(); [ "$proto" = h1 ] && extra=(--h1)
        out="$(h2load "${extra[@]}" -t1 -c"$c" -m1 -D "$secs" -d "$tmp/body-$bytes.json" "${hdrs[@]}" "$url" 2>&1)"
        rps="$(awk '/^finished in/ {print $4}' <<<"$out")"
        ok="$(awk '/^status codes/ {print $3}' <<<"$out")"
        mean="$(awk '/^time for request/ {print $6}' <<<"$out")"
        printf '%-8s %-7s %-6s %12s %10s %10s %s\n' "h2load-$proto" "$bytes" "$c" "$rps" "mean $mean" "-" "2xx: $ok"
      done
    fi
  done
done
