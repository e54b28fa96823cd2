#!/usr/bin/env bash
# The benches' smoke checks: every `[[bench]]` of Cargo.toml (harness = false binaries) run by
# `cargo test --bench NAME`, i.e. without `--bench` on their command line, which each of them
# takes as "smoke run": frames asserts the bridge's rewrites equal the naive ones and runs each
# divan bench once; e2e runs one short cell each way and fails on an error or an empty cell;
# streams opens 20 streams per era and fails if one did not open; connect runs connect and
# the floor forwarder through every cell once and fails on an error or an empty cell. One check per bench binary
# (its exit status). Not `cargo test --benches`: that also reruns the library's unit tests.
#
# Usage:  bash .ci/bench-smoke.sh
# Output: each bench's output, `expected: N checks`, then `N passed, M failed`. Expects
# BENCHES_EXPECTED (below) benches; fewer in Cargo.toml is a failure.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" bench-smoke || exit 2
cd "$(dirname "$0")/.." || exit 2

# frames, e2e, streams, connect: raise it when a [[bench]] is added to Cargo.toml.
BENCHES_EXPECTED=4
ci_expect "$BENCHES_EXPECTED"

# The `name = "…"` line after each `[[bench]]` header.
mapfile -t benches < <(awk '/^\[\[bench\]\]/ { b = 1; next } /^\[/ { b = 0 } b && /^name *=/ { gsub(/.*= *"|".*/, ""); print }' Cargo.toml)
log "benches in Cargo.toml: ${benches[*]:-none}"
for b in "${benches[@]}"; do
  log "cargo test --bench $b"
  if cargo test --bench "$b" 2>&1; then
    echo "PASS bench smoke $b"
    ci_add 1 0
  else
    echo "FAIL bench smoke $b"
    ci_add 0 1
  fi
done
ci_result
[ "$CI_FAILED" -eq 0 ]
