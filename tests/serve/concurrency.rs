//! Many callers sharing one child with colliding JSON-RPC ids and progress tokens: each must
//! get exactly its own answer and its own progress, under its own id and token.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colliding_ids_and_progress_tokens() {
    let _serial = serial().await;
    const N: usize = 200;
    let b = Bridge::demo(&[]).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let mut tasks = Vec::with_capacity(N);
    for k in 0..N {
        let url = b.url.clone();
        tasks.push(tokio::spawn(async move {
            let c = client();
            // Different step counts, so a notification routed to the wrong caller shows up
            // as a wrong count or a wrong total.
            let steps = (k % 4 + 1) as u64;
            let slow = modern_tool_call_progress(
                json!(1),
                "slow",
                json!({"seconds": 0.2, "steps": steps}),
                json!(1),
            );
            let text = format!("client-{k}");
            let echo = modern_tool_call(json!(1), "echo", json!({"text": text}));
            let (rs, re) = tokio::join!(post_modern(&c, &url, &slow), post_modern(&c, &url, &echo));
            (k, steps, text, rs, re)
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(45), futures_join(tasks))
        .await
        .expect("200 concurrent callers did not finish within 45 s");
    for (k, steps, text, rs, re) in all {
        // echo: own text, own id.
        assert_eq!(re.status, 200, "client {k}: {re:?}");
        assert_eq!(re.last()["id"], 1, "client {k}: {re:?}");
        assert_eq!(re.text(), text, "client {k} got someone else's echo");

        // slow: a stream with exactly its own progress, then its answer.
        assert_eq!(rs.status, 200, "client {k}: {rs:?}");
        assert!(rs.is_sse(), "client {k}: progress needs a stream: {rs:?}");
        assert_eq!(rs.last()["id"], 1, "client {k}: {rs:?}");
        assert_eq!(rs.text(), "done", "client {k}");
        let progress = rs.notifications("notifications/progress");
        assert_eq!(
            progress.len() as u64,
            steps,
            "client {k}: wrong number of progress notifications: {:?}",
            rs.raw
        );
        for (i, p) in progress.iter().enumerate() {
            let params = &p["params"];
            assert_eq!(
                params["progressToken"], 1,
                "client {k}: token not restored: {p}"
            );
            assert_eq!(
                params["total"], steps,
                "client {k}: someone else's progress: {p}"
            );
            assert_eq!(params["progress"], i as u64 + 1, "client {k}: {p}");
        }
        // 2026 SSE: no event ids (no resumability), proxies told not to buffer.
        assert_eq!(
            rs.header("x-accel-buffering").as_deref(),
            Some("no"),
            "client {k}"
        );
        assert!(
            !rs.raw.starts_with("id:") && !rs.raw.contains("\nid:"),
            "client {k}: event ids on a 2026 stream: {:?}",
            rs.raw
        );
        // Nothing but progress and the response on the stream.
        assert_eq!(
            rs.messages.len() as u64,
            steps + 1,
            "client {k}: {:?}",
            rs.raw
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_echo_same_id() {
    let _serial = serial().await;
    const N: usize = 50;
    let b = Bridge::demo(&[]).await;
    let c = client();
    let mut tasks = Vec::with_capacity(N);
    for k in 0..N {
        let c = c.clone();
        let url = b.url.clone();
        tasks.push(tokio::spawn(async move {
            let text = format!("echo #{k} {}", "x".repeat(k * 37));
            let r = call_modern(&c, &url, json!(1), "echo", json!({"text": text})).await;
            (text, r)
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(30), futures_join(tasks))
        .await
        .expect("50 concurrent echoes did not finish within 30 s");
    for (text, r) in all {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.last()["id"], 1);
        assert_eq!(r.text(), text);
    }
}

/// 2025 sessions on the shared child, all using id 1 (and string id "a") at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_same_id() {
    let _serial = serial().await;
    const N: usize = 20;
    let b = Bridge::demo(&[]).await;
    let c = client();
    let mut tasks = Vec::with_capacity(N);
    for k in 0..N {
        let c = c.clone();
        let url = b.url.clone();
        tasks.push(tokio::spawn(async move {
            let s = Session::open(&c, &url).await;
            let t1 = format!("session {k} one");
            let t2 = format!("session {k} two");
            let (r1, r2) = tokio::join!(
                s.call(json!(1), "echo", json!({"text": t1})),
                s.call(json!("a"), "echo", json!({"text": t2})),
            );
            (t1, r1, t2, r2)
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(30), futures_join(tasks))
        .await
        .expect("sessions did not finish within 30 s");
    for (t1, r1, t2, r2) in all {
        assert_eq!(r1.last()["id"], 1);
        assert_eq!(r1.text(), t1);
        assert_eq!(r2.last()["id"], "a");
        assert_eq!(r2.text(), t2);
    }
}

async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("task panicked"));
    }
    out
}
