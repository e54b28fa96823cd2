#!/usr/bin/env python3
"""Replicas interop (issue 14): several official MCP Python SDK clients (PyPI `mcp==2.3.0`) at
once against mcp-bridge replicas behind a plain round-robin balancer (.ci/replicas.sh).

Usage:
    python replicas_python_client.py URL --mode MODE[,MODE...] [--clients N] [--rounds R]
        [--duration S] [--pause S] [--elicit] [--elicit-lock] [--reconnect] [--tag T]

MODE is auto, legacy or 2026; N clients run per mode, all modes at once in this process.

Each client (an asyncio task with its own HTTP connection pool, so nginx spreads its requests
over the replicas) connects in its mode, checks `tools/list`, then repeats rounds of
  - `tools/call echo {text: <unique>}`: the answer must be exactly that text (a call answered
    with another client's text would be a misdelivery);
  - with --elicit, `tools/call elicit {message: <unique>}`: the elicitation callback must see
    exactly the message of a call this client has in flight (else: a foreign elicitation) and
    answers `{name: "ans-<unique>"}`; the final text must be `elicited: action=accept
    content={"name":"ans-<unique>"}`.
    * 2026 (and auto, which adopts 2026 on the bridge) in front of a 2025-era child: the first
      call answers `input_required` with a requestState naming the replica that parked it; the
      SDK's retry lands on any replica and must be forwarded to that one.
    * legacy (2025 session): the child's (or the bridge's) elicitation/create arrives on the
      call's SSE stream from the session's owner; the client's answer is a new POST that lands
      on any replica and must be forwarded to the owner.
until R rounds are done (default 3) or, with --duration, until S seconds have passed.

--elicit-lock: the 2026-era clients (2026, auto) of this process run their elicit calls one at
a time, and send their echo calls from a second SDK client that declares no elicitation. Was
needed before the bridge gated a resumed 2026 call like a new one (a retry resumed next to
another askable call on a 2025 child left the child's next request with two addressees:
`-32603 several 2026 calls are running`); .ci/replicas.sh no longer uses it.

Without --reconnect any error fails the run. With --reconnect (the replica-killed scenario),
errors are counted by kind, and a client whose session is gone (HTTP 404 -> the SDK's
"Session terminated") or whose connection broke opens a new client and carries on; the checks
are then: no misdelivered answer, no foreign elicitation, only expected error kinds, and every
client ends with a successful round.

Prints one JSON line `FIGURES {...}` (calls ok, errors by kind, reconnects), `PASS/FAIL` lines,
then exactly `N passed, M failed`; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

MODES = {"auto": "auto", "legacy": "legacy", "2026": "2026-07-28"}
# Error kinds a killed replica may cause (--reconnect); anything else is a failure.
EXPECTED_KINDS = {"session_gone_404", "http_502", "http_503", "http_504", "connection", "timeout",
                  "retry_unreachable", "stream_broken", "mcp_error"}


def _clip(s: str, n: int = 300) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + "..."


def leaf(e: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap the SDK's errors)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def describe(e: BaseException) -> str:
    e = leaf(e)
    if isinstance(e, MCPError):
        return f"MCPError {e.code}: {e.message} data={getattr(e.error, 'data', None)!r}"
    return f"{type(e).__name__}: {e}"


def classify(e: BaseException) -> str:
    """An error's kind, for the figures."""
    if isinstance(e, BaseExceptionGroup):
        return classify(e.exceptions[0]) if e.exceptions else "group"
    if isinstance(e, MCPError):
        msg = (e.message or "").lower()
        if "session terminated" in msg or "session not found" in msg:
            return "session_gone_404"
        for code in ("502", "503", "504"):
            if code in msg:
                return f"http_{code}"
        blob = msg + " " + json.dumps(getattr(e.error, "data", None), default=str).lower()
        if ("unreachable" in blob or "forward" in blob or "cannot resume" in blob
                or "requeststate" in blob.replace(" ", "")):
            return "retry_unreachable"
        if e.code == -32001:
            return "timeout"
        return "mcp_error"
    if isinstance(e, TimeoutError):
        return "timeout"
    name = type(e).__name__
    if isinstance(e, httpx2.HTTPStatusError):
        return f"http_{e.response.status_code}"
    if "Connect" in name or "Network" in name or "Protocol" in name or isinstance(e, (ConnectionError, OSError)):
        return "connection"
    if "Read" in name or "Stream" in name or "Closed" in name or "EndOfStream" in name:
        return "stream_broken"
    return name


