#!/usr/bin/env bash
# Run the official MCP conformance suite (npm @modelcontextprotocol/conformance, server mode)
# against `mcp-bridge serve` publishing tests/fixtures/conformance_server.py over Streamable HTTP.
#
# Usage:  bash .ci/conformance.sh            (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN          bridge binary (default: target/release/mcp-bridge)
#   MCP_BRIDGE_ARGS         extra args for `serve`, inserted before `--` (default: none)
#   CONFORMANCE_CACHE_DIR   where the suite + Node 22 are installed (default: target/conformance-tools)
#   CONFORMANCE_RESULTS_DIR where checks.json files go (default: target/conformance-results/<time>)
#   CONFORMANCE_PORT        port to serve on (default: a free port)
#   CONFORMANCE_SCENARIOS   space-separated subset to run (default: all 30 active scenarios)
#   CONFORMANCE_SCENARIO_TIMEOUT  seconds per scenario (default: 150)
#   CONFORMANCE_ALLOW_WARNINGS=1  count a scenario with WARNING checks (and no FAILURE) as passed
#   CONFORMANCE_VERBOSE=1   print every check of every scenario
#   CONFORMANCE_UPSTREAM=1  run the suite through `serve --upstream URL` in front of a second
#                           `serve` that publishes the fixture (a chain of two bridges; the far
#                           one is the 2025 child's bridge, so sampling and elicitation states
#                           minted there must pass the near one untouched)
#
# Exit status: 0 only if every requested scenario ran and passed (at least one SUCCESS check,
# no FAILURE, and no WARNING unless allowed) and the bridge was still running at the end (a
# bridge that died counts as one more failure). The suite's own exit code is not relied upon:
# in full-suite mode it ignores WARNING checks and a scenario that crashed writes no results.
# Expected count: one check per requested scenario (`expected: N checks`, 30 by default, the
# list below); the summary fails when fewer passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" conformance || exit 2

SUITE_VERSION=0.1.16
NODE_MAJOR=22
ACTIVE_SCENARIOS=(
  server-initialize logging-set-level ping completion-complete tools-list
  tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource
  tools-call-mixed-content tools-call-with-logging tools-call-error tools-call-with-progress
  tools-call-sampling tools-call-elicitation elicitation-sep1034-defaults
  server-sse-multiple-streams elicitation-sep1330-enums resources-list resources-read-text
  resources-read-binary resources-templates-read resources-subscribe resources-unsubscribe
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
  prompts-get-with-image dns-rebinding-protection
)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
CACHE="${CONFORMANCE_CACHE_DIR:-$REPO/target/conformance-tools}"
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="${CONFORMANCE_RESULTS_DIR:-$REPO/target/conformance-results/$STAMP}"
SCEN_TIMEOUT="${CONFORMANCE_SCENARIO_TIMEOUT:-150}"
FIXTURE="tests/fixtures/conformance_server.py"

# Unlike lib.sh's die, no `0 passed, 1 failed` line: this script's count is the summary's
# `conformance: N passed, M failed`, and .ci/run counts a failed set-up as a failed step.
die() { log "ERROR: $*"; exit 2; }

ci_check_bin "$BIN"
[ -f "$FIXTURE" ] || die "fixture $FIXTURE missing"
command -v python3 >/dev/null || die "python3 is required (fixture and helpers)"

# ---------------------------------------------------------------- install (idempotent)
ci_conformance_tools "$CACHE" "$SUITE_VERSION" "$NODE_MAJOR" || die "the conformance suite is not usable"
log "node $("$NODE" --version), conformance $("$NODE" "$SUITE_JS" --version)"

# ---------------------------------------------------------------- start the bridge
PORT="${CONFORMANCE_PORT:-$(ci_free_port python3)}"
URL="http://127.0.0.1:$PORT/mcp"
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
BRIDGE_LOG="$RESULTS/bridge.log"

read -r -a EXTRA_ARGS <<<"${MCP_BRIDGE_ARGS:-}"
FAR_PID=
if [ "${CONFORMANCE_UPSTREAM:-0}" = 1 ]; then
  FAR_PORT="$(ci_free_port python3)"
  FAR_LOG="$RESULTS/far-bridge.log"
  log "starting the far bridge: $BIN serve --port $FAR_PORT -- python3 $FIXTURE"
  setsid "$BIN" serve --port "$FAR_PORT" -- python3 "$FIXTURE" >"$FAR_LOG" 2>&1 &
  FAR_PID=$!
  ci_wait_listening "$FAR_PID" "$FAR_LOG" || { tail -n 50 "$FAR_LOG" >&2; die "the far bridge did not start"; }
  log "starting: $BIN serve --port $PORT ${EXTRA_ARGS[*]} --upstream http://127.0.0.1:$FAR_PORT/mcp"
  setsid "$BIN" serve --port "$PORT" "${EXTRA_ARGS[@]}" --upstream "http://127.0.0.1:$FAR_PORT/mcp" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
else
  log "starting: $BIN serve --port $PORT ${EXTRA_ARGS[*]} -- python3 $FIXTURE"
  # setsid: the bridge and the fixture it spawns get their own process group, so cleanup can
  # reach a fixture that outlives a crashed bridge (and nothing else).
  setsid "$BIN" serve --port "$PORT" "${EXTRA_ARGS[@]}" -- python3 "$FIXTURE" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
fi

