#!/usr/bin/env bash
# Run the official MCP conformance suite's client scenarios (npm @modelcontextprotocol/conformance,
# CLIENT mode: `client --command … --scenario …`) against `mcp-bridge connect`, each once behind
# a 2025 host and once behind a 2026 host (CONFORMANCE_HOST_ERAS). Two sets:
# CONFORMANCE_CLIENT_SET=auth (the default: the authorization scenarios, below) and `core` (the
# others, each at every revision the suite names for it, played by
# tests/interop/conformance_client_host.py the way the suite's everything-client plays them).
# For an auth scenario the suite starts its test MCP server and authorization
# server and runs tests/interop/conformance_auth_host.py, a stdio host that spawns
# `mcp-bridge connect URL` with a fresh --oauth-dir and BROWSER=tests/interop/oauth_browser.py
# (which follows the authorization redirect to the loopback callback), then initializes, lists
# tools and calls one. The suite's checks judge what connect sent (discovery requests, DCR,
# PKCE, scopes, token endpoint authentication, RFC 8707 resource, ...).
#
# Usage:  bash .ci/conformance-client-auth.sh      (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN          bridge binary (default: target/release/mcp-bridge)
#   CONFORMANCE_CACHE_DIR   where the suite + Node 22 are installed (default: target/conformance-tools,
#                           shared with .ci/conformance.sh)
#   CONFORMANCE_RESULTS_DIR where results go (default: target/conformance-client-auth/<time>);
#                           per scenario: output.txt (the suite's), */*/checks.json, stdout.txt
#                           (the host's steps), stderr.txt (connect's log, the browser's hops)
#   CONFORMANCE_AUTH_SCENARIOS    space-separated subset to run, entries `scenario[@revision]#era`
#                           (default: all of the set's and version's list below, times the host
#                           eras: auth 44 at 0.1.16 and 100 at 0.2.0-alpha.12, core 8 and 30)
#   CONFORMANCE_CLIENT_SET  auth (default) or core
#   CONFORMANCE_HOST_ERAS   the hosts' eras, space-separated (default: "2025 2026")
#   CONFORMANCE_AUTH_EXPECTED_FAIL
#                           replaces the EXPECTED_FAIL list below: entries `scenario reason…`,
#                           one per line or separated by `;` (set but empty: expect nothing)
#   CONFORMANCE_AUTH_JOBS   scenarios run at once (default: 4; each has its own servers/ports)
#   CONFORMANCE_AUTH_TIMEOUT_MS   the suite's per-scenario client timeout (default: 45000); the
#                           host gives up 8 s before it; connect's --oauth-timeout is
#                           CONFORMANCE_AUTH_OAUTH_TIMEOUT (default: 20s)
#   CONFORMANCE_VERBOSE=1   also print the INFO checks (every request the servers saw)
#   CONFORMANCE_SUITE_VERSION  the suite's npm version: 0.1.16 (default) or 0.2.0-alpha.12
#                           (the 2026-07-28 scenarios and the auth extensions; CI runs both),
#                           each with its scenario list and expected failures below and its
#                           own install prefix
#
# A scenario passes when the suite exited 0 for it (no FAILURE or WARNING check, the client did
# not time out, and exited 0 unless the scenario allows a client error) and checks.json holds at
# least one SUCCESS. Scenarios in EXPECTED_FAIL are printed as `XFAIL … (reason)` and counted
# neither way; one that passes is printed as `XPASS … now passing: remove from EXPECTED_FAIL`
# and counted as passed. Exit status 0 unless an unexpected scenario failed (or set-up failed)
# or fewer scenarios were counted than expected: one per requested scenario not in EXPECTED_FAIL
# (`expected: N checks`: auth 44 at 0.1.16, 100 at 0.2.0-alpha.12; core 8 and 30: none is
# expected to fail; an EXPECTED_FAIL entry names `scenario[@revision]`, or one host era with `#era`). Closing line: `N passed, M failed` (summed by .ci/run).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" conformance-client-auth || exit 2

