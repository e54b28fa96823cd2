#!/usr/bin/env python3
"""A stdio MCP host for the conformance suite's client authorization scenarios (npm
@modelcontextprotocol/conformance, `client --command "python3 conformance_auth_host.py"`).

The suite starts a test MCP server and authorization server for a scenario, then runs this with
the server URL appended as the last argument, `MCP_CONFORMANCE_SCENARIO` set to the scenario's
name and, for scenarios that give the client something (a pre-registered client, client
credentials, keys), `MCP_CONFORMANCE_CONTEXT` holding a JSON object of it.

This host spawns `$MCP_BRIDGE_BIN connect URL` (default `mcp-bridge` on PATH) the way a desktop
app would, with a fresh `--oauth-dir` and `BROWSER` set to tests/interop/oauth_browser.py (which
follows the authorization redirect to the loopback callback, as a user who approves would), and
speaks MCP over the bridge's stdin/stdout, one JSON message per line: initialize,
notifications/initialized, tools/list, tools/call of the first tool, then it closes stdin. With
CONFORMANCE_HOST_ERA=2026 it is a 2026-07-28 host instead: no initialize, `_meta` on each
request (connect translates for a 2025 server either way). The
login happens inside the bridge when the remote first answers 401.

The scenario context is mapped onto connect's flags: `client_id` -> `--oauth-client-id`,
`client_secret` -> `--oauth-client-secret-file`, `private_key_pem` -> `--oauth-private-key-file`,
a workload's `valid_jwt` -> `--oauth-jwt-bearer-file`, the enterprise IdP's `idp_id_token` ->
`--oauth-id-token-file` and `idp_client_id`, `idp_issuer`, `idp_token_endpoint` -> the
`--oauth-idp-*` flags (files: 0600 in the temp dir), and an `auth/client-credentials-*` scenario
adds `--oauth-client-credentials` (a machine: no browser). Context keys with no connect flag are
reported on stdout and stderr and otherwise ignored, so such a scenario fails visibly.
auth/basic-cimd gives no context: it expects the client id to be the suite's constant URL
https://conformance-test.local/client-metadata.json, passed as --oauth-client-metadata-url;
auth/2025-03-26-oauth-endpoint-fallback gets --oauth (see below).

Output (stdout, kept by the suite as stdout.txt): `PASS|FAIL <step>: detail` lines and a closing
`N passed, M failed`; exit 0 only if every step passed. The bridge's stderr and the browser
stand-in's log go to stderr (kept as stderr.txt).

Env: MCP_BRIDGE_BIN; CONFORMANCE_AUTH_HOST_TIMEOUT (seconds until the host gives up waiting for
answers, default 37: keep it 3 s or more below the suite's --timeout); CONFORMANCE_AUTH_OAUTH_TIMEOUT (connect's --oauth-timeout,
default 20s); CONFORMANCE_AUTH_LOG_LEVEL (connect's --log-level, default info,mcp_bridge=debug);
CONFORMANCE_AUTH_CONNECT_ARGS (extra connect arguments, space-separated).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CIMD_URL = "https://conformance-test.local/client-metadata.json"
BROWSER_SCRIPT = os.path.join(HERE, "oauth_browser.py")
PROTOCOL = "2025-11-25"


class Host:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.passed = self.failed = 0
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    def report(self, ok: bool, step: str, detail: str) -> None:
        print(f"{'PASS' if ok else 'FAIL'} {step}: {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def start(self, argv: list[str], env: dict) -> None:
        print("spawning: " + " ".join(argv), file=sys.stderr, flush=True)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, bufsize=0
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc and self.proc.stdout
        for raw in self.proc.stdout:
            self.lines.put(raw)
        self.lines.put(None)

    def send(self, msg: dict) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, rid: int, method: str, params: dict) -> dict:
        """Send a request; return its response (answering server requests meanwhile)."""
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.wait(rid, method)

    def wait(self, rid: int, method: str) -> dict:
        """The response to `rid`; server requests met on the way get `server_request`'s answer."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to {method} before the host's deadline")
            try:
                raw = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                raise EOFError(f"the bridge closed stdout before answering {method}")
            try:
                msg = json.loads(raw)
            except ValueError:
                raise ValueError(f"not JSON on the bridge's stdout: {raw[:200]!r}") from None
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
            if "method" in msg and "id" in msg:
                self.send({"jsonrpc": "2.0", "id": msg["id"], **self.server_request(msg)})
            # notifications (logging, list changes, progress) are ignored

    def server_request(self, msg: dict) -> dict:
        """The answer to a server request: this host offers nothing."""
        return {"error": {"code": -32601, "message": "not supported by this host"}}

    def close(self, hurry: bool) -> int | None:
        """Close stdin and wait for the bridge. A call still waiting for a login keeps connect
        up for its shutdown grace (10 s, which SIGTERM does not shorten), so after a timeout
        (`hurry`) the bridge gets 2 s and then SIGKILL, to stay inside the suite's timeout."""
        if not self.proc:
            return None
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=2 if hurry else 12)
        except subprocess.TimeoutExpired:
            print(f"conformance_auth_host: the bridge is still running after stdin closed "
                  f"({'host timed out' if hurry else '12 s'}): killing it", file=sys.stderr, flush=True)
            self.proc.kill()
            return self.proc.wait()


def brief(msg: dict) -> str:
    return json.dumps(msg.get("error") if "error" in msg else msg.get("result"))[:600]