cleanup() {
  if [ -n "${BRIDGE_PID:-}" ] && kill -0 "$BRIDGE_PID" 2>/dev/null; then
    kill -TERM "$BRIDGE_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$BRIDGE_PID" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$BRIDGE_PID" 2>/dev/null; then
      log "bridge did not exit within 10 s of SIGTERM; killing its process group"
      kill -KILL -- "-$BRIDGE_PID" 2>/dev/null
    fi
  fi
  # Whatever is left of the bridge's process group (e.g. an orphaned fixture).
  [ -n "${BRIDGE_PID:-}" ] && kill -TERM -- "-$BRIDGE_PID" 2>/dev/null
  BRIDGE_PID=
  # The far bridge last: the near one ends its session with it first.
  if [ -n "${FAR_PID:-}" ]; then
    kill -TERM "$FAR_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$FAR_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$FAR_PID" 2>/dev/null
    FAR_PID=
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ci_wait_listening "$BRIDGE_PID" "$BRIDGE_LOG"
case $? in
  2) log "bridge exited before listening; log:"; tail -n 50 "$BRIDGE_LOG" >&2; exit 1 ;;
  1) log "bridge not listening on port $PORT after 30 s; log:"; tail -n 50 "$BRIDGE_LOG" >&2; exit 1 ;;
esac
log "bridge listening at $URL (pid $BRIDGE_PID)"

# ---------------------------------------------------------------- run the scenarios
if [ -n "${CONFORMANCE_SCENARIOS:-}" ]; then
  read -r -a SCENARIOS <<<"$CONFORMANCE_SCENARIOS"
else
  SCENARIOS=("${ACTIVE_SCENARIOS[@]}")
fi
ci_expect "${#SCENARIOS[@]}"

: >"$RESULTS/exit-codes.txt"
for s in "${SCENARIOS[@]}"; do
  out="$RESULTS/$s"
  mkdir -p "$out"
  timeout --kill-after=10 "$SCEN_TIMEOUT" "$NODE" "$SUITE_JS" server --url "$URL" --scenario "$s" -o "$out" \
    >"$out/output.txt" 2>&1
  rc=$?
  echo "$s $rc" >>"$RESULTS/exit-codes.txt"
  [ "$rc" = 124 ] && log "$s: timed out after ${SCEN_TIMEOUT}s"
  if ! kill -0 "$BRIDGE_PID" 2>/dev/null; then
    log "bridge died during scenario $s"
  fi
done

BRIDGE_ALIVE=1
kill -0 "$BRIDGE_PID" 2>/dev/null || BRIDGE_ALIVE=0
cleanup

# ---------------------------------------------------------------- summary
python3 - "$RESULTS" "${CONFORMANCE_ALLOW_WARNINGS:-0}" "${CONFORMANCE_VERBOSE:-0}" "$BRIDGE_ALIVE" "${SCENARIOS[@]}" <<'PY'
import glob, json, os, sys

results, allow_warn, verbose, alive = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1"
scenarios = sys.argv[5:]
codes = {}
for line in open(os.path.join(results, "exit-codes.txt")):
    name, rc = line.split()
    codes[name] = int(rc)

passed = failed = 0
print("\n=== MCP conformance (server mode) via mcp-bridge%s ===" % (" serve --upstream (a chain of two bridges)" if os.environ.get("CONFORMANCE_UPSTREAM") == "1" else ""))
for s in scenarios:
    files = sorted(glob.glob(os.path.join(results, s, "*", "checks.json")))
    checks, problems = [], []
    if not files:
        problems.append("no checks.json written (suite crashed or timed out, exit %s); see %s"
                        % (codes.get(s), os.path.join(results, s, "output.txt")))
    else:
        try:
            checks = json.load(open(files[-1]))
        except Exception as e:
            problems.append("unreadable checks.json: %s" % e)
    n = {k: sum(1 for c in checks if c.get("status") == k) for k in ("SUCCESS", "FAILURE", "WARNING")}
    bad = [c for c in checks if c.get("status") == "FAILURE" or (c.get("status") == "WARNING" and not allow_warn)]
    if files and n["SUCCESS"] == 0 and not bad:
        problems.append("no SUCCESS check (only INFO/WARNING checks)")
    ok = not problems and not bad
    passed += ok
    failed += not ok
    print("%s %-32s %d ok, %d failed, %d warnings" % ("PASS" if ok else "FAIL", s, n["SUCCESS"], n["FAILURE"], n["WARNING"]))
    for p in problems:
        print("     - " + p)
    for c in bad:
        print("     - [%s] %s: %s" % (c.get("status"), c.get("id"), c.get("errorMessage") or c.get("description")))
        if c.get("details"):
            print("       details: " + json.dumps(c["details"])[:1500])
    if verbose:
        for c in checks:
            print("       . [%s] %s %s" % (c.get("status"), c.get("id"), json.dumps(c.get("details", {}))[:400]))
if not alive:
    # A bridge that died is a failure even if every scenario happened to pass before it did.
    print("FAIL the bridge process was no longer running at the end of the run")
    failed += 1
print("\nresults: %s" % results)
print("conformance: %d passed, %d failed" % (passed, failed))
sys.exit(0 if failed == 0 and passed == len(scenarios) else 1)
PY
status=$?
if [ "$status" != 0 ]; then
  log "bridge log (last 40 lines of $BRIDGE_LOG):"
  tail -n 40 "$BRIDGE_LOG" >&2
fi
exit "$status"
