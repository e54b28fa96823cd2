//! Cancellation reaching the child under the child-side id: a 2026 client hanging up on its
//! stream, the bridge's own per-call timeout, and the end of a 2025 session whose client hung
//! up on a call.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const STARTED: &str = "demo: slow started id=";
const CANCELLED: &str = "demo: cancelled id=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_cancels_in_child() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let body = modern_tool_call_progress(
        json!("hangup-1"),
        "slow",
        json!({"seconds": 30, "steps": 60}),
        json!("p"),
    );
    let mut sse = open_modern_stream(&c, &b.url, &body).await;
    let first = sse
        .next(Duration::from_secs(10))
        .await
        .expect("a first event");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    assert_eq!(first["params"]["progressToken"], "p", "{first}");

    let started = b.log.expect(STARTED, Duration::from_secs(5)).await;
    let child_id = word_after(&started, STARTED).unwrap();
    assert!(
        !child_id.contains("hangup"),
        "child saw the client's id: {child_id}"
    );
    assert!(b.log.find(CANCELLED).is_none(), "cancelled before hang-up");

    drop(sse); // hang up

    let line = b.log.expect(CANCELLED, Duration::from_secs(15)).await;
    assert_eq!(
        word_after(&line, CANCELLED).as_deref(),
        Some(child_id.as_str()),
        "log:\n{}",
        b.log.dump()
    );

    // The bridge keeps serving.
    let r = echo_until_ok(&c, &b.url, "after hang-up", Duration::from_secs(5)).await;
    assert_eq!(r.text(), "after hang-up");
}

/// Two concurrent slow calls; hanging up on one cancels exactly that one in the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_cancels_only_own_call() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let keep = modern_tool_call_progress(
        json!(1),
        "slow",
        json!({"seconds": 4, "steps": 8}),
        json!(1),
    );
    let keep_task = {
        let c = c.clone();
        let url = b.url.clone();
        tokio::spawn(async move { post_modern(&c, &url, &keep).await })
    };
    b.log.expect(STARTED, Duration::from_secs(10)).await;
    let keep_id = b.log.demo_ids("slow started")[0].clone();

    let body = modern_tool_call_progress(
        json!(1),
        "slow",
        json!({"seconds": 30, "steps": 60}),
        json!(1),
    );
    let resp = c
        .post(&b.url)
        .headers(modern_headers(&body))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    sse.next(Duration::from_secs(10))
        .await
        .expect("first event");
    let ids = b.log.demo_ids("slow started");
    assert_eq!(ids.len(), 2, "log:\n{}", b.log.dump());
    let drop_id = ids[1].clone();
    assert_ne!(keep_id, drop_id, "two calls, one child id");
    drop(sse);

    let line = b.log.expect(CANCELLED, Duration::from_secs(15)).await;
    assert_eq!(word_after(&line, CANCELLED), Some(drop_id));

    let r = tokio::time::timeout(Duration::from_secs(20), keep_task)
        .await
        .expect("the other call did not finish")
        .unwrap();
    assert_eq!(r.text(), "done", "{r:?}");
    assert_eq!(r.notifications("notifications/progress").len(), 8);
    assert_eq!(b.log.count(CANCELLED), 1, "log:\n{}", b.log.dump());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_timeout_cancels_in_child() {
    let b = Bridge::demo(&["--call-timeout", "500ms"]).await;
    let c = client();
    let r = call_modern(
        &c,
        &b.url,
        json!("t-1"),
        "slow",
        json!({"seconds": 5, "steps": 0}),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["id"], "t-1");
    assert_eq!(r.error_code(), -32000, "{r:?}");
    assert_eq!(r.error()["data"]["reason"], "timeout", "{r:?}");

    let started = b.log.expect(STARTED, Duration::from_secs(5)).await;
    let child_id = word_after(&started, STARTED).unwrap();
    let line = b.log.expect(CANCELLED, Duration::from_secs(10)).await;
    assert_eq!(word_after(&line, CANCELLED), Some(child_id));
    assert!(line.contains("reason=timeout"), "{line}");

    // Timeouts apply to streams too: the SSE stream ends with the timeout error.
    let body = modern_tool_call_progress(
        json!("t-2"),
        "slow",
        json!({"seconds": 5, "steps": 50}),
        json!("tok"),
    );
    let r = post_modern(&c, &b.url, &body).await;
    assert!(r.is_sse(), "{r:?}");
    assert_eq!(r.last()["id"], "t-2");
    assert_eq!(r.error()["data"]["reason"], "timeout", "{r:?}");
    assert!(!r.notifications("notifications/progress").is_empty());
    tokio::time::timeout(Duration::from_secs(10), async {
        while b.log.count(CANCELLED) < 2 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "second timeout not cancelled in child; log:\n{}",
            b.log.dump()
        )
    });
}