SUITE_VERSION="${CONFORMANCE_SUITE_VERSION:-0.1.16}"
NODE_MAJOR=22
case "$SUITE_VERSION" in
0.1.*)
  AUTH_SCENARIOS=(
    auth/metadata-default auth/metadata-var1 auth/metadata-var2 auth/metadata-var3
    auth/basic-cimd
    auth/scope-from-www-authenticate auth/scope-from-scopes-supported
    auth/scope-omitted-when-undefined auth/scope-step-up auth/scope-retry-limit
    auth/token-endpoint-auth-basic auth/token-endpoint-auth-post auth/token-endpoint-auth-none
    auth/pre-registration
    auth/2025-03-26-oauth-metadata-backcompat auth/2025-03-26-oauth-endpoint-fallback
    auth/resource-mismatch auth/offline-access-scope auth/offline-access-not-supported
    auth/client-credentials-jwt auth/client-credentials-basic auth/cross-app-access-complete-flow
  )
  # Scenarios expected to fail for now, `scenario reason` (the reason is printed with them).
  # Remove an entry when the summary says `now passing`. Missing features first, then bugs.
  EXPECTED_FAIL_DEFAULT=''
  ;;
*)
  # 0.2.x: every auth scenario of `conformance list --client` (33 at 0.2.0-alpha.12), each at
  # every revision it names (`@revision`; the extensions at none): 50 entries.
  AUTH_SCENARIOS=(
    auth/metadata-default@2025-11-25 auth/metadata-default@2026-07-28
    auth/metadata-var1@2025-11-25 auth/metadata-var1@2026-07-28
    auth/metadata-var2@2025-11-25 auth/metadata-var2@2026-07-28
    auth/metadata-var3@2025-11-25 auth/metadata-var3@2026-07-28
    auth/basic-cimd@2025-11-25 auth/basic-cimd@2026-07-28
    auth/scope-from-www-authenticate@2025-11-25 auth/scope-from-www-authenticate@2026-07-28
    auth/scope-from-scopes-supported@2025-11-25 auth/scope-from-scopes-supported@2026-07-28
    auth/scope-omitted-when-undefined@2025-11-25 auth/scope-omitted-when-undefined@2026-07-28
    auth/scope-step-up@2025-11-25 auth/scope-step-up@2026-07-28
    auth/scope-retry-limit@2025-11-25 auth/scope-retry-limit@2026-07-28
    auth/token-endpoint-auth-basic@2025-06-18 auth/token-endpoint-auth-basic@2025-11-25
    auth/token-endpoint-auth-basic@2026-07-28
    auth/token-endpoint-auth-post@2025-06-18 auth/token-endpoint-auth-post@2025-11-25
    auth/token-endpoint-auth-post@2026-07-28
    auth/token-endpoint-auth-none@2025-06-18 auth/token-endpoint-auth-none@2025-11-25
    auth/token-endpoint-auth-none@2026-07-28
    auth/pre-registration@2025-11-25 auth/pre-registration@2026-07-28
    auth/2025-03-26-oauth-metadata-backcompat@2025-03-26
    auth/2025-03-26-oauth-endpoint-fallback@2025-03-26
    auth/resource-mismatch@2026-07-28 auth/offline-access-scope@2026-07-28
    auth/offline-access-not-supported@2026-07-28 auth/authorization-server-migration@2026-07-28
    auth/iss-supported@2026-07-28 auth/iss-not-advertised@2026-07-28
    auth/iss-supported-missing@2026-07-28 auth/iss-wrong-issuer@2026-07-28
    auth/iss-unexpected@2026-07-28 auth/iss-normalized@2026-07-28
    auth/metadata-issuer-mismatch@2026-07-28
    auth/client-credentials-jwt auth/client-credentials-basic
    auth/enterprise-managed-authorization auth/dpop auth/dpop-nonce auth/wif-jwt-bearer
  )
  EXPECTED_FAIL_DEFAULT=''
  ;;
esac

