//! Issue 22: the era rules the core (`src/core`) owns, each run through {serve, connect} ×
//! {2025 child, 2026 child, pool, 2025 remote, 2026 remote} × {2025 caller, 2026 caller},
//! expecting the same observable outcome from both faces. Rows that a rule does not concern
//! (rule 2 and 3 toward a 2026 upstream, rule 6 for a 2026 caller) are not run.
//!
//! - serve: an HTTP client in front of `serve` holding the upstream;
//! - connect: a stdio host in front of `connect --protocol <upstream era>` in front of that
//!   same `serve` (so connect's own upstream is a remote of the named era).
//!
//! The 2025 upstream is `tests/fixtures/strict_legacy_server.py`: it refuses the 2026
//! envelope in `_meta` (as the Python SDK does in a 2025 session), and asks `roots/list`
//! right after `initialize` with nobody to ask. The 2026 upstream is `serve --demo`.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Up {
    Child2025,
    Child2026,
    Pool,
    Remote2025,
    Remote2026,
}

impl Up {
    fn legacy(self) -> bool {
        matches!(self, Up::Child2025 | Up::Pool | Up::Remote2025)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Face {
    Serve,
    Connect,
}

fn strict() -> String {
    format!(
        "{}/tests/fixtures/strict_legacy_server.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The `serve` holding `up` (and the far bridge behind it, for a remote), kept alive.
async fn serve_for(up: Up) -> (Bridge, Option<Bridge>) {
    let s = strict();
    let child = ["--port", "0", "--", "python3", s.as_str()];
    match up {
        Up::Child2025 => (Bridge::serve(&child).await, None),
        Up::Pool => {
            let mut a = vec!["--pool-min", "2", "--pool-max", "2"];
            a.extend_from_slice(&child);
            (Bridge::serve(&a).await, None)
        }
        Up::Child2026 => (Bridge::demo(&["--demo-era", "modern"]).await, None),
        Up::Remote2025 => {
            let mut a = vec!["--isolation", "session"];
            a.extend_from_slice(&child);
            let far = Bridge::serve(&a).await;
            let near =
                Bridge::serve(&["--port", "0", "--upstream", &far.url, "--protocol", LEGACY]).await;
            (near, Some(far))
        }
        Up::Remote2026 => {
            let far = Bridge::demo(&["--demo-era", "modern"]).await;
            let near =
                Bridge::serve(&["--port", "0", "--upstream", &far.url, "--protocol", MODERN]).await;
            (near, Some(far))
        }
    }
}

/// One caller, of either era, on either face.
enum Caller {
    Modern { c: reqwest::Client, url: String },
    Session(Session),
    Host { h: Box<Host>, modern: bool },
}

/// What a request got: its final message and the `notifications/message` before it.
struct Got {
    fin: Value,
    logs: Vec<Value>,
}

impl Got {
    /// An HTTP reply's final message and the log messages before it.
    fn of(r: &Reply) -> Got {
        let logs = r.notifications("notifications/message");
        Got {
            fin: r.last().clone(),
            logs: logs.into_iter().cloned().collect(),
        }
    }
}

impl Caller {
    async fn open(face: Face, up: Up, modern: bool, url: &str) -> (Caller, Option<Value>) {
        match (face, modern) {
            (Face::Serve, true) => (
                Caller::Modern {
                    c: client(),
                    url: url.to_owned(),
                },
                None,
            ),
            (Face::Serve, false) => {
                let s = Session::open(&client(), url).await;
                let init = s.init.clone();
                (Caller::Session(s), Some(init))
            }
            (Face::Connect, _) => {
                let pin = if up.legacy() { LEGACY } else { MODERN };
                let mut h = Host::start(url, &["--protocol", pin]);
                let init = (!modern).then(|| h.initialize(LEGACY, json!({})));
                (
                    Caller::Host {
                        h: Box::new(h),
                        modern,
                    },
                    init,
                )
            }
        }
    }

    /// `method` with `params`; a 2026 caller adds the required `_meta` plus `meta`.
    async fn request(&mut self, id: &str, method: &str, params: Value, meta: Value) -> Got {
        let modern_params = || {
            let mut p = modern_request(json!(id), method, params.clone())["params"].clone();
            for (k, v) in meta.as_object().into_iter().flatten() {
                p["_meta"][k] = v.clone();
            }
            p
        };
        match self {
            Caller::Modern { c, url } => {
                let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": modern_params()});
                Got::of(&post_modern(c, url, &body).await)
            }
            Caller::Session(s) => Got::of(&s.request(json!(id), method, params).await),
            Caller::Host { h, modern } => {
                let p = if *modern { modern_params() } else { params };
                h.request(json!(id), method, p);
                let fin = h.response(&json!(id), T);
                let logs = h
                    .drain(Duration::ZERO)
                    .into_iter()
                    .filter(|m| m["method"] == "notifications/message")
                    .collect();
                Got { fin, logs }
            }
        }
    }

    async fn tool(&mut self, id: &str, name: &str, args: Value, meta: Value) -> Got {
        self.request(
            id,
            "tools/call",
            json!({"name": name, "arguments": args}),
            meta,
        )
        .await
    }
}

fn text_of(fin: &Value) -> String {
    fin["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {fin}"))
        .to_owned()
}

/// Every rule for one face, one upstream, one caller era.
async fn row(face: Face, up: Up, modern: bool) {
    let (serve, _far) = serve_for(up).await;
    let (mut c, init) = Caller::open(face, up, modern, &serve.url).await;
    let tag = format!(
        "{face:?} × {up:?} × {} caller",
        if modern { 2026 } else { 2025 }
    );

    // Rule 6: a 2025 caller's InitializeResult, built from the upstream's, at its version.
    if let Some(init) = init {
        assert_eq!(init["protocolVersion"], LEGACY, "{tag}: {init}");
        if up.legacy() {
            assert_eq!(init["serverInfo"]["name"], "strict-legacy", "{tag}: {init}");
            assert_eq!(init["instructions"], "strict", "{tag}: {init}");
        }
        assert!(init.get("resultType").is_none(), "{tag}: {init}");
    }

    // Rule 2: a 2026 caller's envelope never reaches a 2025 upstream (it would refuse it).
    let g = c
        .tool("echo", "echo", json!({"text": "hi"}), json!({}))
        .await;
    assert_eq!(text_of(&g.fin), "hi", "{tag}: {}", g.fin);

    if up.legacy() {
        // Rule 1: a 2026 request without a logLevel gets no log message; with one, only what
        // is at or above it. A 2025 caller gets its session's messages.
        let g = c
            .tool("log-none", "log", json!({"level": "warning"}), json!({}))
            .await;
        assert_eq!(text_of(&g.fin), "logged", "{tag}");
        if modern {
            assert!(g.logs.is_empty(), "{tag}: no logLevel, got {:?}", g.logs);
            let lvl = json!({"io.modelcontextprotocol/logLevel": "error"});
            let g = c
                .tool("log-below", "log", json!({"level": "warning"}), lvl.clone())
                .await;
            assert!(g.logs.is_empty(), "{tag}: below error, got {:?}", g.logs);
            let g = c
                .tool("log-at", "log", json!({"level": "critical"}), lvl)
                .await;
            assert_eq!(g.logs.len(), 1, "{tag}: at or above error: {:?}", g.logs);
            assert_eq!(g.logs[0]["params"]["level"], "critical", "{tag}");
        } else {
            assert_eq!(
                g.logs.len(),
                1,
                "{tag}: a 2025 session's message: {:?}",
                g.logs
            );
        }

        // Rule 3: a requestState that is not a string is refused, not run as a new call.
        if modern {
            let p = json!({"name": "echo", "arguments": {"text": "x"}, "requestState": 42});
            let g = c.request("state", "tools/call", p, json!({})).await;
            assert_eq!(g.fin["error"]["code"], -32602, "{tag}: {}", g.fin);
            let p = json!({"name": "echo", "arguments": {"text": "x"}, "requestState": "forged"});
            let g = c.request("state2", "tools/call", p, json!({})).await;
            assert_eq!(g.fin["error"]["code"], -32602, "{tag}: {}", g.fin);
        }

        // Rule 5: the server's `roots/list` with nobody to ask is answered with no roots.
        let until = Instant::now() + T;
        loop {
            let g = c.tool("roots", "last_roots", json!({}), json!({})).await;
            let got: Value = serde_json::from_str(&text_of(&g.fin)).unwrap();
            if !got.is_null() {
                assert_eq!(got, json!({"roots": []}), "{tag}");
                break;
            }
            assert!(
                Instant::now() < until,
                "{tag}: the server was never answered"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// For a 2025 remote, the `serve --upstream` in front of `far` (with a metrics listener when
/// it is the bridge in front of an HTTP caller); None for the other upstreams.
async fn near_bridge(face: Face, up: Up, far: &Bridge) -> Option<Bridge> {
    if up != Up::Remote2025 {
        return None;
    }
    let mut a = vec!["--port", "0", "--upstream", &far.url, "--protocol", LEGACY];
    if face == Face::Serve {
        a.extend_from_slice(&["--metrics-listen", "127.0.0.1:0"]);
    }
    Some(Bridge::serve(&a).await)
}

/// Rule 4: a 2026 caller's listen on a 2025 upstream is acknowledged once what the upstream
/// sends can reach it: a change right after the acknowledgement arrives.
async fn listen_row(face: Face, up: Up) {
    let tag = format!("{face:?} × {up:?}: listen");
    // The bridge in front of the caller counts its requests (listens included) once.
    const M: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];
    let front_metrics = face == Face::Serve && up != Up::Remote2025;
    let mut demo = vec!["--demo-era", "legacy"];
    if front_metrics {
        demo.extend_from_slice(&M);
    }
    let far = Bridge::demo(&demo).await;
    let near = near_bridge(face, up, &far).await;
    let url = near.as_ref().map_or(far.url.clone(), |n| n.url.clone());
    let listens = |text: &str| {
        metric_sum(
            text,
            "mcp_bridge_jsonrpc_requests_total",
            &[("method", "subscriptions/listen")],
        )
    };
    let listen = json!({"notifications": {"toolsListChanged": true}});
    let notify = json!({"name": "notify", "arguments": {"kind": "tools"}});
    let changed = |m: &Value| m["method"] == "notifications/tools/list_changed";
    match face {
        Face::Serve => {
            let c = client();
            let body = modern_request(json!("L"), "subscriptions/listen", listen);
            let mut s = open_modern_stream(&c, &url, &body).await;
            let ack = s.next(T).await.expect("acknowledgement");
            assert_eq!(
                ack["method"], "notifications/subscriptions/acknowledged",
                "{tag}"
            );
            assert_eq!(
                ack["params"]["notifications"]["toolsListChanged"], true,
                "{tag}: {ack}"
            );
            let r = post_modern(&c, &url, &modern_request(json!(1), "tools/call", notify)).await;
            assert!(r.last().get("result").is_some(), "{tag}: {:?}", r.last());
            let until = Instant::now() + T;
            loop {
                let m = s.next(until - Instant::now()).await;
                let m = m.unwrap_or_else(|| panic!("{tag}: no list_changed on the listen"));
                if changed(&m) {
                    break;
                }
            }
            let front = near.as_ref().unwrap_or(&far);
            let text = scrape(&c, &metrics_url(front).await).await;
            assert_eq!(listens(&text), Some(1.0), "{tag}: one listen, counted once");
        }
        Face::Connect => {
            let mut h = Host::start(&url, &["--protocol", LEGACY, M[0], M[1]]);
            let mut p = listen;
            p["_meta"] = modern_meta();
            h.request(json!("L"), "subscriptions/listen", p);
            let ack = h.wait_for("acknowledgement", T, |m| {
                m["method"] == "notifications/subscriptions/acknowledged"
            });
            assert_eq!(
                ack["params"]["notifications"]["toolsListChanged"], true,
                "{tag}: {ack}"
            );
            let mut p = notify;
            p["_meta"] = modern_meta();
            h.request(json!(1), "tools/call", p);
            h.wait_for("list_changed", T, changed);
            let text = scrape(&client(), &metrics_url(&h).await).await;
            assert_eq!(listens(&text), Some(1.0), "{tag}: one listen, counted once");
        }
    }
}

/// A 2025-only notification (`notifications/elicitation/complete`) never reaches a 2026
/// caller; a 2025 caller gets it. A 2025 child's notification names no request, so serve
/// publishes it to the 2025 session streams (none here: nothing is dropped, nothing counted);
/// connect receives it on its session's GET stream and drops it for its 2026 host, counted
/// once as `dropped_frames_total{reason="legacy_only_notification"}` (a family connect did
/// not feed before).
async fn dropped_row(face: Face, up: Up) {
    let tag = format!("{face:?} × {up:?}: dropped notification");
    const M: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];
    let s = strict();
    let mut child = vec!["--port", "0"];
    if up == Up::Pool {
        child.extend_from_slice(&["--pool-min", "2", "--pool-max", "2"]);
    }
    if face == Face::Serve && up != Up::Remote2025 {
        child.extend_from_slice(&M);
    }
    child.extend_from_slice(&["--", "python3", s.as_str()]);
    let far = Bridge::serve(&child).await;
    let near = near_bridge(face, up, &far).await;
    let url = near.as_ref().map_or(far.url.clone(), |n| n.url.clone());
    let complete = |m: &Value| m["method"] == "notifications/elicitation/complete";
    let dropped = |text: &str| {
        metric_sum(
            text,
            "mcp_bridge_dropped_frames_total",
            &[("reason", "legacy_only_notification")],
        )
    };
    let call = json!({"name": "complete", "arguments": {}});
    let text = match face {
        Face::Serve => {
            let c = client();
            let r = post_modern(&c, &url, &modern_request(json!(1), "tools/call", call)).await;
            assert_eq!(text_of(r.last()), "completed", "{tag}");
            assert!(
                r.notifications("notifications/elicitation/complete")
                    .is_empty(),
                "{tag}"
            );
            let front = near.as_ref().unwrap_or(&far);
            scrape(&c, &metrics_url(front).await).await
        }
        Face::Connect => {
            let mut h = Host::start(&url, &["--protocol", LEGACY, M[0], M[1]]);
            // A listen first: its acknowledgement says connect's session stream, where serve
            // publishes what a 2025 child sends outside a call, is open.
            let mut p = json!({"notifications": {"toolsListChanged": true}});
            p["_meta"] = modern_meta();
            h.request(json!("L"), "subscriptions/listen", p);
            h.wait_for("acknowledgement", T, |m| {
                m["method"] == "notifications/subscriptions/acknowledged"
            });
            let mut p = call.clone();
            p["_meta"] = modern_meta();
            h.request(json!(1), "tools/call", p);
            assert_eq!(text_of(&h.response(&json!(1), T)), "completed", "{tag}");
            // It arrives on the session stream, after or before the answer: wait (bounded)
            // until connect has counted it, then make sure it never reached the host.
            let text = Scraper::of(&h)
                .await
                .until(&format!("{tag}: the drop counted"), T, |t| {
                    dropped(t) >= Some(1.0)
                })
                .await;
            assert!(
                !h.drain(Duration::from_millis(100)).iter().any(complete),
                "{tag}"
            );
            // A 2025 host gets it (on its session stream once that is open: a call made
            // before may find nobody there, so it is made again, a bounded number of times).
            let mut old = Host::start(&url, &["--protocol", LEGACY]);
            old.initialize(LEGACY, json!({}));
            let got = (0..10).any(|i| {
                old.request(json!(10 + i), "tools/call", call.clone());
                old.drain(Duration::from_secs(1)).iter().any(complete)
            });
            assert!(got, "{tag}: the 2025 host never got it");
            text
        }
    };
    let want = Some(if face == Face::Connect { 1.0 } else { 0.0 });
    assert_eq!(dropped(&text), want, "{tag}: dropped by the front bridge");
}

macro_rules! rows {
    ($($name:ident: $face:expr, $up:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread")]
        async fn $name() {
            row($face, $up, false).await;
            row($face, $up, true).await;
        }
    )*};
}

rows! {
    serve_2025_child: Face::Serve, Up::Child2025;
    serve_2026_child: Face::Serve, Up::Child2026;
    serve_pool: Face::Serve, Up::Pool;
    serve_2025_remote: Face::Serve, Up::Remote2025;
    serve_2026_remote: Face::Serve, Up::Remote2026;
    connect_2025_child: Face::Connect, Up::Child2025;
    connect_2026_child: Face::Connect, Up::Child2026;
    connect_pool: Face::Connect, Up::Pool;
    connect_2025_remote: Face::Connect, Up::Remote2025;
    connect_2026_remote: Face::Connect, Up::Remote2026;
}

#[tokio::test(flavor = "multi_thread")]
async fn listen_on_a_2025_upstream() {
    for (face, up) in [
        (Face::Serve, Up::Child2025),
        (Face::Serve, Up::Remote2025),
        (Face::Connect, Up::Child2025),
        (Face::Connect, Up::Remote2025),
    ] {
        listen_row(face, up).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_only_notifications_never_reach_a_2026_caller() {
    for (face, up) in [
        (Face::Serve, Up::Child2025),
        (Face::Serve, Up::Pool),
        (Face::Serve, Up::Remote2025),
        (Face::Connect, Up::Child2025),
        (Face::Connect, Up::Remote2025),
    ] {
        dropped_row(face, up).await;
    }
}

/// The series `family` has in `text`, keyed by their labels minus `server` (each face names
/// its server its own way), with their values.
fn series(text: &str, family: &str) -> std::collections::BTreeMap<String, f64> {
    let head = format!("{family}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&head))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            let kept: Vec<&str> = labels
                .split(',')
                .filter(|l| !l.starts_with("server="))
                .collect();
            Some((kept.join(","), value.trim().parse().ok()?))
        })
        .collect()
}

/// The same traffic counted the same way by both faces (`core::meter`): one workload of
/// one caller era through the bridge in front of it, serve (`--upstream`) or connect, to
/// the same kind of remote; the front bridge's request, error, latency and tool-result
/// series must be equal, series for series, and nothing left in flight.
async fn counts_of(face: Face, far: &Bridge, far_era: &str, modern: bool) -> String {
    const M: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];
    let (mut c, front) = match face {
        Face::Serve => {
            let near = Bridge::serve(&[
                "--port",
                "0",
                "--upstream",
                &far.url,
                "--protocol",
                far_era,
                M[0],
                M[1],
            ])
            .await;
            let c = if modern {
                Caller::Modern {
                    c: client(),
                    url: near.url.clone(),
                }
            } else {
                Caller::Session(Session::open(&client(), &near.url).await)
            };
            (c, Some(near))
        }
        Face::Connect => {
            let mut h = Host::start(&far.url, &["--protocol", far_era, M[0], M[1]]);
            if !modern {
                h.initialize(LEGACY, json!({}));
            }
            let h = Box::new(h);
            (Caller::Host { h, modern }, None)
        }
    };
    let echo = c.tool("1", "echo", json!({"text": "a"}), json!({})).await;
    assert_eq!(text_of(&echo.fin), "a", "{face:?}: {}", echo.fin);
    c.tool("2", "echo", json!({"text": "b"}), json!({})).await;
    c.request("3", "tools/list", json!({}), json!({})).await;
    c.request("4", "ping", json!({}), json!({})).await;
    let nope = c.request("5", "nope/x", json!({}), json!({})).await;
    assert_eq!(nope.fin["error"]["code"], -32601, "{face:?}: {}", nope.fin);
    if modern {
        let bad = c
            .tool(
                "6",
                "echo",
                json!({"text": "c"}),
                json!({"io.modelcontextprotocol/logLevel": "loud"}),
            )
            .await;
        assert_eq!(bad.fin["error"]["code"], -32602, "{face:?}: {}", bad.fin);
    }
    let url = match (&front, &c) {
        (Some(near), _) => metrics_url(near).await,
        (None, Caller::Host { h, .. }) => metrics_url(&**h).await,
        _ => unreachable!(),
    };
    scrape(&client(), &url).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_counts_from_both_faces() {
    for (demo_era, far_era) in [("modern", MODERN), ("legacy", LEGACY)] {
        let far = Bridge::demo(&["--demo-era", demo_era]).await;
        for modern in [true, false] {
            let tag = format!(
                "{demo_era} remote × {} caller",
                if modern { 2026 } else { 2025 }
            );
            let serve = counts_of(Face::Serve, &far, far_era, modern).await;
            let connect = counts_of(Face::Connect, &far, far_era, modern).await;
            for family in [
                "mcp_bridge_jsonrpc_requests_total",
                "mcp_bridge_jsonrpc_errors_total",
                "mcp_bridge_request_duration_seconds_count",
                "mcp_bridge_tool_results_total",
                "mcp_bridge_calls_in_flight",
            ] {
                let (s, c) = (series(&serve, family), series(&connect, family));
                assert!(
                    !s.is_empty() || family == "mcp_bridge_calls_in_flight",
                    "{tag}: no {family} on serve"
                );
                assert_eq!(s, c, "{tag}: {family}, serve (left) vs connect (right)");
            }
            assert_eq!(
                metric_sum(&serve, "mcp_bridge_calls_in_flight", &[]),
                Some(0.0),
                "{tag}"
            );
        }
    }
}
