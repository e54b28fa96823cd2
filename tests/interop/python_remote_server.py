#!/usr/bin/env python3
"""A small remote MCP server built with the official Python SDK (PyPI `mcp==2.3.0`), served
over Streamable HTTP, for `.ci/interop-connect.sh` to put behind `mcp-bridge connect`.

Usage: python python_remote_server.py --port PORT [--stateless]

Tools: `echo {text}` (returns the text), `slow {seconds, steps}` (reports progress each step;
prints `pyserver: cancelled` to stderr when its request is cancelled).
"""

from __future__ import annotations

import argparse
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("connect-interop-remote")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
async def slow(ctx: Context, seconds: float = 5.0, steps: int = 10) -> str:
    """Sleep `seconds`, reporting progress `steps` times."""
    print("pyserver: slow started", file=sys.stderr, flush=True)
    try:
        for i in range(1, steps + 1):
            await anyio.sleep(seconds / max(steps, 1))
            await ctx.report_progress(i, steps, f"step {i} of {steps}")
    except anyio.get_cancelled_exc_class():
        print("pyserver: cancelled", file=sys.stderr, flush=True)
        raise
    return "done"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--stateless", action="store_true")
    a = ap.parse_args()
    mcp.run("streamable-http", host="127.0.0.1", port=a.port, stateless_http=a.stateless)


if __name__ == "__main__":
    main()
