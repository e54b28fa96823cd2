#!/usr/bin/env python3
"""A one-core stdio MCP server (2025 era, standard library only) for benches/pool/run.sh.

It answers `initialize`, `tools/list` and `ping`, refuses `server/discover` (-32601, like any
pre-2026 server) and has one tool, `spin`: a pure-Python loop of `n` iterations (default
2,000,000, about 0.1 s). Requests are handled one at a time on the main thread, as most Python
servers are, so one process is one core: the case a pool of children is for.
"""

import json
import sys


def reply(msg_id, result=None, error=None):
    out = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


TOOL = {
    "name": "spin",
    "description": "Burn CPU for n loop iterations.",
    "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
}


def spin(n):
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1000003
    return acc


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, msg_id = msg.get("method"), msg.get("id")
    if msg_id is None:
        continue  # notifications
    if method == "initialize":
        version = (msg.get("params") or {}).get("protocolVersion", "2025-11-25")
        reply(msg_id, {"protocolVersion": version, "capabilities": {"tools": {}},
                       "serverInfo": {"name": "pool-cpu", "version": "1"}})
    elif method == "tools/list":
        reply(msg_id, {"tools": [TOOL]})
    elif method == "ping":
        reply(msg_id, {})
    elif method == "tools/call":
        args = (msg.get("params") or {}).get("arguments") or {}
        n = int(args.get("n", 2_000_000))
        reply(msg_id, {"content": [{"type": "text", "text": str(spin(n))}]})
    else:
        reply(msg_id, error={"code": -32601, "message": "Method not found"})
