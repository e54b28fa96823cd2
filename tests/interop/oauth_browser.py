#!/usr/bin/env python3
"""A `$BROWSER` stand-in for OAuth tests: `oauth_browser.py URL`.

Fetches the authorization URL the way a browser whose user approves everything would: GET it,
follow each redirect (301/302/303/307/308, relative `Location` resolved) until the answer is not
a redirect, at most 10 hops. With the MCP conformance suite's test authorization server the
`/authorize` endpoint answers with a redirect straight to the client's `redirect_uri` (the
loopback callback on 127.0.0.1) carrying `code` and `state`, so the last hop is the callback.

Standard library only. `mcp-bridge connect` runs `$BROWSER URL` with stdout and stderr sent
nowhere, so every hop is logged to the file named by `OAUTH_BROWSER_LOG` (appended; nothing is
logged without it). Exit status: 0 when the last answer was a 2xx from a loopback address (the
callback accepted the code), 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

MAX_HOPS = 10
TIMEOUT = 15
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def log(msg: str) -> None:
    path = os.environ.get("OAUTH_BROWSER_LOG")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%H:%M:%S')} [browser {os.getpid()}] {msg}\n")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None  # surface the 3xx as an HTTPError so each hop is seen (and logged)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: oauth_browser.py URL", file=sys.stderr)
        return 2
    url = sys.argv[1]
    opener = urllib.request.build_opener(NoRedirect)
    for hop in range(MAX_HOPS + 1):
        req = urllib.request.Request(url, headers={"User-Agent": "mcp-bridge-test-browser/1"})
        try:
            with opener.open(req, timeout=TIMEOUT) as resp:
                status, headers, body = resp.status, resp.headers, resp.read(2000)
        except urllib.error.HTTPError as e:
            status, headers, body = e.code, e.headers, e.read(2000)
        except (urllib.error.URLError, OSError) as e:
            log(f"GET {url} -> error {e}")
            return 1
        log(f"GET {url} -> {status}")
        loc = headers.get("Location") if headers else None
        if status in (301, 302, 303, 307, 308) and loc:
            url = urllib.parse.urljoin(url, loc)
            continue
        host = urllib.parse.urlsplit(url).hostname or ""
        text = body.decode("utf-8", "replace").replace("\n", " ")[:300]
        log(f"final answer {status}: {text}")
        return 0 if 200 <= status < 300 and host in LOOPBACK else 1
    log(f"gave up after {MAX_HOPS} redirects")
    return 1


if __name__ == "__main__":
    sys.exit(main())
