#!/usr/bin/env bash
# Interleaved A/B throughput of several bridge builds with wrk: ROUNDS rounds, each round runs
# every binary once (fresh bridge + demo child, 16 keep-alive connections, 2026-07-28
# `tools/call echo` with 100 B of text, SECS seconds), so a burst of outside load hits one round
# of every binary rather than every run of one. Prints each run (req/s, and the bridge's own CPU
# per request from /proc/PID/stat, which a busy machine disturbs less than req/s) and the
# medians per binary.
# Usage: ROUNDS=3 SECS=5 benches/wrk/ab.sh BIN_A BIN_B [...]   (needs wrk; only 127.0.0.1)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rounds="${ROUNDS:-3}"
secs="${SECS:-5}"
port="${PORT:-18951}"
url="http://127.0.0.1:$port/mcp"
declare -A all cpu
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    "$bin" serve --host 127.0.0.1 --port "$port" --demo 2>/dev/null &
    bpid=$!
    for _ in $(seq 1 200); do
      curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
      sleep 0.05
    done
    cpu0="$(awk '{print $14 + $15}' "/proc/$bpid/stat")"
    out="$(ECHO_BYTES=100 wrk -t1 -c16 -d"${secs}s" -s "$here/echo.lua" "$url")"
    cpu1="$(awk '{print $14 + $15}' "/proc/$bpid/stat")"
    kill "$bpid"; wait "$bpid" 2>/dev/null || true
    reqs="$(awk '/requests in/ {print $1}' <<<"$out")"
    us="$(awk -v a="$cpu0" -v b="$cpu1" -v n="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b - a) / hz * 1e6 / n}')"
    rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")"
    bad="$(awk '/non-200/ {print $3}' <<<"$out")"
    echo "round $r  $(basename "$bin")  $rps req/s  bridge CPU $us µs/req ${bad:+non-200: $bad}  load $(cut -d' ' -f1 /proc/loadavg)"
    all[$bin]="${all[$bin]:-} $rps"
    cpu[$bin]="${cpu[$bin]:-} $us"
  done
done
for bin in "$@"; do
  echo "median $(basename "$bin"): $(median <<<"${all[$bin]}") req/s (${all[$bin]} ), bridge CPU $(median <<<"${cpu[$bin]}") µs/req (${cpu[$bin]} )"
done
