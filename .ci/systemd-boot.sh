#!/usr/bin/env bash
# The shipped units under a real systemd: boots systemd as PID 1 of a private pid + mount
# namespace and runs systemd/mcp-bridge.service and systemd/mcp-bridge.socket as they are (only
# the binary and config paths are rewritten). Checks: Type=notify start (READY, STATUS), the
# process runs as a DynamicUser, calls reach the demo server and a Python and a Node child
# under the sandbox (the relaxations the unit documents), `systemctl reload` adds a server
# without a restart, the watchdog is armed, `systemctl stop` ends cleanly with no process
# left in the unit's cgroup, and socket activation hands the listener over.
#
# Safety: inside the namespace /tmp, /var/tmp, /run and /etc/systemd/system are fresh tmpfs
# mounts before systemd starts, so its boot-time clean-up (tmpfiles) cannot touch the host's
# files and only our units are enabled. The namespace dies with its PID 1 at the end.
#
# Needs root, unshare/nsenter (util-linux) and systemd (Debian package `systemd`); where those
# are missing it skips with the reason (`skipped: …`), except under CI (CI=1 or CI=true), where
# a skip is a failure. Expects 12 checks (CI_EXPECT below); fewer is a failure.
# Last line: `N passed, M failed`.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" systemd-boot || exit 2
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
# One per ok/bad below: boot, start, STATUS, dynamic user, watchdog, 3 calls (demo, Python,
# Node), reload, stop, shutdown logged, socket activation. Raise it when a check is added.
CI_EXPECT=12
ci_expect "$CI_EXPECT"
bin="${MCP_BRIDGE_BIN:-$repo/target/debug/mcp-bridge}"
ok() { echo "ok: $*"; ci_add 1 0; }
bad() { echo "FAILED: $*"; ci_add 0 1; }
finish() { ci_result; exit $((CI_FAILED > 0)); }
skip() { ci_skip "$@"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (systemd as PID 1 of a namespace)"
[ -x /usr/lib/systemd/systemd ] || skip "systemd is not installed"
command -v nsenter >/dev/null || skip "nsenter (util-linux) is not installed"
unshare --pid --fork --mount true 2>/dev/null || skip "cannot create pid/mount namespaces here"
[ -x "$bin" ] || { bad "bridge binary $bin missing"; finish; }

# Stage outside /tmp and /home: the unit has PrivateTmp= and ProtectHome=, and the dynamic
# user must be able to read everything.
mkdir -p /opt
stage=$(mktemp -d /opt/mcp-bridge-ci.XXXXXX)
chmod 755 "$stage"
sd_pid=""
cleanup() {
  [ -n "$sd_pid" ] && kill -9 "$sd_pid" 2>/dev/null
  rm -rf "$stage"
}
trap cleanup EXIT

port=$(ci_free_port python3)
sport=$(ci_free_port python3)

install -m 755 "$bin" "$stage/mcp-bridge"
install -m 644 tests/fixtures/systemd/tiny_server.py tests/fixtures/systemd/tiny_server.js "$stage/"
mkdir -p "$stage/units"
sed -e "s#/usr/local/bin/mcp-bridge#$stage/mcp-bridge#g" \
    -e "s#/etc/mcp-bridge/config.toml#$stage/config.toml#g" \
    systemd/mcp-bridge.service >"$stage/units/mcp-bridge.service"
sed -e "s#^ListenStream=.*#ListenStream=127.0.0.1:$sport#" \
    systemd/mcp-bridge.socket >"$stage/units/mcp-bridge.socket"
servers() {
  cat <<EOF
default_server = "demo"
[listen]
addresses = ["127.0.0.1:$port"]
[servers.demo]
command = "$stage/mcp-bridge"
args = ["demo-server"]
[servers.py]
command = "python3"
args = ["$stage/tiny_server.py"]
[servers.node]
command = "node"
args = ["$stage/tiny_server.js"]
EOF
}
servers >"$stage/config.toml"
chmod 644 "$stage/config.toml"
cat >"$stage/boot.sh" <<EOF
#!/bin/sh
set -e
mount --make-rprivate /
mount -t proc proc /proc
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /var/tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /etc/systemd/system
cp $stage/units/* /etc/systemd/system/
export container=other
exec /usr/lib/systemd/systemd --system --unit=multi-user.target --log-level=notice
EOF
chmod 755 "$stage/boot.sh"

setsid unshare --pid --fork --mount "$stage/boot.sh" >"$stage/boot.log" 2>&1 </dev/null &
for _ in $(seq 1 100); do
  sd_pid=$(pgrep -f "^/usr/lib/systemd/systemd --system --unit=multi-user.target" | head -1)
  [ -n "$sd_pid" ] && break
  sleep 0.1
done
[ -n "$sd_pid" ] || { bad "systemd did not start: $(tail -5 "$stage/boot.log")"; finish; }
in_ns() { nsenter -t "$sd_pid" --mount --pid "$@"; }
state=""
for _ in $(seq 1 100); do
  state=$(in_ns systemctl is-system-running 2>/dev/null)
  case "$state" in running | degraded) break ;; esac
  sleep 0.2
done
case "$state" in
  running | degraded) ok "systemd booted as PID 1 of a namespace ($state)" ;;
  *) bad "systemd did not finish booting (state: ${state:-none})"; finish ;;
esac
prop() { in_ns systemctl show -p "$2" --value "$1"; }
# By identifier, not -u: journald can miss the unit of the last lines of a process that has
# just exited (it reads the cgroup after the fact), and those are the shutdown lines.
journal() { in_ns journalctl --no-pager -o cat SYSLOG_IDENTIFIER=mcp-bridge; }
# journald writes asynchronously: wait (bounded) for a line.
journal_has() {
  for _ in $(seq 1 100); do
    # Not `journal | grep -q`: under pipefail, grep leaving early fails the pipe (SIGPIPE).
    grep -q -- "$1" <<<"$(journal)" && return 0
    sleep 0.1
  done
  return 1
}

post() { # URL JSON [extra curl args...]
  local url=$1 body=$2
  shift 2
  curl -s --max-time 20 -X POST "$url" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' "$@" -d "$body"
}
call_2025() { # URL: initialize, then tools/call hello; prints the result text
  local url=$1 sid
  sid=$(curl -s --max-time 20 -D - -o /dev/null -X POST "$url" -H 'content-type: application/json' \
    -H 'accept: application/json, text/event-stream' \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ci","version":"1"}}}' |
    sed -nE 's/^mcp-session-id: *([^[:space:]]+).*/\1/Ip')
  post "$url" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hello","arguments":{}}}' \
    -H "mcp-session-id: $sid" -H 'mcp-protocol-version: 2025-11-25' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["content"][0]["text"])' 2>/dev/null
}

