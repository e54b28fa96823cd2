#!/usr/bin/env bash
# Interop for `mcp-bridge serve --upstream URL` (the HTTP face in front of a *remote* Streamable
# HTTP server) with peers nobody here wrote, on both sides:
#
#   remotes   the Python SDK's MCPServer over streamable HTTP (PyPI mcp==2.3.0,
#             tests/interop/python_remote_server.py), stateful and stateless; npm
#             @modelcontextprotocol/server-everything over its own `streamableHttp` transport
#             (2025-era, sessions, elicitation). The Python SDK server is 2026-era: its legacy-mode
#             client crosses eras through the near bridge.
#   clients   the Python SDK client in auto, legacy and pinned 2026-07-28 modes (list, call,
#             progress, cancellation; tests/interop/python_sdk_client.py); the Python SDK client
#             pinned to 2026 completing an elicitation against server-everything (the near bridge
#             turns the remote's 2025 elicitation/create into input_required and back;
#             tests/interop/eras_python_client.py); the TypeScript SDK 1.32.2 (2025) client
#             completing one against server-everything (tests/interop/eras_ts_client.mjs).
#
# Besides the clients' own checks: a cancellation by the client must reach the Python remote
# (`pyserver: cancelled` in its log), and the near bridge must have probed the remote as the
# expected era.
#
# Usage:  bash .ci/interop-upstream.sh     (the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN        bridge binary (default: target/release/mcp-bridge)
#   INTEROP_PYTHON_VENV   venv holding mcp==2.3.0 (default: target/interop-python-venv, shared)
#   INTEROP_PYTHON        interpreter used to create the venv (default: python3)
#   INTEROP_NODE_DIR      npm prefix with the TypeScript SDK and server-everything (default:
#                         target/interop-eras-node, shared with .ci/interop-eras.sh)
#
# Output: per-check PASS/FAIL lines, then `N passed, M failed`; exit 0 only if all passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-upstream || exit 2
# Floor only (not yet the measured total): at least one check ran. Raise it to a passing run's count.
ci_expect 1

SDK_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
EVERYTHING_VERSION=2026.8.31
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
case "$BIN" in /*) ;; *) BIN="$REPO/$BIN" ;; esac
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
NODE_DIR="${INTEROP_NODE_DIR:-$REPO/target/interop-eras-node}"
REMOTE_PY="tests/interop/python_remote_server.py"
CLIENT_PY="tests/interop/python_sdk_client.py"
ERAS_PY="tests/interop/eras_python_client.py"
ERAS_TS="tests/interop/eras_ts_client.mjs"

ci_check_bin "$BIN"
for f in "$REMOTE_PY" "$CLIENT_PY" "$ERAS_PY" "$ERAS_TS"; do [ -f "$f" ] || die "$f missing"; done
command -v node >/dev/null || die "node is required"
command -v npm >/dev/null || die "npm is required"

ci_python_venv "$VENV" "$SDK_VERSION" "$PY_BOOT"

NM="$NODE_DIR/node_modules"
EVERYTHING="$NM/@modelcontextprotocol/server-everything/dist/index.js"
npm_ok() {
  [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" = "$TS_SDK_VERSION" ] &&
    [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/server-everything)" = "$EVERYTHING_VERSION" ] &&
    [ -f "$EVERYTHING" ]
}
if ! npm_ok; then
  log "installing @modelcontextprotocol/sdk@$TS_SDK_VERSION and server-everything@$EVERYTHING_VERSION into $NODE_DIR"
  ci_npm_install "$NODE_DIR" 2 \
    "@modelcontextprotocol/sdk@$TS_SDK_VERSION" "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" ||
    die "npm install failed"
  npm_ok || die "npm packages not at the pinned versions after install"
fi
export INTEROP_NODE_MODULES="$NM"

PIDS=()
LOGS=()
cleanup() {
  for p in "${PIDS[@]}"; do ci_stop "$p" 50; done
  rm -f "${LOGS[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

newlog() { local f; f="$(mktemp -t "mcpb-upstream-$1.XXXXXX.log")"; LOGS+=("$f"); echo "$f"; }

# near REMOTE_URL LOG: start `serve --upstream REMOTE_URL` on a free port; sets NEAR (its URL).
near() {
  local remote="$1" nlog="$2" port
  port="$(ci_free_port "$PY")"
  "$BIN" serve --port "$port" --upstream "$remote" >"$nlog" 2>&1 &
  PIDS+=($!)
  ci_bridge_up "${PIDS[-1]}" "$nlog" "$port"
  NEAR="http://127.0.0.1:$port/mcp"
}

# check_era LABEL LOG WANT: the near bridge probed the remote as WANT (2025|2026).
check_era() {
  local label="$1" nlog="$2" want="$3" got
  ci_wait_log "${PIDS[-1]}" "$nlog" 'remote ready.*era="?[0-9]{4}' 100 0.1
  got="$(sed -nE 's/.*remote ready.*era="?([0-9]{4})"?.*/\1/p' "$nlog" | tail -n1)"
  if [ "$got" = "$want" ]; then
    echo "PASS $label remote era: probed as $got"; ci_add 1 0
  else
    echo "FAIL $label remote era: want $want, log says '${got:-nothing}'"; ci_add 0 1
  fi
}

