//! `mcp-bridge connect` when things go wrong: the remote killed mid-call, an unreachable
//! remote (backoff, face stays up), 2025 session expiry (404 → new session), 401 naming the
//! token flags (and the token never logged), `--request-timeout` cancelling in the remote,
//! host cancellation observed by the remote in both eras, malformed SSE and oversize answers.

mod connect_harness;

use std::time::{Duration, Instant};

use connect_harness::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(20);

fn reason(msg: &Value) -> String {
    msg["error"]["data"]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no error reason in {msg}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_killed_mid_call_then_unreachable_face_stays_up() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &[]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("slow", json!({"seconds": 10, "steps": 10})),
    );
    serve.log.expect("demo: slow started", T).await;
    serve.signal(nix::sys::signal::Signal::SIGKILL);
    let r = h.response(&json!(1), T);
    assert_eq!(reason(&r), "connection_lost", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not re-sent"),
        "{r}"
    );
    for id in 2..5 {
        h.request(
            json!(id),
            "tools/call",
            modern_call_params("echo", json!({"text": "x"})),
        );
        let r = h.response(&json!(id), T);
        assert_eq!(reason(&r), "unreachable", "{r}");
    }
    assert!(
        h.log.find("next attempt after").is_some(),
        "{}",
        h.log.dump()
    );
    assert!(h.alive());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_failure_is_a_clear_error() {
    let mut h = Host::start(
        "http://no-such-host.invalid/mcp",
        &["--protocol", "2026-07-28"],
    );
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(1), T);
    assert!(matches!(reason(&r).as_str(), "dns" | "unreachable"), "{r}");
    assert!(h.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_lost_404_reinitialises() {
    // The remote restarts on the same port: the old session id is unknown there (404).
    let serve = Bridge::demo(&[]).await;
    let port = serve.addr.port().to_string();
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    h.initialize("2025-11-25", json!({}));
    h.request(
        json!(1),
        "tools/call",
        call_params("echo", json!({"text": "a"})),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "a");
    drop(serve);
    let _serve = Bridge::serve(&["--demo", "--port", &port]).await;
    h.request(
        json!(2),
        "tools/call",
        call_params("echo", json!({"text": "b"})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "b");
    assert!(
        h.log.find("session expired on the remote").is_some(),
        "{}",
        h.log.dump()
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_names_the_token_flags_and_never_logs_the_token() {
    let addr = tiny_server(|_, _| {
        (
            401,
            "application/json",
            r#"{"error":"unauthorized"}"#.into(),
        )
    })
    .await;
    let url = format!("http://{addr}/mcp");
    let mut h = Host::start(&url, &[]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(1), T);
    assert_eq!(reason(&r), "unauthorized", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("--bearer-token-file") && msg.contains("--bearer-token-env"),
        "{msg}"
    );
    drop(h);
    let secret = "s3cr3t-token-value";
    let mut h = Host::start_env(
        &url,
        &[
            "--bearer-token-env",
            "CONNECT_TEST_TOKEN",
            "-H",
            "X-Api-Key: other-secret",
        ],
        &[("CONNECT_TEST_TOKEN", secret)],
    );
    h.request(json!(2), "tools/list", json!({"_meta": meta()}));
    let r = h.response(&json!(2), T);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("rejected"),
        "{r}"
    );
    assert!(
        !h.log.dump().contains(secret),
        "token in the log:\n{}",
        h.log.dump()
    );
    assert!(!h.log.dump().contains("other-secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_sent() {
    let addr = tiny_server(|h, _| {
        if h.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer tok-1") {
            (200, "application/json", r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{},"ttlMs":0,"cacheScope":"private"}}"#.into())
        } else {
            (401, "text/plain", "no".into())
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "tok-1\n").unwrap();
    let mut h = Host::start(
        &format!("http://{addr}/mcp"),
        &["--bearer-token-file", f.to_str().unwrap()],
    );
    h.request(json!("x"), "server/discover", json!({"_meta": meta()}));
    let r = h.response(&json!("x"), T);
    assert!(r["result"]["supportedVersions"].is_array(), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_timeout_cancels_in_the_remote() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &["--request-timeout", "1s"]);
    let start = Instant::now();
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("slow", json!({"seconds": 10, "steps": 10})),
    );
    let r = h.response(&json!(1), T);
    assert_eq!(reason(&r), "timeout", "{r}");
    assert!(start.elapsed() < Duration::from_secs(5));
    serve.log.expect("demo: cancelled id=", T).await;
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("echo", json!({"text": "after"})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "after");
}

async fn host_cancel_reaches_remote(extra: &[&str]) {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, extra);
    h.initialize("2025-11-25", json!({}));
    h.request(
        json!("c1"),
        "tools/call",
        call_params("slow", json!({"seconds": 10, "steps": 10})),
    );
    serve.log.expect("demo: slow started", T).await;
    h.notify(
        "notifications/cancelled",
        json!({"requestId": "c1", "reason": "user"}),
    );
    serve.log.expect("demo: cancelled id=", T).await;
    h.request(
        json!(2),
        "tools/call",
        call_params("echo", json!({"text": "next"})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "next");
    let rest = h.drain(Duration::from_millis(300));
    assert!(
        !rest.iter().any(|m| m["id"] == "c1"),
        "a cancelled call was answered: {rest:?}"
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cancel_reaches_2026_remote() {
    host_cancel_reaches_remote(&["--protocol", "2026-07-28"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cancel_reaches_2025_remote() {
    host_cancel_reaches_remote(&["--protocol", "2025-11-25"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_sse_is_an_error_for_that_call() {
    let addr = tiny_server(|_, _| {
        (
            200,
            "text/event-stream",
            "event: message\ndata: {not json\n\n".into(),
        )
    })
    .await;
    let mut h = Host::start(&format!("http://{addr}/mcp"), &["--protocol", "2026-07-28"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    assert_eq!(reason(&h.response(&json!(1), T)), "malformed_response");
    assert!(h.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_response_is_an_error_and_the_next_call_works() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &["--max-response", "4K"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("bytes", json!({"n": 100000})),
    );
    assert_eq!(reason(&h.response(&json!(1), T)), "response_too_large");
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("echo", json!({"text": "ok"})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "ok");
}
