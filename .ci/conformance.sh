#!/usr/bin/env bash
# Run the official MCP conformance suite (npm @modelcontextprotocol/conformance, server mode)
# against `mcp-bridge serve` over Streamable HTTP, publishing a fixture: by default the 2025-era
# stdio server tests/fixtures/conformance_server.py (for the tasks extension's scenarios,
# CONFORMANCE_SET=tasks, the 2026 stdio server tests/fixtures/tasks_conformance_server.py);
# or the suite's own reference server
# (examples/servers/typescript of its repository at a pinned commit, built here), published
# through its 2026-07-28 face by tests/fixtures/reference_stdio_relay.py (a stdio wiring) or
# fronted over HTTP by `serve --upstream`.
#
# Usage:  bash .ci/conformance.sh            (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN          bridge binary (default: target/release/mcp-bridge)
#   MCP_BRIDGE_ARGS         extra args for `serve`, inserted before `--` (default: none)
#   CONFORMANCE_SUITE_VERSION  the suite's npm version: 0.1.16 (default; its 30 active
#                           scenarios) or 0.2.0-alpha.12 (scenarios by requirement set), each
#                           with its own install prefix and scenario list below
#   CONFORMANCE_SPEC_VERSION   0.2.x only: the requirement set whose server scenarios run, at
#                           that revision's wire (`--spec-version R --force`, what the suite's
#                           `--requirements R` does per scenario): 2025-11-25 (default, 30) or
#                           2026-07-28 (37)
#   CONFORMANCE_SET         0.2.x only: core (default; the scenarios of the requirement set
#                           above) or tasks: the tasks extension's server scenarios
#                           (io.modelcontextprotocol/tasks, SEP-2663; `list --server` marks them
#                           [extension], no requirement set scores them), at the 2026-07-28
#                           wire, over tests/fixtures/tasks_conformance_server.py (a 2026 stdio
#                           server with the tools they call). Not with CONFORMANCE_FIXTURE=
#                           reference; CONFORMANCE_UPSTREAM=1 chains two bridges over it.
#   CONFORMANCE_FIXTURE     python (default: conformance_server.py, 2025 era) or reference (the
#                           suite's reference server, built from GitHub, so local only). The
#                           Python fixture runs both sets: for 2026-07-28 it asks the 2025 way
#                           (server->client requests) and serve translates that into input
#                           rounds, so that set tests the era translation (less what a 2025
#                           server cannot express: EXPECTED_FAILURES / ALLOWED_WARNINGS below).
#                           With reference and CONFORMANCE_UPSTREAM=1 the near bridge fronts
#                           the reference server's own HTTP face.
#   CONFORMANCE_REF_GIT     where the reference server's repository is cloned from (default:
#                           https://github.com/modelcontextprotocol/conformance.git; a local
#                           clone or bare mirror works too)
#   CONFORMANCE_REF_COMMIT  the pinned commit (default below); built once into
#                           target/conformance-reference-<commit> (npm ci, Node 22, tsx)
#   CONFORMANCE_CACHE_DIR   where the suite + Node 22 are installed (default:
#                           target/conformance-tools at 0.1.x, target/conformance-tools-<version>
#                           otherwise)
#   CONFORMANCE_RESULTS_DIR where checks.json files go (default: target/conformance-results/<time>)
#   CONFORMANCE_PORT        port to serve on (default: a free port)
#   CONFORMANCE_SCENARIOS   space-separated subset to run (default: all of the list below)
#   CONFORMANCE_SCENARIO_TIMEOUT  seconds per scenario (default: 150)
#   CONFORMANCE_ALLOW_WARNINGS=1  count a scenario with WARNING checks (and no FAILURE) as passed
#   CONFORMANCE_VERBOSE=1   print every check of every scenario
#   CONFORMANCE_UPSTREAM=1  run the suite through `serve --upstream URL`: with the Python fixture
#                           in front of a second `serve` that publishes it (a chain of two
#                           bridges; the far one is the 2025 child's bridge, so sampling and
#                           elicitation states minted there must pass the near one untouched);
#                           with the reference server in front of its HTTP face (at 2025-11-25
#                           with `--protocol 2025-11-25`: its 2026 face has no client to sample
#                           or elicit from, its session face does)
#   CONFORMANCE_ENDPOINT=1  publish the Python fixture as the one member of an aggregation
#                           endpoint (`[endpoints.one]`, prefix = "never") of `serve --config`,
#                           and run the suite against the endpoint's path
#   CONFORMANCE_UPSTREAM=chain  with the reference server: `serve --upstream` in front of a
#                           second `serve` that publishes it through the stdio relay (two
#                           bridges, both 2026 on every hop)
#
# Exit status: 0 only if every requested scenario ran and passed (at least one SUCCESS check,
# no FAILURE unless expected: listed in EXPECTED_FAILURES below, and no WARNING unless
# allowed: listed in ALLOWED_WARNINGS below or CONFORMANCE_ALLOW_WARNINGS=1) and the bridge was still running at the end (a bridge that died
# counts as one more failure). The suite's own exit code is not relied upon: in full-suite mode
# it ignores WARNING checks and a scenario that crashed writes no results.
# Expected count: one check per requested scenario (`expected: N checks`); the summary fails
# when fewer passed.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" conformance || exit 2

