#!/usr/bin/env python3
"""Aggregation-endpoint interop (issue 25): the official MCP Python SDK client (PyPI `mcp==2.3.0`)
through one `[endpoints.team]` of `mcp-bridge serve --config` over four members nobody here
wrote or that speak the other era (see .ci/interop-endpoint.sh):

    ev    npm @modelcontextprotocol/server-everything, stdio child (2025)
    evh   the same over its own `streamableHttp` transport, a remote (2025)
    py    tests/interop/eras_modern_server.py, the Python SDK's MCPServer on stdio (2026)
    demo  `mcp-bridge demo-server --era modern --tools-page 3`, a paginating 2026 child

Usage:
    python endpoint_python_client.py URL --mode 2026-07-28|auto|legacy [--guarded URL2] [--bridge-log LOG]

`--mode` is the SDK's own (`Client(mode=...)`): a 2026 pin, `auto` (server/discover, falling
back to initialize), or `legacy` (a 2025 session). Checks: the merged, paginated tools/list
(every member, prefixed, no repeats, more than one page); a call on every member; elicitation
inside a member's tool (2025 child: the bridge's input round or a plain request; 2026 children:
their own rounds); sampling inside server-everything's tool; a resource subscription (legacy:
resources/subscribe; 2026: subscriptions/listen) that sees server-everything's updates; with
`--guarded URL2` (an endpoint whose `[[policy]]` confirms `*__echo`), the endpoint's own
approval question is answered and the call runs; with `--bridge-log`, the `ev` child is killed (its pid from the bridge's log) and the endpoint must
keep answering for the others and bring `ev` back on its own.

Prints `PASS/FAIL <mode> <check>: ...` per check, then exactly `N passed, M failed`.
"""

from __future__ import annotations

import argparse
import warnings
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")
MEMBERS = ("ev", "evh", "py", "demo")
NAME = "Ada \u2013 endpoint"
SAMPLED = "sampled by the python client"


def texts(result: Any) -> str:
    return "\n".join(b.text for b in (result.content or []) if getattr(b, "type", None) == "text")


class Runner:
    def __init__(self, mode: str) -> None:
        self.mode, self.passed, self.failed = mode, 0, 0

    def report(self, ok: bool, name: str, detail: str) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} py/{self.mode} {name}: {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok

    async def check(self, name: str, fn: Callable[[], Awaitable[tuple[bool, str]]], timeout: float = 45.0) -> bool:
        try:
            with anyio.fail_after(timeout):
                ok, detail = await fn()
        except TimeoutError:
            ok, detail = False, f"no answer within {timeout:.0f}s"
        except MCPError as e:
            ok, detail = False, f"MCPError {e.code}: {e.message}"
        except Exception as e:  # noqa: BLE001 - report whatever the SDK raised
            ok, detail = False, f"{type(e).__name__}: {str(e)[:400]}"
        return self.report(ok, name, detail)


APPROVALS: list[str] = []


async def on_elicit(_ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    msg = params.message or ""
    if msg.startswith("Allow the call to"):  # the endpoint's own approval step (`confirm`)
        APPROVALS.append(msg)
        return types.ElicitResult(action="accept")
    if msg.startswith("Please provide inputs"):  # server-everything
        return types.ElicitResult(action="accept", content={"name": NAME, "check": True, "integer": 7})
    if msg.startswith("Who are you"):  # the Python SDK server's `ask`
        return types.ElicitResult(action="accept", content={"name": NAME, "color": "teal"})
    return types.ElicitResult(action="accept", content={"name": NAME})


async def on_sample(_ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=SAMPLED), model="interop-model",
        stop_reason="endTurn")


def ev_pid(log: str) -> int | None:
    with open(log, encoding="utf-8", errors="replace") as f:
        pids = re.findall(r"child started server=ev pid=(\d+)", f.read())
    return int(pids[-1]) if pids else None


async def guarded(r: Runner, url: str, mode: str) -> None:
    """Calls a `confirm` rule covers: the endpoint asks this client first, then runs them."""
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0))
    client = Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=on_elicit,
                    read_timeout_seconds=40)
    async with http, client:
        for tool, args, want in (("ev__echo", {"message": "guarded"}, "Echo: guarded"),
                                 ("demo__echo", {"text": "guarded"}, "guarded")):
            async def call(tool: str = tool, args: dict = args, want: str = want) -> tuple[bool, str]:
                before = len(APPROVALS)
                res = await client.call_tool(tool, args)
                asked = APPROVALS[before:]
                ok = (not res.is_error and texts(res) == want and len(asked) == 1
                      and f'tool "{tool}"' in asked[0])
                return ok, f"asked {asked!r}, then {tool} -> {texts(res)[:80]!r}"
            await r.check(f"confirm: approved, then {tool.split('__')[0]} runs it", call)


