#!/usr/bin/env bash
# The systemd units in systemd/: `systemd-analyze verify` (syntax, directives, that ExecStart
# and the socket's Service= resolve), and `systemd-analyze security --offline` with a ceiling
# on the exposure score so the sandbox cannot silently loosen. Needs systemd-analyze (Debian
# package `systemd`); runs without a running systemd. Expects 3 checks (verify, security,
# check-config); fewer is a failure. Last line: `N passed, M failed`.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" systemd || exit 2
cd "$(dirname "$0")/.." || exit 2
# verify, security, check-config: raise it when a check is added.
ci_expect 3
bin="${MCP_BRIDGE_BIN:-$PWD/target/debug/mcp-bridge}"
max_exposure="${MCP_BRIDGE_MAX_EXPOSURE:-2.0}"
ok() { echo "ok: $*"; ci_add 1 0; }
bad() { echo "FAILED: $*"; ci_add 0 1; }

if ! command -v systemd-analyze >/dev/null; then
  bad "systemd-analyze not found (apt-get install systemd)"
  ci_result
  exit 1
fi
if [ ! -x "$bin" ]; then
  cargo build --quiet || { bad "cargo build"; ci_result; exit 1; }
fi

# verify resolves ExecStart: point the units at the binary just built.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in systemd/*.service systemd/*.socket; do
  sed "s#/usr/local/bin/mcp-bridge#$bin#g" "$f" >"$tmp/$(basename "$f")"
done

if out=$(cd "$tmp" && systemd-analyze verify --man=no ./mcp-bridge.service ./mcp-bridge.socket 2>&1) \
  && [ -z "$out" ]; then
  ok "systemd-analyze verify mcp-bridge.service mcp-bridge.socket"
else
  bad "systemd-analyze verify: $out"
fi

if sec=$(cd "$tmp" && systemd-analyze security --offline=yes ./mcp-bridge.service 2>&1); then
  level=$(sed -nE 's/.*Overall exposure level for mcp-bridge.service: ([0-9.]+).*/\1/p' <<<"$sec")
  echo "$sec" | grep -E '^✗|Overall'
  if [ -n "$level" ] && awk -v l="$level" -v m="$max_exposure" 'BEGIN { exit !(l <= m) }'; then
    ok "systemd-analyze security: exposure $level <= $max_exposure"
  else
    bad "systemd-analyze security: exposure ${level:-unknown} > $max_exposure"
  fi
else
  bad "systemd-analyze security --offline: $sec"
fi

# The example configuration the unit would load passes check-config.
if "$bin" check-config examples/mcp-bridge.toml >/dev/null; then
  ok "check-config examples/mcp-bridge.toml"
else
  bad "check-config examples/mcp-bridge.toml"
fi

ci_result
[ "$CI_FAILED" -eq 0 ]
