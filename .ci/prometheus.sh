#!/usr/bin/env bash
# Proof with the real thing: a real Prometheus (Debian package `prometheus`) scrapes
# `mcp-bridge serve --demo` every second on loopback while a scripted workload runs; the exact
# counts are then read back through Prometheus' HTTP query API. Then the same for
# `mcp-bridge connect` in front of that serve (a host script on its stdin), including the
# remote going away (a transport failure) and coming back wanting another token (an HTTP 401).
# Also runs `promtool check metrics` on a scrape of each, and evaluates every query of the
# Grafana dashboard and the README (at least PROMQL_QUERIES_EXPECTED of them must be extracted).
# Expects CI_EXPECT checks (below); fewer is a failure. Ends with one line: "N passed, M failed".
#
# Uses $MCP_BRIDGE_BIN when set, else builds a debug binary. Needs curl and jq.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" prometheus || exit 2
cd "$(dirname "$0")/.." || exit 2
# One per ok/bad pair below: serve 3 + 21 `expect`s, connect 3 + 22 `expect`s, then connect's
# stdout, the token, the query count and the queries. Raise it when a check is added.
CI_EXPECT=53
# The dashboard's 23 panel queries and the README's 7 promql examples: raise it when adding one.
PROMQL_QUERIES_EXPECTED=30
ci_expect "$CI_EXPECT"

ok() { echo "ok   $*"; ci_add 1 0; }
bad() { echo "FAIL $*"; ci_add 0 1; }
finish() { ci_result; exit $((CI_FAILED > 0)); }
# Dashboard variables, as Grafana would substitute them.
grafana_vars() { sed 's/\$server/.*/g; s/\$__rate_interval/1m/g'; }

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null
fi
command -v prometheus >/dev/null || { bad "prometheus is not installed"; finish; }
for t in curl jq; do command -v $t >/dev/null || { bad "$t is not installed"; finish; }; done

bin="${MCP_BRIDGE_BIN:-}"
if [ -z "$bin" ]; then
  cargo build -q || { bad "cargo build"; finish; }
  bin="${CARGO_TARGET_DIR:-target}/debug/mcp-bridge"
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Bearer auth on, so that one unauthenticated request can be counted as a 401.
token="ci-$RANDOM$RANDOM"
MB_CI_TOKENS="ci:$token" "$bin" serve --demo --port 0 --metrics-listen 127.0.0.1:0 \
  --auth bearer --token-env MB_CI_TOKENS 2>"$work/bridge.log" &
pids+=($!)
ci_wait_log "${pids[-1]}" "$work/bridge.log" "metrics on http://" 100 0.1 &&
  ci_wait_log "${pids[-1]}" "$work/bridge.log" "child ready" 100 0.1
mcp=$(sed -nE 's/.*listening on (http:\/\/[^ ]+).*/\1/p' "$work/bridge.log" | head -1)
maddr=$(sed -nE 's/.*metrics on http:\/\/([^/ ]+)\/metrics.*/\1/p' "$work/bridge.log" | head -1)
[ -n "$mcp" ] && [ -n "$maddr" ] || { bad "bridge did not start"; cat "$work/bridge.log"; finish; }

