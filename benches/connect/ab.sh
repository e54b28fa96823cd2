#!/usr/bin/env bash
# Interleaved A/B of `connect` across builds: ROUNDS rounds, each runs every binary once as
# `connect` (fresh process) in front of one `serve --demo` (the first binary, started once),
# driven by benches/connect/host.py: N 2026-07-28 `tools/call echo` with WINDOW in flight.
# Prints each run (req/s, and connect's own CPU per request from /usr/bin/time) and the medians per binary. Only 127.0.0.1.
# Usage: ROUNDS=3 N=5000 WINDOW=16 benches/connect/ab.sh BIN_A BIN_B [...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rounds="${ROUNDS:-3}"
n="${N:-5000}"
window="${WINDOW:-16}"
port="${PORT:-18961}"
url="http://127.0.0.1:$port/mcp"
"$1" serve --host 127.0.0.1 --port "$port" --demo 2>/dev/null &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
declare -A all cpu
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    # /usr/bin/time reports connect's own user+system CPU (the host is a separate process).
    out="$(RUST_LOG=warn python3 "$here/host.py" "$n" "$window" \
      /usr/bin/time -f 'cpu %U %S' "$bin" connect "$url" --protocol 2026-07-28 2>&1)"
    read -r reqs secs < <(grep -E '^[0-9]+ [0-9.]+$' <<<"$out" | head -1)
    read -r _ u s < <(grep '^cpu ' <<<"$out" | head -1)
    rps="$(awk -v n="$reqs" -v t="$secs" 'BEGIN {printf "%.0f", n / t}')"
    us="$(awk -v u="$u" -v s="$s" -v n="$reqs" 'BEGIN {printf "%.1f", (u + s) * 1e6 / n}')"
    echo "round $r  $bin  $rps req/s  connect CPU $us µs/req  load $(cut -d' ' -f1 /proc/loadavg)"
    all[$bin]="${all[$bin]:-} $rps"
    cpu[$bin]="${cpu[$bin]:-} $us"
  done
done
for bin in "$@"; do
  echo "median $bin: $(median <<<"${all[$bin]}") req/s (${all[$bin]} ), connect CPU $(median <<<"${cpu[$bin]}") µs/req (${cpu[$bin]} )"
done