# Unlike lib.sh's die, no `0 passed, 1 failed` line: this script's count is the summary's
# `conformance: N passed, M failed`, and .ci/run counts a failed set-up as a failed step.
die() { log "ERROR: $*"; exit 2; }


SUITE_VERSION="${CONFORMANCE_SUITE_VERSION:-0.1.16}"
NODE_MAJOR=22
FIXTURE_KIND="${CONFORMANCE_FIXTURE:-python}"
# The reference server's repository at the commit of the 0.2.0-alpha.11 version bump, the
# newest the suite's repository had when alpha.12 was scored here (its scenarios for the tools
# the server offers are unchanged in alpha.12).
REF_COMMIT="${CONFORMANCE_REF_COMMIT:-c321dd32035556e6769d3724a8ee97d87c3faaac}"
REF_GIT="${CONFORMANCE_REF_GIT:-https://github.com/modelcontextprotocol/conformance.git}"
# WARNING checks that still count as passed, `scenario check-id` one per entry (`;`-separated):
# SHOULDs the reference server itself does not meet natively, so no bridge in front of it can.
ALLOWED_WARNINGS=
# FAILURE checks expected of the path, `scenario check-id` one per entry (`;`-separated): what
# a bridge in front of this fixture cannot do (each set says why). Such a check still counts
# as passed (printed EXPECTED FAILURE); one that passes instead is reported, so the list
# shrinks when the reason goes away.
EXPECTED_FAILURES=
# Every 2025-11-25 server scenario: 0.1.16's 30 active ones, which alpha.12's frozen
# requirement set for 2025-11-25 lists too, in the same order.
SCENARIOS_2025=(
  server-initialize logging-set-level ping completion-complete tools-list
  tools-call-simple-text tools-call-image tools-call-audio tools-call-embedded-resource
  tools-call-mixed-content tools-call-with-logging tools-call-error tools-call-with-progress
  tools-call-sampling tools-call-elicitation elicitation-sep1034-defaults
  server-sse-multiple-streams elicitation-sep1330-enums resources-list resources-read-text
  resources-read-binary resources-templates-read resources-subscribe resources-unsubscribe
  prompts-list prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
  prompts-get-with-image dns-rebinding-protection
)
SPEC=
SET="${CONFORMANCE_SET:-core}"
FIXTURE="tests/fixtures/conformance_server.py"
case "$SET" in core | tasks) ;; *) die "CONFORMANCE_SET=$SET: core or tasks" ;; esac
case "$SUITE_VERSION" in
0.1.*)
  [ -z "${CONFORMANCE_SPEC_VERSION:-}" ] || die "CONFORMANCE_SPEC_VERSION needs a 0.2 suite"
  [ "$FIXTURE_KIND" = python ] || die "CONFORMANCE_FIXTURE=$FIXTURE_KIND needs a 0.2 suite"
  [ "$SET" = core ] || die "CONFORMANCE_SET=$SET needs a 0.2 suite"
  ACTIVE_SCENARIOS=("${SCENARIOS_2025[@]}")
  ;;
