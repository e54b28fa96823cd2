#!/usr/bin/env bash
# Serve direction vs its peers: a stdio MCP child published as Streamable HTTP, under wrk.
# Every subject publishes the same stdio child, `mcp-bridge demo-server`:
#
#   bridge-2025   mcp-bridge serve, 2025 session protocol (benches/wrk/echo_session.lua)
#   bridge-2026   mcp-bridge serve, 2026-07-28 stateless (benches/wrk/echo.lua, no session)
#   supergateway  npm supergateway 4.0.0 --outputTransport streamableHttp --stateful
#                 (stateful: one child for the session; its stateless mode spawns and
#                 auto-initializes a fresh child for every POST, which measures process spawns)
#   mcp-proxy-py  PyPI mcp-proxy 0.13.0, stateful (its default, --no-stateless: one child for
#                 the proxy's life, the 2025 session served by the python SDK's session manager)
#   mcp-stdio-proxy  crates.io mcp-stdio-proxy 0.2.10 (rust/bin/mcp-proxy), its `proxy
#                 --protocol stream` mode: rmcp's Streamable HTTP server in its stateful
#                 (legacy session) mode, one child for the proxy's life, served on every path
#
# The 2025 subjects: POST initialize (protocolVersion PROTO, default 2025-11-25, which every
# 2025 subject accepts and echoes; the negotiated version is what the lua script sends), Mcp-Session-Id from the
# response header, POST notifications/initialized, a curl sanity call, then wrk with
# benches/wrk/echo_session.lua (tools/call echo {"text": N bytes}, a distinct JSON-RPC id per
# request, every answer checked for status 200, "result" and the echoed text, JSON or SSE).
# bridge-2026 runs the existing echo.lua (static body, checked for non-200 only by wrk; one curl
# sanity call checks its answer's text before wrk).
#
# Cells: 1 connection 100 B, 16 connections 100 B, 16 connections 65536 B; `wrk -t1 -cN`.
# RUNS rounds, interleaved: in each round every cell runs every subject (the subject order
# rotates by one per round); each subject is started fresh for every cell (a new server and a
# new child, a new session) and stopped after it. Each cell: WARMUP s of wrk (not measured),
# then SECS s measured. CPU: utime+stime+cutime+cstime summed over the subject's process tree
# (the server and its descendants, from /proc/PID/stat; a child that exits and is reaped lands
# in its parent's cutime/cstime) just before and just after the measured window, per 10k
# requests. A cell with any bad body, non-200, or socket error/timeout in any run is reported
# as FAILED, not as a speed. Output: the commands used, one line per run, and a markdown table
# of medians over the runs (req/s with min-max, p50 latency, CPU s/10k) with mcp-bridge /
# best peer ratios (req/s: the highest peer; p50 and CPU: the lowest; the peers speak 2025
# only, so bridge-2026's ratios compare across protocols). wrk's own CPU is not counted; it
# shares the machine's cores with the subject (on 2 cores: wrk, the server and its child).
#
# Logging is turned down on every subject (supergateway --logLevel none, mcp-proxy
# --log-level WARNING, mcp-bridge --log-level warn, mcp-stdio-proxy -q and its default warn):
# supergateway logs every message at info.
# Only 127.0.0.1 is used by the clients; ports are picked free with python. supergateway
# 4.0.0 has no bind-address flag (it listens on all interfaces for the few seconds of a cell).
#
# Usage: benches/connect/peers.sh   # once: installs the peers into target/bench-peers
#        benches/serve_peers.sh
# Knobs (env): RUNS (3), SECS (3), WARMUP (1), PROTO (2025-11-25),
#   SUBJECTS ("bridge-2025 bridge-2026 supergateway mcp-proxy-py mcp-stdio-proxy"),
#   CELLS ("1:100 16:100 16:65536", CONNS:BYTES), WRK_TIMEOUT (5s),
#   MCP_BRIDGE_BIN (target/release/mcp-bridge), PEERS_DIR (target/bench-peers),
#   OUT (a directory to keep the logs and results.tsv in; default a temp dir, removed).
# Needs: wrk (apt-get install wrk), curl, python3, node (for supergateway).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
PEERS="${PEERS_DIR:-target/bench-peers}"
RUNS="${RUNS:-3}"
SECS="${SECS:-3}"
WARMUP="${WARMUP:-1}"
PROTO="${PROTO:-2025-11-25}"
SUBJECTS="${SUBJECTS:-bridge-2025 bridge-2026 supergateway mcp-proxy-py mcp-stdio-proxy}"
CELLS="${CELLS:-1:100 16:100 16:65536}"
WRK_TIMEOUT="${WRK_TIMEOUT:-5s}"
command -v wrk >/dev/null || { echo "wrk is required (apt-get install wrk)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "bridge binary $BIN not found (cargo build --release)" >&2; exit 2; }
SG="$root/$PEERS/node_modules/.bin/supergateway"
PYP="$root/$PEERS/py/bin/mcp-proxy"
RSP="$root/$PEERS/rust/bin/mcp-proxy"
unset RUST_LOG  # mcp-stdio-proxy's log filter: its default (warn), not the caller's
subjects=()
for s in $SUBJECTS; do
  case "$s" in
    supergateway) [ -x "$SG" ] || { echo "skipping supergateway: $SG missing (benches/connect/peers.sh)" >&2; continue; } ;;
    mcp-proxy-py) [ -x "$PYP" ] || { echo "skipping mcp-proxy-py: $PYP missing (benches/connect/peers.sh)" >&2; continue; } ;;
    mcp-stdio-proxy) [ -x "$RSP" ] || { echo "skipping mcp-stdio-proxy: $RSP missing (benches/connect/peers.sh)" >&2; continue; } ;;
    bridge-2025 | bridge-2026) ;;
    *) echo "unknown subject $s" >&2; exit 2 ;;
  esac
  subjects+=("$s")
