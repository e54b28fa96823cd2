//! Issue 7, era translation of server-initiated flows: URL-mode elicitation and roots in every
//! combination of {2025, 2026} client × {2025, 2026} upstream × {serve, connect, gateway, chain}.
//!
//! - serve: an HTTP client in front of `mcp-bridge serve --demo --demo-era legacy|modern`;
//! - connect: a stdio host in front of `mcp-bridge connect --protocol 2025-11-25|2026-07-28`, in
//!   front of the same `serve` (which then passes the chosen era through to the demo child);
//!   the translation under test is the one in `connect`;
//! - gateway: an HTTP client in front of `serve --upstream URL --protocol <era>` in front of the
//!   same `serve`: the HTTP face over the remote upstream;
//! - chain: an HTTP client in front of `serve -- mcp-bridge connect URL` in front of the same
//!   `serve`: the far bridge's `requestState` must pass the near bridges untouched.
//!
//! Each combination checks that the client is asked exactly what the demo asked, in its own
//! era's shape (2025: a JSON-RPC request, URL elicitation with an `elicitationId`; 2026: an
//! `inputRequests` entry, no `elicitationId`), that the tool's final text carries the client's
//! answer, and that a client which declared only form elicitation is never sent a URL one.
//! Where both ends speak 2025 the `notifications/elicitation/complete` must reach the client with
//! the demo's id; a 2026 client must never see it. A 2025 upstream's `-32042` error reaches 2025
//! clients as it is and 2026 clients as `input_required` (or `-32021` without `elicitation.url`).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(30);
const URL: &str = "https://auth.example.test/consent?flow=42";
const ROOTS: &str = "file:///srv/alpha,file:///srv/beta";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Era {
    E2025,
    E2026,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Face {
    Serve,
    Connect,
    /// `serve --upstream URL --protocol <upstream era>` in front of `serve --demo`: the HTTP
    /// face in front of a remote; the translation under test is the near bridge's.
    Gateway,
    /// `serve -- mcp-bridge connect URL` in front of `serve --demo`: a chain of bridges. The
    /// far bridge speaks 2026 to the chain, so the near one sees a 2026 upstream, and states
    /// minted by the far bridge must pass through the near ones untouched.
    Chain,
}

impl Face {
    /// The era of the upstream whose translation the client sees.
    fn seen(self, upstream: Era) -> Era {
        match self {
            Face::Chain => Era::E2026,
            _ => upstream,
        }
    }
}

/// The client's capabilities: everything this file tests, or form elicitation only.
fn caps(era: Era, full: bool) -> Value {
    match (era, full) {
        (Era::E2025, true) => {
            json!({"elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}})
        }
        (Era::E2026, true) => json!({"elicitation": {"form": {}, "url": {}}, "roots": {}}),
        (_, false) => json!({"elicitation": {"form": {}}}),
    }
}

/// What one tool call looked like from the client's side.
#[derive(Debug, Default)]
struct Exchange {
    /// The input requests the client was asked: (method, params).
    asked: Vec<(String, Value)>,
    /// The final JSON-RPC response.
    fin: Value,
    /// Notifications the client got on the call's own stream.
    notes: Vec<Value>,
}

impl Exchange {
    fn text(&self) -> String {
        self.fin["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text result in {}", self.fin))
            .to_owned()
    }
}

/// The client's answer to an input request.
fn answer(method: &str, _params: &Value) -> Value {
    match method {
        "elicitation/create" => json!({"action": "accept"}),
        "roots/list" => json!({"roots": [
            {"uri": "file:///srv/alpha"},
            {"uri": "file:///srv/beta", "name": "beta"},
        ]}),
        other => panic!("unexpected input request {other}"),
    }
}

/// One client of the bridge, of either era, on either face.
enum Client {
    /// serve, 2025: an HTTP session.
    Session(Session),
    /// serve, 2026: stateless POSTs.
    Modern { c: reqwest::Client, url: String },
    /// connect: a stdio host (2025 after `initialize`, or 2026 with `_meta`).
    Host { h: Box<Host>, era: Era },
}

impl Client {
    async fn open(face: Face, era: Era, upstream: Era, serve: &Bridge, full: bool) -> Client {
        match (face, era) {
            (Face::Serve | Face::Gateway | Face::Chain, Era::E2025) => Client::Session(
                Session::open_with_caps(&client(), &serve.url, caps(era, full)).await,
            ),
            (Face::Serve | Face::Gateway | Face::Chain, Era::E2026) => Client::Modern {
                c: client(),
                url: serve.url.clone(),
            },
            (Face::Connect, _) => {
                let pin = match upstream {
                    Era::E2025 => LEGACY,
                    Era::E2026 => MODERN,
                };
                let mut h = Host::start(&serve.url, &["--protocol", pin]);
                if era == Era::E2025 {
                    h.initialize(LEGACY, caps(era, full));
                }
                Client::Host {
                    h: Box::new(h),
                    era,
                }
            }
        }
    }

    /// 2026 only: one `tools/call` with `extra` params, its response as it came.
    async fn call_once(
        &mut self,
        id: &str,
        tool: &str,
        args: Value,
        extra: Value,
        full: bool,
    ) -> Value {
        let mut params = json!({"name": tool, "arguments": args,
            "_meta": {META_PV: MODERN, META_CAPS: caps(Era::E2026, full)}});
        if let Some(o) = extra.as_object() {
            for (k, v) in o {
                params[k] = v.clone();
            }
        }
        match self {
            Client::Modern { c, url } => {
                let r = post_modern(c, url, &modern_request(json!(id), "tools/call", params)).await;
                r.last().clone()
            }
            Client::Host { h, era: Era::E2026 } => {
                h.request(json!(id), "tools/call", params);
                h.response(&json!(id), T)
            }
            _ => panic!("call_once is for 2026 clients"),
        }
    }

    /// Call `tool`, answering every input request with `answer`, until the final response.
    async fn call(&mut self, n: u32, tool: &str, args: Value, full: bool) -> Exchange {
        match self {
            Client::Session(s) => session_call(s, n, tool, args).await,
            Client::Modern { c, url } => modern_call(c, url, n, tool, args, full).await,
            Client::Host { h, era: Era::E2025 } => host_call_2025(h, n, tool, args),
            Client::Host { h, era: Era::E2026 } => host_call_2026(h, n, tool, args, full),
        }
    }
}

async fn session_call(s: &Session, n: u32, tool: &str, args: Value) -> Exchange {
    let id = json!(format!("call-{n}"));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    let resp =
        s.c.post(&s.url)
            .headers(s.headers())
            .body(body.to_string())
            .send()
            .await
            .expect("POST tools/call");
    assert_eq!(resp.status(), 200, "{tool}");
    let mut ex = Exchange::default();
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        ex.fin = read_reply(resp).await.last().clone();
        return ex;
    }
    let mut sse = SseReader::new(resp);
    loop {
        let m = sse
            .next(T)
            .await
            .unwrap_or_else(|| panic!("{tool}: the stream ended before the answer"));
        match (m.get("method").and_then(Value::as_str), m.get("id")) {
            (Some(method), Some(rid)) => {
                let reply = answer(method, &m["params"]);
                ex.asked.push((method.to_owned(), m["params"].clone()));
                let r = s
                    .post(&json!({"jsonrpc": "2.0", "id": rid, "result": reply}))
                    .await;
                assert_eq!(r.status, 202, "{tool}: answering {m}: {r:?}");
            }
            (Some(_), None) => ex.notes.push(m),
            (None, _) => {
                assert_eq!(m["id"], id, "{m}");
                ex.fin = m;
                return ex;
            }
        }
    }
}

/// A 2026 call: retry with `inputResponses` and the exact `requestState` (new id each round).
async fn modern_call(
    c: &reqwest::Client,
    url: &str,
    n: u32,
    tool: &str,
    args: Value,
    full: bool,
) -> Exchange {
    let mut ex = Exchange::default();
    let mut extra = serde_json::Map::new();
    for round in 0..5 {
        let mut params = json!({"name": tool, "arguments": args,
                                "_meta": {META_CAPS: caps(Era::E2026, full)}});
        for (k, v) in &extra {
            params[k] = v.clone();
        }
        let id = json!(format!("call-{n}-{round}"));
        let r = post_modern(c, url, &modern_request(id.clone(), "tools/call", params)).await;
        let (last, notes) = r
            .messages
            .split_last()
            .unwrap_or_else(|| panic!("{tool}: no answer: {r:?}"));
        assert_eq!(last["id"], id, "{r:?}");
        ex.notes.extend(notes.iter().cloned());
        let res = &last["result"];
        if res["resultType"] != "input_required" {
            ex.fin = last.clone();
            return ex;
        }
        answer_round(tool, res, &mut ex, &mut extra);
    }
    panic!("{tool}: still input_required after 5 rounds: {ex:?}");
}

/// Answer every `inputRequests` entry of an `input_required` result: the retry's extra params
/// (`inputResponses`, `requestState`) go into `extra`, what was asked into `ex`.
fn answer_round(
    tool: &str,
    res: &Value,
    ex: &mut Exchange,
    extra: &mut serde_json::Map<String, Value>,
) {
    let reqs = res["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("{tool}: input_required without inputRequests: {res}"));
    let mut answers = serde_json::Map::new();
    for (k, v) in reqs {
        let method = v["method"].as_str().unwrap_or_default().to_owned();
        answers.insert(k.clone(), answer(&method, &v["params"]));
        ex.asked.push((method, v["params"].clone()));
    }
    extra.insert("inputResponses".into(), Value::Object(answers));
    extra.insert("requestState".into(), res["requestState"].clone());
}

fn host_call_2025(h: &mut Host, n: u32, tool: &str, args: Value) -> Exchange {
    let id = json!(format!("call-{n}"));
    h.request(
        id.clone(),
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    let mut ex = Exchange::default();
    loop {
        let want = id.clone();
        let m = h.wait_for(&format!("{tool}: a request or the answer"), T, move |m| {
            (m.get("method").is_some() && m.get("id").is_some())
                || (m.get("method").is_none() && m["id"] == want)
        });
        match m.get("method").and_then(Value::as_str) {
            Some(method) => {
                let reply = answer(method, &m["params"]);
                ex.asked.push((method.to_owned(), m["params"].clone()));
                h.send(&json!({"jsonrpc": "2.0", "id": m["id"], "result": reply}));
            }
            None => {
                ex.fin = m;
                return ex;
            }
        }
    }
}

fn host_call_2026(h: &mut Host, n: u32, tool: &str, args: Value, full: bool) -> Exchange {
    let mut ex = Exchange::default();
    let mut extra = serde_json::Map::new();
    for round in 0..5 {
        let mut params = json!({"name": tool, "arguments": args,
            "_meta": {META_PV: MODERN, META_CAPS: caps(Era::E2026, full)}});
        for (k, v) in &extra {
            params[k] = v.clone();
        }
        let id = json!(format!("call-{n}-{round}"));
        h.request(id.clone(), "tools/call", params);
        let last = h.response(&id, T);
        let res = &last["result"];
        if res["resultType"] != "input_required" {
            ex.fin = last.clone();
            return ex;
        }
        answer_round(tool, res, &mut ex, &mut extra);
    }
    panic!("{tool}: still input_required after 5 rounds: {ex:?}");
}

/// Run URL elicitation and roots (and the form-only gate) for one combination.
async fn combination(face: Face, client_era: Era, upstream: Era) {
    let tag = format!("{face:?} client={client_era:?} upstream={upstream:?}");
    let demo_era = match upstream {
        Era::E2025 => "legacy",
        Era::E2026 => "modern",
    };
    let far = Bridge::demo(&["--demo-era", demo_era]).await;
    far.wait_ready(T).await;
    let pin = match upstream {
        Era::E2025 => LEGACY,
        Era::E2026 => MODERN,
    };
    let near = match face {
        Face::Serve | Face::Connect => None,
        Face::Gateway => {
            Some(Bridge::serve(&["--port", "0", "--upstream", &far.url, "--protocol", pin]).await)
        }
        Face::Chain => {
            Some(Bridge::serve(&["--port", "0", "--", bin(), "connect", &far.url]).await)
        }
    };
    let serve = near.as_ref().unwrap_or(&far);
    serve.wait_ready(T).await;
    let seen = face.seen(upstream);
    let mut cl = Client::open(face, client_era, upstream, serve, true).await;

    // A 2025 client of serve in front of a 2025 child also holds the session's GET stream,
    // where the child's notifications/elicitation/complete goes.
    let mut get = match (&cl, seen) {
        (Client::Session(s), Era::E2025) => {
            let mut h = s.headers();
            h.insert("accept", hv("text/event-stream"));
            let resp = s.c.get(&s.url).headers(h).send().await.expect("GET");
            assert_eq!(resp.status(), 200, "{tag}: GET stream");
            Some(SseReader::new(resp))
        }
        _ => None,
    };

    // --- URL-mode elicitation -------------------------------------------------------------
    let ex = cl
        .call(
            1,
            "elicit_url",
            json!({"url": URL, "message": "sign in"}),
            true,
        )
        .await;
    assert_eq!(ex.asked.len(), 1, "{tag}: {ex:?}");
    let (method, params) = &ex.asked[0];
    assert_eq!(method, "elicitation/create", "{tag}: {ex:?}");
    assert_eq!(params["mode"], "url", "{tag}: {params}");
    assert_eq!(params["url"], URL, "{tag}: {params}");
    assert_eq!(params["message"], "sign in", "{tag}: {params}");
    let eid = params.get("elicitationId").cloned();
    match (client_era, seen) {
        // 2026 has no elicitationId: the bridge drops the 2025 upstream's.
        (Era::E2026, _) => assert!(eid.is_none(), "{tag}: {params}"),
        // Passed through from the 2025 demo.
        (Era::E2025, Era::E2025) => assert!(
            eid.as_ref()
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("demo-el-")),
            "{tag}: {params}"
        ),
        // 2025 requires one; the bridge mints it.
        (Era::E2025, Era::E2026) => assert!(
            eid.as_ref()
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("mcpb-el-")),
            "{tag}: {params}"
        ),
    }
    assert_eq!(ex.text(), "elicited url: action=accept", "{tag}: {ex:?}");
    assert_ne!(ex.fin["result"]["isError"], true, "{tag}: {ex:?}");
    match client_era {
        Era::E2026 => assert_eq!(ex.fin["result"]["resultType"], "complete", "{tag}"),
        Era::E2025 => assert!(ex.fin["result"].get("resultType").is_none(), "{tag}"),
    }
    assert!(
        !ex.notes.iter().any(
            |m| m["method"] == "notifications/elicitation/complete" && client_era == Era::E2026
        ),
        "{tag}: a 2026 client got notifications/elicitation/complete: {ex:?}"
    );
    // The 2025-only completion notification: to a 2025 client with the demo's id; never to
    // a 2026 client (connect says so in its log; serve never routes it to a 2026 call).
    match (&mut cl, &mut get, client_era, seen) {
        (_, Some(get), _, _) => loop {
            let m = get
                .next(T)
                .await
                .unwrap_or_else(|| panic!("{tag}: GET stream ended"));
            if m["method"] == "notifications/elicitation/complete" {
                assert_eq!(
                    m["params"]["elicitationId"],
                    eid.clone().unwrap_or_default()
                );
                break;
            }
        },
        (Client::Host { h, .. }, None, Era::E2025, Era::E2025) => {
            let want = eid.clone().unwrap_or_default();
            let m = h.wait_for("notifications/elicitation/complete", T, |m| {
                m["method"] == "notifications/elicitation/complete"
            });
            assert_eq!(m["params"]["elicitationId"], want, "{tag}: {m}");
        }
        (Client::Host { h, .. }, None, Era::E2026, Era::E2025) => {
            assert!(
                h.log
                    .wait_find("not relaying notifications/elicitation/complete to a 2026 host")
                    .is_some(),
                "{tag}: log:\n{}",
                h.log.dump()
            );
        }
        _ => {}
    }

    // --- roots ----------------------------------------------------------------------------
    let ex = cl.call(2, "roots", json!({}), true).await;
    assert_eq!(ex.asked.len(), 1, "{tag}: {ex:?}");
    assert_eq!(ex.asked[0].0, "roots/list", "{tag}: {ex:?}");
    assert_eq!(ex.text(), format!("roots: {ROOTS}"), "{tag}: {ex:?}");
    assert_ne!(ex.fin["result"]["isError"], true, "{tag}: {ex:?}");

    // --- a 2025 upstream's -32042 URLElicitationRequired (retired in 2026) ------------------
    if upstream == Era::E2025 {
        let args = json!({"code": -32042, "message": "authorization needed",
            "data": {"elicitations": [
                {"mode": "url", "message": "sign in", "url": URL, "elicitationId": "auth-1"}]}});
        match client_era {
            // 2025 clients get it as it is (through a chain it became 2026's input_required
            // at the far bridge, which a 2025 client cannot be given back as -32042).
            Era::E2025 if seen == Era::E2026 => {}
            Era::E2025 => {
                let ex = cl.call(5, "error", args, true).await;
                assert_eq!(ex.fin["error"]["code"], -32042, "{tag}: {ex:?}");
                assert_eq!(
                    ex.fin["error"]["data"]["elicitations"][0]["elicitationId"], "auth-1",
                    "{tag}: {ex:?}"
                );
            }
            // 2026 clients get input_required with the URL elicitation and no state; the
            // retry runs the call again (the demo errs again, so: input_required again).
            Era::E2026 => {
                let want = json!({"url1": {"method": "elicitation/create",
                    "params": {"mode": "url", "message": "sign in", "url": URL}}});
                let r = cl
                    .call_once("url-req-1", "error", args.clone(), json!({}), true)
                    .await;
                assert_eq!(r["result"]["resultType"], "input_required", "{tag}: {r}");
                assert_eq!(r["result"]["inputRequests"], want, "{tag}: {r}");
                assert!(r["result"].get("requestState").is_none(), "{tag}: {r}");
                let retry = json!({"inputResponses": {"url1": {"action": "accept"}}});
                let r = cl
                    .call_once("url-req-2", "error", args.clone(), retry, true)
                    .await;
                assert_eq!(r["result"]["inputRequests"], want, "{tag}: {r}");
                // Without elicitation.url: -32021 naming it.
                let r = cl
                    .call_once("url-req-3", "error", args, json!({}), false)
                    .await;
                assert_eq!(r["error"]["code"], -32021, "{tag}: {r}");
                assert_eq!(
                    r["error"]["data"]["requiredCapabilities"],
                    json!({"elicitation": {"url": {}}}),
                    "{tag}: {r}"
                );
            }
        }
    }

    // --- a client that declared only form elicitation is never sent a URL one --------------
    let mut form_only = Client::open(face, client_era, upstream, serve, false).await;
    let ex = form_only
        .call(3, "elicit_url", json!({"url": URL}), false)
        .await;
    assert!(
        ex.asked.is_empty(),
        "{tag}: form-only client was asked: {ex:?}"
    );
    let refused = ex.fin.get("error").is_some() || ex.fin["result"]["isError"] == true;
    assert!(refused, "{tag}: {ex:?}");
    if let Some(t) = ex.fin["result"]["content"][0]["text"].as_str() {
        assert!(t.contains("elicitation"), "{tag}: {t}");
    }
    // ... but still gets form elicitation.
    let ex = form_only
        .call(4, "elicit", json!({"message": "name?"}), false)
        .await;
    assert_eq!(ex.asked.len(), 1, "{tag}: {ex:?}");
    assert_eq!(ex.asked[0].1["mode"], "form", "{tag}: {ex:?}");

    for c in [cl, form_only] {
        if let Client::Host { mut h, .. } = c {
            h.close_stdin();
            assert!(h.wait_exit(Duration::from_secs(15)).is_some(), "{tag}");
            h.assert_clean_stdout();
        }
    }
}

macro_rules! matrix {
    ($($name:ident: $face:expr, $client:expr, $up:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            combination($face, $client, $up).await;
        }
    )*};
}

