#!/usr/bin/env bash
# Era-translation interop with official SDK clients (issue 7): an elicitation completes through
# `mcp-bridge serve` when client and stdio server are of different protocol eras.
#
#   py2026-everything    Python SDK client (PyPI mcp==2.3.0) pinned to 2026-07-28 -> serve -> npm
#                        @modelcontextprotocol/server-everything (2025-era, stdio), tool
#                        `trigger-elicitation-request`: the child's elicitation/create request must
#                        reach the client as an `input_required` result, the retry resumes it.
#   py2026-demo-legacy   same client -> serve --demo --demo-era legacy, tool `elicit`.
#   ts2025-python-modern TypeScript SDK client (npm @modelcontextprotocol/sdk@1.32.2, 2025 eras only)
#                        -> serve -> tests/interop/eras_modern_server.py (Python SDK MCPServer on stdio,
#                        2026-07-28): the child's `input_required` must reach the client as a real
#                        elicitation/create request on the call's SSE stream, then a retry upstream.
#   ts2025-demo-modern   same client -> serve --demo --demo-era modern, tool `elicit`.
#   ts2025-everything-tasks       two TypeScript SDK clients (two sessions) -> serve -> server-everything:
#                        2025-11-25 tasks (`simulate-research-query`) through the bridge's task book
#                        (tests/interop/tasks_ts_client.mjs): the bridge's task ids, the owner's
#                        get/list/result/cancel, -32602 and an empty list to the other session, and a
#                        task left running is cancelled at the server when its session ends.
#   ts2025-everything-tasks-pool  the same with a pool of two server-everything children.
#
# Each scenario gets its own bridge on a free port; besides the client's checks the script checks
# (from the bridge log) that the child was probed as the intended era, so a scenario cannot pass
# without crossing eras.
#
# Usage:  bash .ci/interop-eras.sh          (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN          bridge binary (default: target/release/mcp-bridge)
#   INTEROP_PYTHON_VENV     venv holding mcp==2.3.0 (default: target/interop-python-venv, shared
#                           with .ci/interop-python.sh)
#   INTEROP_PYTHON          interpreter used to create the venv (default: python3; needs >= 3.10)
#   INTEROP_NODE_DIR        npm prefix for the SDK and server-everything (default: target/interop-eras-node)
#   INTEROP_ERAS_SCENARIOS  space-separated subset of the scenarios above (default: all four)
#   INTEROP_TRACE=1         print the whole HTTP exchange of every scenario to stderr
#
# Output: the clients' PASS/FAIL lines, then a closing line `N passed, M failed` over all
# scenarios. Exit status 0 only if every scenario ran and every check passed; on a failure the
# scenario's bridge log is printed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-eras || exit 2
# Floor: per scenario the child-era check and at least one client check.
ALL_SCENARIOS="py2026-everything py2026-demo-legacy ts2025-python-modern ts2025-demo-modern ts2025-everything-tasks ts2025-everything-tasks-pool"
# The measured total for all six; a subset expects two per scenario.
if [ -z "${INTEROP_ERAS_SCENARIOS:-}" ]; then ci_expect 56; else ci_expect $((2 * $(wc -w <<<"$INTEROP_ERAS_SCENARIOS"))); fi

PY_SDK_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
EVERYTHING_VERSION=2026.8.31
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
NODE_DIR="${INTEROP_NODE_DIR:-$REPO/target/interop-eras-node}"
SCENARIOS="${INTEROP_ERAS_SCENARIOS:-$ALL_SCENARIOS}"
PY_CLIENT="tests/interop/eras_python_client.py"
TS_CLIENT="tests/interop/eras_ts_client.mjs"
TASKS_CLIENT="tests/interop/tasks_ts_client.mjs"
MODERN_SERVER="$REPO/tests/interop/eras_modern_server.py"

ci_check_bin "$BIN"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
for f in "$PY_CLIENT" "$TS_CLIENT" "$TASKS_CLIENT" "$MODERN_SERVER"; do [ -f "$f" ] || die "$f missing"; done
command -v "$PY_BOOT" >/dev/null || die "$PY_BOOT is required"
NODE="$(command -v node)" || die "node is required"
command -v npm >/dev/null || die "npm is required"

# ---------------------------------------------------------------- venv + mcp==2.3.0 (idempotent)
ci_python_venv "$VENV" "$PY_SDK_VERSION" "$PY_BOOT"

