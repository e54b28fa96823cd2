//! `serve --upstream URL`: the HTTP face in front of a *remote* Streamable HTTP server (here
//! another `mcp-bridge serve --demo`), the proof that faces hold the `Upstream` seam and not a
//! child. Both client eras, progress with the client's own token, a hang-up cancelling the call
//! at the far end, the remote's results counted under the near server's labels, the near
//! bridge's own bearer auth in front of the far one's, and a dead remote reported per call
//! while the near bridge keeps serving.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_carries_both_eras_progress_cancellation_and_metrics() {
    let far = Bridge::demo(&[]).await;
    let near = Bridge::serve(&[
        "--port",
        "0",
        "--upstream",
        &far.url,
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    near.wait_ready(T).await;
    let c = client();

    // A 2026 client.
    for i in 0..2 {
        let r = call_modern(&c, &near.url, json!(i), "echo", json!({"text": "hi"})).await;
        assert_eq!(r.text(), "hi");
    }
    let r = call_modern(&c, &near.url, json!("f"), "fail", json!({})).await;
    assert_eq!(r.result()["isError"], true);
    let r = call_modern(&c, &near.url, json!("e"), "error", json!({"code": -32050})).await;
    assert_eq!(r.error_code(), -32050);

    // A 2025 client: its session is the near bridge's; the answer comes from the far demo.
    let s = Session::open(&c, &near.url).await;
    let r = s.call(json!("s1"), "echo", json!({"text": "legacy"})).await;
    assert_eq!(r.text(), "legacy");

    // Progress comes back under the client's own token.
    let body = modern_tool_call_progress(
        json!("slow-1"),
        "slow",
        json!({"seconds": 30, "steps": 60}),
        json!("tok-near"),
    );
    let mut sse = open_modern_stream(&c, &near.url, &body).await;
    let first = sse.next(T).await.expect("a first event");
    assert_eq!(first["method"], "notifications/progress", "{first}");
    assert_eq!(first["params"]["progressToken"], "tok-near", "{first}");
    far.log.expect("demo: slow started id=", T).await;
    assert!(far.log.find("demo: cancelled id=").is_none());
    // Hanging up on the near bridge cancels the call at the far end (its child logs it).
    drop(sse);
    far.log.expect("demo: cancelled id=", T).await;

    let t = scrape(&c, &metrics_url(&near).await).await;
    let ok = r#"mcp_bridge_tool_results_total{is_error="false",server="default",tool="echo"}"#;
    assert_eq!(sample(&t, ok), Some(3.0), "{t}");
    let failed = r#"mcp_bridge_tool_results_total{is_error="true",server="default",tool="fail"}"#;
    assert_eq!(sample(&t, failed), Some(1.0), "{t}");
    let upstream_err = r#"mcp_bridge_jsonrpc_errors_total{code="-32050",method="tools/call",server="default",source="upstream"}"#;
    assert_eq!(sample(&t, upstream_err), Some(1.0), "{t}");
    assert_eq!(
        sample(&t, r#"mcp_bridge_upstream_up{server="default"}"#),
        Some(1.0),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_guards_with_its_own_token_and_sends_the_remote_its_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let far_tokens = dir.path().join("far-tokens");
    std::fs::write(&far_tokens, "near:far-secret-0123456789abcdef\n").expect("write");
    let near_tokens = dir.path().join("near-tokens");
    std::fs::write(&near_tokens, "client:near-secret-0123456789abcdef\n").expect("write");
    let remote_token = dir.path().join("remote-token");
    std::fs::write(&remote_token, "far-secret-0123456789abcdef\n").expect("write");
    let far = Bridge::demo(&[
        "--auth",
        "bearer",
        "--token-file",
        far_tokens.to_str().expect("path"),
    ])
    .await;
    let near = Bridge::serve(&[
        "--port",
        "0",
        "--upstream",
        &far.url,
        "--bearer-token-file",
        remote_token.to_str().expect("path"),
        "--auth",
        "bearer",
        "--token-file",
        near_tokens.to_str().expect("path"),
    ])
    .await;
    let c = client();
    let body = modern_tool_call(json!(1), "echo", json!({"text": "x"}));
    // No token: the near bridge refuses before anything reaches the remote.
    let r = post_with(&c, &near.url, modern_headers(&body), body.to_string()).await;
    assert_eq!(r.status, 401, "{r:?}");
    // The near bridge's token: the call passes, with the remote's token on the far hop.
    let mut h = modern_headers(&body);
    h.insert(
        hn("authorization"),
        hv("Bearer near-secret-0123456789abcdef"),
    );
    let r = post_with(&c, &near.url, h, body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "x");
    // Neither secret is in either log.
    for b in [&near, &far] {
        let log = b.log.dump();
        assert!(
            !log.contains("near-secret") && !log.contains("far-secret"),
            "{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_remote_fails_each_call_and_the_gateway_stays_up() {
    let mut far = Bridge::demo(&[]).await;
    let mut near = Bridge::serve(&["--port", "0", "--upstream", &far.url]).await;
    near.wait_ready(T).await;
    let c = client();
    let r = call_modern(&c, &near.url, json!(1), "echo", json!({"text": "up"})).await;
    assert_eq!(r.text(), "up");
    far.signal(nix::sys::signal::Signal::SIGKILL);
    far.wait_exit(T).await;
    for id in 2..4 {
        let r = call_modern(&c, &near.url, json!(id), "echo", json!({"text": "down"})).await;
        assert_eq!(r.error_code(), -32000, "{r:?}");
        let reason = r.error()["data"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // The far port refuses connections: README's `unreachable` (refused), every time.
        assert_eq!(reason, "unreachable", "{r:?}");
    }
    // Health stays up; the near bridge answers whatever the remote does.
    let h = c.get(near.endpoint("/healthz")).send().await.expect("GET");
    assert_eq!(h.status(), 200);
    // And it stops on SIGTERM (its remote upstream's tasks end with it; they once kept the
    // daemon's task tracker waiting forever).
    near.signal(nix::sys::signal::Signal::SIGTERM);
    let st = near.wait_exit(T).await;
    assert!(
        st.is_some_and(|s| s.success()),
        "{st:?}\n{}",
        near.log.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_stops_promptly_with_its_remote_up() {
    let far = Bridge::demo(&[]).await;
    // A grace far longer than the wait below: with nothing in flight the gateway must not
    // wait it out (its remote upstream's tasks once kept the daemon's tracker waiting).
    let mut near = Bridge::serve(&[
        "--port",
        "0",
        "--upstream",
        &far.url,
        "--shutdown-grace",
        "60s",
    ])
    .await;
    near.wait_ready(T).await;
    let c = client();
    let s = Session::open(&c, &near.url).await;
    assert_eq!(
        s.call(json!(1), "echo", json!({"text": "x"})).await.text(),
        "x"
    );
    near.signal(nix::sys::signal::Signal::SIGTERM);
    let st = near.wait_exit(Duration::from_secs(10)).await;
    assert!(
        st.is_some_and(|s| s.success()),
        "{st:?}\n{}",
        near.log.dump()
    );
}

/// A remote that streams newline-delimited messages in an `application/json` answer (a
/// notification, then the response: the conformance suite's reference server does) is read
/// line by line: the caller gets the response, and the progress under its own token; a
/// one-object answer pretty-printed over several lines is still read whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_streaming_json_lines_is_read_line_by_line() {
    let far = fake_remote_with(RemoteEra::Modern, |m, _| {
        if m["method"] != "tools/call" {
            return None;
        }
        let id = &m["id"];
        let result = |text: &str| {
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete",
                "content": [{"type": "text", "text": text}]}})
        };
        if m["params"]["name"] == "pretty" {
            let body = serde_json::to_string_pretty(&result("pretty")).unwrap();
            return Some((200, "application/json", format!("{body}\n")));
        }
        let token = m["params"]["_meta"]["progressToken"].clone();
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 50, "total": 100}});
        let body = format!("{progress}\n{}", result("streamed"));
        Some((200, "application/json", body))
    })
    .await;
    let near = Bridge::serve(&["--port", "0", "--upstream", &far.url]).await;
    near.wait_ready(T).await;
    let c = client();

    let body = modern_tool_call_progress(json!("s"), "echo", json!({}), json!("tok-near"));
    let r = post_modern(&c, &near.url, &body).await;
    assert_eq!(r.text(), "streamed", "{r:?}");
    let progress = r.notifications("notifications/progress");
    assert_eq!(progress.len(), 1, "{r:?}");
    assert_eq!(progress[0]["params"]["progressToken"], "tok-near", "{r:?}");

    let r = call_modern(&c, &near.url, json!("p"), "pretty", json!({})).await;
    assert_eq!(r.text(), "pretty", "{r:?}");
}
