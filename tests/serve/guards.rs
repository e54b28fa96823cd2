//! Request guards in front of the MCP endpoint: body size (413), DNS-rebinding protection
//! (Host and Origin, 403), the allow-origin list, health endpoints.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_limit_413() {
    let b = Bridge::demo(&["--max-body", "1KiB"]).await;
    // No connection reuse: after a 413 the bridge closes the connection without saying so
    // (see `oversize_body_413_says_connection_close`), which would make this test flaky.
    let c = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();

    // Under the limit: fine.
    let small = modern_tool_call(json!(1), "echo", json!({"text": "small"}));
    assert!(small.to_string().len() < 1024);
    let r = post_modern(&c, &b.url, &small).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "small");

    // 4 KiB: 413, with Content-Length ...
    let big = modern_tool_call(json!(2), "echo", json!({"text": "x".repeat(4096)}));
    let r = post_modern(&c, &b.url, &big).await;
    assert_eq!(r.status, 413, "{r:?}");

    // ... and chunked (no Content-Length).
    let bytes = big.to_string().into_bytes();
    let stream = futures_util::stream::iter(
        bytes
            .chunks(512)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let resp = c
        .post(&b.url)
        .headers(modern_headers(&big))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);

    // A 2025 initialize over the limit is refused the same way.
    let mut init = initialize_body(json!(3), LEGACY);
    init["params"]["clientInfo"]["name"] = json!("y".repeat(4096));
    let r = post_with(&c, &b.url, base_headers(), init.to_string()).await;
    assert_eq!(r.status, 413, "{r:?}");

    // Still serving.
    let r = post_modern(&c, &b.url, &small).await;
    assert_eq!(r.text(), "small");
}

/// A 413 sent before the body was read ends the connection; the response must say
/// `Connection: close`, or a keep-alive client reuses the dying connection and its next
/// request fails (seen with reqwest as `hyper::Error(IncompleteMessage)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_body_413_says_connection_close() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = Bridge::demo(&["--max-body", "1KiB"]).await;
    let mut s = tokio::net::TcpStream::connect(b.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 1048576\r\n\r\n",
        b.addr
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&[b' '; 8192]).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // Read until the server closes (bounded).
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .is_ok();
    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 413"), "{text}");
    // Both halves, always: the response says so, and the connection then ends.
    assert!(
        text.contains("\r\nconnection: close\r\n"),
        "a 413 without Connection: close:\n{text}"
    );
    assert!(
        closed,
        "the connection stayed open after the 413 (10 s):\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_protection() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let body = modern_tool_call(json!(1), "echo", json!({"text": "hi"}));
    let send = |extra: &[(&str, &str)]| {
        let mut h = modern_headers(&body);
        for (k, v) in extra {
            h.insert(hn(k), hv(v));
        }
        post_with(&c, &b.url, h, body.to_string())
    };

    let r = send(&[("host", "evil.example")]).await;
    assert_eq!(r.status, 403, "Host evil.example: {r:?}");
    let r = send(&[("host", "evil.example:8080")]).await;
    assert_eq!(r.status, 403, "Host evil.example:8080: {r:?}");
    let r = send(&[("origin", "https://evil.example")]).await;
    assert_eq!(r.status, 403, "Origin evil: {r:?}");
    let r = send(&[("origin", "http://localhost.evil.example")]).await;
    assert_eq!(r.status, 403, "Origin localhost.evil.example: {r:?}");
    let r = send(&[("origin", "null")]).await;
    assert_eq!(r.status, 403, "Origin null: {r:?}");

    // Loopback origins and hosts are fine.
    for origin in [
        "http://localhost:1234",
        "http://127.0.0.1:9",
        "http://[::1]:80",
    ] {
        let r = send(&[("origin", origin)]).await;
        assert_eq!(r.status, 200, "Origin {origin}: {r:?}");
        assert_eq!(r.text(), "hi");
    }
    let port = b.addr.port().to_string();
    let r = send(&[("host", &format!("localhost:{port}"))]).await;
    assert_eq!(r.status, 200, "{r:?}");

    // The guard covers GET and DELETE as well.
    let r = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = c
        .delete(&b.url)
        .header("host", "evil.example")
        .header("mcp-session-id", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    // An origin is not allowed until it is listed.
    let r = send(&[("origin", "https://app.example")]).await;
    assert_eq!(r.status, 403, "{r:?}");

    let b2 = Bridge::demo(&[
        "--allow-origin",
        "https://app.example",
        "--allow-origin",
        "*.corp.example",
    ])
    .await;
    let send2 = |origin: &str| {
        let mut h = modern_headers(&body);
        h.insert("origin", hv(origin));
        post_with(&c, &b2.url, h, body.to_string())
    };
    let r = send2("https://app.example").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "hi");
    let r = send2("https://other.example").await;
    assert_eq!(r.status, 403, "{r:?}");
    let r = send2("http://app.example").await;
    assert_eq!(r.status, 403, "scheme matters: {r:?}");
    let r = send2("https://a.corp.example").await;
    assert_eq!(r.status, 200, "wildcard: {r:?}");
    let r = send2("https://x.y.corp.example:8443").await;
    assert_eq!(r.status, 200, "wildcard, deeper, with port: {r:?}");
    let r = send2("https://corp.example").await;
    assert_eq!(r.status, 403, "wildcard needs a subdomain: {r:?}");
    let r = send2("https://evilcorp.example").await;
    assert_eq!(r.status, 403, "wildcard is a label suffix: {r:?}");
    let r = send2("http://localhost:3000").await;
    assert_eq!(r.status, 200, "loopback still allowed: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let r = c.get(b.endpoint("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    b.wait_ready(std::time::Duration::from_secs(20)).await;
    let r = c.get(b.endpoint("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = c.get(b.endpoint("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}
