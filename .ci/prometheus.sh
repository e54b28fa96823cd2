#!/usr/bin/env bash
# Proof with the real thing: a real Prometheus (Debian package `prometheus`) scrapes
# `mcp-bridge serve --demo` every second on loopback while a scripted workload runs; the exact
# counts are then read back through Prometheus' HTTP query API. Also runs `promtool check
# metrics` on a scrape. Ends with one line: "N passed, M failed".
#
# Uses $MCP_BRIDGE_BIN when set, else builds a debug binary. Needs curl and jq.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" prometheus || exit 2
cd "$(dirname "$0")/.."

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
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mcp-bridge
    static_configs:
      - targets: ["$maddr"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$pport/api/v1/query"

query() { # the first sample's value, or "absent"
  curl -sG --max-time 5 --data-urlencode "query=$1" "$api" | jq -r '.data.result[0].value[1] // "absent"' 2>/dev/null || echo absent
}

up=absent
for _ in $(seq 60); do up=$(query 'up{job="mcp-bridge"}'); [ "$up" = 1 ] && break; sleep 0.5; done
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

expect 'mcp_bridge_tool_results_total{tool="echo",is_error="false"}' 5
expect 'mcp_bridge_tool_results_total{tool="fail",is_error="true"}' 3
expect 'sum(mcp_bridge_tool_results_total{is_error="true"})' 3
expect 'sum(mcp_bridge_jsonrpc_errors_total{source="upstream",method="tools/call",code="-32050"})' 2
expect 'sum(mcp_bridge_jsonrpc_errors_total{source="bridge",code="-32020"})' 1
expect 'sum(mcp_bridge_jsonrpc_errors_total{source="bridge"})' 1
expect 'sum(mcp_bridge_jsonrpc_requests_total{method="tools/call"})' 12
expect 'mcp_bridge_http_responses_total{route="mcp",method="POST",status="400"}' 1
expect 'mcp_bridge_http_responses_total{route="mcp",method="POST",status="200"}' 10
expect 'mcp_bridge_http_responses_total{route="mcp",method="POST",status="401"}' 1
expect 'sum(mcp_bridge_auth_failures_total)' 1
expect 'mcp_bridge_cancellations_total{cause="client_disconnect"}' 1
expect 'sum(mcp_bridge_cancellations_total)' 1
expect 'sum(mcp_bridge_request_duration_seconds_count{method="tools/call"})' 10
expect 'mcp_bridge_calls_in_flight' 0
expect 'mcp_bridge_upstream_up{server="default"}' 1
expect 'mcp_bridge_child_starts_total{server="default"}' 1
expect 'count(mcp_bridge_build_info == 1)' 1
expect 'count(process_resident_memory_bytes > 0)' 1
expect 'count(process_open_fds > 0)' 1
# The README's error-ratio PromQL, on raw counters: 3 JSON-RPC errors in 12 requests.
expect 'sum(mcp_bridge_jsonrpc_errors_total) / sum(mcp_bridge_jsonrpc_requests_total)' 0.25

# Every query of the Grafana dashboard and of the README's examples parses and evaluates.
bad_q=0
while IFS= read -r q; do
  [ -z "$q" ] && continue
  st=$(curl -sG --max-time 5 --data-urlencode "query=$q" "$api" | jq -r '.status' 2>/dev/null)
  [ "$st" = success ] || { echo "   query fails: $q"; bad_q=$((bad_q + 1)); }
done < <(
  jq -r '.panels[].targets[].expr' examples/grafana-dashboard.json | grafana_vars
  sed -n '/^```promql$/,/^```$/p' README.md | grep -v '^```' | grep -v '^#' | paste -sd' ' | sed 's/  */ /g; s/) \(sum\|histogram_quantile\|increase\)/)\n\1/g'
)
[ "$bad_q" -eq 0 ] && ok "dashboard and README queries evaluate" || bad "$bad_q dashboard/README queries fail"

finish
