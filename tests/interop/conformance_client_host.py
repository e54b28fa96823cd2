#!/usr/bin/env python3
"""A stdio MCP host for the conformance suite's non-auth client scenarios (npm
@modelcontextprotocol/conformance, `client --command "python3 conformance_client_host.py"`).

The suite starts a scenario's test server and runs this with the server URL as the last
argument, `MCP_CONFORMANCE_SCENARIO` naming the scenario and, for some, `MCP_CONFORMANCE_CONTEXT`
(a JSON object; `toolCalls` lists the calls the scenario wants made). This host spawns
`$MCP_BRIDGE_BIN connect URL` as a desktop app would and speaks MCP to it over stdio, one JSON
message per line, in the era of `CONFORMANCE_HOST_ERA`:

- `2025`: `initialize` (protocol 2025-11-25, capabilities elicitation + sampling), then
  `notifications/initialized`; server requests (elicitation, sampling, roots) arrive from the
  bridge as JSON-RPC requests and are answered here;
- `2026`: no handshake; every request carries `_meta` with the protocol version (2026-07-28),
  the client's capabilities and info; an `input_required` result is answered by retrying the
  request (a new id) with `inputResponses` for every key and `requestState` echoed exactly.

So the scenario judges what connect puts on the wire for either kind of host. What the host
itself does is the everything-client's part, the same for every scenario: list tools and call
each one (with the context's arguments, or ones made from the input schema; a tool that takes a
`schema` object gets the other tool's input schema back verbatim), then list and read the first
resource and list and get the first prompt where the server offers them. An elicitation is
accepted with the schema's defaults filled in (SEP-1034: the host applies them); a sampling
request gets a fixed text answer; `roots/list` an empty list.

Output (stdout, kept by the suite): `PASS|FAIL <step>: detail` lines and `N passed, M failed`;
exit 0 unless a step the scenario needs failed (a tools/list that fails is fatal; a single call
the server refuses is reported, not fatal: some scenarios refuse on purpose). The bridge's
stderr goes to stderr.

Env: MCP_BRIDGE_BIN; CONFORMANCE_HOST_ERA (2025 or 2026, default 2025);
CONFORMANCE_HOST_TIMEOUT (seconds until the host gives up, default 22);
CONFORMANCE_CLIENT_CONNECT_ARGS (extra connect arguments, space-separated).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_auth_host as base  # noqa: E402 - the process handling both hosts share

V2025 = "2025-11-25"
V2026 = "2026-07-28"
CAPS = {"elicitation": {}, "sampling": {}}
INFO = {"name": "mcp-bridge-conformance-host", "version": "1.0.0"}


class Host(base.Host):
    """The auth host's process handling (spawn, reader thread, send, close) with this host's
    era and its answers to server requests."""

    def __init__(self, era: str, deadline: float) -> None:
        super().__init__(deadline)
        self.era = era
        self.next_id = 0

    def params(self, p: dict) -> dict:
        """`p` as this host's era sends it: a 2026 request carries its own `_meta`."""
        if self.era != "2026":
            return p
        meta = dict(p.get("_meta") or {})
        meta.update({
            "io.modelcontextprotocol/protocolVersion": V2026,
            "io.modelcontextprotocol/clientCapabilities": CAPS,
            "io.modelcontextprotocol/clientInfo": INFO,
        })
        return {**p, "_meta": meta}

    def request(self, method: str, params: dict) -> dict:  # type: ignore[override]
        """Send a request; return its final response (answering server requests and, for a
        2026 host, retrying `input_required` results meanwhile)."""
        for _ in range(8):
            self.next_id += 1
            rid = self.next_id
            self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": self.params(params)})
            res = self.wait(rid, method)
            r = res.get("result") or {}
            if self.era != "2026" or r.get("resultType") != "input_required":
                return res
            params = dict(params)
            params["inputResponses"] = {k: answer(q.get("method"), q.get("params") or {})
                                        for k, q in (r.get("inputRequests") or {}).items()}
            if "requestState" in r:
                params["requestState"] = r["requestState"]
            else:
                params.pop("requestState", None)
        raise RuntimeError(f"{method}: still input_required after 8 rounds")

    def server_request(self, msg: dict) -> dict:
        return {"result": answer(msg["method"], msg.get("params") or {})}


