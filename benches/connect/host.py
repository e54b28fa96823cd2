#!/usr/bin/env python3
"""A stdio host for benches/connect/ab.sh: N 2026-07-28 `tools/call echo` (100 B of text)
written to the bridge's stdin with WINDOW in flight, each answer read from its stdout and
checked (id known, result present). Prints `requests seconds` on stdout. No dependencies."""
import json
import subprocess
import sys
import time

n, window, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
text = "x" * 100


def req(i):
    return (json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": text}, "_meta": meta}})
            + "\n").encode()


p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
# Warm-up: the first call waits for the remote's era probe.
p.stdin.write(req(0))
p.stdin.flush()
json.loads(p.stdout.readline())
sent, done = 1, 0
start = time.monotonic()
while sent <= min(window, n):
    p.stdin.write(req(sent))
    sent += 1
p.stdin.flush()
while done < n:
    m = json.loads(p.stdout.readline())
    if "result" not in m:
        sys.exit(f"bad answer: {m}")
    done += 1
    if sent <= n:
        p.stdin.write(req(sent))
        p.stdin.flush()
        sent += 1
took = time.monotonic() - start
p.stdin.close()
p.wait(timeout=10)
print(n, f"{took:.3f}")