# The client scenarios that are not about authorization (CONFORMANCE_CLIENT_SET=core), each
# at every revision `conformance list --client` names for it (`scenario@revision`); their host
# is tests/interop/conformance_client_host.py. Not run: the skills extension (sep-2640-*),
# which checks a host's handling of skills (loading on demand, verifying the digest, size and
# frontmatter of what it reads): connect carries skills/list and resources/read unchanged.
if [ "${CONFORMANCE_CLIENT_SET:-auth}" = core ]; then
  case "$SUITE_VERSION" in
  0.1.*)
    AUTH_SCENARIOS=(initialize tools_call elicitation-sep1034-client-defaults sse-retry)
    ;;
  *)
    AUTH_SCENARIOS=(
      initialize@2025-06-18 initialize@2025-11-25
      tools_call@2025-06-18 tools_call@2025-11-25 tools_call@2026-07-28
      elicitation-sep1034-client-defaults@2025-11-25 sse-retry@2025-11-25
      request-metadata@2026-07-28 sep-2322-client-request-state@2026-07-28
      http-standard-headers@2026-07-28 http-custom-headers@2026-07-28
      http-invalid-tool-headers@2026-07-28 json-schema-ref-no-deref@2026-07-28
      json-schema-2020-12-preservation@2025-11-25 json-schema-2020-12-preservation@2026-07-28
    )
    ;;
  esac
  EXPECTED_FAIL_DEFAULT=''
fi
# Every scenario once per host era (`#2025`, `#2026`): a 2025 host (initialize) and a 2026 one
# (`_meta` on every request) in front of the same connect get the same verdicts.
read -r -a HOST_ERAS <<<"${CONFORMANCE_HOST_ERAS:-2025 2026}"
with_eras=()
for s in "${AUTH_SCENARIOS[@]}"; do
  for e in "${HOST_ERAS[@]}"; do with_eras+=("$s#$e"); done
done
AUTH_SCENARIOS=("${with_eras[@]}")

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
# One prefix per suite version (the 0.1 one is shared with .ci/conformance.sh).
case "$SUITE_VERSION" in
0.1.*) CACHE="${CONFORMANCE_CACHE_DIR:-$REPO/target/conformance-tools}" ;;
*) CACHE="${CONFORMANCE_CACHE_DIR:-$REPO/target/conformance-tools-$SUITE_VERSION}" ;;
esac
STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
RESULTS="${CONFORMANCE_RESULTS_DIR:-$REPO/target/conformance-client-auth/$STAMP}"
JOBS="${CONFORMANCE_AUTH_JOBS:-4}"
TIMEOUT_MS="${CONFORMANCE_AUTH_TIMEOUT_MS:-45000}"
HOST="$REPO/tests/interop/conformance_auth_host.py"
[ "${CONFORMANCE_CLIENT_SET:-auth}" = core ] && HOST="$REPO/tests/interop/conformance_client_host.py"

if [ -n "${CONFORMANCE_AUTH_SCENARIOS:-}" ]; then
  read -r -a SCENARIOS <<<"$CONFORMANCE_AUTH_SCENARIOS"
else
  SCENARIOS=("${AUTH_SCENARIOS[@]}")
fi
# One counted check per requested scenario that is not an expected failure (XFAIL is counted
# neither way).
expected=0
for s in "${SCENARIOS[@]}"; do
  printf '%s\n' "${CONFORMANCE_AUTH_EXPECTED_FAIL-$EXPECTED_FAIL_DEFAULT}" | tr ';' '\n' |
    awk '{ print $1 }' | grep -qxF -e "$s" -e "${s%%#*}" || expected=$((expected + 1))
done
ci_expect "$expected"

ci_check_bin "$BIN"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
for f in "$HOST" "$REPO/tests/interop/oauth_browser.py"; do [ -f "$f" ] || die "$f missing"; done
PYTHON="$(command -v python3)" || die "python3 is required (the host and the browser stand-in)"
# The suite splits --command on spaces (and runs it through sh).
case "$PYTHON$HOST" in *[[:space:]]*) die "paths with blanks are not supported: $PYTHON $HOST" ;; esac
[ "$TIMEOUT_MS" -ge 15000 ] 2>/dev/null || die "CONFORMANCE_AUTH_TIMEOUT_MS must be a number >= 15000"

