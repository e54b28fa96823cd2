//! Connections are bounded, through the real binary on 127.0.0.1: a request head cut short is
//! closed at `--header-timeout`, a stalled upload gets 408 at `--body-timeout`, an idle
//! keep-alive connection is closed at `--http-idle-timeout` (and not at the header timeout),
//! `--max-connections` and `--max-streams` refuse with a counted 503 and `Retry-After`, a
//! legitimate request is answered while slow connections are held, `[limits]` in the
//! configuration file (and a bad key there is exit 78), HTTP/2 heads over HTTP/1's limits get
//! a counted 431, and the daemon router's own answers are counted.
//!
//! Every bound below is generous and shorter than the default it would fall back to, so that a
//! flag that is ignored fails the test.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read until the server closes the connection (bounded by `within`); what it wrote, or None
/// when it did not close in time.
async fn read_until_closed(s: &mut TcpStream, within: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + within;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Read one whole response head (bounded); the head's text.
async fn read_head(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !out.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(
            n > 0,
            "closed before a whole head: {:?}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.expect("connect")
}

fn series(route: &str, method: &str, status: &str) -> String {
    format!(
        r#"mcp_bridge_http_responses_total{{method="{method}",route="{route}",status="{status}"}}"#
    )
}

const HALF_HEAD: &[u8] = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

/// A head cut short and a connection that never sends anything are both closed at the header
/// timeout (1 s here; the default of 10 s would miss the 8 s bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_head_and_silent_connection_closed_at_header_timeout() {
    let b = Bridge::demo(&["--header-timeout", "1s"]).await;
    let mut half = connect(b.addr).await;
    half.write_all(HALF_HEAD).await.unwrap();
    let mut silent = connect(b.addr).await;
    for (what, s) in [("half head", &mut half), ("silent", &mut silent)] {
        let out = read_until_closed(s, Duration::from_secs(8)).await;
        assert_eq!(out.as_deref(), Some(""), "{what}: not closed in time");
    }
    // A keep-alive head that stalls after a first request is closed too.
    let mut ka = connect(b.addr).await;
    ka.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut ka).await.starts_with("HTTP/1.1 200"));
    ka.write_all(HALF_HEAD).await.unwrap();
    let out = read_until_closed(&mut ka, Duration::from_secs(8)).await;
    assert!(
        out.is_some(),
        "a stalled second head was not closed in time"
    );
}

/// A POST whose body stalls after one byte is answered 408 and closed at the body timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_body_gets_408_and_close() {
    let b = Bridge::demo(&["--body-timeout", "1s", "--metrics-listen", "127.0.0.1:0"]).await;
    let murl = metrics_url(&b).await;
    let mut s = connect(b.addr).await;
    s.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    let out = read_until_closed(&mut s, Duration::from_secs(20))
        .await
        .expect("the stalled upload was neither answered nor closed in time");
    assert!(out.starts_with("HTTP/1.1 408 "), "{out:?}");
    assert!(
        out.to_ascii_lowercase().contains("connection: close"),
        "{out:?}"
    );
    Scraper::at(&murl)
        .until_at_least(&series("mcp", "POST", "408"), 1.0)
        .await;
}

/// An idle keep-alive connection is closed at `--http-idle-timeout`; with a short header
/// timeout and a long idle one, a connection quiet between requests stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keepalive_closed_at_idle_timeout_not_header_timeout() {
    let b = Bridge::demo(&["--http-idle-timeout", "1s"]).await;
    let mut s = connect(b.addr).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    assert!(read_head(&mut s).await.starts_with("HTTP/1.1 200"));
    let out = read_until_closed(&mut s, Duration::from_secs(8)).await;
    assert!(out.is_some(), "the idle connection was not closed in time");
    drop(b);

    let b = Bridge::demo(&["--header-timeout", "1s", "--http-idle-timeout", "60s"]).await;
    let mut s = connect(b.addr).await;
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head:?}");
        // Quiet for three header timeouts: only the idle clock applies between requests.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Beyond `--max-connections`: `503` with `Retry-After`, counted under route
