#!/usr/bin/env bash
# Slow-connection attack against `mcp-bridge serve --demo` on 127.0.0.1: a legitimate
# tools/call's latency (fresh connection per call: accept, head, body, answer) before and during
# N slow connections (half heads and stalled bodies), and when the bridge closed the attackers.
#
#   benches/slowloris.sh [BRIDGE FLAGS...]     e.g. benches/slowloris.sh --header-timeout 5s
#
# Environment: N (3000 slow connections), PROBES (200 calls per measurement), HOLD (60 s the
# attackers wait for the server to close them), MCP_BENCH_BRIDGE (the binary; default: the
# release build in $CARGO_TARGET_DIR, built if missing). Needs python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-3000}
PROBES=${PROBES:-200}
HOLD=${HOLD:-60}
TARGET=${CARGO_TARGET_DIR:-target}
BRIDGE=${MCP_BENCH_BRIDGE:-$TARGET/release/mcp-bridge}
if [[ ! -x $BRIDGE ]]; then
    cargo build --release --bin mcp-bridge
fi
# Each attacker is a descriptor on both sides; the bridge's --max-connections default follows
# its own limit (10000, or fewer to keep a quarter free).
ulimit -n "$(ulimit -Hn)"
if (( $(ulimit -n) < N + 512 )); then
    echo "ulimit -n is $(ulimit -n): too low for N=$N slow connections" >&2
    exit 78
fi
log=$(mktemp)
attack=$(mktemp)
"$BRIDGE" --log-level info serve --demo --demo-era modern --port 0 "$@" 2>"$log" &
bridge=$!
trap 'kill $bridge 2>/dev/null; wait $bridge 2>/dev/null; rm -f "$log" "$attack"' EXIT
for _ in $(seq 200); do
    addr=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\)\/.*/\1/p' "$log" | head -1)
    [[ -n $addr ]] && break
    sleep 0.05
done
[[ -n ${addr:-} ]] || { echo "bridge did not start:"; cat "$log"; exit 1; } >&2
for _ in $(seq 200); do
    curl -fsS -o /dev/null "http://$addr/readyz" && break
    sleep 0.05
done
echo "bridge: $BRIDGE $* on $addr; N=$N PROBES=$PROBES HOLD=${HOLD}s; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo -n "before:  "
python3 benches/slowloris.py measure "$addr" "$PROBES"
started=$(date +%s.%N)
python3 benches/slowloris.py attack "$addr" "$N" "$HOLD" >"$attack" &
attacker=$!
for _ in $(seq 1200); do
    [[ -s $attack ]] && break
    sleep 0.05
done
echo -n "attack:  "
head -1 "$attack"
echo -n "during:  "
python3 benches/slowloris.py measure "$addr" "$PROBES"
echo "during measurement ended $(echo "$(date +%s.%N) - $started" | bc) s after the attack began"
wait $attacker
echo -n "closed:  "
tail -1 "$attack"
echo -n "after:   "
python3 benches/slowloris.py measure "$addr" "$PROBES"