# ---------------------------------------------------------------- npm packages (idempotent)
NM="$NODE_DIR/node_modules"
EVERYTHING="$NM/@modelcontextprotocol/server-everything/dist/index.js"
npm_ok() {
  [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" = "$TS_SDK_VERSION" ] &&
    [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/server-everything)" = "$EVERYTHING_VERSION" ] &&
    [ -f "$EVERYTHING" ]
}
if ! npm_ok; then
  log "installing @modelcontextprotocol/sdk@$TS_SDK_VERSION and @modelcontextprotocol/server-everything@$EVERYTHING_VERSION into $NODE_DIR"
  # server-everything depends on the SDK (^1.x); installing both in one prefix makes the server
  # use 1.32.2 as well unless its range excludes it.
  ci_npm_install "$NODE_DIR" 1 \
    "@modelcontextprotocol/sdk@$TS_SDK_VERSION" "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" ||
    die "npm install failed"
  npm_ok || die "npm packages not at the pinned versions after install"
fi
export INTEROP_NODE_MODULES="$NM"

# ---------------------------------------------------------------- one scenario
RC=0
BRIDGE_PID=; BRIDGE_LOG=
TRACE_ARG=(); [ "${INTEROP_TRACE:-0}" = 1 ] && TRACE_ARG=(--trace)

stop_bridge() { ci_stop "${BRIDGE_PID:-}" 80; BRIDGE_PID=; }
cleanup() { stop_bridge; [ -n "${BRIDGE_LOG:-}" ] && rm -f "$BRIDGE_LOG"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# scenario NAME WANT_CHILD_ERA(2025|2026) CLIENT(py|ts) TARGET SERVE_ARGS...
scenario() {
  local name="$1" want_era="$2" kind="$3" target="$4"; shift 4
  local serve_args=("$@") client=()
  local port url sp=0 sf=0 out rc
  port="$(ci_free_port "$PY")"; url="http://127.0.0.1:$port/mcp"
  case "$kind" in
    py) client=("$PY" "$PY_CLIENT" "$url" --target "$target") ;;
    ts) client=("$NODE" "$TS_CLIENT" "$url" --target "$target") ;;
    tasks) client=("$NODE" "$TASKS_CLIENT" "$url") ;;
  esac
  BRIDGE_LOG="$(mktemp -t mcpb-interop-eras.XXXXXX.log)"
  log "$name: $BIN serve --port $port ${serve_args[*]}"
  "$BIN" serve --port "$port" "${serve_args[@]}" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!

  if ci_wait_listening "$BRIDGE_PID" "$BRIDGE_LOG"; then
    # The child is probed at start-up; wait (bounded) for its era to be logged.
    local era=""
    ci_wait_log "$BRIDGE_PID" "$BRIDGE_LOG" 'child ready.*era="?[0-9]{4}'
    era="$(sed -nE 's/.*child ready.*era="?([0-9]{4})"?.*/\1/p' "$BRIDGE_LOG" | tail -n1)"
    if [ "$era" = "$want_era" ]; then
      echo "PASS $name child era: the bridge probed its child as $era-era (client is of the other era)"; sp=$((sp + 1))
    else
      echo "FAIL $name child era: want $want_era, bridge log says '${era:-nothing}'"; sf=$((sf + 1))
    fi

    local targs=("${TRACE_ARG[@]}")
    [ "$kind" = tasks ] && targs=()   # the tasks client has no --trace
    out="$(timeout 180 "${client[@]}" "${targs[@]}")"
    rc=$?
    ci_client_counts "$out" "$rc" || echo "FAIL $name client: no summary line (exit $rc)"
    sp=$((sp + CI_P)); sf=$((sf + CI_F))
    if [ "$kind" = tasks ]; then
      # The task session A left running when it ended is cancelled at the server by the bridge.
      if ci_wait_log "$BRIDGE_PID" "$BRIDGE_LOG" "closed session's tasks were cancelled tasks=1"; then
        echo "PASS $name abandoned: the bridge cancelled the task of the session that ended"; sp=$((sp + 1))
      else
        echo "FAIL $name abandoned: no 'closed session's tasks were cancelled tasks=1' in the bridge log"; sf=$((sf + 1))
      fi
    fi
    if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
      echo "FAIL $name bridge: exited during the scenario"; sf=$((sf + 1))
    fi
  else
    echo "FAIL $name start: bridge not listening on 127.0.0.1:$port"; sf=$((sf + 1))
  fi

  log "$name: $sp passed, $sf failed"
  if [ "$sf" -ne 0 ]; then
    RC=1
    log "$name: bridge log (last 80 lines):"; tail -n 80 "$BRIDGE_LOG" | sed 's/^/    /' >&2
  fi
  stop_bridge
  rm -f "$BRIDGE_LOG"; BRIDGE_LOG=
  ci_add "$sp" "$sf"
}

# ---------------------------------------------------------------- the scenarios
for s in $SCENARIOS; do
  case "$s" in
    py2026-everything)    scenario "$s" 2025 py everything -- "$NODE" "$EVERYTHING" stdio ;;
    py2026-demo-legacy)   scenario "$s" 2025 py demo --demo --demo-era legacy ;;
    ts2025-python-modern) scenario "$s" 2026 ts python -- "$PY" "$MODERN_SERVER" ;;
    ts2025-demo-modern)   scenario "$s" 2026 ts demo --demo --demo-era modern ;;
    ts2025-everything-tasks) scenario "$s" 2025 tasks everything -- "$NODE" "$EVERYTHING" stdio ;;
    ts2025-everything-tasks-pool)
      scenario "$s" 2025 tasks everything --pool-min 2 --pool-max 2 -- "$NODE" "$EVERYTHING" stdio ;;
    *) echo "FAIL $s: unknown scenario"; ci_add 0 1; RC=1 ;;
  esac
done

ci_result
[ "$CI_FAILED" -eq 0 ] && [ "$RC" -eq 0 ] && exit 0
exit 1