done

if [ -n "${OUT:-}" ]; then work="$OUT"; mkdir -p "$work"; keep=1; else work="$(mktemp -d -t mcpb-serve-peers.XXXXXX)"; keep=0; fi
spid=""     # the running subject's pid (its own process group, via setsid)
stree=""    # its tree's pids, last seen
wpid=""
stop_subject() {
  [ -n "$spid" ] || return 0
  kill -TERM -- "-$spid" 2>/dev/null || true
  for p in $stree; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 30); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$spid" 2>/dev/null || true
  for p in $stree; do kill -KILL "$p" 2>/dev/null || true; done
  wait "$spid" 2>/dev/null || true
  spid=""; stree=""
}
cleanup() {
  [ -n "$wpid" ] && kill "$wpid" 2>/dev/null || true
  stop_subject
  [ "$keep" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Prints "TICKS PID..." for the tree under $1: utime+stime+cutime+cstime of every live process.
tree_ticks() {
  python3 - "$1" <<'PY'
import os, sys
root = int(sys.argv[1]); kids = {}; ticks = {}
for d in os.listdir("/proc"):
    if not d.isdigit():
        continue
    try:
        s = open(f"/proc/{d}/stat").read()
    except OSError:
        continue
    r = s.rsplit(")", 1)[1].split()  # r[0] is field 3 (state): field N is r[N-3]
    kids.setdefault(int(r[1]), []).append(int(d))
    ticks[int(d)] = sum(int(x) for x in r[11:15])
tot, seen, stack = 0, [], [root]
while stack:
    p = stack.pop()
    if p in ticks:
        tot += ticks[p]; seen.append(p)
    stack += kids.get(p, [])
print(tot, *seen)
PY
}
hz="$(getconf CLK_TCK)"

# The subject's command line, for PORT $2 (an array in cmd).
subject_cmd() {
  case "$1" in
    bridge-2025 | bridge-2026)
      cmd=("$BIN" --log-level warn serve --host 127.0.0.1 --port "$2" -- "$BIN" demo-server) ;;
    supergateway)
      cmd=("$SG" --stdio "$BIN demo-server" --outputTransport streamableHttp --stateful
           --port "$2" --logLevel none) ;;
    mcp-proxy-py)
      cmd=("$PYP" --log-level WARNING --host 127.0.0.1 --port "$2" --no-stateless -- "$BIN" demo-server) ;;
    mcp-stdio-proxy)
      cmd=("$RSP" proxy --host 127.0.0.1 --port "$2" --protocol stream -q
           --config "{\"mcpServers\":{\"demo\":{\"command\":\"$BIN\",\"args\":[\"demo-server\"]}}}") ;;
  esac
}
text_of() { python3 -c 'import sys; n=int(sys.argv[1]); a="abcdefghijklmnopqrstuvwxyz0123456789 "; print("".join(a[i%len(a)] for i in range(n)), end="")' "$1"; }
H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')