# ---------------------------------------------------------------- install (idempotent; the
# same prefix and package.json as .ci/conformance.sh, so either script installs for both)
ci_conformance_tools "$CACHE" "$SUITE_VERSION" "$NODE_MAJOR" || die "the conformance suite is not usable"
log "node $("$NODE" --version), conformance $("$NODE" "$SUITE_JS" --version), bridge $BIN"

# ---------------------------------------------------------------- run the scenarios
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
if [ -n "${CONFORMANCE_AUTH_EXPECTED_FAIL+set}" ]; then
  printf '%s\n' "$CONFORMANCE_AUTH_EXPECTED_FAIL" | tr ';' '\n' >"$RESULTS/expected-fail.txt"
else
  printf '%s\n' "$EXPECTED_FAIL_DEFAULT" >"$RESULTS/expected-fail.txt"
fi

# The host stops waiting 8 s before the suite's timeout, so it reports (and stops its bridge,
# which takes it up to 2 s more) itself instead of being killed.
export MCP_BRIDGE_BIN="$BIN"
export CONFORMANCE_AUTH_HOST_TIMEOUT=$(((TIMEOUT_MS - 8000) / 1000))
export CONFORMANCE_AUTH_OAUTH_TIMEOUT="${CONFORMANCE_AUTH_OAUTH_TIMEOUT:-20s}"

# One entry: `scenario[@revision]#host-era`.
run_one() {
  local s="$1" out rc t0 name era rev=()
  out="$RESULTS/$(printf '%s' "$1" | tr '/@#' '___')"
  name="${s%%#*}" era="${s##*#}"
  case "$name" in *@*) rev=(--spec-version "${name#*@}") name="${name%%@*}" ;; esac
  mkdir -p "$out"
  t0=$SECONDS
  CONFORMANCE_HOST_ERA="$era" timeout --kill-after=10 $((TIMEOUT_MS / 1000 + 30)) \
    "$NODE" "$SUITE_JS" client --command "$PYTHON $HOST" --scenario "$name" "${rev[@]}" \
    --timeout "$TIMEOUT_MS" -o "$out" >"$out/output.txt" 2>&1
  rc=$?
  echo "$s $rc $((SECONDS - t0))" >"$out/exit-code.txt"
  [ "$rc" = 124 ] && log "$s: the suite did not finish in $((TIMEOUT_MS / 1000 + 30))s"
  return 0
}

T0=$SECONDS
log "running ${#SCENARIOS[@]} scenarios, $JOBS at a time (results: $RESULTS)"
running=0
for s in "${SCENARIOS[@]}"; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$s" &
  running=$((running + 1))
done
wait
log "all scenarios ran in $((SECONDS - T0))s"