pport=$(ci_free_port python3)
cport=$(ci_free_port python3) # connect's metrics, scraped once connect runs (later)
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mcp-bridge
    static_configs:
      - targets: ["$maddr"]
  - job_name: mcp-bridge-connect
    static_configs:
      - targets: ["127.0.0.1:$cport"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$pport/api/v1/query"

query() { # the first sample's value, or "absent"
  curl -sG --max-time 5 --data-urlencode "query=$1" "$api" | jq -r '.data.result[0].value[1] // "absent"' 2>/dev/null || echo absent
}

wait_up() { # wait_up JOB: until Prometheus has scraped JOB (bounded); prints up
  local up=absent
  for _ in $(seq 60); do up=$(query "up{job=\"$1\"}"); [ "$up" = 1 ] && break; sleep 0.5; done
  echo "$up"
}
up=$(wait_up mcp-bridge)
[ "$up" = 1 ] && ok "Prometheus scrapes the bridge" || { bad "Prometheus never scraped the bridge (up=$up)"; tail -20 "$work/prometheus.log"; finish; }

# promtool's linter on what the bridge exposes: no output at all is the pass.
lint=$(curl -s "http://$maddr/metrics" | promtool check metrics 2>&1)
[ -z "$lint" ] && ok "promtool check metrics reports nothing" || bad "promtool check metrics: $lint"

call() { # call TOOL ARGS [extra curl args…]: a 2026 tools/call; prints the HTTP status
  # (set NAME to send an Mcp-Name header other than TOOL)
  local tool=$1 args=$2; shift 2
  local body="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"$tool\",\"arguments\":$args,\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}"
  curl -s -o /dev/null -w '%{http_code}' -X POST "$mcp" -H "Authorization: Bearer ${TOKEN-$token}" \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H "Mcp-Name: ${NAME:-$tool}" \
    "$@" --data "$body"
}

# The workload.
statuses=""
for i in 1 2 3 4 5; do statuses+="$(call echo '{"text":"hi"}') "; done
for i in 1 2 3; do statuses+="$(call fail '{}') "; done
for i in 1 2; do statuses+="$(call error '{"code":-32050}') "; done
statuses+="$(NAME=add call echo '{"text":"hi"}') "   # header mismatch → 400
call slow '{"seconds":30,"steps":0}' --max-time 0.5 >/dev/null  # hang up → cancellation
statuses+="$(TOKEN=wrong call echo '{"text":"hi"}') "          # unauthenticated → 401
[ "$statuses" = "200 200 200 200 200 200 200 200 200 200 400 401 " ] && ok "workload answered as expected" \
  || bad "workload statuses: $statuses"

expect() { # expect QUERY VALUE: poll (bounded) until Prometheus has the value
  local q=$1 want=$2 got=absent
  for _ in $(seq 40); do
    got=$(query "$q")
    [ "$got" = "$want" ] && { ok "$q == $want"; return; }
    sleep 0.5
  done
  bad "$q: want $want, got $got"
}

# serve (job mcp-bridge): connect's series (job mcp-bridge-connect) come later.
expect 'mcp_bridge_tool_results_total{job="mcp-bridge",tool="echo",is_error="false"}' 5
expect 'mcp_bridge_tool_results_total{job="mcp-bridge",tool="fail",is_error="true"}' 3
expect 'sum(mcp_bridge_tool_results_total{job="mcp-bridge",is_error="true"})' 3
expect 'sum(mcp_bridge_jsonrpc_errors_total{job="mcp-bridge",source="upstream",method="tools/call",code="-32050"})' 2
expect 'sum(mcp_bridge_jsonrpc_errors_total{job="mcp-bridge",source="bridge",code="-32020"})' 1
expect 'sum(mcp_bridge_jsonrpc_errors_total{job="mcp-bridge",source="bridge"})' 1
expect 'sum(mcp_bridge_jsonrpc_requests_total{job="mcp-bridge",method="tools/call"})' 12
expect 'mcp_bridge_http_responses_total{job="mcp-bridge",route="mcp",method="POST",status="400"}' 1
expect 'mcp_bridge_http_responses_total{job="mcp-bridge",route="mcp",method="POST",status="200"}' 10
expect 'mcp_bridge_http_responses_total{job="mcp-bridge",route="mcp",method="POST",status="401"}' 1
expect 'sum(mcp_bridge_auth_failures_total{job="mcp-bridge"})' 1
expect 'mcp_bridge_cancellations_total{job="mcp-bridge",cause="client_disconnect"}' 1
expect 'sum(mcp_bridge_cancellations_total{job="mcp-bridge"})' 1
expect 'sum(mcp_bridge_request_duration_seconds_count{job="mcp-bridge",method="tools/call"})' 10
expect 'mcp_bridge_calls_in_flight{job="mcp-bridge"}' 0
expect 'mcp_bridge_upstream_up{job="mcp-bridge",server="default"}' 1
expect 'mcp_bridge_child_starts_total{job="mcp-bridge",server="default"}' 1
expect 'count(mcp_bridge_build_info{job="mcp-bridge"} == 1)' 1
expect 'count(process_resident_memory_bytes{job="mcp-bridge"} > 0)' 1
expect 'count(process_open_fds{job="mcp-bridge"} > 0)' 1
# The README's error-ratio PromQL, on raw counters: 3 JSON-RPC errors in 12 requests.
expect 'sum(mcp_bridge_jsonrpc_errors_total{job="mcp-bridge"}) / sum(mcp_bridge_jsonrpc_requests_total{job="mcp-bridge"})' 0.25

# connect (job mcp-bridge-connect): a host script on connect's stdin, through the serve above.
mkfifo "$work/host.in" || { bad "mkfifo"; finish; }
MB_CI_TOKEN="$token" "$bin" connect "$mcp" --name ci-connect --metrics-listen "127.0.0.1:$cport" \
  --bearer-token-env MB_CI_TOKEN <"$work/host.in" >"$work/host.out" 2>"$work/connect.log" &
pids+=($!)
cpid=$!
exec 3>"$work/host.in" # connect's stdin, open until the end of the script
ci_wait_log "$cpid" "$work/connect.log" "metrics on http://" 100 0.1 ||
  { bad "connect did not start"; cat "$work/connect.log"; finish; }
up=$(wait_up mcp-bridge-connect)
[ "$up" = 1 ] && ok "Prometheus scrapes connect" || { bad "Prometheus never scraped connect (up=$up)"; finish; }
lint=$(curl -s "http://127.0.0.1:$cport/metrics" | promtool check metrics 2>&1)
[ -z "$lint" ] && ok "promtool check metrics reports nothing (connect)" || bad "promtool check metrics (connect): $lint"

meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
answer() { # answer ID: connect's answer to request ID (bounded wait), one JSON line
  local a=""
  for _ in $(seq 100); do
    a=$(jq -c --argjson id "$1" 'select(.id == $id and .method == null)' "$work/host.out" 2>/dev/null | head -1)
    [ -n "$a" ] && break
    sleep 0.1
  done
  echo "${a:-none}"
}
host() { # host ID METHOD PARAMS: a 2026 request on connect's stdin; prints its answer
  echo "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"$2\",\"params\":$3}" >&3
  answer "$1"
}
tool() { # tool ID NAME ARGS [EXTRA_META]: a tools/call; prints .result.isError, or the error's code and reason
  host "$1" tools/call "{\"name\":\"$2\",\"arguments\":$3,\"_meta\":{${4:+$4,}${meta#\"_meta\":\{}}" |
    jq -r 'if .result then "ok:\(.result.isError // false)" else "err:\(.error.code):\(.error.data.reason // "")" end' 2>/dev/null
}

got=""
got+="$(host 1 tools/list "{$meta}" | jq -r '.result.tools | length > 0') "
for i in 2 3 4 5; do got+="$(tool $i echo '{"text":"hi"}') "; done
for i in 6 7; do got+="$(tool $i fail '{}') "; done
got+="$(tool 8 error '{"code":-32050}') "
got+="$(host 9 ping '{}' | jq -c .result) "
got+="$(tool 10 echo '{"text":"hi"}' '"io.modelcontextprotocol/logLevel":"loud"') " # refused by connect
# A call the host cancels once its first progress arrived.
echo "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\",\"arguments\":{\"seconds\":30,\"steps\":300},\"_meta\":{\"progressToken\":\"p11\",${meta#\"_meta\":\{}}}" >&3
ci_wait_log "$cpid" "$work/host.out" '"progressToken":"p11"' 100 0.1 && got+="progress "
cancels=$(grep -c "demo: cancelled id=" "$work/bridge.log")
echo '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11}}' >&3
for _ in $(seq 100); do # the remote saw it too
  [ "$(grep -c "demo: cancelled id=" "$work/bridge.log")" -gt "$cancels" ] && { got+="cancelled "; break; }
  sleep 0.1
done
# The remote goes away (a transport failure), then comes back wanting another token (HTTP 401).
ci_stop "${pids[0]}"
got+="$(tool 12 echo '{"text":"hi"}') "
sport=${mcp#http://127.0.0.1:}; sport=${sport%%/*}
MB_CI_TOKENS="ci:other-$RANDOM$RANDOM" "$bin" serve --demo --port "$sport" --auth bearer \
  --token-env MB_CI_TOKENS 2>"$work/bridge2.log" &
pids+=($!)
ci_wait_log "${pids[-1]}" "$work/bridge2.log" "child ready" 100 0.1 || { bad "serve did not restart"; cat "$work/bridge2.log"; }
got+="$(tool 13 echo '{"text":"hi"}') "
want="true ok:false ok:false ok:false ok:false ok:true ok:true err:-32050: {} err:-32602: progress cancelled err:-32000:unreachable err:-32000:unauthorized "
[ "$got" = "$want" ] && ok "connect workload answered as expected" || bad "connect workload: got '$got', want '$want'"

c='job="mcp-bridge-connect",server="ci-connect"'
expect "mcp_bridge_tool_results_total{$c,tool=\"echo\",is_error=\"false\"}" 4
expect "mcp_bridge_tool_results_total{$c,tool=\"fail\",is_error=\"true\"}" 2
expect "count(mcp_bridge_tool_results_total{$c})" 2
expect "mcp_bridge_jsonrpc_errors_total{$c,source=\"upstream\",method=\"tools/call\",code=\"-32050\"}" 1
expect "mcp_bridge_jsonrpc_errors_total{$c,source=\"bridge\",method=\"tools/call\",code=\"-32602\"}" 1
expect "mcp_bridge_jsonrpc_errors_total{$c,source=\"bridge\",method=\"tools/call\",code=\"-32000\"}" 2
expect "sum(mcp_bridge_jsonrpc_errors_total{$c})" 4
expect "sum(mcp_bridge_jsonrpc_requests_total{$c,method=\"tools/call\"})" 11
expect "sum(mcp_bridge_jsonrpc_requests_total{$c})" 13
# The remote's answers: discover, tools/list, 4 echo, 2 fail, error, slow; then the 401.
expect 'mcp_bridge_http_responses_total{job="mcp-bridge-connect",route="upstream",method="POST",status="200"}' 10
expect 'mcp_bridge_http_responses_total{job="mcp-bridge-connect",route="upstream",method="POST",status="401"}' 1
expect 'sum(mcp_bridge_http_responses_total{job="mcp-bridge-connect",route="upstream"})' 11
expect "mcp_bridge_upstream_transport_failures_total{$c,reason=\"unreachable\"}" 1
expect "sum(mcp_bridge_upstream_transport_failures_total{$c})" 1
expect "count(mcp_bridge_upstream_transport_failures_total{$c})" 7
expect 'mcp_bridge_cancellations_total{job="mcp-bridge-connect",cause="client_notification"}' 1
expect 'sum(mcp_bridge_cancellations_total{job="mcp-bridge-connect"})' 1
# A call connect refuses itself (id 10) has no latency, as on serve: 10 of the 11 reached the remote.
expect "sum(mcp_bridge_request_duration_seconds_count{$c,method=\"tools/call\"})" 9
expect 'mcp_bridge_calls_in_flight{job="mcp-bridge-connect"}' 0
expect 'count(mcp_bridge_build_info{job="mcp-bridge-connect"} == 1)' 1
expect 'count(process_resident_memory_bytes{job="mcp-bridge-connect"} > 0)' 1
# The README's error-ratio PromQL on connect: 4 JSON-RPC errors in 13 requests.
expect "sum(mcp_bridge_jsonrpc_errors_total{$c}) / sum(mcp_bridge_jsonrpc_requests_total{$c})" 0.3076923076923077

exec 3>&- # the host closes stdin: connect ends
ci_wait_log "$cpid" "$work/connect.log" "shutting down" 50 0.1
if jq -e -s 'length > 0 and all(.jsonrpc == "2.0")' "$work/host.out" >/dev/null 2>&1; then
  ok "connect's stdout carries only JSON-RPC"
else
  bad "connect's stdout: $(head -c 500 "$work/host.out")"
fi
grep -q -- "$token" "$work/connect.log" && bad "the bearer token reached connect's log" || ok "no token in connect's log"

# Every query of the Grafana dashboard and of the README's examples parses and evaluates.
bad_q=0
n_q=0
while IFS= read -r q; do
  [ -z "$q" ] && continue
  n_q=$((n_q + 1))
  st=$(curl -sG --max-time 5 --data-urlencode "query=$q" "$api" | jq -r '.status' 2>/dev/null)
  [ "$st" = success ] || { echo "   query fails: $q"; bad_q=$((bad_q + 1)); }
done < <(
  jq -r '.panels[].targets[].expr' examples/grafana-dashboard.json | grafana_vars
  sed -n '/^```promql$/,/^```$/p' README.md | grep -v '^```' | grep -v '^#' | paste -sd' ' | sed 's/  */ /g; s/) \(sum\|histogram_quantile\|increase\)/)\n\1/g'
)
if [ "$n_q" -ge "$PROMQL_QUERIES_EXPECTED" ]; then
  ok "$n_q dashboard and README queries extracted (at least $PROMQL_QUERIES_EXPECTED)"
else
  bad "only $n_q dashboard and README queries extracted, $PROMQL_QUERIES_EXPECTED expected"
fi
[ "$bad_q" -eq 0 ] && ok "dashboard and README queries evaluate" || bad "$bad_q dashboard/README queries fail"

finish
