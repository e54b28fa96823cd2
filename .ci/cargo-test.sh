#!/usr/bin/env bash
# The README's test command, `cargo test` (unit, property, integration and doc tests), counted:
# the passed/failed figures are the sum of cargo's `test result:` lines, and the script expects
# at least as many passed tests as there are test functions in src/ and tests/ (lines
# `#[test]` / `#[tokio::test…]`, minus the `#[ignore]`d ones), and never fewer than
# CARGO_TEST_FLOOR. So a test binary that is no longer built or run, a module cfg'd out, or a
# test deleted without lowering the floor fails the step instead of shrinking the count.
#
# Usage:  bash .ci/cargo-test.sh          (no arguments: the count is of the whole suite)
# Output: cargo's output, `expected: N checks`, then `N passed, M failed`; exit 0 only if cargo
# passed and at least N tests passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" cargo-test || exit 2
cd "$(dirname "$0")/.." || exit 2

# What `cargo test` passed on 2026-12-08: 490 (the test functions counted as below, plus doc
# tests). Raise it when tests are added; lower it only in the commit that deletes tests.
CARGO_TEST_FLOOR=490

attrs=$(grep -rhE '^[[:space:]]*#\[(tokio::)?test\b' src tests | wc -l)
ignored=$(grep -rhE '^[[:space:]]*#\[ignore\b' src tests | wc -l)
counted=$((attrs - ignored))
expected=$((counted > CARGO_TEST_FLOOR ? counted : CARGO_TEST_FLOOR))
log "$attrs test attributes, $ignored ignored: $counted test functions (floor $CARGO_TEST_FLOOR)"
ci_expect "$expected"

# tests/serve/observability.rs lints /metrics with promtool, and under CI a missing promtool
# fails that test rather than skipping it: install it (Debian package prometheus) first.
if ci_is_ci && ! command -v promtool >/dev/null; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  log "installing promtool (Debian package prometheus) for tests/serve/observability.rs"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus; } >/dev/null 2>&1 ||
    log "apt-get install prometheus failed: the promtool check will fail"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo test 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

# One `test result: ok. P passed; F failed; …` line per test binary and one for the doc tests.
p=0
f=0
while read -r bp bf; do
  p=$((p + bp))
  f=$((f + bf))
done < <(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$out")
# A build failure or a crashed test binary leaves no failed count of its own.
[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
ci_add "$p" "$f"
if [ "$p" -lt "$expected" ]; then
  # Failed tests already fail the step; this catches tests that did not run at all.
  echo "FAIL only $p tests passed, $expected expected (test functions counted: $counted, floor: $CARGO_TEST_FLOOR)"
  ci_add 0 1
fi
ci_result
[ "$CI_FAILED" -eq 0 ]
