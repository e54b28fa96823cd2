#!/usr/bin/env bash
# Short fuzz runs: every cargo-fuzz target in fuzz/ on its committed corpus for a bounded
# time (FUZZ_SECS each, 20 by default), failing on a crash, a leak or an invariant broken.
# The long runs (>= 10 million executions each) and their figures are in fuzz/README.md.
# Needs the nightly toolchain (rustup); installs cargo-fuzz from crates.io if missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FUZZ_SECS:-20}"
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "!! fuzz: the nightly toolchain is missing (rustup toolchain install nightly)"
  exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cargo +nightly fuzz build
status=0
for t in $(cargo +nightly fuzz list); do
  # A scratch copy of the corpus: what the short run adds is not kept.
  work=$(mktemp -d)
  cp -r "corpus/$t/." "$work/"
  echo "== fuzz $t (${secs}s)"
  log=$(mktemp)
  rc=0
  cargo +nightly fuzz run "$t" "$work" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$log"
    echo "!! fuzz $t failed (reproducer under fuzz/artifacts/$t/)"
    status=1
  fi
  rm -f "$log"
  rm -rf "$work"
done
exit $status