/// `connection_cap`; once a connection closes, newcomers are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_refuses_with_503_and_counts() {
    let b = Bridge::demo(&[
        "--max-connections",
        "2",
        "--header-timeout",
        "60s",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    let murl = metrics_url(&b).await;
    let c = client();
    let held = [connect(b.addr).await, connect(b.addr).await];
    let mut third = connect(b.addr).await;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let out = read_until_closed(&mut third, Duration::from_secs(20))
        .await
        .expect("the refused connection is closed");
    assert!(out.starts_with("HTTP/1.1 503 "), "{out:?}");
    assert!(out.contains("Retry-After: 1\r\n"), "{out:?}");
    Scraper::at(&murl)
        .until_at_least(&series("connection_cap", "other", "503"), 1.0)
        .await;
    drop(held);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c.get(b.endpoint("/healthz")).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(
            Instant::now() < until,
            "never served again after the cap freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Beyond `--max-streams` (an open SSE call holds one): `503` with `Retry-After`, counted under
/// route `stream_cap`, `/healthz` still answered; when the stream ends the next request is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_cap_refuses_with_503_and_counts() {
    let b = Bridge::demo(&[
        "--demo-era",
        "modern",
        "--max-streams",
        "1",
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    let murl = metrics_url(&b).await;
    let c = client();
    let slow = modern_tool_call_progress(
        json!(1),
        "slow",
        json!({"seconds": 600, "steps": 600}),
        json!("p1"),
    );
    let mut stream = open_modern_stream(&c, &b.url, &slow).await;
    stream
        .next(Duration::from_secs(20))
        .await
        .expect("a progress event: the stream is open");
    let echo = modern_tool_call(json!(2), "echo", json!({"text": "hi"}));
    let r = post_modern(&c, &b.url, &echo).await;
    assert_eq!(r.status, 503, "{:?}", r.messages);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    Scraper::at(&murl)
        .until_at_least(&series("stream_cap", "POST", "503"), 1.0)
        .await;
    // The liveness probe is not capped (busy is not dead); readiness is (a full listener reads
    // unready, so a balancer sends new work elsewhere).
    let live = c.get(b.endpoint("/healthz")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    let ready = c.get(b.endpoint("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    drop(stream);
    let r = echo_until_ok(&c, &b.url, "after", Duration::from_secs(20)).await;
    assert_eq!(r.status, 200);
}

/// 300 slow connections (half heads) do not keep a legitimate call from its answer, and are
/// all closed at the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legitimate_request_answered_while_slow_connections_held() {
    let _serial = serial().await;
    let b = Bridge::demo(&["--header-timeout", "3s"]).await;
    let c = client();
    echo_until_ok(&c, &b.url, "warm", Duration::from_secs(20)).await;
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = connect(b.addr).await;
        s.write_all(HALF_HEAD).await.unwrap();
        slow.push(s);
    }
    let r = call_modern(&c, &b.url, json!(7), "echo", json!({"text": "through"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.result()["content"][0]["text"], "through");
    for (i, s) in slow.iter_mut().enumerate() {
        let out = read_until_closed(s, Duration::from_secs(20)).await;
        assert_eq!(
            out.as_deref(),
            Some(""),
            "slow connection {i} not closed in time"
        );
    }
}

/// HTTP/2 (prior knowledge): a head over HTTP/1's field limit gets a 431 counted like
/// HTTP/1's; an ordinary HTTP/2 request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_oversize_head_gets_counted_431() {
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0"]).await;
    let murl = metrics_url(&b).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let ok = h2.get(b.endpoint("/healthz")).send().await.unwrap();
    assert_eq!(ok.version(), reqwest::Version::HTTP_2);
    assert_eq!(ok.status(), 200);
    let mut req = h2.get(b.endpoint("/healthz"));
    for i in 0..120 {
        req = req.header(format!("x-filler-{i}"), "v");
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 431);
    Scraper::at(&murl)
        .until_at_least(&series("other", "other", "431"), 1.0)
        .await;
}

/// The HTTP/2 head limit is the user's: with `--h2-max-header-list-size 8KiB` a 10 KB header
/// (well under the 64 KiB default) gets the counted 431 and a 2 KB one passes; the same key
/// under `[limits]` in a config file applies too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_header_list_limit_is_configurable() {
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let probe = |b: &Bridge, n: usize| {
        h2.get(b.endpoint("/healthz"))
            .header("x-filler", "v".repeat(n))
            .send()
    };
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0"]).await;
    assert_eq!(probe(&b, 10_000).await.unwrap().status(), 200, "default");
    drop(b);

    let b = Bridge::demo(&[
        "--metrics-listen",
        "127.0.0.1:0",
        "--h2-max-header-list-size",
        "8KiB",
    ])
    .await;
    let murl = metrics_url(&b).await;
    assert_eq!(probe(&b, 2_000).await.unwrap().status(), 200);
    assert_eq!(probe(&b, 10_000).await.unwrap().status(), 431);
    Scraper::at(&murl)
        .until_at_least(&series("other", "other", "431"), 1.0)
        .await;
    drop(b);

    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[limits]\nh2_max_header_list_size = \"8KiB\"\nh2_max_concurrent_streams = 4\n\
         h2_max_pending_resets = 10\n{}",
        demo_server("a", &[])
    );
    let b = daemon(&write(dir.path(), "h2.toml", &text)).await;
    assert_eq!(probe(&b, 2_000).await.unwrap().status(), 200);
    assert_eq!(probe(&b, 10_000).await.unwrap().status(), 431);
}

/// `[limits]` in the file applies to the listener (its header timeout closes a half head),
/// the router's own answers (health, 404) are counted, and listener keys in a server's own
/// table or unknown keys are exit 78 with their place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_limits_apply_and_bad_keys_are_78() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[metrics]\nlisten = \"127.0.0.1:0\"\n[limits]\nheader_timeout = \"1s\"\n\
         body_timeout = \"5s\"\nidle_timeout = \"30s\"\nmax_connections = 50\n\
         max_streams = 20\n{}{}",
        demo_server("a", &[]),
        demo_server("b", &[])
    );
    let cfg = write(dir.path(), "limits.toml", &text);
    let b = daemon(&cfg).await;
    let murl = metrics_url(&b).await;
    let c = client();
    let mut half = connect(b.addr).await;
    half.write_all(HALF_HEAD).await.unwrap();
    let out = read_until_closed(&mut half, Duration::from_secs(8)).await;
    assert_eq!(
        out.as_deref(),
        Some(""),
        "[limits] header_timeout not applied"
    );
    assert_eq!(
        c.get(b.endpoint("/healthz")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        c.get(b.endpoint("/nowhere")).send().await.unwrap().status(),
        404
    );
    Scraper::at(&murl)
        .until_at_least(&series("health", "GET", "200"), 1.0)
        .await;
    Scraper::at(&murl)
        .until_at_least(&series("other", "GET", "404"), 1.0)
        .await;

    let check = |name: &str, text: &str| {
        let p = write(dir.path(), name, text);
        let out = Bridge::builder()
            .no_log_level()
            .sub(["check-config"])
            .arg(&p)
            .run(Duration::from_secs(30));
        (
            p,
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (p, code, err) = check(
        "typo.toml",
        &format!("[limits]\nmax_conections = 5\n{}", demo_server("a", &[])),
    );
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains(&format!("{}:2:1:", p.display())), "{err}");
    assert!(err.contains("max_conections"), "{err}");
    let (_, code, err) = check(
        "per_server.toml",
        &format!(
            "{}[servers.a.limits]\nmax_streams = 3\n",
            demo_server("a", &[])
        ),
    );
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("max_streams") && err.contains("global [limits]"),
        "{err}"
    );
    let (_, code, err) = check(
        "good.toml",
        &format!(
            "[limits]\nheader_timeout = \"2s\"\nmax_streams = 3\n{}",
            demo_server("a", &[])
        ),
    );
    assert_eq!(code, Some(0), "{err}");
}