/// The call timeout applies to 2025 sessions as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_timeout_cancels_in_child_2025() {
    let b = Bridge::demo(&["--call-timeout", "500ms"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let r = s
        .call(json!(1), "slow", json!({"seconds": 5, "steps": 0}))
        .await;
    assert_eq!(r.error()["data"]["reason"], "timeout", "{r:?}");
    let started = b.log.expect(STARTED, Duration::from_secs(5)).await;
    let line = b.log.expect(CANCELLED, Duration::from_secs(10)).await;
    assert_eq!(word_after(&line, CANCELLED), word_after(&started, STARTED));
}

/// A 2026 client that asked without a progress token gets a plain JSON answer; hanging up
/// before it comes is still a cancellation (spec ambiguity A4: the bridge treats it as one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_up_on_json_response_cancels_in_child() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let body = modern_tool_call(json!(1), "slow", json!({"seconds": 30, "steps": 0}));
    let req = c
        .post(&b.url)
        .headers(modern_headers(&body))
        .body(body.to_string())
        .send();
    let started = {
        let log = b.log.clone();
        async move { log.expect(STARTED, Duration::from_secs(10)).await }
    };
    // Wait for the child to start the call, then drop the request future (hang up).
    let line = tokio::select! {
        r = req => panic!("answered early: {r:?}"),
        l = started => l,
    };
    let child_id = word_after(&line, STARTED).unwrap();
    let line = b.log.expect(CANCELLED, Duration::from_secs(15)).await;
    assert_eq!(word_after(&line, CANCELLED), Some(child_id));
}

/// A 2025 client's hang-up leaves its call running in the child (detached, cancellable by id
/// until its deadline); the end of its session (DELETE) cancels it there, with the reason
/// `client cancelled`. Both children: a 2026 one (the call runs in `input_required` rounds)
/// and a 2025 one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_delete_cancels_a_hung_up_call_2025() {
    for era in ["dual", "legacy"] {
        let b = Bridge::demo(&["--demo-era", era, "--metrics-listen", "127.0.0.1:0"]).await;
        let m = Scraper::of(&b).await;
        let c = client();
        let s = Session::open(&c, &b.url).await;
        let started = s.hang_up_slow_call(&b.log, STARTED).await;
        // The request future is gone: the client hung up. The bridge has seen it once the
        // call left `calls_in_flight` (its response was dropped: a cancel would have been
        // sent to the child then, before anything sent to the child after it).
        let what = format!("{era}: the hang-up reached the bridge (no call in flight)");
        m.until(&what, Duration::from_secs(20), |t| {
            sample(t, "mcp_bridge_calls_in_flight") == Some(0.0)
        })
        .await;
        // A later call through the same child is the barrier: the child answers it after
        // reading whatever the bridge wrote before, so a cancel would be in the log by now.
        let r = s.call(json!(2), "echo", json!({"text": "after"})).await;
        assert_eq!(r.text(), "after", "{era}: {r:?}");
        assert!(
            b.log.find(CANCELLED).is_none(),
            "{era}: a hang-up cancelled; log:\n{}",
            b.log.dump()
        );
        let t = m.scrape().await;
        assert_eq!(
            sample(
                &t,
                r#"mcp_bridge_cancellations_total{cause="client_disconnect"}"#
            ),
            Some(0.0),
            "{era}: a 2025 hang-up is not a cancellation:\n{t}"
        );
        let r = c.delete(&s.url).headers(s.headers()).send().await.unwrap();
        assert_eq!(r.status(), 200, "{era}");
        let line = b.log.expect(CANCELLED, Duration::from_secs(10)).await;
        assert_eq!(
            word_after(&line, CANCELLED),
            word_after(&started, STARTED),
            "{era}"
        );
        assert!(
            line.contains(" reason=client cancelled server="),
            "{era}: the cancel's reason: {line}"
        );
    }
}
