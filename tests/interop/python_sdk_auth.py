#!/usr/bin/env python3
"""Interop check of `mcp-bridge serve --auth bearer` with the official MCP Python SDK client
(PyPI `mcp==2.3.0`): with the token (sent by the SDK's httpx2 client as a default
`Authorization: Bearer` header) the client connects in every mode, lists tools and calls
`echo`; without a token, and with a wrong one, the connection fails and the server answered
401 with a `WWW-Authenticate: Bearer` challenge.

Usage:
    MCP_BRIDGE_TOKEN=... python python_sdk_auth.py http://127.0.0.1:PORT/mcp

Prints `PASS <check>` / `FAIL <check>: why` lines and a final `N passed, M failed` line;
exits 1 if any check failed. The token itself is never printed.
"""

from __future__ import annotations

import os
import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MODES = {"auto": "auto", "legacy": "legacy", "2026": "2026-07-28"}


class Recorder(httpx2.AsyncBaseTransport):
    """Remembers each response's status and WWW-Authenticate header."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.seen: list[tuple[int, str]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        resp = await self.inner.handle_async_request(request)
        self.seen.append((resp.status_code, resp.headers.get("www-authenticate", "")))
        return resp

    async def aclose(self) -> None:
        await self.inner.aclose()


async def session(url: str, mode: str, token: str | None) -> tuple[str | None, Recorder]:
    """Connect, list tools, call echo. Returns (error or None, recorder)."""
    rec = Recorder()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http_client = httpx2.AsyncClient(transport=rec, headers=headers, timeout=httpx2.Timeout(20.0))
    try:
        with anyio.fail_after(60):
            async with http_client:
                async with Client(
                    streamable_http_client(url, http_client=http_client), mode=mode, read_timeout_seconds=20
                ) as client:
                    tools = await client.list_tools()
                    names = [t.name for t in tools.tools]
                    if "echo" not in names:
                        return f"echo not among tools {names}", rec
                    res = await client.call_tool("echo", {"text": "through the auth gate"})
                    text = " ".join(getattr(c, "text", "") for c in res.content)
                    if "through the auth gate" not in text:
                        return f"echo answered {text!r}", rec
        return None, rec
    except BaseException as e:  # noqa: BLE001 - any failure is the result here
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        msg = f"{type(e).__name__}: {e}"
        if token:
            msg = msg.replace(token, "<token>")
        return msg[:300], rec


async def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    url = sys.argv[1]
    token = os.environ.get("MCP_BRIDGE_TOKEN", "")
    passed = failed = 0

    def report(ok: bool, name: str, why: str = "") -> None:
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"PASS {name}", flush=True)
        else:
            failed += 1
            print(f"FAIL {name}: {why}", flush=True)

    if not token:
        report(False, "setup", "MCP_BRIDGE_TOKEN is not set")
    for label, mode in MODES.items():
        err, _ = await session(url, mode, token)
        report(err is None, f"{label} with token: tools/list + echo", err or "")
    for label, tok in (("without token", None), ("with a wrong token", "wrong-" + "x" * 24)):
        for mode_label, mode in (("auto", "auto"), ("legacy", "legacy")):
            err, rec = await session(url, mode, tok)
            got_401 = [w for s, w in rec.seen if s == 401]
            ok = err is not None and bool(got_401) and all(w.startswith("Bearer") for w in got_401)
            why = f"error={err!r} responses={[s for s, _ in rec.seen]}"
            report(ok, f"{mode_label} {label}: refused with 401 + WWW-Authenticate: Bearer", why)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
