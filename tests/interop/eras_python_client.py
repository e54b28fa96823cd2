#!/usr/bin/env python3
"""Era-translation interop: the official MCP Python SDK client (PyPI `mcp==2.3.0`) pinned to
protocol version 2026-07-28 completes a form-mode elicitation through `mcp-bridge serve` in
front of a 2025-era stdio server. The bridge must turn the child's `elicitation/create`
request into an `input_required` result and resume the parked call on the client's retry.

Usage:
    python eras_python_client.py URL --target everything|demo [--trace]

Targets:
    everything  child = npm @modelcontextprotocol/server-everything (stdio). Its tool
                `trigger-elicitation-request` (no arguments; registered only for clients that
                declared elicitation at initialize - the bridge does) sends `elicitation/create`
                and answers `✅ User provided the requested information!` + `User inputs:\\n-
                Name: <name>...` + `Raw result: <the ElicitResult as JSON>`.
    demo        child = `mcp-bridge serve --demo --demo-era legacy`: tool `elicit {message}`
                answers `elicited: action=accept content=<content as JSON>`.

How mcp 2.3.0 is driven (site-packages/mcp/client/client.py, _input_required.py):
`Client(streamable_http_client(url, http_client=...), mode="2026-07-28",
elicitation_callback=cb)` adopts 2026-07-28 without a probe, stamps per-request `_meta`
(protocolVersion, clientCapabilities - `elicitation` present because a callback is given -,
clientInfo) and the `MCP-Protocol-Version`/`Mcp-Method`/`Mcp-Name` headers. When `tools/call`
returns `resultType: "input_required"`, `call_tool` runs `run_input_required_driver`: every
`inputRequests` entry goes through the callback `cb(context, ElicitRequestParams)`, then the
same `tools/call` is re-sent under a new JSON-RPC id with `inputResponses` and the echoed
`requestState`, until a complete result arrives (at most `input_required_max_rounds` = 10).

Prints `PASS/FAIL <target> <check>: ...` per check, then exactly `N passed, M failed`; exit 1
on any failure. On a failure the HTTP exchange of that check (requests, statuses, response
bodies) is dumped to stderr; `--trace` prints it live.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

T0 = time.monotonic()
ANSWER_NAME = "Ada Lovelace \u2013 \u00e9ra 2026"
ANSWER_COLOR = "teal"

TARGETS: dict[str, dict[str, Any]] = {
    "everything": {
        "tool": "trigger-elicitation-request",
        "args": {},
        "message": "Please provide inputs for the following fields:",
        "content": {"name": ANSWER_NAME, "check": True, "integer": 7},
    },
    "demo": {
        "tool": "elicit",
        "args": {"message": "What is your name? (python sdk, 2026-07-28)"},
        "message": "What is your name? (python sdk, 2026-07-28)",
        "content": {"name": ANSWER_NAME},
    },
}


def _clip(b: bytes | str, n: int = 700) -> str:
    s = b.decode("utf-8", "replace") if isinstance(b, bytes) else b
    s = s.replace("\r", "\\r").replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + f"...(+{len(s) - n} chars)"


class Trace:
    """The HTTP exchange: one line per event, plus one record per HTTP request."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.lines: list[str] = []
        self.requests: list[dict[str, Any]] = []

    def add(self, line: str) -> None:
        line = f"[{time.monotonic() - T0:7.3f}] {line}"
        self.lines.append(line)
        if self.live:
            print(line, file=sys.stderr, flush=True)

    def mark(self) -> int:
        return len(self.lines)


_SHOWN = ("content-type", "mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name")


