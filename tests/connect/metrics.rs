//! `mcp-bridge connect --metrics-listen`: the same families as `serve`, with the three kinds of
//! failure apart — the remote's HTTP answers by status (`route="upstream"`) and the exchanges
//! that got none by reason, JSON-RPC errors by who made them (`upstream`: the remote answered
//! with an error; `bridge`: connect did), and tool results by `isError` — after a scripted
//! workload against `serve --demo`, with exact values for every series.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

/// Every sample of `family` (lines starting with `family{`), for "nothing else" checks.
fn samples<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
    let prefix = format!("{family}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// Assert each `(series, value)` exactly.
fn assert_samples(text: &str, want: &[(String, f64)]) {
    let mut wrong = Vec::new();
    for (series, v) in want {
        let got = sample(text, series);
        if got != Some(*v) {
            wrong.push(format!("{series}: want {v}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}\n---\n{text}", wrong.join("\n"));
}

fn modern(params: Value) -> Value {
    let mut p = params;
    let m = p["_meta"].as_object().cloned().unwrap_or_default();
    let mut meta = modern_meta();
    for (k, v) in m {
        meta[k] = v;
    }
    p["_meta"] = meta;
    p
}

fn reason(msg: &Value) -> String {
    msg["error"]["data"]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no error reason in {msg}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_counts_http_transport_and_jsonrpc_apart() {
    let serve = Bridge::demo(&[]).await;
    let port = serve.addr.port().to_string();
    let mut h = Host::start(
        &serve.url,
        &["--name", "demo", "--metrics-listen", "127.0.0.1:0"],
    );
    let murl = metrics_url(&h).await;
    // The metrics listener is up (and logged) before the remote registers its series.
    h.log.expect("connect: forwarding stdio to", T).await;
    let s = |labels: &str| format!("{{{labels}}}");

    // Before anything happened: the bounded families are there, at 0.
    let t = scrape(&client(), &murl).await;
    let mut zero: Vec<(String, f64)> = [
        "unreachable",
        "dns",
        "tls",
        "connect_timeout",
        "connection_lost",
        "malformed_response",
        "response_too_large",
    ]
    .iter()
    .map(|r| {
        (
            format!(
                "mcp_bridge_upstream_transport_failures_total{}",
                s(&format!(r#"reason="{r}",server="demo""#))
            ),
            0.0,
        )
    })
    .collect();
    zero.push(("mcp_bridge_calls_in_flight".into(), 0.0));
    zero.push((
        r#"mcp_bridge_cancellations_total{cause="client_notification"}"#.into(),
        0.0,
    ));
    zero.push((
        format!(
            "mcp_bridge_build_info{}",
            s(&format!(r#"version="{}""#, env!("CARGO_PKG_VERSION")))
        ),
        1.0,
    ));
    assert_samples(&t, &zero);
    // The remote is probed on the host's first message, so it is not up yet.
    let up = r#"mcp_bridge_upstream_up{server="demo"}"#;
    assert_eq!(sample(&t, up), Some(0.0), "{t}");
    assert!(
        samples(&t, "mcp_bridge_jsonrpc_requests_total").is_empty(),
        "{t}"
    );
    assert!(t.contains("process_resident_memory_bytes"), "{t}");

    // The workload, a 2026 host.
    h.request(json!(1), "tools/list", json!({"_meta": modern_meta()}));
    let r = h.response(&json!(1), T);
    assert!(r["result"]["tools"].is_array(), "{r}");
    // Probed and answering: up, as for `serve --upstream`.
    let t = scrape(&client(), &murl).await;
    assert_eq!(sample(&t, up), Some(1.0), "{t}");
    for id in 2..5 {
        h.request(
            json!(id),
            "tools/call",
            modern_call_params("echo", json!({"text": "hi"})),
        );
        assert_eq!(text(&h.response(&json!(id), T)), "hi");
    }
    h.request(
        json!(5),
        "tools/call",
        modern_call_params("fail", json!({})),
    );
    assert_eq!(h.response(&json!(5), T)["result"]["isError"], true);
    h.request(
        json!(6),
        "tools/call",
        modern_call_params("error", json!({"code": -32050})),
    );
    assert_eq!(h.response(&json!(6), T)["error"]["code"], -32050);
    h.request(json!(7), "ping", json!({}));
    assert_eq!(h.response(&json!(7), T)["result"], json!({}));
    // Refused by connect itself: not a log level.
    h.request(
        json!(8),
        "tools/call",
        modern(json!({"name": "echo", "arguments": {"text": "x"},
                      "_meta": {"io.modelcontextprotocol/logLevel": "loud"}})),
    );
    assert_eq!(h.response(&json!(8), T)["error"]["code"], -32602);
    // A call the host cancels once it is under way (its first progress arrived).
    h.request(
        json!(9),
        "tools/call",
        modern(
            json!({"name": "slow", "arguments": {"seconds": 30, "steps": 300},
                      "_meta": {"progressToken": "p9"}}),
        ),
    );
    h.wait_for("progress of 9", T, |m| {
        m["method"] == "notifications/progress" && m["params"]["progressToken"] == "p9"
    });
    h.notify("notifications/cancelled", json!({"requestId": 9}));
    serve.log.expect("demo: cancelled id=", T).await;
    // The remote goes away: a transport failure.
    drop(serve);
    h.request(
        json!(10),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(10), T);
    assert_eq!(reason(&r), "unreachable", "{r}");
    // It comes back on the same port wanting a token connect does not have: an HTTP error.
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ci:tok-0123456789abcdef0123456789\n").unwrap();
    let serve = Bridge::serve(&[
        "--demo",
        "--port",
        &port,
        "--auth",
        "bearer",
        "--token-file",
        tokens.to_str().unwrap(),
    ])
    .await;
    h.request(
        json!(11),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(11), T);
    assert_eq!(reason(&r), "unauthorized", "{r}");
    assert_eq!(r["error"]["data"]["httpStatus"], 401, "{r}");
    assert!(h
        .drain(Duration::from_millis(200))
        .iter()
        .all(|m| m["id"] != 9));

    let t = scrape(&client(), &murl).await;
    let d = |labels: &str| s(&format!(r#"{labels},server="demo""#));
    let mut want: Vec<(String, f64)> = vec![
        // What the host asked: 9 tools/call (3 echo, fail, error, refused, slow, 2 after the
        // remote went away), tools/list, ping.
        (
            format!(
                "mcp_bridge_jsonrpc_requests_total{}",
                d(r#"method="tools/call""#)
            ),
            9.0,
        ),
        (
            format!(
                "mcp_bridge_jsonrpc_requests_total{}",
                d(r#"method="tools/list""#)
            ),
            1.0,
        ),
        (
            format!("mcp_bridge_jsonrpc_requests_total{}", d(r#"method="ping""#)),
            1.0,
        ),
        // JSON-RPC errors by who made them.
        (
            format!(
                "mcp_bridge_jsonrpc_errors_total{}",
                s(r#"code="-32050",method="tools/call",server="demo",source="upstream""#)
            ),
            1.0,
        ),
        (
            format!(
                "mcp_bridge_jsonrpc_errors_total{}",
                s(r#"code="-32602",method="tools/call",server="demo",source="bridge""#)
            ),
            1.0,
        ),
        (
            format!(
                "mcp_bridge_jsonrpc_errors_total{}",
                s(r#"code="-32000",method="tools/call",server="demo",source="bridge""#)
            ),
            2.0,
        ),
        // Tool results (the tool ran), labelled from the remote's tools/list.
        (
            format!(
                "mcp_bridge_tool_results_total{}",
                s(r#"is_error="false",server="demo",tool="echo""#)
            ),
            3.0,
        ),
        (
            format!(
                "mcp_bridge_tool_results_total{}",
                s(r#"is_error="true",server="demo",tool="fail""#)
            ),
            1.0,
        ),
        // The remote's HTTP answers: discover, tools/list, 3 echo, fail, error, slow; the 401.
        (
            r#"mcp_bridge_http_responses_total{method="POST",route="upstream",status="200"}"#
                .into(),
            8.0,
        ),
        (
            r#"mcp_bridge_http_responses_total{method="POST",route="upstream",status="401"}"#
                .into(),
            1.0,
        ),
        (
            r#"mcp_bridge_http_request_duration_seconds_count{method="POST",route="upstream"}"#
                .into(),
            9.0,
        ),
        // Time to the answer, for the calls that got one (not the cancelled slow, not the
        // one the bridge refused before any call: `core::meter`, as on serve).
        (
            format!(
                "mcp_bridge_request_duration_seconds_count{}",
                d(r#"method="tools/call""#)
            ),
            7.0,
        ),
        ("mcp_bridge_calls_in_flight".into(), 0.0),
        (
            r#"mcp_bridge_cancellations_total{cause="client_notification"}"#.into(),
            1.0,
        ),
        (
            r#"mcp_bridge_cancellations_total{cause="timeout"}"#.into(),
            0.0,
        ),
        (
            r#"mcp_bridge_cancellations_total{cause="shutdown"}"#.into(),
            0.0,
        ),
    ];
    // The transport failure: one, unreachable.
    for (series, v) in zero.iter().take(7) {
        let one = series.contains(r#"reason="unreachable""#);
        want.push((series.clone(), if one { 1.0 } else { *v }));
    }
    assert_samples(&t, &want);
    // ping is the bridge's own answer: no call, so no latency series at all.
    let ping = format!(
        "mcp_bridge_request_duration_seconds_count{}",
        d(r#"method="ping""#)
    );
    assert_eq!(sample(&t, &ping), None, "{t}");
    // Nothing else in the outcome families.
    assert_eq!(
        samples(&t, "mcp_bridge_jsonrpc_errors_total").len(),
        3,
        "{t}"
    );
    assert_eq!(samples(&t, "mcp_bridge_tool_results_total").len(), 2, "{t}");
    let upstream: Vec<&str> = samples(&t, "mcp_bridge_http_responses_total")
        .into_iter()
        .filter(|l| l.contains(r#"route="upstream""#))
        .collect();
    assert_eq!(upstream.len(), 2, "{upstream:?}");
    assert_eq!(
        samples(&t, "mcp_bridge_jsonrpc_requests_total").len(),
        3,
        "{t}"
    );

    h.close_stdin();
    let st = h.wait_exit(T).expect("connect exits when stdin closes");
    assert!(st.success(), "{st}");
    h.assert_clean_stdout();
    assert!(
        !h.log.dump().contains("tok-0123456789"),
        "a token reached the log"
    );
    drop(serve);
}

/// `--request-timeout` is the bridge's error and a cancellation with cause `timeout`; without
/// `--name` the server label is the URL's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_is_a_bridge_error_and_a_timeout_cancellation() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(
        &serve.url,
        &["--metrics-listen", "127.0.0.1:0", "--request-timeout", "3s"],
    );
    let murl = metrics_url(&h).await;
    h.request(
        json!("s"),
        "tools/call",
        modern_call_params("slow", json!({"seconds": 30})),
    );
    let r = h.response(&json!("s"), T);
    assert_eq!(reason(&r), "timeout", "{r}");
    serve.log.expect("demo: cancelled id=", T).await;
    let t = scrape(&client(), &murl).await;
    let want: Vec<(String, f64)> = vec![
        (
            r#"mcp_bridge_jsonrpc_requests_total{method="tools/call",server="127.0.0.1"}"#.into(),
            1.0,
        ),
        (
            r#"mcp_bridge_jsonrpc_errors_total{code="-32000",method="tools/call",server="127.0.0.1",source="bridge"}"#
                .into(),
            1.0,
        ),
        (r#"mcp_bridge_cancellations_total{cause="timeout"}"#.into(), 1.0),
        (
            r#"mcp_bridge_cancellations_total{cause="client_notification"}"#.into(),
            0.0,
        ),
        // server/discover, the tools/list connect sent to learn the unknown tool (with
        // --metrics-listen, for its label; without, the call goes first: faults.rs), and the
        // slow call's event stream (serve starts one after 1 s).
        (
            r#"mcp_bridge_http_responses_total{method="POST",route="upstream",status="200"}"#
                .into(),
            3.0,
        ),
        (
            r#"mcp_bridge_upstream_transport_failures_total{reason="connection_lost",server="127.0.0.1"}"#
                .into(),
            0.0,
        ),
        ("mcp_bridge_calls_in_flight".into(), 0.0),
    ];
    assert_samples(&t, &want);
    assert_eq!(
        samples(&t, "mcp_bridge_jsonrpc_errors_total").len(),
        1,
        "{t}"
    );
    assert!(
        samples(&t, "mcp_bridge_tool_results_total").is_empty(),
        "{t}"
    );
    h.assert_clean_stdout();
}

/// A metrics address that cannot be bound is a configuration error (exit 78), as on serve.
#[test]
fn metrics_listener_that_cannot_bind_exits_78() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Bridge::builder()
        .no_log_level()
        .connect("http://127.0.0.1:9/mcp")
        .args(["--metrics-listen", &addr])
        .output();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot bind the metrics listener"), "{err}");
    assert!(out.stdout.is_empty());
}
