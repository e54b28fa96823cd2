//! Metrics that tell the truth, through the real binary: `calls_in_flight` holds a streaming
//! call until its final answer or its cancellation (JSON and SSE, both eras, both child eras);
//! answers hyper writes on its own (400/414/431) are in `http_responses_total`; a 2025
//! session's held listen on a 2026 child ends without counting a cancellation.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const IN_FLIGHT: &str = "mcp_bridge_calls_in_flight";
const TOOL_CALL_FINALS: &str =
    r#"mcp_bridge_request_duration_seconds_count{method="tools/call",server="default"}"#;
const TOOL_CALL_SECONDS: &str =
    r#"mcp_bridge_request_duration_seconds_sum{method="tools/call",server="default"}"#;

/// A 2025 `tools/call` of `slow` with a progress token.
fn legacy_slow(id: &str, seconds: f64, steps: u64) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "slow",
            "arguments": {"seconds": seconds, "steps": steps},
            "_meta": {"progressToken": format!("p-{id}")},
        }
    })
}

/// POST a 2025 session's request whose answer streams; 200 and SSE asserted.
async fn open_legacy_stream(s: &Session, body: &Value) -> SseReader {
    let resp =
        s.c.post(&s.url)
            .headers(s.headers())
            .body(body.to_string())
            .send()
            .await
            .expect("POST");
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    SseReader::new(resp)
}

/// Streaming calls stay in `calls_in_flight` while they stream (they read 0 before: the gauge
/// ended with the response head), and leave it at their cancellation or final answer; the
/// request duration is observed at the final answer, over the whole call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_calls_are_in_flight_until_answered_or_cancelled() {
    for era in ["modern", "legacy"] {
        let b = Bridge::demo(&["--demo-era", era, "--metrics-listen", "127.0.0.1:0"]).await;
        let murl = metrics_url(&b).await;
        let c = client();
        b.wait_ready(Duration::from_secs(20)).await;
        let s = Session::open(&c, &b.url).await;

        // Three long calls, each streaming progress: two from 2026 clients, one from the 2025
        // session (a 2026 child serves it through input rounds, a 2025 child directly).
        let mut streams = Vec::new();
        for i in 0..2 {
            let body = modern_tool_call_progress(
                json!(i),
                "slow",
                json!({"seconds": 600, "steps": 6000}),
                json!(format!("t{i}")),
            );
            streams.push(open_modern_stream(&c, &b.url, &body).await);
        }
        streams.push(open_legacy_stream(&s, &legacy_slow("l", 600.0, 6000)).await);
        for st in &mut streams {
            let ev = st.next(Duration::from_secs(20)).await.expect("an event");
            assert_eq!(ev["method"], "notifications/progress", "{era}: {ev}");
        }
        let t = scrape(&c, &murl).await;
        assert_eq!(
            sample(&t, IN_FLIGHT),
            Some(3.0),
            "{era}: streaming calls:\n{t}"
        );
        // No final yet: the histogram's series appears with its first observation (the
        // same series reads 2 below, so a renamed one fails there).
        assert_eq!(
            sample(&t, TOOL_CALL_FINALS),
            None,
            "{era}: no final yet:\n{t}"
        );

        // The 2025 call is cancelled by notification (its stream ends without an answer), the
        // 2026 ones by hanging up.
        let st = s
            .notify("notifications/cancelled", json!({"requestId": "l"}))
            .await;
        assert_eq!(st, 202);
        let mut legacy = streams.pop().expect("the 2025 stream");
        assert!(legacy.ends_within(Duration::from_secs(20)).await, "{era}");
        drop(streams);
        Scraper::at(&murl).until_sample(IN_FLIGHT, 0.0).await;

        // Calls that run to their answer leave the gauge before the answer is sent.
        let body = modern_tool_call_progress(
            json!("short"),
            "slow",
            json!({"seconds": 0.3, "steps": 3}),
            json!("ts"),
        );
        let mut m = open_modern_stream(&c, &b.url, &body).await;
        let mut last = None;
        while let Some(ev) = m.next(Duration::from_secs(20)).await {
            last = Some(ev);
        }
        let last = last.expect("events");
        assert_eq!(
            last["result"]["content"][0]["text"], "done",
            "{era}: {last}"
        );
        let r = s.post(&legacy_slow("ls", 0.3, 3)).await;
        assert!(r.is_sse(), "{era}: {r:?}");
        assert_eq!(r.text(), "done", "{era}: {r:?}");
        let t = scrape(&c, &murl).await;
        assert_eq!(
            sample(&t, IN_FLIGHT),
            Some(0.0),
            "{era}: all answered:\n{t}"
        );
        assert_eq!(sample(&t, TOOL_CALL_FINALS), Some(2.0), "{era}:\n{t}");
        assert!(
            sample(&t, TOOL_CALL_SECONDS).is_some_and(|s| s >= 0.6),
            "{era}: the duration covers each whole call:\n{t}"
        );
    }
}