class _Body(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, trace: Trace, tag: str, rec: dict[str, Any]) -> None:
        self.inner, self.trace, self.tag, self.rec = inner, trace, tag, rec

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.trace.add(f"{self.tag} <<< {_clip(chunk)}")
            self.rec["body"] += chunk
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class TracingTransport(httpx2.AsyncBaseTransport):
    def __init__(self, trace: Trace) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.trace = trace

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        tag = f"#{len(self.trace.requests) + 1}"
        hdrs = " ".join(f"{k}={v!r}" for k, v in request.headers.items() if k.lower() in _SHOWN)
        body = request.content if request.content else b""
        self.trace.add(f"{tag} >>> {request.method} {request.url.path} {hdrs} {_clip(body)}")
        rec: dict[str, Any] = {"http": request.method, "status": None, "body": b""}
        try:
            rec["msg"] = json.loads(body) if body else None
        except ValueError:
            rec["msg"] = None
        self.trace.requests.append(rec)
        resp = await self.inner.handle_async_request(request)
        rh = " ".join(f"{k}={v!r}" for k, v in resp.headers.items() if k.lower() in _SHOWN)
        self.trace.add(f"{tag} <<< HTTP {resp.status_code} {rh}")
        rec["status"] = resp.status_code
        return httpx2.Response(status_code=resp.status_code, headers=resp.headers,
                               stream=_Body(resp.stream, self.trace, tag, rec), extensions=resp.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _messages(body: bytes) -> list[dict[str, Any]]:
    """JSON-RPC messages in a response body, JSON or SSE."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return []
    try:
        v = json.loads(text)
        return [v] if isinstance(v, dict) else []
    except ValueError:
        pass
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in event.split("\n") if line.startswith("data:"))
        if data:
            try:
                out.append(json.loads(data))
            except ValueError:
                pass
    return out


def _texts(result: Any) -> list[str]:
    return [b.text for b in (result.content or []) if getattr(b, "type", None) == "text"]


class Runner:
    def __init__(self, target: str, trace: Trace) -> None:
        self.target, self.trace = target, trace
        self.passed = self.failed = 0

    def report(self, ok: bool, name: str, detail: str, mark: int | None = None) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} py2026/{self.target} {name}: {detail}", flush=True)
        if ok:
            self.passed += 1
            return True
        self.failed += 1
        if mark is not None and not self.trace.live:
            print(f"---- HTTP exchange during '{name}' ({self.target}) ----", file=sys.stderr)
            for line in self.trace.lines[mark:][-80:]:
                print("    " + line, file=sys.stderr)
            print("---- end ----", file=sys.stderr, flush=True)
        return False

    async def check(self, name: str, fn: Callable[[], Awaitable[tuple[bool, str]]], timeout: float = 30.0) -> bool:
        mark = self.trace.mark()
        try:
            with anyio.fail_after(timeout):
                ok, detail = await fn()
        except TimeoutError:
            ok, detail = False, f"no answer within {timeout:.0f}s (hung)"
        except MCPError as e:
            ok, detail = False, f"MCPError {e.code}: {e.message} data={getattr(e.error, 'data', None)!r}"
        except Exception as e:  # noqa: BLE001 - report whatever the SDK raised
            ok, detail = False, f"{type(e).__name__}: {_clip(str(e), 500)}"
        return self.report(ok, name, detail, mark)


async def run(url: str, target: str, trace: Trace) -> Runner:
    r = Runner(target, trace)
    spec = TARGETS[target]
    asked: list[types.ElicitRequestParams] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        trace.add(f"--- elicitation callback: {_clip(params.model_dump_json(by_alias=True, exclude_none=True), 300)}")
        return types.ElicitResult(action="accept", content=spec["content"])

    http_client = httpx2.AsyncClient(transport=TracingTransport(trace), timeout=httpx2.Timeout(30.0, read=120.0))
    client = Client(streamable_http_client(url, http_client=http_client), mode="2026-07-28",
                    elicitation_callback=on_elicit, read_timeout_seconds=30)
    mark = trace.mark()
    try:
        async with http_client, client:
            r.report(client.protocol_version == "2026-07-28", "connect",
                     f"protocol_version={client.protocol_version} (pinned, no probe)", mark)

            async def tools_list() -> tuple[bool, str]:
                names = [t.name for t in (await client.list_tools()).tools]
                return spec["tool"] in names, f"{spec['tool']!r} in tools={names}"

            await r.check("tools/list", tools_list)

            first = len(trace.requests)
            call_mark = trace.mark()

            async def elicit() -> tuple[bool, str]:
                res = await client.call_tool(spec["tool"], spec["args"])
                texts = _texts(res)
                joined = "\n".join(texts)
                if res.is_error:
                    return False, f"is_error=True texts={texts!r}"
                if target == "everything":
                    ok = ("User provided the requested information" in joined
                          and f"- Name: {ANSWER_NAME}" in joined
                          and "- Agreed to terms: true" in joined
                          and "- Favorite Integer: 7" in joined)
                else:
                    prefix = "elicited: action=accept content="
                    got = None
                    if len(texts) == 1 and texts[0].startswith(prefix):
                        try:
                            got = json.loads(texts[0][len(prefix):])
                        except ValueError:
                            got = None
                    ok = got == spec["content"]
                return ok, f"final result reflects the answer: {_clip(joined, 300)!r}"

            if await r.check("elicitation round trip", elicit):
                ok = len(asked) == 1 and asked[0].message == spec["message"]
                r.report(ok, "elicitation callback", f"called {len(asked)}x (want 1), message="
                         f"{asked[0].message if asked else None!r} mode={getattr(asked[0], 'mode', None) if asked else None!r}")
            else:
                r.report(False, "elicitation callback", f"called {len(asked)}x")

            # What went over the wire: first tools/call -> input_required; retry under a new id
            # with inputResponses (the key the bridge chose) and the exact requestState.
            def wire() -> tuple[bool, str]:
                calls = [q for q in trace.requests[first:]
                         if isinstance(q.get("msg"), dict) and q["msg"].get("method") == "tools/call"]
                if len(calls) < 2:
                    return False, f"{len(calls)} tools/call POST(s); want 2 (call + retry)"
                c0, c1 = calls[0], calls[1]
                m0 = [m for m in _messages(c0["body"]) if m.get("id") == c0["msg"].get("id")]
                res0 = (m0[-1].get("result") or {}) if m0 else {}
                keys = sorted((res0.get("inputRequests") or {}).keys())
                state = res0.get("requestState")
                p1 = c1["msg"].get("params") or {}
                resp_keys = sorted((p1.get("inputResponses") or {}).keys())
                m1 = [m for m in _messages(c1["body"]) if m.get("id") == c1["msg"].get("id")]
                res1 = (m1[-1].get("result") or {}) if m1 else {}
                ok = (c0["status"] == 200 and res0.get("resultType") == "input_required" and len(keys) == 1
                      and isinstance(state, str) and c1["msg"].get("id") != c0["msg"].get("id")
                      and resp_keys == keys and p1.get("requestState") == state
                      and c1["status"] == 200 and res1.get("resultType", "complete") == "complete" and len(calls) == 2)
                return ok, (f"POST tools/call id={c0['msg'].get('id')} -> HTTP {c0['status']} resultType="
                            f"{res0.get('resultType')!r} inputRequests={keys} "
                            f"method={[(res0.get('inputRequests') or {})[k].get('method') for k in keys]} "
                            f"requestState={len(state) if isinstance(state, str) else None} chars; "
                            f"retry id={c1['msg'].get('id')} inputResponses={resp_keys} "
                            f"requestState echoed={p1.get('requestState') == state} -> HTTP {c1['status']} "
                            f"resultType={res1.get('resultType')!r}; tools/call POSTs={len(calls)}")

            ok, detail = wire()
            r.report(ok, "on the wire", detail, call_mark)
    except Exception as e:  # noqa: BLE001
        r.report(False, "run", f"aborted: {type(e).__name__}: {_clip(str(e), 500)}", mark)
    return r


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--target", choices=sorted(TARGETS), required=True)
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args()
    trace = Trace(args.trace)
    try:
        with anyio.fail_after(120):
            r = await run(args.url, args.target, trace)
        passed, failed = r.passed, r.failed
    except TimeoutError:
        print(f"FAIL {args.target} overall: did not finish within 120s", flush=True)
        passed, failed = 0, 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
