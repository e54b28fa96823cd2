#!/usr/bin/env python3
"""A `$BROWSER` stand-in for a real OpenID provider's login and consent pages (npm
`oidc-provider`'s dev interactions), used by .ci/interop-oidc.sh.

    oidc_browser.py URL                  the authorization URL (what connect runs `$BROWSER` with)
    oidc_browser.py --device URL CODE    the device flow: the verification URL and the user code

Acts like a user who approves everything: GET the URL, follow redirects with a cookie jar; on an
HTML page with a <form>, fill it (login=alice, password=anything, user_code=CODE, hidden inputs
as they are; submit buttons are not sent, so the device page's "abort" stays unpressed) and POST
it to its action; repeat until the answer is a 2xx from the 127.0.0.1 callback (authorization code
flow) or a page without a form (the device flow's "sign-in successful" page), at most 25 steps.

Standard library only. Each step is appended to the file named by `OIDC_BROWSER_LOG`; each run
appends one line `run PID ARGV0-MODE` to the file named by `OIDC_BROWSER_COUNT` (the test counts
the logins this way). Exit status 0 on success, 1 otherwise.
"""

from __future__ import annotations

import html.parser
import http.cookiejar
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

MAX_STEPS = 25
TIMEOUT = 15
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
USER = os.environ.get("OIDC_BROWSER_USER", "alice")


def log(msg: str) -> None:
    path = os.environ.get("OIDC_BROWSER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%H:%M:%S')} [oidc-browser {os.getpid()}] {msg}\n")


class Forms(html.parser.HTMLParser):
    """Every <form> with its action, method, id, and the <input>s inside it or naming it."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []
        self.orphans: list[dict] = []
        self._cur: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self._cur = {"action": a.get("action", ""), "method": a.get("method", "get").lower(),
                         "id": a.get("id", ""), "inputs": []}
            self.forms.append(self._cur)
        elif tag == "input":
            if a.get("form"):
                self.orphans.append(a)
            elif self._cur is not None:
                self._cur["inputs"].append(a)

    def handle_endtag(self, tag):
        if tag == "form":
            self._cur = None


def fill(form: dict, user_code: str | None) -> dict:
    data = {}
    for a in form["inputs"]:
        name, typ = a.get("name"), a.get("type", "text").lower()
        if not name or typ in ("submit", "button", "image", "reset"):
            continue
        if name == "login":
            data[name] = USER
        elif name == "password":
            data[name] = "any-password"
        elif name == "user_code" and not a.get("value") and user_code:
            data[name] = user_code
        else:
            data[name] = a.get("value", "")
    return data


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


def main() -> int:
    args = sys.argv[1:]
    user_code = None
    if args[:1] == ["--device"] and len(args) == 3:
        url, user_code = args[1], args[2]
    elif len(args) == 1:
        url = args[0]
    else:
        print(__doc__, file=sys.stderr)
        return 2
    count = os.environ.get("OIDC_BROWSER_COUNT")
    if count:
        with open(count, "a", encoding="utf-8") as f:
            f.write(f"run {os.getpid()} {'device' if user_code else 'code'}\n")
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect)
    method, data = "GET", None
    for _step in range(MAX_STEPS):
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"User-Agent": "mcp-bridge-oidc-browser/1"})
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with opener.open(req, timeout=TIMEOUT) as resp:
                status, headers, body = resp.status, resp.headers, resp.read(200000)
        except urllib.error.HTTPError as e:
            status, headers, body = e.code, e.headers, e.read(200000)
        except (urllib.error.URLError, OSError) as e:
            log(f"{method} {url} -> error {e}")
            return 1
        # The callback's URL carries the code: log only its path.
        shown = url.split("?")[0] if urllib.parse.urlsplit(url).hostname in LOOPBACK and "/callback" in url else url
        log(f"{method} {shown} -> {status}")
        loc = headers.get("Location") if headers else None
        if status in (301, 302, 303, 307, 308) and loc:
            url = urllib.parse.urljoin(url, loc)
            method, data = "GET", None
            continue
        text = body.decode("utf-8", "replace")
        host = urllib.parse.urlsplit(url).hostname or ""
        port = urllib.parse.urlsplit(url).port
        if host in LOOPBACK and "/callback" in url:
            log(f"callback answered {status}: {text[:200]!r}")
            return 0 if 200 <= status < 300 else 1
        p = Forms()
        p.feed(text)
        for o in p.orphans:  # inputs outside their form (form="id")
            for f in p.forms:
                if f["id"] and f["id"] == o.get("form"):
                    f["inputs"].append(o)
        forms = [f for f in p.forms if f["method"] == "post"]
        if not forms:
            flat = " ".join(text.split())
            log(f"final page {status} (port {port}): {flat[:300]!r}")
            ok = 200 <= status < 300 and user_code is not None and "error" not in flat.lower()
            return 0 if ok else 1
        form = forms[0]
        data_map = fill(form, user_code)
        log(f"form {form['action'] or '(same)'} fields {sorted(data_map)}")
        url = urllib.parse.urljoin(url, form["action"] or url)
        method, data = "POST", urllib.parse.urlencode(data_map).encode()
    log(f"gave up after {MAX_STEPS} steps")
    return 1


if __name__ == "__main__":
    sys.exit(main())