def meta(params: dict) -> dict:
    """`params` as a 2026 host sends them: with `_meta` naming the revision, the client's
    capabilities and info (no `initialize` comes first)."""
    return {**params, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-bridge-conformance-auth-host",
                                               "version": "1.0.0"},
    }}


def run(host: Host) -> None:
    modern = os.environ.get("CONFORMANCE_HOST_ERA") == "2026"
    wrap = meta if modern else (lambda p: p)
    if not modern:
        res = host.request(1, "initialize", {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "mcp-bridge-conformance-auth-host", "version": "1.0.0"},
        })
        ok = "result" in res
        host.report(ok, "initialize", brief(res))
        if not ok:
            return
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    res = host.request(2, "tools/list", wrap({}))
    tools = [t.get("name") for t in (res.get("result") or {}).get("tools", [])]
    ok = "result" in res
    host.report(ok, "tools/list", f"tools={tools}" if ok else brief(res))
    if not ok or not tools:
        return

    res = host.request(3, "tools/call", wrap({"name": tools[0], "arguments": {}}))
    ok = "result" in res and not res["result"].get("isError")
    host.report(ok, f"tools/call {tools[0]}", brief(res))


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--"]
    if len(args) != 1:
        print("usage: conformance_auth_host.py SERVER_URL (the suite appends it)", file=sys.stderr)
        return 2
    url = args[0]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "?")
    try:
        ctx = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    except ValueError:
        ctx = {}
    budget = float(os.environ.get("CONFORMANCE_AUTH_HOST_TIMEOUT", "37"))
    host = Host(time.monotonic() + budget)
    print(f"scenario {scenario}, server {url}", flush=True)

    work = tempfile.mkdtemp(prefix="mcpb-conf-auth.")
    browser_log = os.path.join(work, "browser.log")
    try:
        # The browser stand-in behind a wrapper: connect runs `$BROWSER URL` as a program, and
        # this does not depend on the checked-out script's mode bits or shebang.
        browser = os.path.join(work, "browser")
        with open(browser, "w", encoding="utf-8") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" "{BROWSER_SCRIPT}" "$@"\n')
        os.chmod(browser, stat.S_IRWXU)

        argv = [os.environ.get("MCP_BRIDGE_BIN") or "mcp-bridge", "connect", url,
                "--log-level", os.environ.get("CONFORMANCE_AUTH_LOG_LEVEL") or "info,mcp_bridge=debug",
                "--oauth-dir", os.path.join(work, "oauth"),
                "--oauth-timeout", os.environ.get("CONFORMANCE_AUTH_OAUTH_TIMEOUT", "20s")]
        for key, val in ctx.items():
            if key == "name":
                continue
            if key == "client_id":
                argv += ["--oauth-client-id", str(val)]
            elif key in ("client_secret", "private_key_pem"):
                path = os.path.join(work, key)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(str(val))
                flag = "--oauth-client-secret-file" if key == "client_secret" else "--oauth-private-key-file"
                argv += [flag, path]
            elif key in ("valid_jwt", "idp_id_token"):
                # A workload's JWT (SEP-1933) or the user's ID token at the enterprise IdP
                # (SEP-990): a 0600 file connect reads for every token.
                path = os.path.join(work, key)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(str(val))
                flag = "--oauth-jwt-bearer-file" if key == "valid_jwt" else "--oauth-id-token-file"
                argv += [flag, path]
            elif key in ("idp_client_id", "idp_issuer", "idp_token_endpoint"):
                argv += ["--oauth-" + key.replace("_", "-"), str(val)]
            elif key in ("wrong_audience_jwt", "expired_jwt"):
                # For hosts that test refusals; this host logs in once, with the valid one.
                print(f"NOTE {key}: not used (the valid JWT is)", flush=True)
            elif key == "signing_algorithm":
                # connect signs with what the key is: ES256 for P-256, RS256 for RSA.
                print(f"NOTE signing_algorithm {val!r}: taken from the key's type", flush=True)
            else:
                note = f"context key {key!r} has no connect flag (not passed)"
                print("NOTE " + note, flush=True)
                print("conformance_auth_host: " + note, file=sys.stderr, flush=True)
        if scenario.startswith("auth/client-credentials"):
            # A machine: the client credentials grant, no browser.
            argv += ["--oauth-client-credentials"]
        elif scenario == "auth/basic-cimd":
            # The suite's client: its Client ID Metadata Document (used where advertised).
            argv += ["--oauth-client-metadata-url", CIMD_URL]
        elif scenario == "auth/2025-03-26-oauth-endpoint-fallback":
            # No metadata anywhere: connect guesses the default endpoints only when told the
            # server uses OAuth (else a bare 401 keeps its advice about tokens).
            argv += ["--oauth"]
        argv += (os.environ.get("CONFORMANCE_AUTH_CONNECT_ARGS") or "").split()

        env = dict(os.environ, BROWSER=browser, OAUTH_BROWSER_LOG=browser_log)
        hurry = False
        try:
            host.start(argv, env)
            run(host)
        except Exception as e:  # noqa: BLE001 - every way out is a reported failure
            hurry = isinstance(e, TimeoutError)
            host.report(False, "run", f"{type(e).__name__}: {e}"[:600])
        rc = host.close(hurry)
        print(f"bridge exit status: {rc}", flush=True)
        if os.path.exists(browser_log):
            with open(browser_log, encoding="utf-8", errors="replace") as f:
                sys.stderr.write(f.read())
        else:
            print("conformance_auth_host: the browser was never started", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{host.passed} passed, {host.failed} failed", flush=True)
    return 1 if host.failed else 0


if __name__ == "__main__":
    sys.exit(main())
