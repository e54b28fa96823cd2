#!/usr/bin/env python3
"""Slow-connection attack and latency probe for benches/slowloris.sh (standard library only).

  slowloris.py measure HOST:PORT N      N sequential tools/call echo requests, each on a fresh
                                        connection; prints one JSON line with the latencies
  slowloris.py attack HOST:PORT N HOLD  open N slow connections (half of them stop halfway
                                        through the request head, half send a whole head and
                                        one byte of a 1000-byte body), hold them up to HOLD
                                        seconds, and print one JSON line saying when the
                                        server closed each kind and what it wrote first

The attacker and the prober run as separate processes so that the attack's event loop does not
delay the probe's own reads.
"""

import asyncio
import json
import statistics
import sys
import time

BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "hello"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
).encode()


def request(host):
    return (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {len(BODY)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + BODY


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def one_call(host, port, raw):
    t0 = time.perf_counter()
    r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
    w.write(raw)
    await w.drain()
    data = await asyncio.wait_for(r.read(), 30)
    dt = time.perf_counter() - t0
    w.close()
    ok = data.startswith(b"HTTP/1.1 200") and b'"hello"' in data
    return dt, ok


async def measure(addr, n):
    host, port = addr.rsplit(":", 1)
    raw = request(addr)
    lat, errors = [], 0
    for _ in range(n):
        try:
            dt, ok = await one_call(host, int(port), raw)
            if ok:
                lat.append(dt * 1000)
            else:
                errors += 1
        except (OSError, asyncio.TimeoutError):
            errors += 1
    out = {"requests": n, "errors": errors}
    if lat:
        out.update(
            median_ms=round(statistics.median(lat), 2),
            p99_ms=round(pct(lat, 99), 2),
            max_ms=round(max(lat), 2),
        )
    print(json.dumps(out), flush=True)


async def slow_one(host, port, kind, hold, opened):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
    except (OSError, asyncio.TimeoutError):
        return kind, None, "connect failed"
    t0 = time.perf_counter()
    if kind == "half_head":
        w.write(f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
    else:
        w.write(
            (
                f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                "Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{"
            ).encode()
        )
    try:
        await w.drain()
    except OSError:
        pass
    opened.append(1)
    try:
        data = await asyncio.wait_for(r.read(64), hold)
        closed = time.perf_counter() - t0
        first = data.split(b"\r\n", 1)[0].decode(errors="replace") or "(closed, nothing written)"
    except asyncio.TimeoutError:
        closed, first = None, "still open"
    except OSError:
        closed, first = time.perf_counter() - t0, "(reset)"
    w.close()
    return kind, closed, first


async def attack(addr, n, hold):
    host, port = addr.rsplit(":", 1)
    opened = []
    t0 = time.perf_counter()
    tasks = []
    for i in range(n):
        kind = "half_head" if i % 2 == 0 else "stalled_body"
        tasks.append(asyncio.create_task(slow_one(host, int(port), kind, hold, opened)))
        if i % 100 == 99:
            await asyncio.sleep(0)  # let the connects proceed
    while len(opened) < n and time.perf_counter() - t0 < 60:
        if all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    print(json.dumps({"opened": len(opened), "open_s": round(time.perf_counter() - t0, 2)}),
          flush=True)
    results = await asyncio.gather(*tasks)
    out = {}
    for kind in ("half_head", "stalled_body"):
        rs = [r for r in results if r[0] == kind]
        closed = [r[1] for r in rs if r[1] is not None]
        firsts = {}
        for r in rs:
            firsts[r[2]] = firsts.get(r[2], 0) + 1
        out[kind] = {
            "connections": len(rs),
            "closed": len(closed),
            "closed_after_s_min": round(min(closed), 2) if closed else None,
            "closed_after_s_median": round(statistics.median(closed), 2) if closed else None,
            "closed_after_s_max": round(max(closed), 2) if closed else None,
            "first_line": firsts,
        }
    print(json.dumps(out), flush=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "measure":
        asyncio.run(measure(sys.argv[2], int(sys.argv[3])))
    elif len(sys.argv) >= 5 and sys.argv[1] == "attack":
        asyncio.run(attack(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(64)


if __name__ == "__main__":
    main()