*)
  if [ "$SET" = tasks ]; then
    # The tasks extension's server scenarios (`conformance list --server` marks them
    # [extension]; no requirement set scores them), at the 2026-07-28 wire, over the 2026
    # task fixture. tasks-status-notifications is left out: at 0.2.0-alpha.12 it is one
    # SKIPPED check (its harness awaits a subscriptions/listen rewrite), nothing to score.
    [ "$FIXTURE_KIND" = python ] || die "CONFORMANCE_SET=tasks publishes its own fixture (CONFORMANCE_FIXTURE=python)"
    [ -z "${CONFORMANCE_SPEC_VERSION:-}" ] || [ "$CONFORMANCE_SPEC_VERSION" = 2026-07-28 ] ||
      die "CONFORMANCE_SET=tasks runs at 2026-07-28 only"
    CONFORMANCE_SPEC_VERSION=2026-07-28
    FIXTURE="tests/fixtures/tasks_conformance_server.py"
  fi
  SPEC="${CONFORMANCE_SPEC_VERSION:-2025-11-25}"
  case "$SPEC" in
  2025-11-25) ACTIVE_SCENARIOS=("${SCENARIOS_2025[@]}") ;;
  2026-07-28)
    if [ "$SET" = tasks ]; then
      ACTIVE_SCENARIOS=(
        tasks-capability-negotiation tasks-mrtr-composition tasks-dispatch-and-envelope
        tasks-request-headers tasks-lifecycle tasks-mrtr-input tasks-request-state-removal
        tasks-required-task-error tasks-wire-fields
      )
    else
    # `conformance list --server --requirements 2026-07-28` at 0.2.0-alpha.12: 37 scored
    # (the tasks extension, json-schema-2020-12 and the two pending header scenarios are
    # reported there but never scored, and not run here).
    ACTIVE_SCENARIOS=(
      server-stateless completion-complete tools-list tools-call-simple-text tools-call-image
      tools-call-audio tools-call-embedded-resource tools-call-mixed-content tools-call-error
      tools-call-with-progress server-sse-multiple-streams resources-list resources-read-text
      resources-read-binary resources-templates-read sep-2164-resource-not-found prompts-list
      prompts-get-simple prompts-get-with-args prompts-get-embedded-resource
      prompts-get-with-image dns-rebinding-protection caching
      input-required-result-basic-elicitation input-required-result-basic-sampling
      input-required-result-basic-list-roots input-required-result-request-state
      input-required-result-multiple-input-requests input-required-result-multi-round
      input-required-result-missing-input-response input-required-result-non-tool-request
      input-required-result-result-type input-required-result-unsupported-methods
      input-required-result-tampered-state input-required-result-capability-check
      input-required-result-ignore-extra-params input-required-result-validate-input
    )
    if [ "$FIXTURE_KIND" = reference ]; then
      # The reference server accepts an inputResponses value of the wrong type (a SHOULD).
      ALLOWED_WARNINGS='input-required-result-validate-input sep-2322-validate-input-responses'
    else
      # The 2025-era Python fixture asks with server->client requests; serve names each
      # request's inputRequests entry itself (input1, input2, ...): a 2025 server has no
      # way to name it. So the suite's fixed key cannot be met, and a fresh call that
      # carries inputResponses under that key (no requestState) starts the call anew.
      EXPECTED_FAILURES='input-required-result-basic-elicitation sep-2322-elicitation-incomplete'
      ALLOWED_WARNINGS='input-required-result-ignore-extra-params sep-2322-ignore-unexpected-params'
    fi
    fi
    ;;
  *) die "CONFORMANCE_SPEC_VERSION=$SPEC: 2025-11-25 or 2026-07-28" ;;
  esac
  ;;
