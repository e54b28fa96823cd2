#!/usr/bin/env bash
# Interop check of authentication with the official MCP Python SDK client (PyPI mcp==2.3.0):
# starts `mcp-bridge serve --demo --auth bearer` on a free port with a token from a file and
# runs tests/interop/python_sdk_auth.py against it: with the token the client connects (auto,
# legacy and 2026 modes), lists tools and calls echo; without it, or with a wrong one, it gets
# 401 with a `WWW-Authenticate: Bearer` challenge. Finally checks the token is not in the log.
#
# Usage:  bash .ci/interop-auth.sh          (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN        bridge binary (default: target/release/mcp-bridge)
#   INTEROP_PYTHON_VENV   venv holding mcp==2.3.0 (default: target/interop-python-venv, shared
#                         with .ci/interop-python.sh)
#   INTEROP_PYTHON        interpreter used to create the venv (default: python3; needs >= 3.10)
#
# Output: the client's PASS/FAIL lines, then `N passed, M failed`. Exit 0 only if all passed.
set -uo pipefail

SDK_VERSION=2.3.0
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
CLIENT="tests/interop/python_sdk_auth.py"

log() { printf '[interop-auth] %s\n' "$*" >&2; }
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

# ---------------------------------------------------------------- token + bridge
WORK="$(mktemp -d -t mcpb-interop-auth.XXXXXX)"
TOKEN="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(32))')"
printf 'interop:%s\n' "$TOKEN" >"$WORK/tokens"
chmod 600 "$WORK/tokens"
PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT/mcp"
BRIDGE_LOG="$WORK/bridge.log"
log "starting $BIN serve --demo --port $PORT --auth bearer (log: $BRIDGE_LOG)"
"$BIN" --log-level debug serve --demo --port "$PORT" --auth bearer --token-file "$WORK/tokens" >"$BRIDGE_LOG" 2>&1 &
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
trap 'stop_bridge; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

ready=0
for _ in $(seq 1 150); do   # up to ~30 s
  if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
    log "bridge exited before listening; its output:"; sed 's/^/    /' "$BRIDGE_LOG" >&2
    die "bridge did not start"
  fi
  if grep -q "listening on http://" "$BRIDGE_LOG"; then ready=1; break; fi
  sleep 0.2
done
[ "$ready" = 1 ] || { sed 's/^/    /' "$BRIDGE_LOG" >&2; die "bridge not listening on 127.0.0.1:$PORT after 30s"; }

# ---------------------------------------------------------------- run the client
out="$(MCP_BRIDGE_TOKEN="$TOKEN" timeout 300 "$PY" "$CLIENT" "$URL")"
rc=$?
printf '%s\n' "$out" | grep -Ev '^[0-9]+ passed, [0-9]+ failed$'
summary="$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n1)"
if [ -n "$summary" ]; then
  p="${summary%% passed*}"; f="${summary#*, }"; f="${f%% failed*}"
else
  p=0; f=1; log "client produced no summary (exit $rc)"
fi
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
stop_bridge
if grep -qF "$TOKEN" "$BRIDGE_LOG"; then
  echo "FAIL the token appears in the bridge log"; f=$((f + 1))
else
  echo "PASS the token is not in the bridge log"; p=$((p + 1))
fi
if [ "$f" -ne 0 ]; then
  log "bridge output (last 40 lines):"; tail -n 40 "$BRIDGE_LOG" | sed 's/^/    /' >&2
fi
echo "$p passed, $f failed"
[ "$f" -eq 0 ] && exit 0
exit 1
