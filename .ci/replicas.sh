#!/usr/bin/env bash
# Replicas (issue 14): several `mcp-bridge serve --cluster-key-file F --advertise-url U` behind a
# real nginx doing plain round-robin (examples/nginx-replicas.conf, ports templated), with the
# official SDK clients, several at once.
#
# Two groups of 3 replicas, one nginx with a server block (port) per group:
#   L  serve --demo --demo-era legacy  (2025-era child): Python SDK clients pinned to 2026-07-28,
#      in auto mode (adopts 2026) and in legacy mode (2025 sessions): list + echo + elicit. A 2026
#      elicit parks the call on one replica (input_required + requestState); the SDK's retry lands
#      anywhere and must be forwarded to it. A 2025 session's POSTs, GET stream and DELETE land
#      anywhere and must be forwarded to the replica that minted the session.
#      2026 and 2025 elicit calls run at once: each replica's lone 2025 child takes one askable
#      caller at a time (new calls and resumed retries alike wait for the slot), so every
#      question reaches its own client.
#   M  serve --demo --demo-era modern  (2026-era child): TypeScript SDK 2025 sessions and Python
#      SDK legacy + 2026 clients: list + echo + elicit. For a 2025 session the bridge turns the
#      child's input_required into an elicitation/create on the call's SSE stream; the client's
#      answer is a POST that lands anywhere and must be forwarded to the owner.
# Scenarios:
#   steady        all clients of both groups at once; no error allowed; every call echoes a
#                 unique value and the clients check it (no misdelivery);
#   forwards      the replicas' metrics: mcp_bridge_cluster_forwards_total{outcome="ok"} summed
#                 per group > 0 (the run cannot pass without crossing replicas);
#   killed        a call parked on L2 and a session minted on M2 are used once through another
#                 replica (forwarded), then again after the kill: a JSON-RPC error for the retry,
#                 404 for the session. Meanwhile
#                 clients run sessions in a loop; one replica of each group gets SIGKILL; 2025
#                 clients that get 404 (or a broken stream) open a new session and carry on;
#                 errors are counted by kind; no misdelivery; every client ends healthy;
#   restarted     the killed replicas start again on the same ports and serve: /readyz, a direct
#                 2026 call, and another client round through nginx that reaches them.
#
# Usage:  bash .ci/replicas.sh       (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN        bridge binary (default: target/release/mcp-bridge)
#   INTEROP_PYTHON_VENV   venv holding mcp==2.3.0 (default: target/interop-python-venv, shared)
#   INTEROP_PYTHON        interpreter used to create the venv (default: python3)
#   INTEROP_NODE_DIR      npm prefix holding @modelcontextprotocol/sdk (default: target/interop-eras-node, shared)
#   NGINX                 nginx binary (default: nginx on PATH or /usr/sbin/nginx; installed
#                         with apt-get when missing and running as root)
#   REPLICAS_CLIENTS      clients per kind in the steady scenario (default 5)
#   REPLICAS_KILL_SECS    length of the killed scenario (default 12)
#   REPLICAS_KEEP=1       keep the temp dir (logs, nginx config) and print its path
#
# Output: the clients' FIGURES/PASS/FAIL lines, the script's own checks, a figures summary,
# then `N passed, M failed`. Exit 0 only if everything passed. Processes are always cleaned up.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" replicas || exit 2
# Floor only (not yet the measured total): at least one check ran. Raise it to a passing run's count.
ci_expect 1

PY_SDK_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
NODE_DIR="${INTEROP_NODE_DIR:-$REPO/target/interop-eras-node}"
CLIENTS="${REPLICAS_CLIENTS:-5}"
KILL_SECS="${REPLICAS_KILL_SECS:-12}"
PY_CLIENT="tests/interop/replicas_python_client.py"
TS_CLIENT="tests/interop/replicas_ts_client.mjs"
NGINX_EXAMPLE="examples/nginx-replicas.conf"