# run LABEL NEAR_LOG CMD...: one client; its closing counts go into the totals.
run() {
  local label="$1" nlog="$2" out rc
  shift 2
  log "run $label"
  out="$(timeout 240 "$@")"; rc=$?
  ci_client_counts "$out" "$rc" || echo "FAIL $label: no summary line (exit $rc)"
  ci_add "$CI_P" "$CI_F"
  if [ "$CI_F" -ne 0 ] || [ "$rc" -ne 0 ]; then
    log "$label failed; near bridge log (last 40 lines):"; tail -n 40 "$nlog" | sed 's/^/    /' >&2
  fi
}

# ---------------------------------------------------------------- Python SDK remotes
for kind in stateful stateless; do
  port="$(ci_free_port "$PY")"; rlog="$(newlog "py-$kind")"
  extra=(); [ "$kind" = stateless ] && extra=(--stateless)
  "$PY" "$REMOTE_PY" --port "$port" "${extra[@]}" >"$rlog" 2>&1 & PIDS+=($!)
  ci_wait_port "$port" "${PIDS[-1]}" "$PY" || { cat "$rlog" >&2; die "python remote ($kind) did not start"; }
  nlog="$(newlog "near-py-$kind")"
  near "http://127.0.0.1:$port/mcp" "$nlog"
  check_era "py-$kind" "$nlog" 2026   # mcp 2.3.0 speaks 2026-07-28 (and 2025 to 2025 clients)
  for mode in auto legacy 2026; do
    before="$(grep -c 'pyserver: cancelled' "$rlog")"
    run "python client $mode → serve --upstream → python remote ($kind)" "$nlog" \
      "$PY" "$CLIENT_PY" "$NEAR" --mode "$mode"
    # The client cancelled its slow calls: the remote must have seen it.
    for _ in $(seq 1 50); do
      [ "$(grep -c 'pyserver: cancelled' "$rlog")" -gt "$before" ] && break
      sleep 0.1
    done
    after="$(grep -c 'pyserver: cancelled' "$rlog")"
    if [ "$after" -gt "$before" ]; then
      echo "PASS py-$kind/$mode cancellation reached the remote ($((after - before))x pyserver: cancelled)"; ci_add 1 0
    else
      echo "FAIL py-$kind/$mode cancellation: the remote never logged pyserver: cancelled"; ci_add 0 1
      tail -n 20 "$rlog" | sed 's/^/    /' >&2
    fi
  done
done

# ---------------------------------------------------------------- server-everything over HTTP
port="$(ci_free_port "$PY")"; elog="$(newlog everything)"
PORT="$port" node "$EVERYTHING" streamableHttp >"$elog" 2>&1 & PIDS+=($!)
ci_wait_port "$port" "${PIDS[-1]}" "$PY" || { cat "$elog" >&2; die "server-everything did not start"; }
nlog="$(newlog near-everything)"
near "http://127.0.0.1:$port/mcp" "$nlog"
check_era everything "$nlog" 2025
run "python client (2026 pin) → serve --upstream → server-everything: elicitation" "$nlog" \
  "$PY" "$ERAS_PY" "$NEAR" --target everything
run "typescript client (2025) → serve --upstream → server-everything: elicitation" "$nlog" \
  node "$ERAS_TS" "$NEAR" --target everything

ci_result
[ "$CI_FAILED" -eq 0 ] && exit 0
exit 1
