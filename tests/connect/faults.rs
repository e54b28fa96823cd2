//! `mcp-bridge connect` when things go wrong: the remote killed mid-call, an unreachable
//! remote (backoff, face stays up), 2025 session expiry (404 → new session), 401 naming the
//! token flags (and the token never logged), `--request-timeout` cancelling in the remote,
//! host cancellation observed by the remote in both eras, malformed SSE and oversize answers.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

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
    // The name does not resolve: "dns", not the catch-all "unreachable".
    assert_eq!(reason(&r), "dns", "{r}");
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
        h.log.wait_find("session expired on the remote").is_some(),
        "{}",
        h.log.dump()
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_names_the_token_flags_and_never_logs_the_token() {
    let remote = fake_remote_with(RemoteEra::Modern, |_, _| {
        Some((
            401,
            "application/json",
            r#"{"error":"unauthorized"}"#.into(),
        ))
    })
    .await;
    let url = remote.url.clone();
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
    h.request(json!(2), "tools/list", json!({"_meta": modern_meta()}));
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
    // Anything without the token is refused; with it, the fake remote's 2026 defaults.
    let remote = fake_remote_with(RemoteEra::Modern, |_, h| {
        let auth = h.get("authorization").and_then(|v| v.to_str().ok());
        (auth != Some("Bearer tok-1")).then(|| (401, "text/plain", "no".into()))
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("token");
    std::fs::write(&f, "tok-1\n").unwrap();
    let mut h = Host::start(&remote.url, &["--bearer-token-file", f.to_str().unwrap()]);
    h.request(
        json!("x"),
        "server/discover",
        json!({"_meta": modern_meta()}),
    );
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
    let remote = fake_remote_with(RemoteEra::Modern, |_, _| {
        let junk = "event: message\ndata: {not json\n\n";
        Some((200, "text/event-stream", junk.into()))
    })
    .await;
    let mut h = Host::start(&remote.url, &["--protocol", "2026-07-28"]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_failure_is_a_clear_error() {
    // A plain-HTTP server spoken to over https: the handshake fails.
    let serve = Bridge::demo(&[]).await;
    let url = serve.url.replace("http://", "https://");
    let mut h = Host::start(&url, &["--protocol", "2026-07-28"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(1), T);
    // The TCP connection is made and the handshake fails: "tls", not "unreachable".
    assert_eq!(reason(&r), "tls", "{r}");
    assert!(h.alive());
}

/// A CA file with no certificate in it is bad configuration: exit 78 (EX_CONFIG) before any
/// connection, the file named on stderr, stdout untouched.
#[test]
fn bad_ca_file_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("ca.pem");
    std::fs::write(&f, "not a certificate").unwrap();
    let out = Bridge::builder()
        .no_log_level()
        .connect("https://example.com/mcp")
        .args(["--ca-file", f.to_str().unwrap()])
        .output();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{said}");
    let want = format!("--ca-file {}: no certificates found", f.display());
    assert!(said.contains(&want), "want {want:?} on stderr:\n{said}");
    assert!(out.stdout.is_empty(), "stdout must stay clean");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_mismatch_refreshes_tools_and_retries_once_invalid_tools_dropped() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let lists = AtomicUsize::new(0);
    let remote = fake_remote_with(RemoteEra::Modern, move |v, h| {
        let id = &v["id"];
        match v["method"].as_str().unwrap_or("") {
            "tools/list" => {
                // The first list lacks the annotation; later ones carry it.
                let region = if lists.fetch_add(1, Ordering::SeqCst) == 0 {
                    json!({"type": "string"})
                } else {
                    json!({"type": "string", "x-mcp-header": "Region"})
                };
                Some(rpc_result(
                    id,
                    json!({"resultType": "complete", "ttlMs": 0,
                    "cacheScope": "private", "tools": [
                    {"name": "good", "inputSchema": {"type": "object",
                        "properties": {"region": region}}},
                    {"name": "bad", "inputSchema": {"type": "object",
                        "properties": {"x": {"type": "number", "x-mcp-header": "X"}}}}]}),
                ))
            }
            "tools/call" => Some(
                if h.get("mcp-param-region").and_then(|v| v.to_str().ok()) == Some("eu") {
                    rpc_result(
                        id,
                        json!({"resultType": "complete",
                        "content": [{"type": "text", "text": "ok"}]}),
                    )
                } else {
                    let e = json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32020, "message": "Mcp-Param-Region missing"}});
                    (400, "application/json", e.to_string())
                },
            ),
            _ => None,
        }
    })
    .await;
    let calls = || {
        remote
            .methods()
            .iter()
            .filter(|m| *m == "tools/call")
            .count()
    };
    let mut h = Host::start(&remote.url, &["--protocol", "2026-07-28"]);
    h.request(json!(1), "tools/list", json!({"_meta": modern_meta()}));
    let r = h.response(&json!(1), T);
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, vec!["good"], "{r}");
    assert!(
        h.log.wait_find("dropping tool \"bad\"").is_some(),
        "{}",
        h.log.dump()
    );
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("good", json!({"region": "eu"})),
    );
    let r = h.response(&json!(2), T);
    assert_eq!(text(&r), "ok", "{r}");
    assert_eq!(calls(), 2, "one rejected call, one retry");
}

