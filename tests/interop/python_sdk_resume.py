#!/usr/bin/env python3
"""Interop check: the official MCP Python SDK client (PyPI `mcp==2.3.0`) follows mcp-bridge's
resumable SSE streams (2025-11-25 session, `--sse-close-after`): a `slow` call whose stream the
bridge closes early is resumed by the SDK with GET + Last-Event-ID after the priming event's
`retry:`, and the call's result and every progress step arrive.

Usage:
    python python_sdk_resume.py http://127.0.0.1:PORT/mcp

(serve must run with e.g. `--sse-close-after 1s --sse-retry 200ms`.) Prints `PASS`/`FAIL`
lines and a final `N passed, M failed`; exits 1 if a check failed.
"""

from __future__ import annotations

import sys

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


class Count(httpx2.AsyncBaseTransport):
    """Counts the GETs that carry Last-Event-ID."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.resumes = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET" and "last-event-id" in request.headers:
            self.resumes += 1
        return await self.inner.handle_async_request(request)


async def main(url: str) -> int:
    t = Count()
    steps: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        steps.append(progress)

    checks: list[tuple[bool, str]] = []
    async with httpx2.AsyncClient(transport=t, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
            with anyio.fail_after(30):
                r = await c.call_tool(
                    "slow", {"seconds": 4, "steps": 8}, progress_callback=on_progress
                )
            text = r.content[0].text if r.content else None
            checks.append((text == "done", f"slow answered after resuming: {text!r}"))
            await anyio.sleep(0.2)  # progress callbacks run as tasks
            checks.append((sorted(steps) == [float(i) for i in range(1, 9)], f"every progress step: {steps}"))
            checks.append((t.resumes >= 2, f"GETs with Last-Event-ID: {t.resumes}"))
    failed = 0
    for ok, what in checks:
        print(("PASS" if ok else "FAIL") + " resume " + what)
        failed += not ok
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1]))