ci_check_bin "$BIN"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
for f in "$PY_CLIENT" "$TS_CLIENT" "$NGINX_EXAMPLE"; do [ -f "$f" ] || die "$f missing"; done
NODE="$(command -v node)" || die "node is required"
command -v npm >/dev/null || die "npm is required"
command -v curl >/dev/null || die "curl is required"

ok() { echo "PASS replicas $*"; ci_add 1 0; }
bad() { echo "FAIL replicas $*"; ci_add 0 1; }

# ---------------------------------------------------------------- nginx (Debian package)
find_nginx() {
  NGINX="${NGINX:-}"
  [ -n "$NGINX" ] && [ -x "$NGINX" ] && return 0
  NGINX="$(command -v nginx 2>/dev/null || true)"
  [ -z "$NGINX" ] && [ -x /usr/sbin/nginx ] && NGINX=/usr/sbin/nginx
  [ -n "$NGINX" ]
}
if ! find_nginx; then
  [ "$(id -u)" -eq 0 ] || die "nginx is required (apt-get install nginx-light), or set NGINX"
  log "installing nginx (Debian)"
  apt_nginx() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1 ||
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null 2>&1
  }
  apt_nginx || { apt-get update -qq >/dev/null 2>&1 && apt_nginx; } || die "apt-get install nginx failed"
  find_nginx || die "nginx not found after install"
fi
log "nginx: $NGINX ($("$NGINX" -v 2>&1 | sed 's/^nginx version: //'))"

