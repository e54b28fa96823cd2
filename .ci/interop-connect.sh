#!/usr/bin/env bash
# Interop check for `mcp-bridge connect` with peers nobody here wrote:
#   * the official Python SDK (PyPI mcp==2.3.0) as the *host*: its stdio client in auto, legacy
#     and pinned 2026-07-28 modes spawns `mcp-bridge connect <url of serve --demo>`;
#   * the same SDK as the *remote*: tests/interop/python_remote_server.py (its MCPServer in
#     streamable-http mode, stateful and stateless) behind `connect` (auto-detected, and pinned
#     to 2025-11-25 for the stateful one);
#   * the official TypeScript SDK (npm @modelcontextprotocol/sdk@1.32.2) stdio client as a
#     2025 host, against serve --demo (auto-detected 2026 remote and pinned 2025 remote).
# Each run: list tools, call, progress, cancel (the remote must log the cancellation), a call
# after the cancel.
#
# Usage:  bash .ci/interop-connect.sh     (the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN        bridge binary (default: target/release/mcp-bridge)
#   INTEROP_PYTHON_VENV   venv holding mcp==2.3.0 (default: target/interop-python-venv)
#   INTEROP_PYTHON        interpreter used to create the venv (default: python3; needs >= 3.10)
#   INTEROP_NODE_DIR      npm prefix holding the TypeScript SDK (default: target/interop-connect-node)
#
# Output: per-check PASS/FAIL lines, then `N passed, M failed`; exit 0 only if all passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-connect || exit 2
# Floor: one check per checker run (3 python host modes + pinned 2025, 2 TypeScript hosts, 3
# against the stateful Python remote, 2 against the stateless one); not yet the measured total.
ci_expect 11

SDK_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
case "$BIN" in /*) ;; *) BIN="$REPO/$BIN" ;; esac
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
NODE_DIR="${INTEROP_NODE_DIR:-$REPO/target/interop-connect-node}"
HOST_PY="tests/interop/python_connect_host.py"
REMOTE_PY="tests/interop/python_remote_server.py"
HOST_TS="tests/interop/ts_connect_host.mjs"

ci_check_bin "$BIN"
for f in "$HOST_PY" "$REMOTE_PY" "$HOST_TS"; do [ -f "$f" ] || die "$f missing"; done

# ---------------------------------------------------------------- Python venv (idempotent)
ci_python_venv "$VENV" "$SDK_VERSION" "$PY_BOOT"

# ---------------------------------------------------------------- TypeScript SDK (idempotent)
TS_OK=1
ts_ok() { [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" = "$TS_SDK_VERSION" ]; }
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  log "node/npm missing: the TypeScript host checks will fail"; TS_OK=0
elif ! ts_ok; then
  log "installing @modelcontextprotocol/sdk@$TS_SDK_VERSION into $NODE_DIR"
  ci_npm_install "$NODE_DIR" 1 "@modelcontextprotocol/sdk@$TS_SDK_VERSION" || TS_OK=0
  ts_ok || TS_OK=0
fi

# ---------------------------------------------------------------- helpers
PIDS=()
LOGS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -f "${LOGS[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run LABEL REMOTE_LOG -- CMD...: run one checker, add its closing counts to the totals.
run() {
  local label="$1"; shift
  local out rc
  log "run $label"
  out="$(timeout 240 "$@" 2>>"$CONNECT_LOG")"; rc=$?
  ci_client_counts "$out" "$rc" || log "$label: no summary (exit $rc)"
  [ "$CI_F" -ne 0 ] && { log "$label failed; stderr (last 40 lines):"; tail -n 40 "$CONNECT_LOG" | sed 's/^/    /' >&2; }
  ci_add "$CI_P" "$CI_F"
}
CONNECT_LOG="$(mktemp -t mcpb-connect.XXXXXX.log)"; LOGS+=("$CONNECT_LOG")

# ---------------------------------------------------------------- remote: serve --demo
PORT="$(ci_free_port "$PY")"; SERVE_LOG="$(mktemp -t mcpb-serve.XXXXXX.log)"; LOGS+=("$SERVE_LOG")
"$BIN" serve --demo --port "$PORT" >"$SERVE_LOG" 2>&1 & PIDS+=($!)
ci_wait_listening "${PIDS[-1]}" "$SERVE_LOG" || { cat "$SERVE_LOG" >&2; die "serve --demo did not start"; }
DEMO="http://127.0.0.1:$PORT/mcp"
for mode in auto legacy 2026; do
  run "python host $mode → serve" "$PY" "$HOST_PY" --mode "$mode" --label "py-host-$mode" \
    --remote-log "$SERVE_LOG" --cancel-needle "demo: cancelled id=" -- "$BIN" connect "$DEMO"
done
run "python host legacy → serve (pinned 2025-11-25)" "$PY" "$HOST_PY" --mode legacy --label "py-host-legacy-remote2025" \
  --remote-log "$SERVE_LOG" --cancel-needle "demo: cancelled id=" -- "$BIN" connect "$DEMO" --protocol 2025-11-25
if [ "$TS_OK" = 1 ]; then
  for proto in auto 2025-06-18; do
    NODE_PATH="$NODE_DIR/node_modules" run "ts host → serve ($proto)" node "$HOST_TS" \
      --remote-log "$SERVE_LOG" --cancel-needle "demo: cancelled id=" -- "$BIN" connect "$DEMO" --protocol "$proto"
  done
else
  log "TypeScript SDK unavailable"; ci_add 0 1
fi

# ---------------------------------------------------------------- remote: Python SDK server
for kind in stateful stateless; do
  P2="$(ci_free_port "$PY")"; RLOG="$(mktemp -t mcpb-pyremote.XXXXXX.log)"; LOGS+=("$RLOG")
  extra=(); [ "$kind" = stateless ] && extra=(--stateless)
  "$PY" "$REMOTE_PY" --port "$P2" "${extra[@]}" >"$RLOG" 2>&1 & PIDS+=($!)
  ci_wait_port "$P2" "${PIDS[-1]}" "$PY" || { cat "$RLOG" >&2; die "python remote ($kind) did not start"; }
  URL="http://127.0.0.1:$P2/mcp"
  for mode in auto legacy; do
    run "python host $mode → python remote ($kind)" "$PY" "$HOST_PY" --mode "$mode" --label "py-remote-$kind-host-$mode" \
      --remote-log "$RLOG" --cancel-needle "pyserver: cancelled" -- "$BIN" connect "$URL"
  done
  if [ "$kind" = stateful ]; then
    run "python host legacy → python remote (stateful, pinned 2025-11-25)" "$PY" "$HOST_PY" --mode legacy \
      --label "py-remote-stateful-2025" --remote-log "$RLOG" --cancel-needle "pyserver: cancelled" \
      -- "$BIN" connect "$URL" --protocol 2025-11-25
  fi
done

ci_result
[ "$CI_FAILED" -eq 0 ] && exit 0
exit 1