esac
case "$FIXTURE_KIND" in python | reference) ;; *) die "CONFORMANCE_FIXTURE=$FIXTURE_KIND: python or reference" ;; esac
case "${CONFORMANCE_UPSTREAM:-0}" in
0 | 1) ;;
chain) [ "$FIXTURE_KIND" = reference ] || die "CONFORMANCE_UPSTREAM=chain needs CONFORMANCE_FIXTURE=reference (1 chains two bridges over the Python fixture)" ;;
*) die "CONFORMANCE_UPSTREAM=${CONFORMANCE_UPSTREAM}: 0, 1 or chain" ;;
esac

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
# One prefix per suite version (as .ci/conformance-client-auth.sh, which shares them).
case "$SUITE_VERSION" in
0.1.*) CACHE="${CONFORMANCE_CACHE_DIR:-$REPO/target/conformance-tools}" ;;
*) CACHE="${CONFORMANCE_CACHE_DIR:-$REPO/target/conformance-tools-$SUITE_VERSION}" ;;
esac
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="${CONFORMANCE_RESULTS_DIR:-$REPO/target/conformance-results/$STAMP}"
SCEN_TIMEOUT="${CONFORMANCE_SCENARIO_TIMEOUT:-150}"
RELAY="tests/fixtures/reference_stdio_relay.py"

ci_check_bin "$BIN"
[ -f "$FIXTURE" ] && [ -f "$RELAY" ] || die "fixture $FIXTURE or $RELAY missing"
command -v python3 >/dev/null || die "python3 is required (fixture and helpers)"

# ---------------------------------------------------------------- install (idempotent)
ci_conformance_tools "$CACHE" "$SUITE_VERSION" "$NODE_MAJOR" || die "the conformance suite is not usable"
log "node $("$NODE" --version), conformance $("$NODE" "$SUITE_JS" --version)${SPEC:+, requirement set $SPEC}, set $SET, fixture $FIXTURE_KIND ($FIXTURE)"

# The reference server: its directory of the repository at REF_COMMIT, npm ci'd with Node 22.
REF_DIR="$REPO/target/conformance-reference-$REF_COMMIT"
REF_SRV="$REF_DIR/examples/servers/typescript"
NODE_BIN_DIR="$(dirname "$NODE")"
build_reference() {
  [ -f "$REF_DIR/.built" ] && return 0
  command -v git >/dev/null || die "git is required to fetch the reference server"
  local tmp="$REF_DIR.tmp"
  rm -rf "$tmp" "$REF_DIR"
  mkdir -p "$tmp" || die "cannot create $tmp"
  log "fetching the reference server from $REF_GIT at $REF_COMMIT"
  git clone -q --bare "$REF_GIT" "$tmp/git" >"$tmp/git.log" 2>&1 || { cat "$tmp/git.log" >&2; die "git clone $REF_GIT failed"; }
  git --git-dir="$tmp/git" archive "$REF_COMMIT" examples/servers/typescript | tar -x -C "$tmp" ||
    die "commit $REF_COMMIT has no examples/servers/typescript"
  rm -rf "$tmp/git"
  log "npm ci in examples/servers/typescript (Node $("$NODE" --version))"
  (cd "$tmp/examples/servers/typescript" && PATH="$NODE_BIN_DIR:$PATH" npm ci --no-audit --no-fund --loglevel=error) \
    >"$tmp/npm-ci.log" 2>&1 || { tail -n 30 "$tmp/npm-ci.log" >&2; die "npm ci for the reference server failed"; }
  # The server calls app.listen(PORT): make that loopback only (a preload, not a patch).
  cat >"$tmp/loopback.mjs" <<'EOF'
import net from 'node:net';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
EOF
  touch "$tmp/.built"
  mv "$tmp" "$REF_DIR" || die "cannot move $tmp to $REF_DIR"
}

# ---------------------------------------------------------------- start the bridge
PORT="${CONFORMANCE_PORT:-$(ci_free_port python3)}"
URL="http://127.0.0.1:$PORT/mcp"
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
BRIDGE_LOG="$RESULTS/bridge.log"

