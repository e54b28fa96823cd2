#!/usr/bin/env bash
# The soak (tests/soak/main.rs) at CI size: 20,000 mixed requests of both eras against the release
# bridge — 2025 sessions sharing one child, hang-ups and notifications/cancelled, child crashes
# and SIGKILLs mid-call, malformed and oversize bodies, a wrong Origin, a method 2026 removed —
# checking one answer per request with its own id, metrics against the client's counts, flat
# fds and RSS, no orphaned children, no panics.
#
# Builds nothing new: the bridge is $MCP_BRIDGE_BIN (the release binary .ci/run builds) and the
# load generator is the `soak` test binary `cargo test` built already (`#[ignore]`d there).
#
# Usage:  bash .ci/soak.sh
# Env:
#   MCP_BRIDGE_BIN   bridge binary (default: target/release/mcp-bridge)
#   SOAK_REQUESTS    requests (default 20000; the full run is 1000000, see benches/RESULTS.md)
#   SOAK_TIMEOUT     wall-clock bound in seconds for the whole script (default 110)
#
# Output: the soak's figures, cargo's `test result:` line, then `N passed, M failed` from that
# line. Expects 1 check (the `soak` test): a renamed or filtered-out test (`0 passed`) fails.
# Exit 0 only if it passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" soak || exit 2
cd "$(dirname "$0")/.." || die "no repository"
# The one `soak` test in tests/soak/main.rs.
ci_expect 1

export MCP_BRIDGE_BIN="${MCP_BRIDGE_BIN:-$PWD/target/release/mcp-bridge}"
ci_check_bin "$MCP_BRIDGE_BIN"
export SOAK_REQUESTS="${SOAK_REQUESTS:-20000}"
limit="${SOAK_TIMEOUT:-110}"
# The soak bounds itself a little inside the script's bound, so it fails with its own message.
export SOAK_MAX_SECS="${SOAK_MAX_SECS:-$((limit - 15))}"

log "soak: $SOAK_REQUESTS requests against $MCP_BRIDGE_BIN (bound ${limit}s)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout --kill-after=5 "$limit" cargo test --quiet --test soak -- --ignored --exact soak --nocapture 2>&1 |
  tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  die "the soak ran out of its ${limit}s bound"
fi
# cargo's own count, e.g. `test result: ok. 1 passed; 0 failed; 0 ignored; ...`.
counts=$(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$out" | tail -n1)
[ -n "$counts" ] || die "no \`test result:\` line from cargo (exit $rc)"
read -r p f <<<"$counts"
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
ci_add "$p" "$f"
ci_result
[ "$CI_FAILED" -eq 0 ]
