#!/usr/bin/env bash
# Interop check with the official MCP Python SDK client (PyPI mcp==2.3.0): starts
# `mcp-bridge serve --demo` on a free port and runs tests/interop/python_sdk_client.py against
# it in the SDK's three connect modes: auto (server/discover era detection), legacy
# (2025 initialize/session) and pinned to protocol version 2026-07-28; then, against a second
# bridge with `--sse-close-after 1s --sse-retry 200ms`, tests/interop/python_sdk_resume.py: the
# SDK resumes a call's stream the bridge closed early (GET + Last-Event-ID) and loses nothing.
#
# Usage:  bash .ci/interop-python.sh          (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN        bridge binary (default: target/release/mcp-bridge)
#   MCP_BRIDGE_ARGS       extra args for `serve` (default: none), e.g. "--demo-era legacy"
#   INTEROP_PYTHON_VENV   venv holding mcp==2.3.0 (default: target/interop-python-venv)
#   INTEROP_PYTHON        interpreter used to create the venv (default: python3; needs >= 3.10)
#   INTEROP_MODES         space-separated subset of "auto legacy 2026" (default: all three)
#   INTEROP_PORT          port to serve on (default: a free port picked with python)
#   INTEROP_TRACE=1       print the whole HTTP exchange of every mode to stderr
#
# Output: the client's per-check PASS/FAIL lines, then a closing line `N passed, M failed`
# summed over all modes. Exit status 0 only if every mode ran and every check passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-python || exit 2
# Floor: the client's 10 unconditional checks per mode (tools/list, echo, slow progress, the
# cancel-scope and read-timeout cancellations with their wire checks and the calls after them,
# slow after cancels); a measured total would be stricter: raise it when checks are added.
# Plus the resume check's 3.
n_modes=$(wc -w <<<"${INTEROP_MODES:-auto legacy 2026}")
ci_expect $((10 * n_modes + 3))

SDK_VERSION=2.3.0
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
MODES="${INTEROP_MODES:-auto legacy 2026}"
CLIENT="tests/interop/python_sdk_client.py"

ci_check_bin "$BIN"
[ -f "$CLIENT" ] || die "$CLIENT missing"
command -v "$PY_BOOT" >/dev/null || die "$PY_BOOT is required"

# ---------------------------------------------------------------- venv + mcp==2.3.0 (idempotent)
ci_python_venv "$VENV" "$SDK_VERSION" "$PY_BOOT"

# ---------------------------------------------------------------- start the bridge
PORT="${INTEROP_PORT:-$(ci_free_port "$PY")}"
URL="http://127.0.0.1:$PORT/mcp"
BRIDGE_LOG="$(mktemp -t mcpb-interop-python.XXXXXX.log)"
read -r -a EXTRA_ARGS <<<"${MCP_BRIDGE_ARGS:-}"
log "starting $BIN serve --demo --port $PORT ${EXTRA_ARGS[*]} (log: $BRIDGE_LOG)"
"$BIN" serve --demo --port "$PORT" "${EXTRA_ARGS[@]}" >"$BRIDGE_LOG" 2>&1 &
BRIDGE_PID=$!

stop_bridge() { ci_stop "${BRIDGE_PID:-}"; BRIDGE_PID=; }
trap 'stop_bridge; rm -f "$BRIDGE_LOG"' EXIT
trap 'exit 130' INT TERM

ci_bridge_up "$BRIDGE_PID" "$BRIDGE_LOG" "$PORT"

# ---------------------------------------------------------------- run the client in every mode
RC=0
TRACE_ARG=(); [ "${INTEROP_TRACE:-0}" = 1 ] && TRACE_ARG=(--trace)
for mode in $MODES; do
  log "mode $mode: $URL"
  out="$(timeout 300 "$PY" "$CLIENT" "$URL" --mode "$mode" "${TRACE_ARG[@]}")"
  rc=$?
  # The client's own closing line would read as the whole run's result; print it as a sub-total.
  if ci_client_counts "$out" "$rc"; then
    log "mode $mode: $CI_SUMMARY (exit $rc)"
  else
    log "mode $mode: client produced no summary (exit $rc)"
  fi
  ci_add "$CI_P" "$CI_F"
  [ "$rc" -ne 0 ] && RC=1
  if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
    log "bridge died during mode $mode"; ci_add 0 1; RC=1; break
  fi
done

if [ "$RC" -ne 0 ]; then
  log "bridge output (last 60 lines):"; tail -n 60 "$BRIDGE_LOG" | sed 's/^/    /' >&2
fi
stop_bridge

# ---------------------------------------------------------------- resumable streams (2025-11-25)
PORT="$(ci_free_port "$PY")"
URL="http://127.0.0.1:$PORT/mcp"
log "starting $BIN serve --demo --port $PORT --sse-close-after 1s --sse-retry 200ms ${EXTRA_ARGS[*]}"
"$BIN" serve --demo --port "$PORT" --sse-close-after 1s --sse-retry 200ms "${EXTRA_ARGS[@]}" \
  >"$BRIDGE_LOG" 2>&1 &
BRIDGE_PID=$!
ci_bridge_up "$BRIDGE_PID" "$BRIDGE_LOG" "$PORT"
out="$(timeout 120 "$PY" tests/interop/python_sdk_resume.py "$URL")"
rc=$?
if ci_client_counts "$out" "$rc"; then
  log "resume: $CI_SUMMARY (exit $rc)"
else
  log "resume: client produced no summary (exit $rc)"
fi
ci_add "$CI_P" "$CI_F"
if [ "$rc" -ne 0 ]; then
  RC=1
  log "bridge output (last 60 lines):"; tail -n 60 "$BRIDGE_LOG" | sed 's/^/    /' >&2
fi
stop_bridge
ci_result
[ "$CI_FAILED" -eq 0 ] && [ "$RC" -eq 0 ] && exit 0
exit 1
