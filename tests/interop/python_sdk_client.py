#!/usr/bin/env python3
"""Interop check: the official MCP Python SDK client (PyPI `mcp==2.3.0`) against an
mcp-bridge Streamable HTTP endpoint (normally `mcp-bridge serve --demo`).

Usage:
    python python_sdk_client.py http://127.0.0.1:PORT/mcp --mode auto|legacy|2026 [--trace]

Prints one line per check (`PASS <mode> <check>: ...` / `FAIL <mode> <check>: ...`) and
a final line exactly `N passed, M failed`; exits 1 if any check failed. On a failure the
HTTP exchange recorded during that check (requests the SDK sent, status/headers/body the
server answered, SSE chunks as they arrived, and who closed the stream) is dumped to
stderr; `--trace` prints the whole exchange live to stderr instead.

How mcp 2.3.0 is driven (read from site-packages/mcp/client/*.py):

* Modes. `mcp.Client(server, mode=...)` (client/client.py):
    - `mode="auto"` (the default): `negotiate_auto()` (client/_probe.py) POSTs
      `server/discover` stamped with the newest modern version (2026-07-28), headers
      `MCP-Protocol-Version: 2026-07-28` + `Mcp-Method: server/discover`. A valid
      DiscoverResult listing a modern version => `session.adopt()` (stateless 2026 era).
      Any JSON-RPC error (the transport also turns a bare HTTP 4xx into an MCPError),
      except -32022 with a disjoint modern-only `supported` list, or an unparseable /
      legacy-only DiscoverResult => falls back to `initialize` (2025 era).
      Transport/network errors propagate (no fallback).
    - `mode="legacy"`: `initialize` (protocolVersion = newest handshake version,
      2025-11-25) + `notifications/initialized`; the `Mcp-Session-Id` from the
      InitializeResult response is sent on every later POST, a GET SSE stream is opened
      after `initialized`, and a DELETE is sent on close.
    - `mode="2026-07-28"` (a modern version string; `--mode 2026` here): pinned, no probe
      at all; the client adopts a synthesized minimal DiscoverResult (unless
      `prior_discover=` is given) and sends per-request `_meta`
      (`io.modelcontextprotocol/protocolVersion`, `.../clientCapabilities`, `.../clientInfo`)
      plus `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` headers on every POST.
* Streamable HTTP: passing a URL string uses `mcp.client.streamable_http.streamable_http_client`;
  here we pass that transport explicitly (`Client(streamable_http_client(url, http_client=...))`)
  so the httpx2 client can carry a tracing transport. Accept is
  `application/json, text/event-stream`; both JSON and SSE responses are handled.
* Progress: `client.call_tool(name, args, progress_callback=async cb(progress, total, message))`.
  The dispatcher puts `_meta.progressToken = <JSON-RPC request id>` and routes
  `notifications/progress` with that token to the callback (spawned as a task).
* Cancellation: cancelling the awaiting task (e.g. `anyio.move_on_after`) or
  `read_timeout_seconds=` (raises MCPError -32001 REQUEST_TIMEOUT) makes the dispatcher
  emit a courtesy `notifications/cancelled {requestId}`. The streamable HTTP transport
  then, per the request's era: legacy => POSTs that notification (with Mcp-Session-Id),
  the response stream is left to be dropped; 2026 => does NOT post it, it aborts the
  request's in-flight POST instead (closes the response stream = cancellation).
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
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

MODES = {"auto": "auto", "legacy": "legacy", "2026": "2026-07-28"}
ECHO_TEXT = "hello from the python sdk \u2013 \u00fcn\u00efc\u00f8de \u2713"
CANCEL_AFTER = 1.5  # seconds before the client gives up on a long `slow`
PROMPT_SLACK = 2.0  # control must come back within CANCEL_AFTER + this
T0 = time.monotonic()


def now() -> float:
    return time.monotonic() - T0


# --------------------------------------------------------------------------- HTTP trace


class Trace:
    def __init__(self, live: bool) -> None:
        self.live = live
        self.lines: list[str] = []
        # structured view of the same exchange: one dict per HTTP request, in send order
        self.requests: list[dict[str, Any]] = []

    def add(self, line: str) -> None:
        line = f"[{now():7.3f}] {line}"
        self.lines.append(line)
        if self.live:
            print(line, file=sys.stderr, flush=True)

    def mark(self) -> int:
        return len(self.lines)

    def since(self, mark: int, limit: int = 80) -> list[str]:
        out = self.lines[mark:]
        if len(out) > limit:
            out = out[: limit // 2] + [f"... ({len(out) - limit} lines) ..."] + out[-limit // 2 :]
        return out


def _clip(b: bytes | str, n: int = 600) -> str:
    s = b.decode("utf-8", "replace") if isinstance(b, bytes) else b
    s = s.replace("\r", "\\r").replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + f"...(+{len(s) - n} chars)"


_SHOWN_HEADERS = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name",
                  "last-event-id", "origin")


class _TracedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, trace: Trace, tag: str, rec: dict[str, Any]) -> None:
        self.inner, self.trace, self.tag, self.rec = inner, trace, tag, rec
        self.body = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.trace.add(f"{self.tag} <<< {_clip(chunk)}")
            self.body += chunk
            if b'"result"' in self.body or b'"error"' in self.body:
                self.rec["answered"] = True
            yield chunk
        self.rec["server_ended"] = True
        self.trace.add(f"{self.tag} <<< (server ended the body)")

    async def aclose(self) -> None:
        if not self.rec.get("server_ended") and not self.rec.get("client_closed"):
            self.rec["client_closed"] = True
            when = "after the JSON-RPC response" if self.rec.get("answered") else "BEFORE any JSON-RPC response"
            self.trace.add(f"{self.tag} --- client closed the response stream {when}")
        await self.inner.aclose()


class TracingTransport(httpx2.AsyncBaseTransport):
    def __init__(self, trace: Trace) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.trace = trace
        self.n = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.n += 1
        tag = f"#{self.n}"
        hdrs = " ".join(f"{k}={v!r}" for k, v in request.headers.items() if k.lower() in _SHOWN_HEADERS)
        try:
            body = _clip(request.content) if request.content else ""
        except Exception:
            body = "(streamed body)"
        self.trace.add(f"{tag} >>> {request.method} {request.url.path} {hdrs} {body}")
        rec: dict[str, Any] = {"n": self.n, "http": request.method, "status": None}
        try:
            rec["msg"] = json.loads(request.content) if request.content else None
        except Exception:
            rec["msg"] = None
        self.trace.requests.append(rec)
        try:
            resp = await self.inner.handle_async_request(request)
        except BaseException as e:
            rec["aborted"] = True
            self.trace.add(f"{tag} !!! request aborted before response headers: {type(e).__name__}: {e}")
            raise
        rh = " ".join(f"{k}={v!r}" for k, v in resp.headers.items() if k.lower() in _SHOWN_HEADERS)
        self.trace.add(f"{tag} <<< HTTP {resp.status_code} {rh}")
        rec["status"] = resp.status_code
        return httpx2.Response(
            status_code=resp.status_code,
            headers=resp.headers,
            stream=_TracedStream(resp.stream, self.trace, tag, rec),
            extensions=resp.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


# --------------------------------------------------------------------------- checks


class Runner:
    def __init__(self, mode: str, trace: Trace) -> None:
        self.mode, self.trace = mode, trace
        self.passed = 0
        self.failed = 0
        self.last_mark = 0

    def report(self, ok: bool, name: str, detail: str, mark: int | None = None) -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {self.mode} {name}: {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            if mark is not None and not self.trace.live:
                print(f"---- HTTP exchange during '{name}' ({self.mode}) ----", file=sys.stderr)
                for line in self.trace.since(mark):
                    print("    " + line, file=sys.stderr)
                print("---- end ----", file=sys.stderr, flush=True)
        return ok

    async def check(self, name: str, fn: Callable[[], Awaitable[tuple[bool, str]]], timeout: float = 20.0) -> bool:
        mark = self.last_mark = self.trace.mark()
        try:
            with anyio.fail_after(timeout):
                ok, detail = await fn()
        except TimeoutError:
            ok, detail = False, f"no answer within {timeout:.0f}s (hung)"
        except MCPError as e:
            ok, detail = False, f"MCPError {e.code}: {e.message} data={getattr(e.error, 'data', None)!r}"
        except Exception as e:  # noqa: BLE001 - report whatever the SDK raised
            ok, detail = False, f"{type(e).__name__}: {_clip(str(e), 400)}"
        return self.report(ok, name, detail, mark)


def _msg(rec: dict[str, Any]) -> dict[str, Any]:
    m = rec.get("msg")
    return m if isinstance(m, dict) else {}


async def _cancel_on_wire(trace: Trace, first: int, modern: bool) -> tuple[bool, str]:
    """How the abandoned `slow` call was signalled to the server, read off the HTTP trace."""
    await anyio.sleep(0.5)  # the courtesy cancel is POSTed by a background task
    reqs = trace.requests[first:]
    call = next((q for q in reqs if _msg(q).get("method") == "tools/call"
                 and (_msg(q).get("params") or {}).get("name") == "slow"), None)
    if call is None:
        return False, "no tools/call slow POST in the trace"
    rid = _msg(call).get("id")
    cancels = [q for q in reqs if _msg(q).get("method") == "notifications/cancelled"
               and (_msg(q).get("params") or {}).get("requestId") == rid]
    closed = bool(call.get("client_closed") or call.get("aborted"))
    call_desc = (f"tools/call id={rid!r} HTTP {call.get('status')}: "
                 f"{'answered' if call.get('answered') else 'no response'}, "
                 f"{'client closed/aborted the stream' if closed else 'stream not closed by client'}")
    if modern:
        ok = closed and not call.get("answered") and not cancels
        return ok, f"2026: cancel = closing the response stream; {call_desc}; cancelled POSTs={len(cancels)}"
    statuses = [q.get("status") for q in cancels]
    ok = len(cancels) == 1 and statuses[0] in (200, 202, 204)
    return ok, f"legacy: notifications/cancelled POST statuses={statuses} (want [202]); {call_desc}"


def _text_of(result: Any) -> str | None:
    for block in result.content or []:
        if getattr(block, "type", None) == "text":
            return block.text
    return None


async def run_mode(url: str, mode: str, trace: Trace) -> Runner:
    r = Runner(mode, trace)
    sdk_mode = MODES[mode]
    later_checks = ["tools/list", "echo", "slow progress", "slow progress before result", "slow progress count",
                    "cancel (cancel scope)", "cancel (cancel scope) on the wire", "call after cancel",
                    "cancel (read timeout)", "cancel (read timeout) on the wire", "call after timeout",
                    "slow after cancels", "disconnect"]

    http_client = httpx2.AsyncClient(
        transport=TracingTransport(trace), timeout=httpx2.Timeout(30.0, read=300.0)
    )
    # read_timeout_seconds bounds every request (discover/initialize included) so a hung
    # server shows up as MCPError -32001 instead of stalling the run; task groups inside
    # Client must not be entered under a cancel scope that closes before Client exits.
    client = Client(streamable_http_client(url, http_client=http_client), mode=sdk_mode, read_timeout_seconds=20)
    state: dict[str, Any] = {"connected": False, "closing": False, "mark": trace.mark()}

    def describe(e: BaseException) -> str:
        if isinstance(e, MCPError):
            return f"MCPError {e.code}: {e.message} data={getattr(e.error, 'data', None)!r}"
        if isinstance(e, BaseExceptionGroup):
            return f"{type(e).__name__}: {[describe(x) for x in e.exceptions]}"
        return f"{type(e).__name__}: {_clip(str(e), 400)}"

    try:
        async with http_client:
            async with client:
                state["connected"] = True
                await _run_checks(r, client, trace, mode, state["mark"])
                state["mark"] = trace.mark()
                state["closing"] = True
        if state["connected"]:
            r.report(True, "disconnect", "client closed cleanly", state["mark"])
    except Exception as e:  # noqa: BLE001
        if not state["connected"]:
            r.report(False, "connect", describe(e), state["mark"])
            for name in later_checks:
                r.report(False, name, "skipped: not connected")
        elif state["closing"]:
            r.report(False, "disconnect", describe(e), state["mark"])
        else:
            r.report(False, "run", f"aborted by {describe(e)}", state["mark"])
    return r


async def _run_checks(r: Runner, client: Client, trace: Trace, mode: str, mark: int) -> None:
    pv = client.protocol_version
    if mode == "legacy":
        era_ok = pv in HANDSHAKE_PROTOCOL_VERSIONS and client.session.initialize_result is not None
        want = "an initialize handshake version"
    else:
        # The bridge is dual-era, so auto detection must land on the modern era.
        era_ok = pv in MODERN_PROTOCOL_VERSIONS
        want = "2026-07-28"
    how = "initialize" if client.session.initialize_result is not None else (
        "server/discover" if mode == "auto" else "pinned (no probe)")
    r.report(era_ok, "connect", f"protocol_version={pv} via {how} (want {want}); "
             f"server_info={getattr(client.server_info, 'name', None)!r}", mark)

    async def tools_list() -> tuple[bool, str]:
        res = await client.list_tools()
        names = [t.name for t in res.tools]
        missing = [n for n in ("echo", "slow") if n not in names]
        return not missing, f"tools={names}" + (f" missing={missing}" if missing else "")

    async def echo(label: str = "echo") -> tuple[bool, str]:
        res = await client.call_tool("echo", {"text": ECHO_TEXT})
        text = _text_of(res)
        ok = text == ECHO_TEXT and not res.is_error
        return ok, f"text={text!r} is_error={res.is_error}"

    await r.check("tools/list", tools_list)
    await r.check("echo", echo)

    # --- progress: slow with 5 steps over 1 s
    progress: list[tuple[float, float, float | None, str | None]] = []
    returned_at: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((time.monotonic(), p, total, message))

    async def slow_progress() -> tuple[bool, str]:
        res = await client.call_tool("slow", {"seconds": 1, "steps": 5}, progress_callback=on_progress)
        returned_at.append(time.monotonic())
        await anyio.sleep(0.3)  # progress callbacks are spawned tasks; let stragglers land
        return not res.is_error, f"result={_text_of(res)!r} is_error={res.is_error}"

    if await r.check("slow progress", slow_progress):
        t_ret = returned_at[0]
        before = [p for p in progress if p[0] <= t_ret]
        values = [p[1] for p in progress]
        r.report(len(before) >= 1, "slow progress before result",
                 f"{len(before)} of {len(progress)} progress notifications delivered before call_tool returned",
                 r.last_mark)
        increasing = all(b > a for a, b in zip(values, values[1:]))
        r.report(len(progress) == 5 and increasing, "slow progress count",
                 f"got {len(progress)} (want 5) values={values} totals={[p[2] for p in progress]} "
                 f"strictly_increasing={increasing}", r.last_mark)
    else:
        r.report(False, "slow progress before result", "skipped: slow call failed")
        r.report(False, "slow progress count", "skipped: slow call failed")

    # --- cancellation through a cancel scope (caller cancels the awaiting task)
    cancel_progress: list[float] = []

    async def on_cancel_progress(p: float, total: float | None, message: str | None) -> None:
        cancel_progress.append(p)

    async def cancel_scope() -> tuple[bool, str]:
        t = time.monotonic()
        res = None
        with anyio.move_on_after(CANCEL_AFTER) as scope:
            res = await client.call_tool("slow", {"seconds": 30, "steps": 30}, progress_callback=on_cancel_progress)
        dt = time.monotonic() - t
        if not scope.cancelled_caught:
            return False, f"slow(30s) returned after {dt:.2f}s instead of being cancelled: {res!r}"
        ok = dt <= CANCEL_AFTER + PROMPT_SLACK
        return ok, (f"control back {dt:.2f}s after the call (cancel at {CANCEL_AFTER}s); "
                    f"progress seen before cancel={cancel_progress}")

    modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
    first = len(trace.requests)
    await r.check("cancel (cancel scope)", cancel_scope)
    await r.check("cancel (cancel scope) on the wire", lambda: _cancel_on_wire(trace, first, modern))
    await r.check("call after cancel", echo, timeout=10)

    # --- cancellation through the SDK's per-request read timeout
    async def cancel_timeout() -> tuple[bool, str]:
        t = time.monotonic()
        try:
            res = await client.call_tool("slow", {"seconds": 30, "steps": 30}, read_timeout_seconds=CANCEL_AFTER)
        except MCPError as e:
            dt = time.monotonic() - t
            ok = e.code == -32001 and dt <= CANCEL_AFTER + PROMPT_SLACK
            return ok, f"MCPError {e.code} ({e.message}) after {dt:.2f}s"
        return False, f"slow(30s) returned instead of timing out: {res!r}"

    first = len(trace.requests)
    await r.check("cancel (read timeout)", cancel_timeout)
    await r.check("cancel (read timeout) on the wire", lambda: _cancel_on_wire(trace, first, modern))
    await r.check("call after timeout", echo, timeout=10)

    # --- the server-side work of a fresh slow call still works after two cancellations
    async def slow_again() -> tuple[bool, str]:
        seen: list[float] = []

        async def cb(p: float, total: float | None, message: str | None) -> None:
            seen.append(p)

        res = await client.call_tool("slow", {"seconds": 0.5, "steps": 2}, progress_callback=cb)
        await anyio.sleep(0.2)
        return (not res.is_error and len(seen) >= 1), f"result={_text_of(res)!r} progress={seen}"

    await r.check("slow after cancels", slow_again, timeout=15)



async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url", help="MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    ap.add_argument("--mode", choices=sorted(MODES), default="auto")
    ap.add_argument("--trace", action="store_true", help="print the HTTP exchange live to stderr")
    args = ap.parse_args()
    trace = Trace(args.trace)
    try:
        with anyio.fail_after(180):
            r = await run_mode(args.url, args.mode, trace)
        passed, failed = r.passed, r.failed
    except TimeoutError:
        print(f"FAIL {args.mode} overall: the run did not finish within 180s", flush=True)
        passed, failed = 0, 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
