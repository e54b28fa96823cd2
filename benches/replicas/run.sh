#!/usr/bin/env bash
# Replicas throughput (issue 14): what a round-robin balancer and replica-to-replica forwarding
# cost. Starts 3 replicas of `mcp-bridge serve --demo` sharing a cluster key
# (--cluster-key-file, --advertise-url http://127.0.0.1:PORT each) and one nginx (from
# examples/nginx-replicas.conf, ports templated) with two upstreams: `one` (replica 1 only) and
# `three` (all 3, round-robin). Then wrk (RUNS runs of SECS seconds per cell, medians):
#
#   2026 stateless tools/call echo (benches/wrk/echo.lua, 100 B), never forwarded:
#     direct       replica 1 directly
#     nginx-1      nginx -> replica 1
#     nginx-3      nginx -> 3 replicas
#   2025 session tools/call echo (benches/replicas/session.lua), SESSIONS sessions minted on
#   replica 1:
#     direct       replica 1 directly (the owner: no forward)
#     nginx-1      nginx -> replica 1 (no forward)
#     nginx-3      nginx -> 3 replicas (2 in 3 requests forwarded to replica 1)
#     via-peer     replica 2 directly (every request forwarded to replica 1)
#
# Prints one table (req/s median, min-max, p50/p99 latency of the median run, non-2xx) and the
# forwards counted by the replicas. On a small machine everything shares the same cores (wrk,
# nginx, 3 bridges, 3 children): read nginx-3 as "cost of the hop", not as scaling.
#
# Env: MCP_BRIDGE_BIN (default target/release/mcp-bridge), NGINX (default nginx or
#      /usr/sbin/nginx), RUNS (5), SECS (3), CONNS (32), THREADS (2), SESSIONS (8).
# Needs: wrk (apt-get install wrk), nginx (apt-get install nginx-light), curl, python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
RUNS="${RUNS:-5}"
SECS="${SECS:-3}"
CONNS="${CONNS:-32}"
THREADS="${THREADS:-2}"
SESSIONS="${SESSIONS:-8}"
NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }
[ -x "$NGINX" ] || { echo "nginx is required (apt-get install nginx-light)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "bridge binary $BIN not found (cargo build --release)" >&2; exit 2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d -t mcpb-bench-replicas.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

(umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$work/keys")
ports=(); mports=()
for i in 0 1 2; do
  ports[i]="$(free_port)"; mports[i]="$(free_port)"
  "$BIN" serve --port "${ports[i]}" --metrics-listen "127.0.0.1:${mports[i]}" --demo \
    --cluster-key-file "$work/keys" --advertise-url "http://127.0.0.1:${ports[i]}" \
    --log-level warn 2>"$work/r$i.log" &
  pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:${ports[i]}/readyz" >/dev/null && break; sleep 0.1; done
  curl -fs "http://127.0.0.1:${ports[i]}/readyz" >/dev/null || { cat "$work/r$i.log" >&2; echo "replica $i not ready" >&2; exit 1; }
done

# nginx: the example's upstream/server block twice (one = replica 1 only, three = all).
np1="$(free_port)"; np3="$(free_port)"
mkdir -p "$work/nginx/tmp"
sed -e 's/mcp_bridge_replicas/three/g' -e "s/127\.0\.0\.1:8081/127.0.0.1:${ports[0]}/" \
  -e "s/127\.0\.0\.1:8082/127.0.0.1:${ports[1]}/" -e "s/127\.0\.0\.1:8083/127.0.0.1:${ports[2]}/" \
  -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$np3;/" examples/nginx-replicas.conf >"$work/nginx/three.conf"
sed -e 's/mcp_bridge_replicas/one/g' -e "s/127\.0\.0\.1:8081/127.0.0.1:${ports[0]}/" \
  -e '/127\.0\.0\.1:808[23]/d' \
  -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$np1;/" examples/nginx-replicas.conf >"$work/nginx/one.conf"
user_line=""; [ "$(id -u)" -eq 0 ] && user_line="user root;"
cat >"$work/nginx/nginx.conf" <<EOF
$user_line
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/tmp/body;
    proxy_temp_path $work/nginx/tmp/proxy;
    fastcgi_temp_path $work/nginx/tmp/fastcgi;
    uwsgi_temp_path $work/nginx/tmp/uwsgi;
    scgi_temp_path $work/nginx/tmp/scgi;
    include $work/nginx/one.conf;
    include $work/nginx/three.conf;
}
EOF
"$NGINX" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" -g 'daemon off;' &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$np3/readyz" && break; sleep 0.1; done

# 2025 sessions minted on replica 1.
sids=()
for _ in $(seq "$SESSIONS"); do
  sid="$(curl -fsS -D - -o /dev/null "http://127.0.0.1:${ports[0]}/mcp" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' \
    --data '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}' |
    tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id" {print $2}')"
  [ -n "$sid" ] || { echo "initialize on replica 1 gave no session id" >&2; exit 1; }
  curl -fsS -o /dev/null "http://127.0.0.1:${ports[0]}/mcp" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' -H "mcp-session-id: $sid" -H 'mcp-protocol-version: 2025-11-25' \
    --data '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  sids+=("$sid")
done
SIDS="$(IFS=,; echo "${sids[*]}")"
export SIDS ECHO_BYTES=100

forwards() {
  local s=0 i n
  for i in 0 1 2; do
    n="$(curl -fsS "http://127.0.0.1:${mports[i]}/metrics" |
      awk '/^mcp_bridge_cluster_forwards_total\{/ && /outcome="ok"/ { s += $NF } END { printf "%d\n", s }')"
    s=$((s + n))
  done
  echo "$s"
}

