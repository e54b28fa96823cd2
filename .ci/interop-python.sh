#!/usr/bin/env bash
# Interop check with the official MCP Python SDK client (PyPI mcp==2.3.0): starts
# `mcp-bridge serve --demo` on a free port and runs tests/interop/python_sdk_client.py against
# it in the SDK's three connect modes: auto (server/discover era detection), legacy
# (2025 initialize/session) and pinned to protocol version 2026-07-28.
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

SDK_VERSION=2.3.0
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
MODES="${INTEROP_MODES:-auto legacy 2026}"
CLIENT="tests/interop/python_sdk_client.py"

log() { printf '[interop-python] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; echo "0 passed, 1 failed"; exit 2; }

[ -x "$BIN" ] || die "bridge binary '$BIN' not found or not executable (build it first or set MCP_BRIDGE_BIN)"
[ -f "$CLIENT" ] || die "$CLIENT missing"
command -v "$PY_BOOT" >/dev/null || die "$PY_BOOT is required"

# ---------------------------------------------------------------- venv + mcp==2.3.0 (idempotent)
PY="$VENV/bin/python"
sdk_ok() { [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$SDK_VERSION')" 2>/dev/null; }
if ! sdk_ok; then
  log "creating $VENV with mcp==$SDK_VERSION"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"
  "$PY_BOOT" -m venv "$VENV" || die "python -m venv failed (Debian: apt-get install python3-venv)"
  "$PY" -m pip install --quiet --disable-pip-version-check "mcp==$SDK_VERSION" || die "pip install mcp==$SDK_VERSION failed"
  sdk_ok || die "mcp==$SDK_VERSION not importable after install"
fi

# ---------------------------------------------------------------- start the bridge
PORT="${INTEROP_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')}"
URL="http://127.0.0.1:$PORT/mcp"
BRIDGE_LOG="$(mktemp -t mcpb-interop-python.XXXXXX.log)"
read -r -a EXTRA_ARGS <<<"${MCP_BRIDGE_ARGS:-}"
log "starting $BIN serve --demo --port $PORT ${EXTRA_ARGS[*]} (log: $BRIDGE_LOG)"
"$BIN" serve --demo --port "$PORT" "${EXTRA_ARGS[@]}" >"$BRIDGE_LOG" 2>&1 &
BRIDGE_PID=$!

stop_bridge() {
  if [ -n "${BRIDGE_PID:-}" ] && kill -0 "$BRIDGE_PID" 2>/dev/null; then
    kill "$BRIDGE_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$BRIDGE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$BRIDGE_PID" 2>/dev/null
    wait "$BRIDGE_PID" 2>/dev/null
  fi
  BRIDGE_PID=
}
trap 'stop_bridge; rm -f "$BRIDGE_LOG"' EXIT
trap 'exit 130' INT TERM

ready=0
for _ in $(seq 1 150); do   # up to ~30 s
  if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
    log "bridge exited before listening; its output:"; sed 's/^/    /' "$BRIDGE_LOG" >&2
    die "bridge did not start"
  fi
  if "$PY" -c "import socket,sys; s=socket.socket(); s.settimeout(0.5); sys.exit(s.connect_ex(('127.0.0.1',$PORT)))" 2>/dev/null; then
    ready=1; break
  fi
  sleep 0.2
done
[ "$ready" = 1 ] || { sed 's/^/    /' "$BRIDGE_LOG" >&2; die "bridge not listening on 127.0.0.1:$PORT after 30s"; }

# ---------------------------------------------------------------- run the client in every mode
TOTAL_PASS=0; TOTAL_FAIL=0; RC=0
TRACE_ARG=(); [ "${INTEROP_TRACE:-0}" = 1 ] && TRACE_ARG=(--trace)
for mode in $MODES; do
  log "mode $mode: $URL"
  out="$(timeout 300 "$PY" "$CLIENT" "$URL" --mode "$mode" "${TRACE_ARG[@]}")"
  rc=$?
  # The client's own closing line would read as the whole run's result; print it as a sub-total.
  printf '%s\n' "$out" | grep -Ev '^[0-9]+ passed, [0-9]+ failed$'
  summary="$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n1)"
  if [ -n "$summary" ]; then
    p="${summary%% passed*}"; f="${summary#*, }"; f="${f%% failed*}"
    log "mode $mode: $summary (exit $rc)"
  else
    p=0; f=1
    log "mode $mode: client produced no summary (exit $rc)"
  fi
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  TOTAL_PASS=$((TOTAL_PASS + p)); TOTAL_FAIL=$((TOTAL_FAIL + f))
  [ "$rc" -ne 0 ] && RC=1
  if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
    log "bridge died during mode $mode"; TOTAL_FAIL=$((TOTAL_FAIL + 1)); RC=1; break
  fi
done

if [ "$RC" -ne 0 ]; then
  log "bridge output (last 60 lines):"; tail -n 60 "$BRIDGE_LOG" | sed 's/^/    /' >&2
fi
stop_bridge
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed"
[ "$TOTAL_FAIL" -eq 0 ] && [ "$RC" -eq 0 ] && exit 0
exit 1
