//! HTTP/2 limits of the README (`--h2-max-concurrent-streams`, `--h2-max-pending-resets`),
//! with the `h2` crate as the client over cleartext HTTP/2 (prior knowledge): the stream limit
//! is what the bridge advertises in its SETTINGS, and a client that opens streams and resets
//! them at once (the "rapid reset" flood, CVE-2023-44487) has its connection closed with
//! GOAWAY `ENHANCE_YOUR_CALM` while other connections are served on.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use support::*;

const T: Duration = Duration::from_secs(20);

/// An HTTP/2 connection to the bridge: the request handle and the connection's task (which
/// ends with the connection's error, if any).
async fn h2_to(
    b: &Bridge,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tcp = tokio::net::TcpStream::connect(b.addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    (send, tokio::spawn(conn))
}

fn healthz(b: &Bridge) -> http::Request<()> {
    http::Request::get(b.endpoint("/healthz")).body(()).unwrap()
}

/// One GET /healthz on `send`: its status.
async fn get(send: &mut h2::client::SendRequest<Bytes>, b: &Bridge) -> u16 {
    let ready = send.clone().ready().await.expect("stream slot");
    *send = ready;
    let (resp, _) = send.send_request(healthz(b), true).expect("send");
    tokio::time::timeout(T, resp)
        .await
        .expect("an answer")
        .expect("a response")
        .status()
        .as_u16()
}

/// The bridge advertises `--h2-max-concurrent-streams` (default 100) as
/// SETTINGS_MAX_CONCURRENT_STREAMS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_limit_is_advertised() {
    for (flags, want) in [
        (&["--h2-max-concurrent-streams", "3"][..], 3),
        (&[][..], 100),
    ] {
        let b = Bridge::demo(flags).await;
        b.wait_ready(T).await;
        let (mut send, _conn) = h2_to(&b).await;
        // After a round trip the server's SETTINGS are in.
        assert_eq!(get(&mut send, &b).await, 200);
        assert_eq!(send.current_max_send_streams(), want, "{flags:?}");
    }
}

/// Open a stream and reset it at once, `n` times, as fast as the client can.
async fn rapid_resets(send: &mut h2::client::SendRequest<Bytes>, b: &Bridge, n: usize) {
    for _ in 0..n {
        let Ok(ready) = send.clone().ready().await else {
            return; // the connection is gone
        };
        *send = ready;
        match send.send_request(healthz(b), false) {
            Ok((resp, mut body)) => {
                body.send_reset(h2::Reason::CANCEL);
                drop(resp);
            }
            Err(_) => return,
        }
    }
}

/// More resets than `--h2-max-pending-resets` before the bridge serves them: GOAWAY
/// ENHANCE_YOUR_CALM for that connection; a new connection is served at once. A client
/// within the limit keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rapid_reset_flood_closes_that_connection_only() {
    let b = Bridge::demo(&["--h2-max-pending-resets", "5"]).await;
    b.wait_ready(T).await;

    let (mut calm, calm_conn) = h2_to(&b).await;
    rapid_resets(&mut calm, &b, 3).await;
    assert_eq!(get(&mut calm, &b).await, 200, "3 resets are within 5");

    let (mut flood, conn) = h2_to(&b).await;
    rapid_resets(&mut flood, &b, 2000).await;
    let ended = tokio::time::timeout(T, conn)
        .await
        .expect("the flooding connection was not closed")
        .unwrap();
    let e = ended.expect_err("the connection ended without an error");
    // The bridge sends GOAWAY ENHANCE_YOUR_CALM and closes; a client still writing its flood
    // may see the closed socket (broken pipe, reset) before it reads the GOAWAY. Either way
    // the bridge must have closed it for the flood: its h2 layer logs the limit it hit.
    let log = b.log.dump();
    if e.is_io() {
        assert!(
            log.contains("pending-accept streams reached limit (5)"),
            "{e}: the connection failed, but not for the reset limit; log:\n{log}"
        );
    } else {
        assert_eq!(
            e.reason(),
            Some(h2::Reason::ENHANCE_YOUR_CALM),
            "{e}; log:\n{log}"
        );
        assert!(e.is_go_away(), "{e}");
    }

    // The bridge serves on: the calm connection and a new one.
    assert_eq!(get(&mut calm, &b).await, 200);
    let (mut fresh, _c) = h2_to(&b).await;
    assert_eq!(get(&mut fresh, &b).await, 200);
    assert!(!calm_conn.is_finished());
}
