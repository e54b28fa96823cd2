#!/usr/bin/env bash
# One endpoint over servers nobody here wrote (issue 25): `mcp-bridge serve --config` with one
# `[endpoints.team]` over four members, driven by the official SDK clients.
#
#   members  ev    npm @modelcontextprotocol/server-everything, stdio child (2025)
#            evh   the same over its own `streamableHttp` transport, a remote (2025)
#            py    tests/interop/eras_modern_server.py: the Python SDK's MCPServer (2026)
#            demo  `mcp-bridge demo-server --era modern --tools-page 3` (2026, paginates)
#   callers  py-2026    Python SDK client (PyPI mcp==2.3.0) pinned to 2026-07-28; it also
#                       kills the `ev` child and checks the endpoint brings it back
#            py-auto    the same client in `auto` mode (server/discover first)
#            py-legacy  the same client in `legacy` mode (a 2025 session)
#            ts-2025    TypeScript SDK client (npm @modelcontextprotocol/sdk@1.32.2, 2025 only)
#
# Each caller: the merged tools/list over every page, a call on every member, elicitation and
# sampling inside members' tools, a resource subscription that sees server-everything's
# updates; and on a second endpoint, `guarded` (over ev and demo, `confirm = ["*__echo"]`), the
# endpoint's own approval question answered before the call runs, in the caller's era
# (tests/interop/endpoint_python_client.py, endpoint_ts_client.mjs).
#
# Usage:  bash .ci/interop-endpoint.sh   (the binary must already be built)
# Env:    MCP_BRIDGE_BIN (default target/release/mcp-bridge); INTEROP_PYTHON_VENV and
#         INTEROP_NODE_DIR are shared with .ci/interop-eras.sh; INTEROP_ENDPOINT_CALLERS a
#         subset of the callers above (in that order by default).
# Output: the clients' PASS/FAIL lines and `N passed, M failed`; exit 0 only if all passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-endpoint || exit 2
ci_expect 56

PY_SDK_VERSION=2.3.0
TS_SDK_VERSION=1.32.2
EVERYTHING_VERSION=2026.8.31
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
VENV="${INTEROP_PYTHON_VENV:-$REPO/target/interop-python-venv}"
NODE_DIR="${INTEROP_NODE_DIR:-$REPO/target/interop-eras-node}"
PY_CLIENT="$REPO/tests/interop/endpoint_python_client.py"
TS_CLIENT="$REPO/tests/interop/endpoint_ts_client.mjs"
PY_SERVER="$REPO/tests/interop/eras_modern_server.py"
ci_check_bin "$BIN"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
NODE="$(command -v node)" || die "node is required"

ci_python_venv "$VENV" "$PY_SDK_VERSION" "${INTEROP_PYTHON:-python3}"
NM="$NODE_DIR/node_modules"
EVERYTHING="$NM/@modelcontextprotocol/server-everything/dist/index.js"
if [ "$(ci_npm_version "$NODE_DIR" @modelcontextprotocol/sdk)" != "$TS_SDK_VERSION" ] || [ ! -f "$EVERYTHING" ]; then
  log "installing @modelcontextprotocol/sdk@$TS_SDK_VERSION and server-everything@$EVERYTHING_VERSION"
  ci_npm_install "$NODE_DIR" 2 "@modelcontextprotocol/sdk@$TS_SDK_VERSION" \
    "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" || die "npm install failed"
fi
export INTEROP_NODE_MODULES="$NM"

WORK="$(mktemp -d -t mcpb-interop-endpoint.XXXXXX)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do ci_stop "$p" 50; done; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# server-everything over HTTP (the remote member).
EV_PORT="$(ci_free_port "$PY")"
PORT="$EV_PORT" "$NODE" "$EVERYTHING" streamableHttp >"$WORK/everything.log" 2>&1 & PIDS+=($!)
ci_wait_port "$EV_PORT" "${PIDS[-1]}" "$PY" || { cat "$WORK/everything.log" >&2; die "server-everything did not start"; }

cat >"$WORK/endpoint.toml" <<EOF
[servers.ev]
command = "$NODE"
args = ["$EVERYTHING", "stdio"]
[servers.evh]
url = "http://127.0.0.1:$EV_PORT/mcp"
[servers.py]
command = "$PY"
args = ["$PY_SERVER"]
[servers.demo]
command = "$BIN"
args = ["demo-server", "--era", "modern", "--tools-page", "3"]
[endpoints.team]
servers = ["ev", "evh", "py", "demo"]
title = "interop"
[endpoints.guarded]
servers = ["ev", "demo"]
[[policy]]
endpoint = "guarded"
confirm = ["*__echo"]
allow = ["*"]
EOF
BPORT="$(ci_free_port "$PY")"
BLOG="$WORK/bridge.log"
"$BIN" serve --config "$WORK/endpoint.toml" --port "$BPORT" >"$BLOG" 2>&1 & PIDS+=($!)
BRIDGE=${PIDS[-1]}
ci_bridge_up "$BRIDGE" "$BLOG" "$BPORT"
URL="http://127.0.0.1:$BPORT/endpoints/team/mcp"
GUARDED="http://127.0.0.1:$BPORT/endpoints/guarded/mcp"
# Every member ready before the callers start (the lists would lack a starting one).
for _ in $(seq 1 150); do
  curl -fsS -o /dev/null "http://127.0.0.1:$BPORT/readyz" 2>/dev/null && break
  sleep 0.2
done

caller() {
  local name="$1" out rc; shift
  log "$name: $*"
  out="$(timeout 300 "$@")"; rc=$?
  ci_client_counts "$out" "$rc" || echo "FAIL $name: no summary line (exit $rc)"
  ci_add "$CI_P" "$CI_F"
  if [ "$CI_F" -ne 0 ]; then log "$name: bridge log (last 60 lines):"; tail -n 60 "$BLOG" | sed 's/^/    /' >&2; fi
}
for c in ${INTEROP_ENDPOINT_CALLERS:-py-auto py-legacy ts-2025 py-2026}; do
  case "$c" in
    py-auto) caller "$c" "$PY" "$PY_CLIENT" "$URL" --mode auto --guarded "$GUARDED" ;;
    py-legacy) caller "$c" "$PY" "$PY_CLIENT" "$URL" --mode legacy --guarded "$GUARDED" ;;
    ts-2025) caller "$c" "$NODE" "$TS_CLIENT" "$URL" "$GUARDED" ;;
    py-2026) caller "$c" "$PY" "$PY_CLIENT" "$URL" --mode 2026-07-28 --guarded "$GUARDED" --bridge-log "$BLOG" ;;
    *) echo "FAIL $c: unknown caller"; ci_add 0 1 ;;
  esac
done
if kill -0 "$BRIDGE" 2>/dev/null; then
  echo "PASS bridge: still running after every caller"; ci_add 1 0
else
  echo "FAIL bridge: exited"; ci_add 0 1; tail -n 60 "$BLOG" >&2
fi
ci_result
[ "$CI_FAILED" -eq 0 ]