/// A host that calls from a cached list, with no `tools/list` first: a tool without header
/// mappings costs one exchange (no list of connect's own before it); one whose argument must be
/// mirrored into `Mcp-Param-*` is rejected once with -32020, and then connect lists the tools
/// and retries it with the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_a_list_first_is_sent_as_is_and_a_header_tool_recovers() {
    let remote = fake_remote_with(RemoteEra::Modern, move |v, h| {
        let id = &v["id"];
        match v["method"].as_str().unwrap_or("") {
            "tools/list" => Some(rpc_result(
                id,
                json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "tools": [
                    {"name": "plain", "inputSchema": {"type": "object"}},
                    {"name": "routed", "inputSchema": {"type": "object", "properties": {
                        "region": {"type": "string", "x-mcp-header": "Region"}}}}]}),
            )),
            "tools/call" => {
                let routed = v["params"]["name"] == "routed";
                let header = h.get("mcp-param-region").and_then(|v| v.to_str().ok());
                Some(if routed && header != Some("eu") {
                    let e = json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32020, "message": "Mcp-Param-Region missing"}});
                    (400, "application/json", e.to_string())
                } else {
                    rpc_result(
                        id,
                        json!({"resultType": "complete",
                        "content": [{"type": "text", "text": v["params"]["name"]}]}),
                    )
                })
            }
            _ => None,
        }
    })
    .await;
    let count = |method: &str| remote.methods().iter().filter(|m| *m == method).count();
    let mut h = Host::start(&remote.url, &["--protocol", "2026-07-28"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("plain", json!({})),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "plain");
    assert_eq!(
        (count("tools/list"), count("tools/call")),
        (0, 1),
        "{:?}",
        remote.methods()
    );
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("routed", json!({"region": "eu"})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "routed");
    assert_eq!(
        (count("tools/list"), count("tools/call")),
        (1, 3),
        "plain, routed rejected, routed retried with the header: {:?}",
        remote.methods()
    );
    // Known now: the next call carries the header at once.
    h.request(
        json!(3),
        "tools/call",
        modern_call_params("routed", json!({"region": "eu"})),
    );
    assert_eq!(text(&h.response(&json!(3), T)), "routed");
    assert_eq!((count("tools/list"), count("tools/call")), (1, 4));
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_2025_stream_resumes_with_last_event_id() {
    use std::sync::{Arc, Mutex};
    let call_id: Arc<Mutex<Value>> = Arc::new(Mutex::new(Value::Null));
    let resumed_with: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let (cid, rw) = (call_id.clone(), resumed_with.clone());
    let addr = tiny_server(move |h, body| {
        let v: Value = serde_json::from_slice(body).unwrap_or_default();
        if body.is_empty() {
            // GET: a resumption (Last-Event-ID) or the session's own stream (not offered).
            let Some(last) = h.get("last-event-id").and_then(|x| x.to_str().ok()) else {
                return (405, "text/plain", String::new());
            };
            *rw.lock().unwrap() = Some(last.to_owned());
            let id = cid.lock().unwrap().clone();
            let resp = json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":"resumed"}]}});
            return (200, "text/event-stream", format!("id: e2\ndata: {resp}\n\n"));
        }
        match v["method"].as_str() {
            Some("initialize") => (200, "application/json", json!({"jsonrpc":"2.0","id":v["id"],"result":{
                "protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"0"}}}).to_string()),
            Some("tools/call") => {
                *cid.lock().unwrap() = v["id"].clone();
                // A priming event with an id, then the connection drops before the answer.
                (200, "text/event-stream", "id: e1\nretry: 100\ndata:\n\n".into())
            }
            _ => (202, "application/json", String::new()),
        }
    })
    .await;
    let mut h = Host::start(&format!("http://{addr}/mcp"), &["--protocol", "2025-11-25"]);
    h.initialize("2025-11-25", json!({}));
    h.request(json!(1), "tools/call", call_params("anything", json!({})));
    assert_eq!(text(&h.response(&json!(1), T)), "resumed");
    assert_eq!(resumed_with.lock().unwrap().as_deref(), Some("e1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_read_only_tools_are_retried_and_only_with_the_flag() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let reads = AtomicUsize::new(0);
    let remote = fake_remote_with(RemoteEra::Modern, move |v, _| {
        let id = &v["id"];
        match v["method"].as_str().unwrap_or("") {
            "tools/list" => Some(rpc_result(
                id,
                json!({"resultType": "complete", "ttlMs": 0,
                "cacheScope": "private", "tools": [
                {"name": "read", "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": true}},
                {"name": "write", "inputSchema": {"type": "object"}}]}),
            )),
            "tools/call" => {
                // `write` always breaks after the request arrived; `read` breaks on its 1st,
                // 3rd, … send and answers the others.
                let is_read = v["params"]["name"] == "read";
                Some(
                    if !is_read || reads.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
                        (200, "text/event-stream", ": accepted\n\n".into())
                    } else {
                        rpc_result(
                            id,
                            json!({"resultType": "complete",
                        "content": [{"type": "text", "text": "ok"}]}),
                        )
                    },
                )
            }
            _ => None,
        }
    })
    .await;
    let calls = || {
        remote
            .methods()
            .iter()
            .filter(|m| *m == "tools/call")
            .count()
    };
    let url = remote.url.clone();
    let mut h = Host::start(&url, &["--protocol", "2026-07-28", "--retry-idempotent"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("read", json!({})),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "ok");
    assert_eq!(calls(), 2, "read-only: one failure, one retry");
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("write", json!({})),
    );
    assert_eq!(reason(&h.response(&json!(2), T)), "connection_lost");
    assert_eq!(calls(), 3, "not read-only: never re-sent");
    drop(h);
    let mut h = Host::start(&url, &["--protocol", "2026-07-28"]);
    h.request(
        json!(3),
        "tools/call",
        modern_call_params("read", json!({})),
    );
    assert_eq!(reason(&h.response(&json!(3), T)), "connection_lost");
    assert_eq!(calls(), 4, "without --retry-idempotent nothing is re-sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_ends_a_silent_stream_but_not_a_busy_one() {
    let serve = Bridge::demo(&["--keepalive", "30s"]).await;
    let mut h = Host::start(&serve.url, &["--idle-timeout", "1500ms"]);
    // Progress every 0.4 s keeps the stream alive past the idle limit.
    let mut p = modern_call_params("slow", json!({"seconds": 2.4, "steps": 6}));
    p["_meta"]["progressToken"] = json!("busy");
    h.request(json!(1), "tools/call", p);
    assert_eq!(text(&h.response(&json!(1), T)), "done");
    // No progress token: nothing flows for 10 s after the SSE headers.
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("slow", json!({"seconds": 10, "steps": 10})),
    );
    let r = h.response(&json!(2), T);
    assert_eq!(reason(&r), "connection_lost", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--idle-timeout"),
        "{r}"
    );
    serve.log.expect("demo: cancelled id=", T).await;
}

/// `--connect-timeout`: a remote whose accept queue is full never completes the TCP handshake
/// (Linux drops the SYN); the call fails after the timeout (1 s here, the default is 10 s) with
/// reason `connect_timeout`, and the face stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_bounds_a_handshake_that_never_completes() {
    // Backlog 0 holds one connection that is never accepted; fill it, then one more.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sock.local_addr().unwrap();
    let _listener = sock.listen(0).unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    assert!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "the queue is not full: this kernel completes handshakes anyway"
    );
    let url = format!("http://{addr}/mcp");
    let mut h = Host::start(
        &url,
        &["--protocol", "2026-07-28", "--connect-timeout", "1s"],
    );
    let start = Instant::now();
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x"})),
    );
    let r = h.response(&json!(1), T);
    let took = start.elapsed();
    assert_eq!(reason(&r), "connect_timeout", "{r}");
    assert!(
        took >= Duration::from_millis(900),
        "failed in {took:?}, before the timeout"
    );
    assert!(
        took < Duration::from_secs(5),
        "failed in {took:?}: not the flag's 1 s"
    );
    assert!(h.alive());
    drop(held);
}