# Starts subject $1, mints its session; sets spid, url, sid, ver. Returns 1 on failure.
start_subject() {
  local name="$1" port log
  port="$(free_port)"; url="http://127.0.0.1:$port/mcp"; log="$work/$name.log"
  subject_cmd "$name" "$port"
  setsid "${cmd[@]}" >>"$log" 2>&1 </dev/null &
  spid=$!
  local up=""
  for _ in $(seq 200); do
    kill -0 "$spid" 2>/dev/null || break
    code="$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" || true)"
    [ "$code" != 000 ] && { up=1; break; }
    sleep 0.05
  done
  [ -n "$up" ] || { echo "$name did not listen on $url (log: $(tail -3 "$log"))" >&2; return 1; }
  sid=""; ver=""
  [ "$name" = bridge-2026 ] && return 0
  local init='{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"serve_peers","version":"0"}}}'
  curl -s -m 10 -D "$work/init.hdr" -o "$work/init.body" "${H[@]}" -d "$init" "$url" || true
  sid="$(awk 'tolower($1)=="mcp-session-id:" {print $2}' "$work/init.hdr" | tr -d '\r')"
  ver="$(grep -o '"protocolVersion" *: *"[^"]*"' "$work/init.body" | head -n1 | sed 's/.*"\([^"]*\)"$/\1/')"
  if [ -z "$sid" ] || [ -z "$ver" ]; then
    echo "$name: initialize failed: $(head -c 300 "$work/init.hdr" "$work/init.body")" >&2; return 1
  fi
  code="$(curl -s -m 10 -o /dev/null -w '%{http_code}' "${H[@]}" -H "Mcp-Session-Id: $sid" \
    -H "MCP-Protocol-Version: $ver" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url")"
  case "$code" in 200 | 202 | 204) ;; *) echo "$name: notifications/initialized answered $code" >&2; return 1 ;; esac
  return 0
}

# A curl call of tools/call echo on the running subject; 0 if the text came back.
sanity() {
  local name="$1" t body
  t="$(text_of 100)"
  if [ "$name" = bridge-2026 ]; then
    body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'"$t"'"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
    curl -s -m 10 "${H[@]}" -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' \
      -H 'Mcp-Name: echo' -d "$body" "$url" >"$work/sanity.body" || true
  else
    body='{"jsonrpc":"2.0","id":"sanity","method":"tools/call","params":{"name":"echo","arguments":{"text":"'"$t"'"}}}'
    curl -s -m 10 "${H[@]}" -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $ver" \
      -d "$body" "$url" >"$work/sanity.body" || true
  fi
  grep -qF "$t" "$work/sanity.body" || { echo "$name: echo sanity call failed: $(head -c 300 "$work/sanity.body")" >&2; return 1; }
}

run_wrk() { # name conns bytes secs -> wrk output in $work/wrk.out
  local script="$root/benches/wrk/echo_session.lua"
  [ "$1" = bridge-2026 ] && script="$root/benches/wrk/echo.lua"
  MCP_SESSION_ID="$sid" MCP_PROTOCOL_VERSION="$ver" ECHO_BYTES="$3" \
    wrk -t1 -c"$2" -d"$4s" --timeout "$WRK_TIMEOUT" -s "$script" "$url" >"$work/wrk.out" 2>&1 &
  wpid=$!
  wait "$wpid" || true
  wpid=""
}

echo "# mcp-bridge serve vs peers: RUNS=$RUNS SECS=$SECS WARMUP=$WARMUP PROTO=$PROTO CELLS=\"$CELLS\" ($(nproc) cores, $(date -u +%FT%TZ))"
echo "# commands (PORT free, picked per cell):"
for s in "${subjects[@]}"; do subject_cmd "$s" PORT; printf '#   %-13s %s\n' "$s" "${cmd[*]}"; done
echo "#   2025 handshake: curl -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"$PROTO\",...}}' http://127.0.0.1:PORT/mcp;"
echo "#     then the same with Mcp-Session-Id: SID, MCP-Protocol-Version: VER and {\"method\":\"notifications/initialized\"}"
echo "#   2025 load: MCP_SESSION_ID=SID MCP_PROTOCOL_VERSION=VER ECHO_BYTES=BYTES wrk -t1 -cCONNS -d${SECS}s --timeout $WRK_TIMEOUT -s benches/wrk/echo_session.lua http://127.0.0.1:PORT/mcp"
echo "#   2026 load: ECHO_BYTES=BYTES wrk -t1 -cCONNS -d${SECS}s --timeout $WRK_TIMEOUT -s benches/wrk/echo.lua http://127.0.0.1:PORT/mcp"
[ "$WARMUP" != 0 ] && echo "#   each preceded by the same wrk for ${WARMUP}s, not measured"

