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
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-auth || exit 2
# Floor: at least one check from the client plus the token-not-in-the-log check (not yet the
# measured total: raise it to what a passing run counts).
ci_expect 2

SDK_VERSION=2.3.0
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
PY_BOOT="${INTEROP_PYTHON:-python3}"
CLIENT="tests/interop/python_sdk_auth.py"

ci_check_bin "$BIN"
[ -f "$CLIENT" ] || die "$CLIENT missing"
command -v "$PY_BOOT" >/dev/null || die "$PY_BOOT is required"

# ---------------------------------------------------------------- venv + mcp==2.3.0 (idempotent)
ci_python_venv "$VENV" "$SDK_VERSION" "$PY_BOOT"

# ---------------------------------------------------------------- token + bridge
WORK="$(mktemp -d -t mcpb-interop-auth.XXXXXX)"
TOKEN="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(32))')"
printf 'interop:%s\n' "$TOKEN" >"$WORK/tokens"
chmod 600 "$WORK/tokens"
PORT="$(ci_free_port "$PY")"
URL="http://127.0.0.1:$PORT/mcp"
BRIDGE_LOG="$WORK/bridge.log"
log "starting $BIN serve --demo --port $PORT --auth bearer (log: $BRIDGE_LOG)"
"$BIN" --log-level debug serve --demo --port "$PORT" --auth bearer --token-file "$WORK/tokens" >"$BRIDGE_LOG" 2>&1 &
BRIDGE_PID=$!

stop_bridge() { ci_stop "${BRIDGE_PID:-}"; BRIDGE_PID=; }
trap 'stop_bridge; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM

ci_bridge_up "$BRIDGE_PID" "$BRIDGE_LOG" "$PORT"

# ---------------------------------------------------------------- run the client
out="$(MCP_BRIDGE_TOKEN="$TOKEN" timeout 300 "$PY" "$CLIENT" "$URL")"
rc=$?
ci_client_counts "$out" "$rc" || log "client produced no summary (exit $rc)"
ci_add "$CI_P" "$CI_F"
stop_bridge
if grep -qF "$TOKEN" "$BRIDGE_LOG"; then
  echo "FAIL the token appears in the bridge log"; ci_add 0 1
else
  echo "PASS the token is not in the bridge log"; ci_add 1 0
fi
if [ "$CI_FAILED" -ne 0 ]; then
  log "bridge output (last 40 lines):"; tail -n 40 "$BRIDGE_LOG" | sed 's/^/    /' >&2
fi
ci_result
[ "$CI_FAILED" -eq 0 ] && exit 0
exit 1