async def run(url: str, mode: str, bridge_log: str | None, guarded_url: str | None) -> Runner:
    r = Runner(mode)
    updates: list[str] = []

    async def on_message(m: Any) -> None:
        root = getattr(m, "root", m)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(getattr(root.params, "uri", ""))

    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0))
    client = Client(streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=on_elicit,
                    sampling_callback=on_sample, message_handler=on_message, read_timeout_seconds=40)
    async with http, client:
        want = "2026-07-28" if mode != "legacy" else None
        pv = client.protocol_version
        r.report(pv == want if want else pv != "2026-07-28", "connect", f"protocol_version={pv}")

        async def paginate() -> tuple[bool, str]:
            names, pages, cursor = [], 0, None
            while pages < 50:
                res = await client.list_tools(cursor=cursor, cache_mode="bypass")
                pages += 1
                names += [t.name for t in res.tools]
                cursor = res.next_cursor
                if not cursor:
                    break
            by = {m: sum(1 for n in names if n.startswith(m + "__")) for m in MEMBERS}
            ok = (pages > 1 and all(by.values()) and len(names) == len(set(names))
                  and all(any(n.startswith(m + "__") for m in MEMBERS) for n in names))
            return ok, f"{len(names)} tools in {pages} pages, per member {by}"

        await r.check("tools/list, every page", paginate)

        calls = {
            "ev": ("ev__echo", {"message": "hi ev"}, "Echo: hi ev"),
            "evh": ("evh__echo", {"message": "hi evh"}, "Echo: hi evh"),
            "py": ("py__echo", {"text": "hi py"}, "hi py"),
            "demo": ("demo__echo", {"text": "hi demo"}, "hi demo"),
        }
        for m, (tool, args, want_text) in calls.items():
            async def call(tool: str = tool, args: dict = args, want_text: str = want_text) -> tuple[bool, str]:
                res = await client.call_tool(tool, args)
                t = texts(res)
                return (not res.is_error and want_text in t), f"{tool} -> {t[:120]!r}"
            await r.check(f"call {m}", call)

        elicits = {
            "ev": ("ev__trigger-elicitation-request", {}, "User provided the requested information"),
            "py": ("py__ask", {"question": "Who are you? (endpoint)"}, f"answer: action=accept name={NAME} color=teal"),
            "demo": ("demo__elicit", {"message": "name? (endpoint)"}, "elicited: action=accept"),
        }
        for m, (tool, args, want_text) in elicits.items():
            async def elicit(tool: str = tool, args: dict = args, want_text: str = want_text) -> tuple[bool, str]:
                res = await client.call_tool(tool, args)
                t = texts(res)
                return (not res.is_error and want_text in t and (m != "ev" or NAME in t)), f"{tool} -> {t[:160]!r}"
            await r.check(f"elicitation inside {m}", elicit)

        async def sample() -> tuple[bool, str]:
            res = await client.call_tool("ev__trigger-sampling-request", {"prompt": "hello", "maxTokens": 20})
            t = texts(res)
            return (not res.is_error and SAMPLED in t), f"-> {t[:160]!r}"

        await r.check("sampling inside ev", sample)

        async def subscribe() -> tuple[bool, str]:
            res = await client.list_resources()
            uris = [str(x.uri) for x in res.resources if "static" in str(x.uri)] or [str(x.uri) for x in res.resources]
            if not uris:
                return False, "no resources listed"
            uri = uris[0]
            if mode == "legacy":
                await client.subscribe_resource(uri)
                await client.call_tool("ev__toggle-subscriber-updates", {})
                try:
                    with anyio.fail_after(20):
                        while uri not in updates:
                            await anyio.sleep(0.2)
                finally:
                    await client.call_tool("ev__toggle-subscriber-updates", {})
                return True, f"notifications/resources/updated for {uri}"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                await client.call_tool("ev__toggle-subscriber-updates", {})
                try:
                    with anyio.fail_after(20):
                        async for ev in sub:
                            if uri in repr(ev):
                                return True, f"listen event for {uri}: {str(ev)[:120]}"
                finally:
                    await client.call_tool("ev__toggle-subscriber-updates", {})
            return False, "the listen ended without an update"

        await r.check("resource subscription on ev", subscribe, timeout=60)
        if guarded_url:
            await guarded(r, guarded_url, mode)

        if bridge_log:
            pid = ev_pid(bridge_log)
            if pid is None:
                r.report(False, "member killed", "no 'child started server=ev pid=' in the bridge log")
                return r
            os.kill(pid, signal.SIGKILL)

            async def others() -> tuple[bool, str]:
                res = await client.call_tool("demo__echo", {"text": "still here"})
                return texts(res) == "still here", f"demo__echo while ev restarts -> {texts(res)!r}"

            await r.check("member killed: the others answer", others)

            async def back() -> tuple[bool, str]:
                tries, last = 0, ""
                t0 = time.monotonic()
                while time.monotonic() - t0 < 40:
                    tries += 1
                    try:
                        res = await client.call_tool("ev__echo", {"message": "back"})
                        if texts(res) == "Echo: back" and ev_pid(bridge_log) != pid:
                            return True, f"ev answers again after {tries} tries (new pid {ev_pid(bridge_log)})"
                        last = texts(res)
                    except MCPError as e:
                        last = f"MCPError {e.code}: {e.message}"
                        if "ev" not in e.message:
                            return False, f"an error that does not name the member: {last}"
                    await anyio.sleep(0.5)
                return False, f"ev did not come back: {last}"

            await r.check("member killed: it comes back on its own", back, timeout=60)
    return r


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--mode", required=True)
    ap.add_argument("--bridge-log")
    ap.add_argument("--guarded", help="an endpoint whose rule confirms ev__echo and demo__echo")
    a = ap.parse_args()
    try:
        with anyio.fail_after(300):
            r = await run(a.url, a.mode, a.bridge_log, a.guarded)
        passed, failed = r.passed, r.failed
    except Exception as e:  # noqa: BLE001
        print(f"FAIL py/{a.mode} run: {type(e).__name__}: {str(e)[:400]}", flush=True)
        passed, failed = 0, 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