res="$work/results.tsv"
: >"$res"
ns=${#subjects[@]}
for round in $(seq 1 "$RUNS"); do
  for cell in $CELLS; do
    conns="${cell%%:*}"; bytes="${cell##*:}"
    for i in $(seq 0 $((ns - 1))); do
      name="${subjects[$(((i + round - 1) % ns))]}"
      if ! start_subject "$name" || ! sanity "$name"; then
        printf '%s\t%s\t%s\t%s\t-\t-\t-\t-\tstart\n' "$round" "$name" "$conns" "$bytes" >>"$res"
        echo "run $round $name c$conns ${bytes}B: FAILED to start (see above)"
        stop_subject; continue
      fi
      if [ "$WARMUP" != 0 ]; then run_wrk "$name" "$conns" "$bytes" "$WARMUP"; fi
      read -r t0 stree < <(tree_ticks "$spid")
      run_wrk "$name" "$conns" "$bytes" "$SECS"
      read -r t1 stree < <(tree_ticks "$spid")
      out="$(cat "$work/wrk.out")"
      reqs="$(awk '/requests in/ {print $1}' <<<"$out")"
      rps="$(awk '/^Requests\/sec/ {print $2}' <<<"$out")"
      p50="$(awk '/latency p50/ {print $3}' <<<"$out")"
      bad="$(awk '/^bad bodies/ {print $3}' <<<"$out")"
      n200="$(awk '/^non-200/ {print $3}' <<<"$out")"
      sock="$(awk '/Socket errors/ {gsub(",", ""); print $4+$6+$8+$10}' <<<"$out")"
      errs=$(( ${bad:-0} + ${n200:-0} + ${sock:-0} ))
      [ -n "$reqs" ] && [ "$reqs" -gt 0 ] || errs=$((errs + 1))
      cpu="$(python3 -c "print(f'{($t1-$t0)/$hz/max(${reqs:-0},1)*1e4:.3f}')")"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$conns" "$bytes" "${rps:--}" "${p50:--}" "$cpu" "${reqs:-0}" \
        "$errs" >>"$res"
      printf 'run %s %-13s c%-2s %6sB: %9s req/s  p50 %8s ms  CPU %6s s/10k  (%s requests, %s errors: %s bad bodies, %s non-200, %s socket)\n' \
        "$round" "$name" "$conns" "$bytes" "${rps:--}" "${p50:--}" "$cpu" "${reqs:-0}" "$errs" "${bad:--}" "${n200:-0}" "${sock:-0}"
      [ "$errs" = 0 ] || sed 's/^/    wrk: /' <<<"$out" | head -n 20
      stop_subject
    done
  done
done

python3 - "$res" "$CELLS" "${subjects[@]}" <<'PY'
import sys, statistics as st
res, cells, subjects = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
rows = {}
for line in open(res):
    rnd, name, c, b, rps, p50, cpu, reqs, errs = line.rstrip("\n").split("\t")
    rows.setdefault((c, b, name), []).append((rps, p50, cpu, errs))
peers = [s for s in subjects if not s.startswith("bridge")]
print()
print("| cell | subject | req/s (median, min-max) | p50 ms | CPU s/10k | req/s ÷ best peer | p50 ÷ best peer | CPU ÷ best peer |")
print("|---|---|---|---|---|---|---|---|")
for cell in cells:
    c, b = cell.split(":")
    med = {}
    for s in subjects:
        runs = rows.get((c, b, s), [])
        failed = [r for r in runs if r[3] == "start" or r[3] != "0"]
        if not runs or failed:
            why = "start failed" if any(r[3] == "start" for r in failed) else \
                f"{sum(int(r[3]) for r in failed if r[3].isdigit())} errors"
            med[s] = None
            print(f"| {c} conn, {b} B | {s} | FAILED ({why}, {len(failed)}/{len(runs)} runs) | | | | | |")
            continue
        r = [float(x[0]) for x in runs]; p = [float(x[1]) for x in runs]; u = [float(x[2]) for x in runs]
        med[s] = (st.median(r), st.median(p), st.median(u), min(r), max(r))
    ok = [s for s in peers if med.get(s)]
    best = (max(med[s][0] for s in ok), min(med[s][1] for s in ok), min(med[s][2] for s in ok)) if ok else None
    for s in subjects:
        m = med.get(s)
        if not m:
            continue
        ratio = ["", "", ""]
        if s.startswith("bridge") and best:
            ratio = [f"{m[0]/best[0]:.2f}x", f"{m[1]/best[1]:.2f}x", f"{m[2]/best[2]:.2f}x"]
        print(f"| {c} conn, {b} B | {s} | {m[0]:.0f} ({m[3]:.0f}-{m[4]:.0f}) | {m[1]:.3f} | {m[2]:.3f} | " + " | ".join(ratio) + " |")
PY
echo
echo "# wall time: ${SECONDS}s"
