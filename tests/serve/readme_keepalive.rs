//! README "serve" flags: `--keepalive` is the interval of the SSE `:` comments on a long stream
//! (default 15 s), so proxies with idle timeouts keep a long call's stream open.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// The keep-alive comments on the stream of a 2 s `slow` call, and the stream's body.
async fn keepalives(extra: &[&str]) -> (usize, String) {
    let b = Bridge::demo(extra).await;
    let body = modern_tool_call(json!("ka-1"), "slow", json!({"seconds": 2, "steps": 0}));
    let mut resp = client()
        .post(&b.url)
        .headers(modern_headers(&body))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut text = String::new();
    let read = async {
        while let Some(c) = resp.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&c));
        }
    };
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("the stream ends after the call");
    assert!(text.contains("\"done\""), "{text}");
    (text.matches(": keep-alive").count(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn keepalive_sets_the_interval_of_sse_comments() {
    // A 2 s call with comments every 200 ms: the stream opens after a short wait for a quick
    // answer, so a few fewer than ten; at least three whatever the machine's load.
    let (n, text) = keepalives(&["--keepalive", "200ms"]).await;
    assert!(n >= 3, "{n} keep-alives in a 2 s stream at 200 ms: {text}");
    // The default (15 s) sends none in 2 s.
    let (n, text) = keepalives(&[]).await;
    assert_eq!(n, 0, "{text}");
}
