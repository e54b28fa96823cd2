//! A misbehaving child: it crashes mid-call (in-flight calls fail with child_exited, the
//! child restarts, sessions survive), and it writes junk on stdout (skipped, calls go on).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

fn assert_child_exited(r: &Reply, id: serde_json::Value, what: &str) {
    assert_eq!(r.status, 200, "{what}: {r:?}");
    assert_eq!(r.last()["id"], id, "{what}: {r:?}");
    assert_eq!(r.error_code(), -32000, "{what}: {r:?}");
    assert_eq!(r.error()["data"]["reason"], "child_exited", "{what}: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_mid_call_then_restart() {
    let b = Bridge::demo(&[]).await;
    let c = client();

    // A 2025 session that exists before the crash.
    let s = Session::open(&c, &b.url).await;
    assert_eq!(
        s.call(json!(1), "echo", json!({"text": "before"}))
            .await
            .text(),
        "before"
    );

    // Three calls in flight: 2026 JSON, 2026 SSE (progress), 2025 session.
    let json_call = {
        let (c, url) = (c.clone(), b.url.clone());
        tokio::spawn(async move {
            call_modern(
                &c,
                &url,
                json!("j"),
                "slow",
                json!({"seconds": 30, "steps": 0}),
            )
            .await
        })
    };
    let sse_call = {
        let (c, url) = (c.clone(), b.url.clone());
        tokio::spawn(async move {
            let body = modern_tool_call_progress(
                json!("s"),
                "slow",
                json!({"seconds": 30, "steps": 300}),
                json!("tok"),
            );
            post_modern(&c, &url, &body).await
        })
    };
    let session_call = {
        let s2 = Session {
            c: c.clone(),
            url: s.url.clone(),
            id: s.id.clone(),
            version: s.version.clone(),
            init: s.init.clone(),
        };
        tokio::spawn(async move {
            s2.call(json!("l"), "slow", json!({"seconds": 30, "steps": 0}))
                .await
        })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while b.log.count("demo: slow started") < 3 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("slow calls did not start; log:\n{}", b.log.dump()));

    // Crash the child.
    let r = call_modern(&c, &b.url, json!("crash"), "crash", json!({})).await;
    assert_child_exited(&r, json!("crash"), "the crash call itself");

    let wait = Duration::from_secs(10);
    let r = tokio::time::timeout(wait, json_call)
        .await
        .expect("json call")
        .unwrap();
    assert_child_exited(&r, json!("j"), "2026 JSON call");
    let r = tokio::time::timeout(wait, sse_call)
        .await
        .expect("sse call")
        .unwrap();
    assert_child_exited(&r, json!("s"), "2026 SSE call");
    let r = tokio::time::timeout(wait, session_call)
        .await
        .expect("session call")
        .unwrap();
    assert_child_exited(&r, json!("l"), "2025 session call");

    // The child comes back (bounded retries) and serves again.
    let r = echo_until_ok(&c, &b.url, "after crash", Duration::from_secs(20)).await;
    assert_eq!(r.text(), "after crash", "{r:?}\nlog:\n{}", b.log.dump());
    // The log is read from the bridge's stderr asynchronously: wait (bounded) for the line.
    b.log
        .expect_count("child started", 2, Duration::from_secs(10))
        .await;

    // The session made before the crash still works.
    let r = s
        .call(json!(2), "echo", json!({"text": "session survives"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "session survives");

    // Header validation still knows the tools after the restart.
    let body = modern_tool_call(json!(3), "lookup", json!({"region": "eu", "id": 1}));
    let r = post_with(&c, &b.url, modern_headers(&body), body.to_string()).await;
    assert_eq!(
        r.status, 400,
        "Mcp-Param-* not checked after restart: {r:?}"
    );
    assert_eq!(r.error_code(), -32020);
}

/// `mcp_bridge_dropped_frames_total{reason}` for every reason the README lists, from a scrape.
fn drops(t: &str) -> Vec<(&'static str, Option<f64>)> {
    const REASONS: [&str; 7] = [
        "unknown_id",
        "oversize",
        "malformed",
        "slow_consumer",
        "unroutable_request",
        "undeclared_capability",
        "legacy_only_notification",
    ];
    REASONS
        .iter()
        .map(|r| {
            let series = format!("mcp_bridge_dropped_frames_total{{reason=\"{r}\"}}");
            (*r, sample(t, &series))
        })
        .collect()
}

/// Junk a child writes on stdout (a line over `--max-line`, a line that is not JSON, an answer
/// to an id nobody asked) is skipped: the call that caused it still gets its answer, the child
/// keeps serving, and each skipped line moves its own `dropped_frames_total{reason}` by
/// exactly one (every reason exported from the start, at 0 or more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_on_stdout_is_skipped() {
    // The demo's own tools/list answer (~3.9 KB) is over this limit too, so the start-up
    // tool scan times out: keep that wait short.
    let b = Bridge::demo(&[
        "--max-line",
        "1024",
        "--probe-timeout",
        "1s",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    b.wait_ready(Duration::from_secs(20)).await;
    let m = Scraper::of(&b).await;
    let c = client();
    // The start-up scan's answer, over the limit, was the one drop before any call.
    let mut before = drops(&m.scrape().await);
    for (reason, v) in &before {
        let want = if *reason == "oversize" { 1.0 } else { 0.0 };
        assert_eq!(*v, Some(want), "{reason} at start");
    }
    let cases = [
        (json!({"kind": "oversize", "size": 100000}), "oversize"),
        (json!({"kind": "malformed"}), "malformed"),
        (json!({"kind": "unknown_id"}), "unknown_id"),
        (json!({"kind": "oversize", "size": 1025}), "oversize"),
        (json!({"kind": "oversize", "size": 5_000_000}), "oversize"),
    ];
    for (i, (args, reason)) in cases.iter().enumerate() {
        let r = call_modern(&c, &b.url, json!(i), "junk", args.clone()).await;
        assert_eq!(r.status, 200, "{args}: {r:?}");
        assert_eq!(r.last()["id"], i, "{args}: {r:?}");
        assert_eq!(r.text(), "ok", "{args}: {r:?}");
        assert!(!r.raw.contains("xxxxxxxxxx"), "junk leaked to the client");
        // The junk line came before the answer on the child's stdout: counted by now.
        let after = drops(&m.scrape().await);
        for ((name, was), (_, now)) in before.iter().zip(&after) {
            let delta = if name == reason { 1.0 } else { 0.0 };
            assert_eq!(*now, was.map(|w| w + delta), "{args}: {name}");
        }
        before = after;
    }
    // The same through a 2025 session.
    let s = Session::open(&c, &b.url).await;
    let r = s
        .call(
            json!(9),
            "junk",
            json!({"kind": "oversize", "size": 100000}),
        )
        .await;
    assert_eq!(r.text(), "ok");

    // Still serving, the same child (no restart).
    let r = call_modern(&c, &b.url, json!(10), "echo", json!({"text": "still fine"})).await;
    assert_eq!(r.text(), "still fine");
    // A line just under the limit still gets through.
    let r = call_modern(&c, &b.url, json!(11), "bytes", json!({"n": 800})).await;
    assert_eq!(r.text().len(), 800);
    assert_eq!(b.log.count("child started"), 1, "log:\n{}", b.log.dump());
    let t = m.scrape().await;
    let oversize = r#"mcp_bridge_dropped_frames_total{reason="oversize"}"#;
    assert_eq!(
        sample(&t, oversize),
        Some(5.0),
        "1 at start, 3 by 2026 calls, 1 by 2025"
    );
}

/// A response line over `--max-line` cannot be delivered; the bridge recognises the id at the
/// start of the line and fails that call at once (not at its timeout), and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_response_fails_bounded() {
    let b = Bridge::demo(&["--max-line", "4096", "--call-timeout", "30s"]).await;
    let c = client();
    let started = std::time::Instant::now();
    let r = call_modern(&c, &b.url, json!(1), "bytes", json!({"n": 10000})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.error_code(), -32603, "{r:?}");
    assert_eq!(
        r.messages[0]["error"]["data"]["reason"], "response_too_large",
        "{r:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "waited for the timeout"
    );
    let r = call_modern(&c, &b.url, json!(2), "echo", json!({"text": "next"})).await;
    assert_eq!(r.text(), "next");
}

/// A 2025 child whose `tools/call` of `close` closes its stdin, then lives on for a while
/// before it exits: the bridge's writer is gone while the process still runs.
const STDIN_CLOSER: &str = r#"
import json, os, sys, time
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    meth, rid = m["method"], m["id"]
    if meth == "initialize":
        res = {"protocolVersion": m["params"]["protocolVersion"],
               "capabilities": {"tools": {}}, "serverInfo": {"name": "closer", "version": "1"}}
        out = {"jsonrpc": "2.0", "id": rid, "result": res}
    elif meth == "tools/list":
        out = {"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "close", "inputSchema": {"type": "object"}},
            {"name": "echo", "inputSchema": {"type": "object"}}]}}
    elif meth == "tools/call" and m["params"]["name"] == "close":
        os.close(0)
        sys.stderr.write("closer: stdin closed\n"); sys.stderr.flush()
        time.sleep(4)
        sys.exit(1)
    elif meth == "tools/call":
        out = {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "e"}]}}
    else:
        out = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