# ---------------------------------------------------------------- summary
out=$(AUTH_ALL="${AUTH_SCENARIOS[*]}" python3 - "$RESULTS" "${CONFORMANCE_VERBOSE:-0}" "${SCENARIOS[@]}" <<'PY'
import glob, json, os, re, sys

results, verbose = sys.argv[1], sys.argv[2] == "1"
scenarios = sys.argv[3:]
expected = {}
for line in open(os.path.join(results, "expected-fail.txt"), encoding="utf-8"):
    line = line.strip()
    if line and not line.startswith("#"):
        name, _, reason = line.partition(" ")
        expected[name] = reason.strip() or "(no reason given)"

# An entry is expected to fail when named with its host era or without it (both eras).
for s in list(scenarios):
    base = s.split("#")[0]
    if s not in expected and base in expected:
        expected[s] = expected[base]
passed = failed = xfail = 0
now_passing = []
print("\n=== MCP conformance: client scenarios (client mode) via a host spawning mcp-bridge connect (scenario[@revision]#host era) ===")
for s in scenarios:
    d = os.path.join(results, s.replace("/", "_").replace("@", "_").replace("#", "_"))
    try:
        _, rc, secs = open(os.path.join(d, "exit-code.txt")).read().split()
        rc, secs = int(rc), int(secs)
    except (OSError, ValueError):
        rc, secs = -1, 0
    files = sorted(glob.glob(os.path.join(d, "**", "checks.json"), recursive=True))
    checks, problems = [], []
    if not files:
        problems.append("no checks.json written (exit %s); see %s" % (rc, os.path.join(d, "output.txt")))
    else:
        try:
            checks = json.load(open(files[-1]))
        except Exception as e:
            problems.append("unreadable checks.json: %s" % e)
    n = {k: sum(1 for c in checks if c.get("status") == k) for k in ("SUCCESS", "FAILURE", "WARNING")}
    suite_out = ""
    try:
        suite_out = open(os.path.join(d, "output.txt"), encoding="utf-8", errors="replace").read()
    except OSError:
        pass
    if "Client timed out" in suite_out:
        problems.append("the host timed out (the suite killed it)")
    m = re.search(r"Client exited with code (-?\d+)", suite_out)
    if m:
        problems.append("the host exited with code %s%s" % (m.group(1), "" if rc else " (allowed by this scenario)"))
    if files and n["SUCCESS"] == 0:
        problems.append("no SUCCESS check")
    if rc != 0 and not problems and not n["FAILURE"] and not n["WARNING"]:
        problems.append("the suite exited %d" % rc)
    ok = bool(rc == 0 and files and n["SUCCESS"] > 0 and not n["FAILURE"] and not n["WARNING"])

    if ok and s in expected:
        verdict = "XPASS"
        passed += 1
        now_passing.append(s)
    elif ok:
        verdict = "PASS"
        passed += 1
    elif s in expected:
        verdict = "XFAIL"
        xfail += 1
    else:
        verdict = "FAIL"
        failed += 1
    print("\n%-5s %-60s %d ok, %d failed, %d warnings  (%ds)" % (verdict, s, n["SUCCESS"], n["FAILURE"], n["WARNING"], secs))
    if verdict == "XFAIL":
        print("      expected failure (%s)" % expected[s])
    if verdict == "XPASS":
        print("      now passing: remove from EXPECTED_FAIL (%s)" % expected[s])
    # Each check once, in the suite's order, with a count when it repeats (valid-bearer-token
    # is recorded per request); INFO checks (the requests the servers saw) only when verbose.
    rows, seen = [], {}
    for c in checks:
        st = c.get("status")
        if st == "INFO" and not verbose:
            continue
        msg = c.get("errorMessage") or c.get("description") or ""
        key = (st, c.get("id"), msg)
        if key in seen and st != "INFO":
            rows[seen[key]][1] += 1
            continue
        seen[key] = len(rows)
        rows.append([c, 1])
    for c, k in rows:
        st = c.get("status")
        msg = c.get("errorMessage") or c.get("description") or ""
        print("      %-7s %s%s: %s" % (st, c.get("id"), " (x%d)" % k if k > 1 else "", msg))
        if st in ("FAILURE", "WARNING") and c.get("details"):
            print("              details: " + json.dumps(c["details"])[:600])
        elif verbose and st == "INFO" and c.get("details"):
            print("              " + json.dumps(c["details"])[:400])
    for p in problems:
        print("      - " + p)
    if not ok:
        # The host's own account (its steps) helps tell what connect did.
        try:
            for line in open(os.path.join(os.path.dirname(files[-1]), "stdout.txt"), encoding="utf-8", errors="replace"):
                if line.startswith(("FAIL ", "NOTE ", "bridge exit")):
                    print("      host: " + line.rstrip()[:400])
        except (OSError, IndexError):
            pass

print()
known = set(os.environ.get("AUTH_ALL", "").split())
known |= {k.split("#")[0] for k in known}
for s in sorted(set(expected) - known):
    print("note: EXPECTED_FAIL names %s, which is not one of this script's scenarios" % s)
if now_passing:
    print("NOW PASSING (remove from EXPECTED_FAIL in .ci/conformance-client-auth.sh): " + " ".join(now_passing))
print("%d expected failure%s (XFAIL above, not counted)" % (xfail, "" if xfail == 1 else "s"))
print("results: %s" % results)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
)
rc=$?
ci_client_counts "$out" "$rc" || log "the summary printed no closing line (exit $rc)"
ci_add "$CI_P" "$CI_F"
ci_result
[ "$CI_FAILED" -eq 0 ]
status=$?
log "took $((SECONDS - T0))s"
exit "$status"