/// Send `raw` on a new connection to `addr` and read until the server closes it.
async fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(raw).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// What hyper answers by itself — too many headers (431), a URI over 64 KiB (414), a bad
/// `Content-Length` or request line (400) — is counted under route and method `other`, on the
/// main listener and on the metrics listener alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_hyper_writes_itself_are_counted() {
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0"]).await;
    let murl = metrics_url(&b).await;
    let series = |status: &str| {
        format!(
            r#"mcp_bridge_http_responses_total{{method="other",route="other",status="{status}"}}"#
        )
    };

    let mut many = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n".to_vec();
    for i in 0..150 {
        many.extend_from_slice(format!("X-Filler-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let mut long_uri = b"GET /".to_vec();
    long_uri.resize(long_uri.len() + 70_000, b'a');
    long_uri.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (many, "431"),
        (long_uri, "414"),
        (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ten\r\n\r\n".to_vec(),
            "400",
        ),
        (b"THIS IS NOT HTTP\r\n\r\n".to_vec(), "400"),
    ];
    for (raw, status) in &cases {
        let out = raw_exchange(b.addr, raw).await;
        assert!(
            out.starts_with(&format!("HTTP/1.1 {status} ")),
            "want {status}, got {out:?}"
        );
    }
    // The metrics listener's own connections too.
    let maddr: std::net::SocketAddr = murl
        .strip_prefix("http://")
        .and_then(|r| r.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .expect("metrics address");
    let out = raw_exchange(maddr, b"\x01\x02 nonsense\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400 "), "{out:?}");

    // Counted as each connection ends, just after hyper wrote its answer.
    Scraper::at(&murl).until_sample(&series("400"), 3.0).await;
    Scraper::at(&murl).until_sample(&series("431"), 1.0).await;
    let t = Scraper::at(&murl).until_sample(&series("414"), 1.0).await;
    // No catch-all series (the family is there: the three above were read from it).
    assert_eq!(
        sample(
            &t,
            r#"mcp_bridge_http_responses_total{method="other",route="other",status="other"}"#
        ),
        None,
        "every status has its own label:\n{t}"
    );
}

/// Open a 2025 session's GET stream (the bridge then holds a listen on the 2026 child).
async fn open_get_stream(s: &Session) -> SseReader {
    let resp =
        s.c.get(&s.url)
            .headers(s.headers())
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("GET");
    assert_eq!(resp.status(), 200);
    SseReader::new(resp)
}

async fn delete(s: &Session) {
    let r =
        s.c.delete(&s.url)
            .headers(s.headers())
            .send()
            .await
            .expect("DELETE");
    assert_eq!(r.status(), 200);
}

/// The listen the bridge holds on a 2026 child for a 2025 session's GET stream is the bridge's
/// own: ending it (DELETE, a new subscription set, the GET stream's end) tells the child but
/// counts no cancellation (it counted one `client_disconnect` each before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_is_not_a_client_cancellation() {
    const STARTED: &str = "demo: listen started";
    const ENDED: &str = "demo: listen ended";
    let b = Bridge::demo(&["--demo-era", "modern", "--metrics-listen", "127.0.0.1:0"]).await;
    let murl = metrics_url(&b).await;
    let c = client();
    b.wait_ready(Duration::from_secs(20)).await;

    // DELETE with the GET stream open.
    let s1 = Session::open(&c, &b.url).await;
    let mut g1 = open_get_stream(&s1).await;
    b.log.expect_count(STARTED, 1, METRIC_WAIT).await;
    delete(&s1).await;
    assert!(g1.ends_within(Duration::from_secs(20)).await);

    // A subscription re-issues the listen (the old one ends), then DELETE.
    let s2 = Session::open(&c, &b.url).await;
    let mut g2 = open_get_stream(&s2).await;
    b.log.expect_count(STARTED, 2, METRIC_WAIT).await;
    let r = s2
        .request(
            json!(1),
            "resources/subscribe",
            json!({"uri": "demo://readme"}),
        )
        .await;
    assert_eq!(r.result(), &json!({}), "{r:?}");
    b.log.expect_count(STARTED, 3, METRIC_WAIT).await;
    delete(&s2).await;
    assert!(g2.ends_within(Duration::from_secs(20)).await);

    // The client closes its GET stream, then ends the session.
    let s3 = Session::open(&c, &b.url).await;
    let g3 = open_get_stream(&s3).await;
    b.log.expect_count(STARTED, 4, METRIC_WAIT).await;
    drop(g3);
    b.log.expect_count(ENDED, 4, METRIC_WAIT).await;
    delete(&s3).await;

    // The child was told about every listen the bridge let go of; nothing was counted.
    let t = scrape(&c, &murl).await;
    assert_eq!(b.log.count(ENDED), 4, "log:\n{}", b.log.dump());
    assert_eq!(
        sample(
            &t,
            r#"mcp_bridge_cancellations_total{cause="client_disconnect"}"#
        ),
        Some(0.0),
        "{t}"
    );
    assert_eq!(
        metric_sum(&t, "mcp_bridge_cancellations_total", &[]),
        Some(0.0),
        "{t}"
    );
}