def answer(method: str | None, params: dict) -> dict:
    """What this host answers a server request with."""
    if method == "elicitation/create":
        props = ((params.get("requestedSchema") or {}).get("properties") or {})
        content = {k: v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
        return {"action": "accept", "content": content}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "sampled"},
                "model": "conformance-host", "stopReason": "endTurn"}
    if method == "roots/list":
        return {"roots": []}
    return {}


def sample(schema: dict) -> object:
    """A value for `schema` (its default, first enum value, or one of its type)."""
    if not isinstance(schema, dict):
        return "x"
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    t = schema.get("type")
    t = t[0] if isinstance(t, list) and t else t
    if t in ("number", "integer"):
        return 1
    if t == "boolean":
        return True
    if t == "array":
        return []
    if t == "object":
        return {k: sample(v) for k, v in (schema.get("properties") or {}).items()
                if k in (schema.get("required") or [])}
    return "test"


def arguments_for(tool: dict, tools: list[dict]) -> dict:
    schema = tool.get("inputSchema") or {}
    props = schema.get("properties") or {}
    if set(schema.get("required") or []) == {"schema"} and (props.get("schema") or {}).get("type") == "object":
        # An echo of what the host saw: the other tool's schema, verbatim.
        other = next((t for t in tools if t is not tool), None)
        return {"schema": (other or {}).get("inputSchema") or {}}
    return {k: sample(v) for k, v in props.items() if k in (schema.get("required") or [])}


def brief(msg: dict) -> str:
    return json.dumps(msg.get("error") if "error" in msg else msg.get("result"))[:400]


def run(host: Host, context: dict) -> None:
    if host.era != "2026":
        res = host.request("initialize", {"protocolVersion": V2025, "capabilities": CAPS,
                                          "clientInfo": INFO})
        host.report("result" in res, "initialize", brief(res))
        if "result" not in res:
            return
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        caps = res["result"].get("capabilities") or {}
    else:
        caps = None  # a 2026 host asks for each list and takes a refusal as "not offered"

    res = host.request("tools/list", {})
    tools = (res.get("result") or {}).get("tools") or []
    host.report("result" in res, "tools/list", f"tools={[t.get('name') for t in tools]}"
                if "result" in res else brief(res))
    if "result" not in res:
        return
    calls = context.get("toolCalls")
    if calls is None:
        calls = [{"name": t.get("name"), "arguments": arguments_for(t, tools)} for t in tools]
    for c in calls:
        res = host.request("tools/call", {"name": c.get("name"), "arguments": c.get("arguments") or {}})
        ok = "result" in res
        print(f"{'call' if ok else 'refused'} {c.get('name')}: {brief(res)}", flush=True)

    for kind, lister, key, getter in (("resources", "resources/list", "resources", "resources/read"),
                                      ("prompts", "prompts/list", "prompts", "prompts/get")):
        if caps is not None and kind not in caps:
            continue
        res = host.request(lister, {})
        items = (res.get("result") or {}).get(key) or []
        print(f"{lister}: {brief(res)}", flush=True)
        if items:
            first = items[0]
            p = {"uri": first.get("uri")} if kind == "resources" else {
                "name": first.get("name"),
                "arguments": {a["name"]: "test" for a in first.get("arguments") or [] if a.get("required")}}
            res = host.request(getter, p)
            print(f"{getter}: {brief(res)}", flush=True)


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--"]
    if not args:
        print("usage: conformance_client_host.py URL", file=sys.stderr)
        return 64
    url = args[-1]
    era = os.environ.get("CONFORMANCE_HOST_ERA", "2025")
    try:
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    except ValueError:
        context = {}
    timeout = float(os.environ.get("CONFORMANCE_HOST_TIMEOUT") or 22)
    host = Host(era, time.monotonic() + timeout)
    argv = [os.environ.get("MCP_BRIDGE_BIN") or "mcp-bridge", "connect", url]
    argv += (os.environ.get("CONFORMANCE_CLIENT_CONNECT_ARGS") or "").split()
    print(f"scenario {os.environ.get('MCP_CONFORMANCE_SCENARIO', '?')}, a {era} host", flush=True)
    host.start(argv, dict(os.environ))
    try:
        run(host, context if isinstance(context, dict) else {})
    except Exception as e:  # noqa: BLE001 - every failure is one reported step
        host.report(False, "host", f"{type(e).__name__}: {e}")
    rc = host.close(False)
    host.report(rc == 0, "connect exit", f"exit {rc}")
    print(f"{host.passed} passed, {host.failed} failed", flush=True)
    return 0 if host.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