# Set before anything is started, so a set-up that dies stops what it started.
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
  # The reference server last of all (tsx runs it as a child: its whole group).
  if [ -n "${REF_PID:-}" ]; then
    kill -TERM -- "-$REF_PID" 2>/dev/null
    for _ in $(seq 1 25); do kill -0 "$REF_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$REF_PID" 2>/dev/null
    REF_PID=
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r -a EXTRA_ARGS <<<"${MCP_BRIDGE_ARGS:-}"
FAR_PID=
REF_PID=
if [ "$FIXTURE_KIND" = reference ]; then
  build_reference
  REF_PORT="$(ci_free_port python3)"
  REF_LOG="$RESULTS/reference-server.log"
  REF_URL="http://127.0.0.1:$REF_PORT/mcp"
  log "starting the reference server ($REF_COMMIT) on 127.0.0.1:$REF_PORT"
  (cd "$REF_SRV" && PORT="$REF_PORT" PATH="$NODE_BIN_DIR:$PATH" NODE_OPTIONS="--import $REF_DIR/loopback.mjs" \
    exec setsid node_modules/.bin/tsx everything-server.ts) >"$REF_LOG" 2>&1 &
  REF_PID=$!
  ci_wait_port "$REF_PORT" "$REF_PID" python3 || { tail -n 50 "$REF_LOG" >&2; die "the reference server did not start"; }
fi
if [ "${CONFORMANCE_ENDPOINT:-0}" = 1 ]; then
  # An aggregation endpoint with the fixture as its one member, bare names (prefix = never):
  # everything the suite asks goes through the endpoint's merging, routing and id renaming.
  [ "$FIXTURE_KIND" = python ] || die "CONFORMANCE_ENDPOINT=1 publishes the Python fixture"
  ENDPOINT_CFG="$RESULTS/endpoint.toml"
  cat >"$ENDPOINT_CFG" <<EOF
[listen]
addresses = ["127.0.0.1:$PORT"]
[servers.fixture]
command = "python3"
args = ["$REPO/$FIXTURE"]
[endpoints.one]
servers = ["fixture"]
prefix = "never"
EOF
  URL="http://127.0.0.1:$PORT/endpoints/one/mcp"
  log "starting: $BIN serve --config $ENDPOINT_CFG ${EXTRA_ARGS[*]} (endpoint one over $FIXTURE)"
  setsid "$BIN" serve --config "$ENDPOINT_CFG" "${EXTRA_ARGS[@]}" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
elif [ "${CONFORMANCE_UPSTREAM:-0}" = chain ] && [ "$FIXTURE_KIND" = reference ]; then
  # Two bridges: the far one publishes the reference server through the stdio relay (its
  # 2026 child), the near one fronts the far one.
  FAR_PORT="$(ci_free_port python3)"
  FAR_LOG="$RESULTS/far-bridge.log"
  log "starting the far bridge: $BIN serve --port $FAR_PORT -- python3 $RELAY $REF_URL"
  setsid "$BIN" serve --port "$FAR_PORT" -- python3 "$RELAY" "$REF_URL" >"$FAR_LOG" 2>&1 &
  FAR_PID=$!
  ci_wait_listening "$FAR_PID" "$FAR_LOG" || { tail -n 50 "$FAR_LOG" >&2; die "the far bridge did not start"; }
  log "starting: $BIN serve --port $PORT ${EXTRA_ARGS[*]} --upstream http://127.0.0.1:$FAR_PORT/mcp"
  setsid "$BIN" serve --port "$PORT" "${EXTRA_ARGS[@]}" --upstream "http://127.0.0.1:$FAR_PORT/mcp" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
elif [ "${CONFORMANCE_UPSTREAM:-0}" = 1 ] && [ "$FIXTURE_KIND" = reference ]; then
  # The reference server's own HTTP face is the upstream. At 2025-11-25 the near bridge speaks
  # 2025 to it: its 2026 face answers test_sampling/test_elicitation without asking anyone.
  UP_ARGS=()
  [ "$SPEC" = 2025-11-25 ] && UP_ARGS=(--protocol 2025-11-25)
  log "starting: $BIN serve --port $PORT ${EXTRA_ARGS[*]} --upstream $REF_URL ${UP_ARGS[*]}"
  setsid "$BIN" serve --port "$PORT" "${EXTRA_ARGS[@]}" --upstream "$REF_URL" "${UP_ARGS[@]}" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
elif [ "$FIXTURE_KIND" = reference ]; then
  log "starting: $BIN serve --port $PORT ${EXTRA_ARGS[*]} -- python3 $RELAY $REF_URL"
  setsid "$BIN" serve --port "$PORT" "${EXTRA_ARGS[@]}" -- python3 "$RELAY" "$REF_URL" >"$BRIDGE_LOG" 2>&1 &
  BRIDGE_PID=$!