class Stats:
    def __init__(self) -> None:
        self.calls_ok = 0
        self.elicit_ok = 0
        self.lists_ok = 0
        self.connects = 0
        self.reconnects = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: dict[str, str] = {}
        self.mismatches: list[str] = []
        self.foreign_elicitations: list[str] = []
        self.protocol_versions: Counter[str] = Counter()
        self.clients_healthy_at_end = 0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        self.error_samples.setdefault(kind, _clip(detail))


async def one_client(idx: int, mode: str, args: argparse.Namespace, stats: Stats, deadline: float | None,
                     lock: anyio.Lock) -> None:
    tag = f"{args.tag}-{mode}-c{idx}"
    pending: set[str] = set()  # elicitation messages of this client's calls in flight
    healthy = False
    rnd = 0
    attempts = 0
    modern = mode in ("2026", "auto")
    split = args.elicit and args.elicit_lock and modern

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        msg = params.message
        if msg not in pending:
            stats.foreign_elicitations.append(f"{tag} got {msg!r}, has {sorted(pending)}")
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"name": "ans-" + msg})

    def more() -> bool:
        if deadline is not None:
            return time.monotonic() < deadline
        return rnd < args.rounds

    async def echo(client: Client) -> None:
        text = f"{tag}-r{rnd}-{uuid.uuid4().hex}"
        res = await client.call_tool("echo", {"text": text})
        got = [b.text for b in (res.content or []) if getattr(b, "type", None) == "text"]
        if res.is_error or got != [text]:
            stats.mismatches.append(f"{tag} echo {text!r} -> {got!r} is_error={res.is_error}")
        else:
            stats.calls_ok += 1

    async def elicit(client: Client) -> None:
        msg = f"q-{tag}-r{rnd}-{uuid.uuid4().hex[:12]}"
        pending.add(msg)
        try:
            res = await client.call_tool("elicit", {"message": msg})
        finally:
            pending.discard(msg)
        got = [b.text for b in (res.content or []) if getattr(b, "type", None) == "text"]
        ok = False
        prefix = "elicited: action=accept content="
        if not res.is_error and len(got) == 1 and got[0].startswith(prefix):
            try:
                ok = json.loads(got[0][len(prefix):]) == {"name": "ans-" + msg}
            except ValueError:
                ok = False
        if ok:
            stats.elicit_ok += 1
        else:
            stats.mismatches.append(f"{tag} elicit {msg!r} -> {got!r} is_error={res.is_error}")

    while more():
        attempts += 1
        if attempts > args.rounds * 4 + 200:
            stats.error("gave_up", f"{tag}: too many attempts")
            break
        http = httpx2.AsyncClient(timeout=httpx2.Timeout(20.0, read=60.0))
        client = Client(streamable_http_client(args.url, http_client=http), mode=MODES[mode],
                        elicitation_callback=on_elicit if args.elicit else None, read_timeout_seconds=args.call_timeout)
        http2 = httpx2.AsyncClient(timeout=httpx2.Timeout(20.0, read=60.0))
        plain = Client(streamable_http_client(args.url, http_client=http2), mode=MODES[mode],
                       read_timeout_seconds=args.call_timeout) if split else None
        try:
            with anyio.fail_after(args.duration + 60 if args.duration else 120):
                async with AsyncExitStack() as stack:
                    await stack.enter_async_context(http)
                    await stack.enter_async_context(http2)
                    await stack.enter_async_context(client)
                    if plain is not None:
                        await stack.enter_async_context(plain)
                    stats.connects += 1
                    if stats.connects > args.clients:
                        stats.reconnects += 1
                    stats.protocol_versions[str(client.protocol_version)] += 1
                    names = [t.name for t in (await client.list_tools()).tools]
                    if "echo" not in names or (args.elicit and "elicit" not in names):
                        stats.mismatches.append(f"{tag} tools/list: {names}")
                    else:
                        stats.lists_ok += 1
                    while more():
                        rnd += 1
                        healthy = False
                        await echo(plain or client)
                        if args.elicit:
                            if split:
                                async with lock:
                                    await elicit(client)
                            else:
                                await elicit(client)
                        healthy = True
                        if args.pause:
                            await anyio.sleep(args.pause)
        except Exception as e:  # noqa: BLE001 - counted by kind
            kind = classify(e)
            stats.error(kind, f"{tag}: {describe(e)}")
            healthy = False
            if not args.reconnect:
                break
            await anyio.sleep(0.2)
    if healthy:
        stats.clients_healthy_at_end += 1


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--mode", required=True, help="comma-separated: auto, legacy, 2026")
    ap.add_argument("--clients", type=int, default=5, help="clients per mode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds between rounds")
    ap.add_argument("--elicit", action="store_true")
    ap.add_argument("--elicit-lock", action="store_true")
    ap.add_argument("--reconnect", action="store_true")
    ap.add_argument("--tag", default="py")
    ap.add_argument("--call-timeout", type=float, default=30.0, help="seconds a request may take")
    args = ap.parse_args()
    modes = [m for m in args.mode.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}")

    stats = {m: Stats() for m in modes}
    lock = anyio.Lock()
    deadline = time.monotonic() + args.duration if args.duration else None
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for m in modes:
            for i in range(args.clients):
                tg.start_soon(one_client, i, m, args, stats[m], deadline, lock)
    secs = time.monotonic() - started

    passed = failed = 0

    def report(ok: bool, name: str, detail: str) -> None:
        nonlocal passed, failed
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if ok:
            passed += 1
        else:
            failed += 1

    for mode in modes:
        st = stats[mode]
        who = f"py/{mode}/{args.tag}"
        figures = {
            "client": f"python/{mode}", "tag": args.tag, "clients": args.clients, "seconds": round(secs, 2),
            "calls_ok": st.calls_ok, "elicitations_ok": st.elicit_ok, "lists_ok": st.lists_ok,
            "connects": st.connects, "reconnects": st.reconnects, "errors": dict(st.errors),
            "mismatches": len(st.mismatches), "foreign_elicitations": len(st.foreign_elicitations),
            "protocol_versions": dict(st.protocol_versions),
        }
        print("FIGURES " + json.dumps(figures, sort_keys=True), flush=True)
        for k, v in st.error_samples.items():
            print(f"  error sample [{k}]: {v}", flush=True)
        want_pv = "2026-07-28" if mode in ("2026", "auto") else None
        pvs = set(st.protocol_versions)
        report(bool(pvs) and (pvs == {want_pv} if want_pv else "2026-07-28" not in pvs and "None" not in pvs),
               f"{who} era", f"protocol versions {dict(st.protocol_versions)} (want {want_pv or 'a 2025 version'})")
        report(not st.mismatches, f"{who} no misdelivery",
               f"{len(st.mismatches)} wrong answers" + (f"; first: {st.mismatches[:3]}" if st.mismatches else
                                                        f" over {st.calls_ok} echo + {st.elicit_ok} elicit calls"))
        if args.elicit:
            report(not st.foreign_elicitations, f"{who} no foreign elicitation",
                   f"{len(st.foreign_elicitations)}" + (f"; first: {st.foreign_elicitations[:3]}" if st.foreign_elicitations else ""))
        if args.reconnect:
            unexpected = {k: v for k, v in st.errors.items() if k not in EXPECTED_KINDS}
            report(not unexpected, f"{who} errors of expected kinds only", f"errors={dict(st.errors)} unexpected={unexpected}")
            report(st.clients_healthy_at_end == args.clients and st.calls_ok > 0, f"{who} every client ends healthy",
                   f"{st.clients_healthy_at_end}/{args.clients} clients' last round succeeded; "
                   f"{st.reconnects} reconnects; {st.calls_ok} echo + {st.elicit_ok} elicit calls ok")
        else:
            want = args.clients * args.rounds
            report(not st.errors, f"{who} no errors", f"errors={dict(st.errors)}")
            report(st.calls_ok == want and (not args.elicit or st.elicit_ok == want) and st.lists_ok == args.clients,
                   f"{who} all calls ok", f"{st.lists_ok} lists, {st.calls_ok} echo, {st.elicit_ok} elicit "
                   f"(want {args.clients}, {want}, {want if args.elicit else 0})")
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
