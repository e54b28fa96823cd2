#!/usr/bin/env python3
"""A 2026-era stdio MCP server written with the official Python SDK (PyPI `mcp==2.3.0`),
used by .ci/interop-eras.sh as the child of `mcp-bridge serve -- python eras_modern_server.py`.

Why this is a 2026-era server (read from site-packages/mcp/server/*.py):

* `MCPServer.run("stdio")` -> `lowlevel.Server.run` -> `runner.serve_dual_era_loop`: the
  client's first request decides the era of the whole stdio connection. A request carrying
  the 2026-07-28 `_meta` envelope (`io.modelcontextprotocol/protocolVersion` +
  `.../clientCapabilities`) opens a *modern* connection (`_serve_modern_stream`), on which
  `initialize` is refused and server->client JSON-RPC requests are impossible
  (`_NoServerRequestsDispatchContext` raises NoBackChannelError). The bridge probes its child
  with an enveloped `server/discover`, so this child serves 2026-07-28.
* The `ask` tool gets its answer through `Annotated[..., Resolve(fn)]` where `fn` returns
  `Elicit(message, Model)` (mcp/server/mcpserver/resolve.py). On a >= 2026-07-28 request the
  framework answers `tools/call` with `resultType: "input_required"`, `inputRequests`
  (`elicitation/create`, form mode) and a sealed `requestState`, and resumes when the client
  retries with `inputResponses` + the echoed `requestState` (on a 2025 connection it would send
  a plain `elicitation/create` request instead). It only asks when that request's
  `clientCapabilities` declare elicitation (otherwise -32021).

Tool `ask {question}` -> text `answer: action=accept name=<name> color=<color>` (or
`answer: action=decline|cancel`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)


class Person(BaseModel):
    name: str = Field(description="Your name")
    color: str = Field(default="", description="Your favourite colour")


def ask_person(question: str) -> Elicit[Person]:
    return Elicit(question, Person)


mcp = MCPServer("eras-modern-python")


@mcp.tool(description="Ask the user (elicitation, form mode) for a name and a colour.")
async def ask(
    question: str,
    person: Annotated[ElicitationResult[Person], Resolve(ask_person)],
) -> str:
    if isinstance(person, AcceptedElicitation):
        return f"answer: action=accept name={person.data.name} color={person.data.color}"
    return f"answer: action={person.action}"


@mcp.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    mcp.run("stdio")
