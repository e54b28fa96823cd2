#!/usr/bin/env python3
"""Interop check: the official MCP Python SDK (PyPI `mcp==2.3.0`) stdio client as the *host*
of `mcp-bridge connect` (spawned as a stdio server).

Usage:
    python python_connect_host.py --mode auto|legacy|2026 --label L \
        [--remote-log FILE --cancel-needle TEXT] -- mcp-bridge connect URL [ARGS...]

Checks: connect (era), tools/list (echo, slow), echo, slow with progress before the result,
cancel (cancel scope; with --remote-log the remote must log TEXT for it), a call after the
cancel. Prints `PASS|FAIL <label> <check>: ...` lines and a final `N passed, M failed`.
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

MODES = {"auto": "auto", "legacy": "legacy", "2026": "2026-07-28"}
TEXT = "hello through connect \u2013 \u00fcn\u00efc\u00f8de \u2713"


class Runner:
    def __init__(self, label: str) -> None:
        self.label, self.passed, self.failed = label, 0, 0

    def report(self, ok: bool, name: str, detail: str) -> None:
        print(f"{'PASS' if ok else 'FAIL'} {self.label} {name}: {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def text_of(res) -> str:
    for c in getattr(res, "content", []) or []:
        if getattr(c, "type", None) == "text":
            return c.text
    return ""


def count(path: str | None, needle: str) -> int:
    if not path:
        return 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().count(needle)
    except OSError:
        return 0


async def run(a: argparse.Namespace, r: Runner) -> None:
    cmd = a.command[0]
    params = StdioServerParameters(command=cmd, args=a.command[1:])
    client = Client(params, mode=MODES[a.mode], read_timeout_seconds=30)
    async with client:
        pv = client.protocol_version
        ok = pv in (HANDSHAKE_PROTOCOL_VERSIONS if a.mode == "legacy" else MODERN_PROTOCOL_VERSIONS)
        r.report(ok, "connect", f"protocol_version={pv}")

        res = await client.list_tools()
        names = [t.name for t in res.tools]
        r.report("echo" in names and "slow" in names, "tools/list", f"tools={names}")

        res = await client.call_tool("echo", {"text": TEXT})
        r.report(text_of(res) == TEXT and not res.is_error, "echo", f"text={text_of(res)!r}")

        seen: list[float] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            seen.append(p)

        res = await client.call_tool("slow", {"seconds": 1, "steps": 4}, progress_callback=on_progress)
        got = len(seen)
        r.report(not res.is_error and got >= 1, "progress", f"result={text_of(res)!r} progress before result={got}")

        before = count(a.remote_log, a.cancel_needle)
        t = time.monotonic()
        with anyio.move_on_after(1.5) as scope:
            await client.call_tool("slow", {"seconds": 30, "steps": 30})
        dt = time.monotonic() - t
        r.report(scope.cancelled_caught and dt < 4, "cancel", f"control back after {dt:.2f}s")
        if a.remote_log:
            deadline = time.monotonic() + 8
            while count(a.remote_log, a.cancel_needle) <= before and time.monotonic() < deadline:
                await anyio.sleep(0.1)
            n = count(a.remote_log, a.cancel_needle)
            r.report(n > before, "cancel reached the remote", f"{a.cancel_needle!r} lines: {before} -> {n}")

        res = await client.call_tool("echo", {"text": "after"})
        r.report(text_of(res) == "after", "call after cancel", f"text={text_of(res)!r}")


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="auto")
    ap.add_argument("--label", default="")
    ap.add_argument("--remote-log")
    ap.add_argument("--cancel-needle", default="cancelled")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.command and a.command[0] == "--":
        a.command = a.command[1:]
    r = Runner(a.label or a.mode)
    try:
        with anyio.fail_after(120):
            await run(a, r)
    except Exception as e:  # noqa: BLE001
        r.report(False, "run", f"aborted: {type(e).__name__}: {e!r}"[:500])
    print(f"{r.passed} passed, {r.failed} failed", flush=True)
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