# ---------------------------------------------------------------- SDKs (idempotent, shared)
ci_python_venv "$VENV" "$PY_SDK_VERSION" "$PY_BOOT"
if [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" != "$TS_SDK_VERSION" ]; then
  log "installing @modelcontextprotocol/sdk@$TS_SDK_VERSION into $NODE_DIR"
  ci_npm_install "$NODE_DIR" 2 "@modelcontextprotocol/sdk@$TS_SDK_VERSION" || die "npm install failed"
  [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" = "$TS_SDK_VERSION" ] || die "sdk not at $TS_SDK_VERSION"
fi
export INTEROP_NODE_MODULES="$NODE_DIR/node_modules"

# ---------------------------------------------------------------- processes and clean-up
WORK="$(mktemp -d -t mcpb-replicas.XXXXXX)" || die "mktemp failed"
declare -A RPID RPORT MPORT ERA
NGINX_PID=
CLIENT_PIDS=()
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
  local p k
  for p in "${CLIENT_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  ci_stop "$NGINX_PID" 50
  for k in "${!RPID[@]}"; do ci_stop "${RPID[$k]}" 50; done
  if [ "${REPLICAS_KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The shared key file: a current secret, a comment and an older one still accepted (rotation).
umask 077
KEY="$WORK/cluster.keys"
{
  echo "# mcp-bridge cluster keys: the first signs and seals, the others still open"
  "$PY" -c 'import secrets; print(secrets.token_hex(32))'
  echo
  echo "# previous key, kept for the grace period"
  "$PY" -c 'import secrets; print(secrets.token_hex(32))'
} >"$KEY"
chmod 0600 "$KEY"
umask 022

for g in L M; do
  for i in 1 2 3; do
    RPORT[$g$i]="$(ci_free_port "$PY")"
    MPORT[$g$i]="$(ci_free_port "$PY")"
  done
done
ERA[L]=legacy; ERA[M]=modern
NGINX_L="$(ci_free_port "$PY")"; NGINX_M="$(ci_free_port "$PY")"

# start_replica ID LOGFILE
start_replica() {
  local id="$1" logf="$2" g="${1:0:1}"
  "$BIN" serve --port "${RPORT[$id]}" --metrics-listen "127.0.0.1:${MPORT[$id]}" \
    --cluster-key-file "$KEY" --advertise-url "http://127.0.0.1:${RPORT[$id]}" \
    --shutdown-grace 2s --demo --demo-era "${ERA[$g]}" >"$logf" 2>&1 &
  RPID[$id]=$!
}
# wait_replica ID LOGFILE WANT_ERA: listening, child probed as WANT_ERA, /readyz 200
wait_replica() {
  local id="$1" logf="$2" want="$3" era i
  ci_bridge_up "${RPID[$id]}" "$logf" "${RPORT[$id]}"
  ci_wait_log "${RPID[$id]}" "$logf" 'child ready.*era="?[0-9]{4}'
  era="$(sed -nE 's/.*child ready.*era="?([0-9]{4})"?.*/\1/p' "$logf" | tail -n1)"
  [ "$era" = "$want" ] || { bad "$id child era: want $want, log says '${era:-nothing}'"; return 1; }
  for ((i = 0; i < 50; i++)); do
    curl -fsS -o /dev/null "http://127.0.0.1:${RPORT[$id]}/readyz" 2>/dev/null && return 0
    sleep 0.1
  done
  bad "$id /readyz not 200 on 127.0.0.1:${RPORT[$id]}"
  return 1
}

log "6 replicas (L: --demo-era legacy, M: --demo-era modern), key file $KEY (0600)"
for id in L1 L2 L3 M1 M2 M3; do start_replica "$id" "$WORK/$id.log"; done
up=0
for id in L1 L2 L3 M1 M2 M3; do
  want=2025; [ "${id:0:1}" = M ] && want=2026
  wait_replica "$id" "$WORK/$id.log" "$want" && up=$((up + 1))
done
if [ "$up" -eq 6 ]; then
  ok "start: 6 replicas listening, children probed (L 2025-era, M 2026-era), /readyz 200 on each"
else
  for id in L1 L2 L3 M1 M2 M3; do log "$id log:"; tail -n 20 "$WORK/$id.log" | sed 's/^/    /' >&2; done
  ci_result; exit 1
fi

# ---------------------------------------------------------------- nginx from the example
NDIR="$WORK/nginx"
mkdir -p "$NDIR/tmp" || die "mkdir $NDIR"
# render GROUP LISTEN_PORT: the example with this group's upstream name, ports and listen port
render() {
  local g="$1" lp="$2"
  sed -e "s/mcp_bridge_replicas/replicas_$g/g" \
    -e "s/127\.0\.0\.1:8081/127.0.0.1:${RPORT[${g}1]}/" \
    -e "s/127\.0\.0\.1:8082/127.0.0.1:${RPORT[${g}2]}/" \
    -e "s/127\.0\.0\.1:8083/127.0.0.1:${RPORT[${g}3]}/" \
    -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$lp;/" \
    "$NGINX_EXAMPLE" >"$NDIR/replicas-$g.conf"
  for want in "${RPORT[${g}1]}" "${RPORT[${g}2]}" "${RPORT[${g}3]}" "$lp"; do
    grep -q "127.0.0.1:${want}[; ]" "$NDIR/replicas-$g.conf" || die "templating $NGINX_EXAMPLE failed (port $want missing)"
  done
}
render L "$NGINX_L"
render M "$NGINX_M"
# Running as root (CI), nginx's workers would switch to `nobody` and could not use the temp dir.
user_line=""; [ "$(id -u)" -eq 0 ] && user_line="user root;"
cat >"$NDIR/nginx.conf" <<EOF
$user_line
worker_processes 2;
pid $NDIR/nginx.pid;
error_log $NDIR/error.log notice;
events { worker_connections 1024; }
http {
    log_format replicas '\$status \$remote_addr "\$request" upstream=\$upstream_addr rt=\$request_time';
    access_log $NDIR/access.log replicas;
    client_body_temp_path $NDIR/tmp/body;
    proxy_temp_path $NDIR/tmp/proxy;
    fastcgi_temp_path $NDIR/tmp/fastcgi;
    uwsgi_temp_path $NDIR/tmp/uwsgi;
    scgi_temp_path $NDIR/tmp/scgi;
    include $NDIR/replicas-L.conf;
    include $NDIR/replicas-M.conf;
}
EOF
"$NGINX" -t -p "$NDIR" -c "$NDIR/nginx.conf" -e "$NDIR/error.log" >"$NDIR/nginx-t.log" 2>&1 ||
  { sed 's/^/    /' "$NDIR/nginx-t.log" >&2; die "nginx -t failed"; }
"$NGINX" -p "$NDIR" -c "$NDIR/nginx.conf" -e "$NDIR/error.log" -g 'daemon off;' >"$NDIR/stdout.log" 2>&1 &
NGINX_PID=$!
if ci_wait_port "$NGINX_L" "$NGINX_PID" "$PY" && ci_wait_port "$NGINX_M" "$NGINX_PID" "$PY"; then
  ok "nginx: $NGINX_EXAMPLE templated, round-robin over 3 replicas per group on 127.0.0.1:$NGINX_L (L) and :$NGINX_M (M)"
else
  sed 's/^/    /' "$NDIR/error.log" >&2
  die "nginx did not start"
fi
URL_L="http://127.0.0.1:$NGINX_L/mcp"
URL_M="http://127.0.0.1:$NGINX_M/mcp"

# ---------------------------------------------------------------- helpers
# forwards GROUP OUTCOME: mcp_bridge_cluster_forwards_total{outcome=OUTCOME} summed over the group
forwards_of() {
  curl -fsS "http://127.0.0.1:${MPORT[$1]}/metrics" 2>/dev/null |
    awk -v o="outcome=\"$2\"" '/^mcp_bridge_cluster_forwards_total\{/ && index($0, o) { s += $NF } END { printf "%d\n", s }'
}
forwards() {
  local g="$1" o="$2" s=0 i n
  for i in 1 2 3; do n="$(forwards_of "$g$i" "$o")"; s=$((s + ${n:-0})); done
  echo "$s"
}
responses_of() { # HTTP responses a replica sent on route mcp (its metrics)
  curl -fsS "http://127.0.0.1:${MPORT[$1]}/metrics" 2>/dev/null |
    awk '/^mcp_bridge_http_responses_total\{/ && /route="mcp"/ { s += $NF } END { printf "%d\n", s }'
}
FIG=()
J=(-H 'content-type: application/json' -H 'accept: application/json, text/event-stream')
META26='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}'
# park_on PORT: a 2026 `elicit` parked on that replica (its 2025-era child asks); prints the requestState
park_on() {
  curl -sS "http://127.0.0.1:$1/mcp" "${J[@]}" -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' \
    -H 'mcp-name: elicit' --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"elicit\",\"arguments\":{\"message\":\"parked\"},$META26}}" |
    "$PY" -c 'import json,sys; r=json.load(sys.stdin)["result"]; assert r["resultType"]=="input_required"; print(r["requestState"])' 2>/dev/null
}
# retry_via URL STATE: the retry of a parked call; prints the JSON-RPC answer
retry_via() {
  curl -sS "$1" "${J[@]}" -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: elicit' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"elicit\",\"arguments\":{\"message\":\"parked\"},\"inputResponses\":{\"input1\":{\"action\":\"accept\",\"content\":{\"name\":\"Z\"}}},\"requestState\":\"$2\",$META26}}"
}
# session_on PORT: a 2025 session minted by that replica (initialized); prints its id
session_on() {
  local sid
  sid="$(curl -sS -D - -o /dev/null "http://127.0.0.1:$1/mcp" "${J[@]}" \
    --data '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ci","version":"1"}}}' |
    tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id" {print $2}')"
  curl -sS -o /dev/null "http://127.0.0.1:$1/mcp" "${J[@]}" -H "mcp-session-id: $sid" -H 'mcp-protocol-version: 2025-11-25' \
    --data '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  echo "$sid"
}
# session_echo URL SID TEXT: HTTP status and body of a tools/call echo in that session
session_echo() {
  curl -sS -w ' HTTP=%{http_code}' "$1" "${J[@]}" -H "mcp-session-id: $2" -H 'mcp-protocol-version: 2025-11-25' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"$3\"}}}"
}
# run_clients NAME CMD...: runs in the background; output to $WORK/NAME.out
run_clients() {
  local name="$1"; shift
  ( timeout 240 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; echo $? >"$WORK/$name.rc" ) &
  CLIENT_PIDS+=($!)
}
# collect NAME: counts the client's checks; shows its stderr tail on failure
collect() {
  local name="$1" rc out
  out="$(cat "$WORK/$name.out" 2>/dev/null)"
  rc="$(cat "$WORK/$name.rc" 2>/dev/null || echo 1)"
  ci_client_counts "$out" "$rc" || echo "FAIL replicas $name: no summary line (exit $rc)"
  ci_add "$CI_P" "$CI_F"
  while IFS= read -r l; do FIG+=("$name ${l#FIGURES }"); done < <(grep '^FIGURES ' "$WORK/$name.out" 2>/dev/null)
  if [ "$CI_F" -ne 0 ] && [ -s "$WORK/$name.err" ]; then
    log "$name stderr (last 40 lines):"; tail -n 40 "$WORK/$name.err" | sed 's/^/    /' >&2
  fi
}
wait_clients() { local p; for p in "${CLIENT_PIDS[@]}"; do wait "$p" 2>/dev/null; done; CLIENT_PIDS=(); }

# ---------------------------------------------------------------- steady: all clients at once
log "steady: $CLIENTS clients per kind, 3 rounds each (echo + elicit), both groups at once"
run_clients steady-L-py "$PY" "$PY_CLIENT" "$URL_L" --mode 2026,auto --clients "$CLIENTS" --rounds 3 --elicit --tag L
run_clients steady-M-ts "$NODE" "$TS_CLIENT" "$URL_M" --clients "$CLIENTS" --rounds 3 --elicit --tag M
run_clients steady-M-py "$PY" "$PY_CLIENT" "$URL_M" --mode legacy,2026 --clients "$CLIENTS" --rounds 3 --elicit --tag M
run_clients steady-L-py-legacy "$PY" "$PY_CLIENT" "$URL_L" --mode legacy --clients "$CLIENTS" --rounds 3 --elicit --tag L
wait_clients
for n in steady-L-py steady-M-ts steady-M-py steady-L-py-legacy; do collect "$n"; done

# ---------------------------------------------------------------- forwards happened
FWD_L="$(forwards L ok)"; FWD_M="$(forwards M ok)"
UNR_STEADY=$(( $(forwards L unreachable) + $(forwards M unreachable) ))
if [ "$FWD_L" -gt 0 ]; then ok "forwards L: mcp_bridge_cluster_forwards_total{outcome=\"ok\"} = $FWD_L over L1-L3"
else bad "forwards L: no forward counted (sum of outcome=\"ok\" = $FWD_L): the run did not cross replicas"; fi
if [ "$FWD_M" -gt 0 ]; then ok "forwards M: mcp_bridge_cluster_forwards_total{outcome=\"ok\"} = $FWD_M over M1-M3"
else bad "forwards M: no forward counted (sum of outcome=\"ok\" = $FWD_M): the run did not cross replicas"; fi
if [ "$UNR_STEADY" -eq 0 ]; then ok "forwards: none unreachable while every replica was up"
else bad "forwards: $UNR_STEADY unreachable while every replica was up"; fi
spread=""
for id in L1 L2 L3 M1 M2 M3; do spread+="$id=$(responses_of "$id") "; done
log "responses per replica (route mcp) after steady: $spread"

# ---------------------------------------------------------------- killed: SIGKILL mid-run
log "killed: clients loop for ${KILL_SECS}s; SIGKILL L2 and M2 after 4s"
run_clients killed-L-py "$PY" "$PY_CLIENT" "$URL_L" --mode 2026 --clients 3 --duration "$KILL_SECS" --pause 0.05 --elicit --reconnect --call-timeout 8 --tag Lk
run_clients killed-L-py-legacy "$PY" "$PY_CLIENT" "$URL_L" --mode legacy --clients 3 --duration "$KILL_SECS" --pause 0.05 --reconnect --call-timeout 8 --tag Lk
run_clients killed-M-ts "$NODE" "$TS_CLIENT" "$URL_M" --clients 4 --duration "$KILL_SECS" --pause 0.05 --elicit --reconnect --call-timeout 8 --tag Mk
run_clients killed-M-py "$PY" "$PY_CLIENT" "$URL_M" --mode legacy,2026 --clients 3 --duration "$KILL_SECS" --pause 0.05 --elicit --reconnect --call-timeout 8 --tag Mk
# Deterministic ones, besides the clients: a call parked on L2 and a session minted on M2, each
# used once through another replica while they live, and again after the kill.
STATE_L2="$(park_on "${RPORT[L2]}")"; STATE_L2b="$(park_on "${RPORT[L2]}")"
SID_M2="$(session_on "${RPORT[M2]}")"
r="$(retry_via "http://127.0.0.1:${RPORT[L1]}/mcp" "$STATE_L2")"
if grep -q '"elicited: action=accept content=' <<<"$r"; then ok "retry of a call parked on L2, sent to L1: forwarded and completed"
else bad "retry of a call parked on L2, sent to L1: $(head -c 300 <<<"$r")"; fi
r="$(session_echo "http://127.0.0.1:${RPORT[M3]}/mcp" "$SID_M2" m2-alive)"
if grep -q '"text":"m2-alive"' <<<"$r" && grep -q 'HTTP=200' <<<"$r"; then ok "session minted on M2, POST sent to M3: forwarded and answered"
else bad "session minted on M2, POST sent to M3: $(head -c 300 <<<"$r")"; fi
sleep 3
kill -9 "${RPID[L2]}" "${RPID[M2]}" 2>/dev/null
wait "${RPID[L2]}" 2>/dev/null; wait "${RPID[M2]}" 2>/dev/null
log "killed L2 (pid ${RPID[L2]}, port ${RPORT[L2]}) and M2 (pid ${RPID[M2]}, port ${RPORT[M2]})"
unset 'RPID[L2]' 'RPID[M2]'
r="$(retry_via "$URL_L" "$STATE_L2b")"
if grep -q '"error"' <<<"$r" && ! grep -q '"result"' <<<"$r"; then ok "retry of a call parked on L2 after its SIGKILL, through nginx: JSON-RPC error $(grep -o '"message":"[^"]*"' <<<"$r" | head -1)"
else bad "retry of a call parked on L2 after its SIGKILL, through nginx: want a JSON-RPC error, got $(head -c 300 <<<"$r")"; fi
r="$(session_echo "$URL_M" "$SID_M2" m2-dead)"
if grep -q 'HTTP=404' <<<"$r"; then ok "session of M2 after its SIGKILL, through nginx: 404 (the client initializes again)"
else bad "session of M2 after its SIGKILL, through nginx: want 404, got $(head -c 300 <<<"$r")"; fi
wait_clients
for n in killed-L-py killed-L-py-legacy killed-M-ts killed-M-py; do collect "$n"; done
UNR_L=$(( $(forwards_of L1 unreachable) + $(forwards_of L3 unreachable) ))
UNR_M=$(( $(forwards_of M1 unreachable) + $(forwards_of M3 unreachable) ))
n404=0
for n in killed-L-py killed-L-py-legacy killed-M-ts killed-M-py; do
  k="$(grep -o '"session_gone_404": *[0-9]*' "$WORK/$n.out" | awk -F: '{s += $2} END {print s + 0}')"
  n404=$((n404 + k))
done
if [ "$n404" -eq 0 ] || [ $((UNR_L + UNR_M)) -gt 0 ]; then
  ok "killed: $n404 session 404s; forwards to the dead replicas counted unreachable: L $UNR_L, M $UNR_M"
else
  bad "killed: $n404 session 404s but no forward counted unreachable (L $UNR_L, M $UNR_M)"
fi
for id in L1 L3 M1 M3; do
  kill -0 "${RPID[$id]}" 2>/dev/null || bad "killed: survivor $id exited"
done

# ---------------------------------------------------------------- restarted on the same ports
log "restarted: L2 on ${RPORT[L2]}, M2 on ${RPORT[M2]}"
restarted=0
for id in L2 M2; do
  start_replica "$id" "$WORK/$id.restart.log"
  want=2025; [ "${id:0:1}" = M ] && want=2026
  wait_replica "$id" "$WORK/$id.restart.log" "$want" && restarted=$((restarted + 1))
done
if [ "$restarted" -eq 2 ]; then
  ok "restarted: L2 and M2 listening again on their ports, /readyz 200"
fi
for id in L2 M2; do
  text="direct-$id-$RANDOM$RANDOM"
  body="$(curl -sS -X POST "http://127.0.0.1:${RPORT[$id]}/mcp" \
    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
    -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo' \
    --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"$text\"},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}" 2>&1)"
  if grep -q "\"text\":\"$text\"" <<<"$body"; then ok "restarted: $id answers a direct 2026 echo"
  else bad "restarted: $id direct 2026 echo: $(head -c 300 <<<"$body")"; fi
done
# nginx took them out for fail_timeout (5 s in the example) at their last refused connection;
# it tries them again with live requests after that.
sleep 6
before_L2="$(responses_of L2)"; before_M2="$(responses_of M2)"
run_clients after-L-py "$PY" "$PY_CLIENT" "$URL_L" --mode 2026 --clients 3 --rounds 3 --elicit --tag La
run_clients after-L-py-legacy "$PY" "$PY_CLIENT" "$URL_L" --mode legacy --clients 3 --rounds 3 --tag La
run_clients after-M-ts "$NODE" "$TS_CLIENT" "$URL_M" --clients 3 --rounds 3 --elicit --tag Ma
wait_clients
for n in after-L-py after-L-py-legacy after-M-ts; do collect "$n"; done
after_L2="$(responses_of L2)"; after_M2="$(responses_of M2)"
if [ "$after_L2" -gt "$before_L2" ] && [ "$after_M2" -gt "$before_M2" ]; then
  ok "restarted: nginx sends them work again (route mcp responses L2 $before_L2 -> $after_L2, M2 $before_M2 -> $after_M2)"
else
  bad "restarted: no traffic reached them through nginx (L2 $before_L2 -> $after_L2, M2 $before_M2 -> $after_M2)"
fi

# ---------------------------------------------------------------- figures
FWD_OK_ALL=0; FWD_UNR_ALL=0
echo "---- figures"
for f in "${FIG[@]}"; do echo "  $f"; done
for id in L1 L2 L3 M1 M2 M3; do
  o="$(forwards_of "$id" ok)"; u="$(forwards_of "$id" unreachable)"
  FWD_OK_ALL=$((FWD_OK_ALL + o)); FWD_UNR_ALL=$((FWD_UNR_ALL + u))
  echo "  forwards $id: ok=$o unreachable=$u (restarted replicas: since restart)"
done
echo "  forwards total: ok=$FWD_OK_ALL unreachable=$FWD_UNR_ALL (steady: L $FWD_L, M $FWD_M)"
echo "  nginx: $(wc -l <"$NDIR/access.log") requests; by status: $(awk '{print $1}' "$NDIR/access.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"

if [ "$CI_FAILED" -ne 0 ]; then
  for id in L1 L2 L3 M1 M2 M3; do
    for f in "$WORK/$id.log" "$WORK/$id.restart.log"; do
      [ -f "$f" ] || continue
      log "$(basename "$f") (warnings/errors, last 20):"
      grep -Ei 'warn|error' "$f" | tail -n 20 | sed 's/^/    /' >&2
    done
  done
  log "nginx error.log (last 20):"; tail -n 20 "$NDIR/error.log" | sed 's/^/    /' >&2
fi
ci_result
[ "$CI_FAILED" -eq 0 ] && exit 0
exit 1