# cell NAME LUA URL: RUNS wrk runs; prints the row
cell() {
  local name="$1" lua="$2" url="$3" out f0 f1
  : >"$work/cell"
  f0="$(forwards)"
  wrk -t"$THREADS" -c"$CONNS" -d1s -s "$lua" "$url" >/dev/null 2>&1 || true   # warm-up
  for _ in $(seq "$RUNS"); do
    out="$(wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" -s "$lua" "$url")"
    printf '%s %s %s %s\n' "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
      "$(awk '/latency p50/ {print $3}' <<<"$out")" "$(awk '/latency p99/ {print $3}' <<<"$out")" \
      "$(awk '/non-200 responses/ {print $3}' <<<"$out")" >>"$work/cell"
  done
  f1="$(forwards)"
  python3 - "$name" "$work/cell" "$((f1 - f0))" <<'PY'
import statistics, sys
name, path, fwd = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [tuple(float(x) for x in l.split()) for l in open(path) if l.strip()]
rows.sort(key=lambda r: r[0])
med = rows[len(rows) // 2]
rps = [r[0] for r in rows]
bad = int(sum(r[3] for r in rows))
print(f"{name:<22} {statistics.median(rps):>10.0f} {min(rps):>8.0f}-{max(rps):<8.0f} {med[1]:>8.2f} {med[2]:>8.2f} {bad:>7} {fwd:>10}", flush=True)
PY
}

echo "replicas bench: $RUNS runs x ${SECS}s, wrk -t$THREADS -c$CONNS, $(nproc) cores, $SESSIONS sessions for 2025"
printf '%-22s %10s %17s %8s %8s %7s %10s\n' cell 'req/s med' 'min-max' 'p50 ms' 'p99 ms' non-2xx forwards
cell "2026 direct"      benches/wrk/echo.lua "http://127.0.0.1:${ports[0]}/mcp"
cell "2026 nginx-1"     benches/wrk/echo.lua "http://127.0.0.1:$np1/mcp"
cell "2026 nginx-3"     benches/wrk/echo.lua "http://127.0.0.1:$np3/mcp"
cell "2025 direct"      benches/replicas/session.lua "http://127.0.0.1:${ports[0]}/mcp"
cell "2025 nginx-1"     benches/replicas/session.lua "http://127.0.0.1:$np1/mcp"
cell "2025 nginx-3"     benches/replicas/session.lua "http://127.0.0.1:$np3/mcp"
cell "2025 via-peer"    benches/replicas/session.lua "http://127.0.0.1:${ports[1]}/mcp"