"#;

/// Calls made while the child can no longer read them are `child_exited`, never `overloaded`
/// (nothing was full: the child's input was gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_dying_child_are_child_exited_not_overloaded() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("closer.py");
    std::fs::write(&script, STDIN_CLOSER).unwrap();
    let path = script.to_str().unwrap();
    let b = Bridge::serve(&["--port", "0", "--", "python3", "-u", path]).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let c = client();
    let close = {
        let (c, url) = (c.clone(), b.url.clone());
        tokio::spawn(async move { call_modern(&c, &url, json!("close"), "close", json!({})).await })
    };
    b.log
        .expect("closer: stdin closed", Duration::from_secs(10))
        .await;
    // While the child lingers, a handful of calls: each needs its own answer.
    let mut calls = Vec::new();
    for i in 0..8 {
        let (c, url) = (c.clone(), b.url.clone());
        calls.push(tokio::spawn(async move {
            call_modern(&c, &url, json!(i), "echo", json!({})).await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wait = Duration::from_secs(20);
    let r = tokio::time::timeout(wait, close)
        .await
        .expect("close")
        .unwrap();
    assert_child_exited(&r, json!("close"), "the close call");
    for (i, call) in calls.into_iter().enumerate() {
        let r = tokio::time::timeout(wait, call)
            .await
            .expect("call")
            .unwrap();
        assert_child_exited(&r, json!(i), &format!("call {i} to the dying child"));
    }
}