elif [ "${CONFORMANCE_UPSTREAM:-0}" = 1 ]; then
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
  SPEC_ARGS=()
  # --force: run it at this wire as `--requirements` does (which takes no --scenario).
  [ -n "$SPEC" ] && SPEC_ARGS=(--spec-version "$SPEC" --force)
  timeout --kill-after=10 "$SCEN_TIMEOUT" "$NODE" "$SUITE_JS" server --url "$URL" --scenario "$s" \
    "${SPEC_ARGS[@]}" -o "$out" >"$out/output.txt" 2>&1
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
ALLOWED_WARNINGS="$ALLOWED_WARNINGS" EXPECTED_FAILURES="$EXPECTED_FAILURES" TITLE="$SUITE_VERSION${SPEC:+, requirement set $SPEC}$([ "$SET" = tasks ] && echo ", the tasks extension's scenarios"), fixture $FIXTURE_KIND" \
python3 - "$RESULTS" "${CONFORMANCE_ALLOW_WARNINGS:-0}" "${CONFORMANCE_VERBOSE:-0}" "$BRIDGE_ALIVE" "${SCENARIOS[@]}" <<'PY'
import glob, json, os, sys

# `scenario check-id` entries whose WARNING still counts as passed (printed as ALLOWED).
allowed = {tuple(e.split()[:2]) for e in os.environ.get("ALLOWED_WARNINGS", "").split(";") if len(e.split()) >= 2}
# `scenario check-id` entries whose FAILURE is expected of this path (printed as EXPECTED).
expected = {tuple(e.split()[:2]) for e in os.environ.get("EXPECTED_FAILURES", "").split(";") if len(e.split()) >= 2}

results, allow_warn, verbose, alive = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1"
scenarios = sys.argv[5:]
codes = {}
for line in open(os.path.join(results, "exit-codes.txt")):
    name, rc = line.split()
    codes[name] = int(rc)

passed = failed = 0
fixture = "reference" if "fixture reference" in os.environ.get("TITLE", "") else "python"
via = ""
if os.environ.get("CONFORMANCE_UPSTREAM") == "chain":
    via = " serve --upstream (a chain of two bridges, the far one over the stdio relay)"
elif os.environ.get("CONFORMANCE_UPSTREAM") == "1":
    via = " serve --upstream" + (" (the reference server's HTTP face)" if fixture == "reference" else " (a chain of two bridges)")
print("\n=== MCP conformance %s (server mode) via mcp-bridge%s ===" % (os.environ.get("TITLE", ""), via))
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
    excused = [c for c in checks if c.get("status") == "WARNING" and (s, c.get("id")) in allowed]
    known = [c for c in checks if c.get("status") == "FAILURE" and (s, c.get("id")) in expected]
    bad = [c for c in checks if (c.get("status") == "FAILURE" and c not in known)
           or (c.get("status") == "WARNING" and not allow_warn and c not in excused)]
    if files and n["SUCCESS"] == 0 and not bad:
        problems.append("no SUCCESS check (only INFO/WARNING checks)")
    # An expected failure that no longer fails: say so (the list should lose it).
    unexpected_passes = [i for (sc, i) in sorted(expected) if sc == s and files
                         and any(c.get("id") == i and c.get("status") == "SUCCESS" for c in checks)]
    ok = not problems and not bad
    passed += ok
    failed += not ok
    print("%s %-32s %d ok, %d failed, %d warnings" % ("PASS" if ok else "FAIL", s, n["SUCCESS"], n["FAILURE"], n["WARNING"]))
    for p in problems:
        print("     - " + p)
    for c in excused:
        print("     - [ALLOWED WARNING] %s: %s" % (c.get("id"), c.get("errorMessage") or c.get("description")))
    for c in known:
        print("     - [EXPECTED FAILURE] %s: %s" % (c.get("id"), c.get("errorMessage") or c.get("description")))
    for i in unexpected_passes:
        print("     - [NOW PASSES] %s: listed in EXPECTED_FAILURES, drop it from there" % i)
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