# --- Type=notify start
if in_ns systemctl start mcp-bridge.service; then
  ok "systemctl start: READY=1 reached (Type=notify)"
else
  bad "systemctl start failed: $(journal | tail -5)"
  finish
fi
status=$(prop mcp-bridge.service StatusText)
[ "$status" = "serving 3 servers on 127.0.0.1:$port" ] && ok "STATUS=$status" || bad "STATUS is '$status'"
main=$(prop mcp-bridge.service MainPID)
user=$(in_ns ps -o user= -p "$main" | tr -d ' ')
[ -n "$user" ] && [ "$user" != root ] && ok "runs as the dynamic user '$user'" || bad "main process user '$user'"
journal_has "systemd watchdog enabled" && ok "watchdog armed (WatchdogSec)" || bad "watchdog not armed"

# --- calls through the sandbox
text=$(post "http://127.0.0.1:$port/mcp" \
  '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"under systemd"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}' \
  -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: echo' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["content"][0]["text"])' 2>/dev/null)
[ "$text" = "under systemd" ] && ok "2026 call to the demo server" || bad "demo call answered '$text'"
text=$(call_2025 "http://127.0.0.1:$port/servers/py/mcp")
case "$text" in "hello from python "*) ok "Python child under the sandbox: $text" ;; *) bad "Python child: '$text' $(journal | grep -i py | tail -3)" ;; esac
text=$(call_2025 "http://127.0.0.1:$port/servers/node/mcp")
case "$text" in "hello from node "*" 42") ok "Node child (JIT) under the sandbox: $text" ;; *) bad "Node child: '$text' $(journal | grep -i node | tail -3)" ;; esac

# --- systemctl reload: one more server, same main process, unchanged ones untouched
{ servers; printf '[servers.extra]\ncommand = "%s"\nargs = ["demo-server", "--era", "legacy"]\n' "$stage/mcp-bridge"; } >"$stage/config.toml"
if in_ns systemctl reload mcp-bridge.service; then
  status=$(prop mcp-bridge.service StatusText)
  [ "$status" = "serving 4 servers on 127.0.0.1:$port" ] && [ "$(prop mcp-bridge.service MainPID)" = "$main" ] &&
    journal_has 'added=\["extra"\] removed=\[\] restarted=\[\] unchanged=3' &&
    ok "systemctl reload: extra server added, 3 untouched, same main process" ||
    bad "reload: STATUS '$status'; $(journal | grep 'configuration reloaded' | tail -1)"
else
  bad "systemctl reload failed"
fi

# --- systemctl stop: clean exit, nothing left in the cgroup
cg=$(prop mcp-bridge.service ControlGroup)
in_ns systemctl stop mcp-bridge.service
result=$(prop mcp-bridge.service Result)
left=$(in_ns pgrep -f "$stage/" | wc -l)
[ "$result" = success ] && [ "$left" -eq 0 ] && ok "systemctl stop: Result=success, no process left ($cg)" ||
  bad "stop: Result=$result, $left processes left"
journal_has "shutdown complete" && ok "graceful shutdown logged" || bad "no 'shutdown complete' in the journal"

# --- socket activation
servers >"$stage/config.toml"
in_ns systemctl start mcp-bridge.socket
before=$(prop mcp-bridge.service ActiveState)
code=$(curl -s --max-time 20 -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$sport/mcp" \
  -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ci","version":"1"}}}')
# The passed listener is served at once; READY=1 follows when the children are up.
for _ in $(seq 1 100); do
  after=$(prop mcp-bridge.service ActiveState)
  [ "$after" = activating ] || break
  sleep 0.1
done
[ "$before" = inactive ] && [ "$code" = 200 ] && [ "$after" = active ] &&
  journal_has "using the listening sockets passed by the service manager" &&
  ok "socket activation: first connection started the service on the passed listener" ||
  bad "socket activation: service $before -> $after, HTTP $code"
in_ns systemctl stop mcp-bridge.socket mcp-bridge.service

finish
