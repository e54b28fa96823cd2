#!/usr/bin/env bash
# Short fuzz runs: every cargo-fuzz target in fuzz/ on its committed corpus for a bounded
# time (FUZZ_SECS each, 15 by default), failing on a crash, a leak or a broken invariant.
# Each target counts as one check in the closing `N passed, M failed` line; the script expects
# FUZZ_TARGETS_EXPECTED (below) of them and fails when fewer ran (e.g. `cargo fuzz list` empty).
# The long runs (>= 10 million executions each) and their figures are in fuzz/README.md.
#
# Needs the nightly toolchain (rustup); installs cargo-fuzz from crates.io if missing. The
# fuzz build has its own target dir (fuzz/target) and is bounded by FUZZ_BUILD_TIMEOUT
# (seconds, default 2400).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" fuzz || exit 2
# The targets in fuzz/fuzz_targets/ ([[bin]] in fuzz/Cargo.toml): raise it when one is added.
FUZZ_TARGETS_EXPECTED=8
ci_expect "$FUZZ_TARGETS_EXPECTED"
cd "$(dirname "$0")/../fuzz" || die "no fuzz/ directory"
secs="${FUZZ_SECS:-15}"
rustup run nightly rustc --version >/dev/null 2>&1 ||
  die "the nightly toolchain is missing (rustup toolchain install nightly)"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked >/dev/null 2>&1 || die "cannot install cargo-fuzz"
fi
log "building the fuzz targets"
timeout "${FUZZ_BUILD_TIMEOUT:-2400}" cargo +nightly fuzz build >build.log 2>&1 || {
  tail -n 30 build.log
  die "the fuzz build failed or ran out of time"
}
for t in $(cargo +nightly fuzz list); do
  # A scratch copy of the corpus: what the short run adds is not kept.
  work=$(mktemp -d)
  cp -r "corpus/$t/." "$work/"
  out=$(mktemp)
  rc=0
  timeout $((secs + 120)) cargo +nightly fuzz run "$t" "$work" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$out" 2>&1 || rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$out")
  if [ "$rc" -eq 0 ]; then
    log "$t: ok, ${execs:-?} executions in ${secs}s"
    ci_add 1 0
  else
    tail -n 40 "$out"
    log "$t: FAILED (exit $rc; reproducer under fuzz/artifacts/$t/)"
    ci_add 0 1
  fi
  rm -f "$out"
  rm -rf "$work"
done
rm -f build.log
ci_result
[ "$CI_FAILED" -eq 0 ]
