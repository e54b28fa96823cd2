#!/usr/bin/env python3
"""A stdio MCP host for .ci/interop-oidc.sh: spawns `mcp-bridge connect URL ARGS…` (the argv
after `--`), speaks MCP over its stdin/stdout (initialize, notifications/initialized, then
tools/call echo N times, optionally waiting between calls) and prints one JSON line with what
happened:

    {"ok": bool, "calls": [{"ok": bool, "text"|"error": …, "at": secs}], "rc": exit status,
     "error": "…"}

connect's stdout (every raw line) and stderr go to the files --stdout-log / --stderr-log, so the
test can look for leaked tokens in both.

    oidc_host.py [--calls N] [--gap SECS] [--timeout SECS] [--before-call-file F]
                 --stdout-log F --stderr-log F -- BIN connect URL …

--before-call-file F: before each call after the first, wait until F exists and delete it (the
test uses this to swap the server between two calls of one connect process).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time

PROTOCOL = "2025-11-25"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--gap", type=float, default=0)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--before-call-file")
    ap.add_argument("--stdout-log", required=True)
    ap.add_argument("--stderr-log", required=True)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    out: dict = {"ok": False, "calls": []}
    t0 = time.monotonic()
    deadline = t0 + a.timeout
    errf = open(a.stderr_log, "ab")
    rawf = open(a.stdout_log, "ab")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf, bufsize=0)
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        assert proc.stdout
        for raw in proc.stdout:
            rawf.write(raw)
            rawf.flush()
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()

    def send(msg: dict) -> None:
        assert proc.stdin
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    def request(rid: int, method: str, params: dict) -> dict:
        send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to {method} in {a.timeout}s")
            try:
                raw = lines.get(timeout=left)
            except queue.Empty:
                continue
            if raw is None:
                raise EOFError(f"connect closed stdout before answering {method}")
            msg = json.loads(raw)
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
            if "method" in msg and "id" in msg:
                send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not supported"}})

    try:
        res = request(1, "initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                        "clientInfo": {"name": "oidc-interop-host", "version": "1"}})
        if "result" not in res:
            raise RuntimeError("initialize: " + json.dumps(res.get("error"))[:400])
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for i in range(a.calls):
            if i and a.gap:
                time.sleep(a.gap)
            if i and a.before_call_file:
                while not os.path.exists(a.before_call_file):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the test never said go")
                    time.sleep(0.1)
                os.unlink(a.before_call_file)
            res = request(10 + i, "tools/call", {"name": "echo", "arguments": {"text": f"hello {i}"}})
            at = round(time.monotonic() - t0, 1)
            if "result" in res and not res["result"].get("isError"):
                text = " ".join(c.get("text", "") for c in res["result"].get("content", []))
                out["calls"].append({"ok": True, "text": text[:200], "at": at})
            else:
                out["calls"].append({"ok": False, "error": json.dumps(res.get("error") or res.get("result"))[:600], "at": at})
        out["ok"] = bool(out["calls"]) and all(c["ok"] for c in out["calls"])
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"[:600]
    try:
        if proc.stdin:
            proc.stdin.close()
    except OSError:
        pass
    try:
        out["rc"] = proc.wait(timeout=12)
    except subprocess.TimeoutExpired:
        proc.kill()
        out["rc"] = proc.wait()
        out["killed"] = True
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