matrix! {
    serve_2025_client_2025_upstream: Face::Serve, Era::E2025, Era::E2025;
    serve_2025_client_2026_upstream: Face::Serve, Era::E2025, Era::E2026;
    serve_2026_client_2025_upstream: Face::Serve, Era::E2026, Era::E2025;
    serve_2026_client_2026_upstream: Face::Serve, Era::E2026, Era::E2026;
    connect_2025_host_2025_remote: Face::Connect, Era::E2025, Era::E2025;
    connect_2025_host_2026_remote: Face::Connect, Era::E2025, Era::E2026;
    connect_2026_host_2025_remote: Face::Connect, Era::E2026, Era::E2025;
    connect_2026_host_2026_remote: Face::Connect, Era::E2026, Era::E2026;
    gateway_2025_client_2025_remote: Face::Gateway, Era::E2025, Era::E2025;
    gateway_2025_client_2026_remote: Face::Gateway, Era::E2025, Era::E2026;
    gateway_2026_client_2025_remote: Face::Gateway, Era::E2026, Era::E2025;
    gateway_2026_client_2026_remote: Face::Gateway, Era::E2026, Era::E2026;
    chain_2025_client_2025_child: Face::Chain, Era::E2025, Era::E2025;
    chain_2025_client_2026_child: Face::Chain, Era::E2025, Era::E2026;
    chain_2026_client_2025_child: Face::Chain, Era::E2026, Era::E2025;
    chain_2026_client_2026_child: Face::Chain, Era::E2026, Era::E2026;
}
