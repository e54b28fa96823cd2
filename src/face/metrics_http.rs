//! The Prometheus exposition endpoint: `GET /metrics` in the text format, on its own listener
//! (`--metrics-listen ADDR`) and, with `--metrics-on-main`, on the main one as well. Also
//! `hyper_answer`: which answers hyper wrote on its own, counted by both listeners (it sits
//! here, below the main listener in `http`, so that neither reaches up into the other).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::face::respond::{self, Body};
use crate::metrics::Metrics;

/// The `route` label of metrics requests.
pub const ROUTE: &str = "metrics";

/// The status hyper 1 answered with on its own before closing a connection with `e`, if it
/// did (`Server::on_error` in hyper's `proto::h1::role`): 431 for a request head over its
/// limits (more than 100 headers, or larger than the read buffer), 414 for a URI over 65,534
/// bytes, 400 for any other head it cannot parse (request line, header syntax,
/// `Content-Length`, `Transfer-Encoding`). It writes nothing for an HTTP/2 preface on an HTTP/1
/// connection, for its internal parse errors, nor for I/O errors, timeouts or HTTP/2 errors.
pub fn hyper_answer(e: &(dyn std::error::Error + 'static)) -> Option<u16> {
    let mut cur = Some(e);
    let h = loop {
        let c = cur?;
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            break h;
        }
        cur = c.source();
    };
    if !h.is_parse() || h.is_parse_version_h2() || h.is_parse_status() {
        return None;
    }
    // Only the message tells these kinds apart (hyper's predicates group them).
    let what = h.to_string();
    if h.is_parse_too_large() {
        return Some(if what == "URI too long" { 414 } else { 431 });
    }
    if what.starts_with("internal error") {
        return None;
    }
    Some(400)
}

/// `GET` (or `HEAD`) → the text exposition; other methods → 405.
pub fn exposition(m: &Metrics, method: &Method) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        let mut r = respond::status_only(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(m.render())
    };
    let mut r = Response::new(respond::full(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn answer(m: &Metrics, req: &Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let (route, resp) = if req.uri().path() == "/metrics" {
        (ROUTE, exposition(m, req.method()))
    } else {
        ("other", respond::status_only(StatusCode::NOT_FOUND))
    };
    m.http_response(route, req.method().as_str(), resp.status().as_u16());
    m.http_duration(
        route,
        req.method().as_str(),
        started.elapsed().as_secs_f64(),
    );
    resp
}

/// Serve `/metrics` on `listener` until `stop` is cancelled; returns once every connection
/// it served has ended (each ends at `stop`).
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, stop: CancellationToken) {
    let conns = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors, mostly: back off a little (or stop).
                    warn!("metrics listener: accept failed: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                        _ = stop.cancelled() => break,
                    }
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        conns.spawn(serve_conn(stream, metrics.clone(), stop.clone()));
    }
    conns.close();
    conns.wait().await;
}

/// One metrics connection, until it ends or `stop`.
async fn serve_conn(stream: tokio::net::TcpStream, m: Arc<Metrics>, stop: CancellationToken) {
    let m2 = m.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let m = m.clone();
        async move { Ok::<_, std::convert::Infallible>(answer(&m, &req)) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10))
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        r = conn => if let Err(e) = r {
            if let Some(status) = hyper_answer(&e) {
                m2.http_connection_response(status);
            }
            debug!("metrics connection ended: {e}");
        },
        _ = stop.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use hyper_util::rt::TokioExecutor;

    use super::*;

    type ConnEnd = Option<Box<dyn std::error::Error + Send + Sync>>;

    /// Feed `input` to a real hyper connection (the builder `http::accept_loop` uses), then close the
    /// write side if `close`; returns what hyper wrote back and how the connection ended.
    async fn hyper_on(input: Vec<u8>, close: bool) -> (String, ConnEnd) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1 << 23);
        let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, std::convert::Infallible>(respond::status_only(StatusCode::OK))
        });
        let conn = tokio::spawn(async move {
            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(server), svc)
                .await
        });
        client.write_all(&input).await.unwrap();
        if close {
            client.shutdown().await.unwrap();
        }
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.unwrap();
        let ended = conn.await.unwrap();
        (String::from_utf8_lossy(&out).into_owned(), ended.err())
    }

    /// `hyper_answer` names exactly the status this hyper version wrote itself.
    #[tokio::test]
    async fn hyper_answer_matches_what_hyper_wrote() {
        let mut many = b"GET /mcp HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..101 {
            many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let mut big = b"GET /mcp HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        big.resize(big.len() + 2_000_000, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        let mut long_uri = b"GET /".to_vec();
        long_uri.resize(long_uri.len() + 70_000, b'a');
        long_uri.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        let cases: Vec<(&str, Vec<u8>, u16)> = vec![
            ("too many headers", many, 431),
            ("a head over the read buffer", big, 431),
            ("a long URI", long_uri, 414),
            (
                "a bad Content-Length",
                b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_vec(),
                400,
            ),
            (
                "a bad Transfer-Encoding",
                b"POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(),
                400,
            ),
            (
                "a garbage request line",
                b"THIS IS NOT HTTP\r\n\r\n".to_vec(),
                400,
            ),
            ("control bytes", b"\x01\x02\x03\r\n\r\n".to_vec(), 400),
            (
                "a bad header name",
                b"GET /mcp HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n".to_vec(),
                400,
            ),
        ];
        for (what, input, want) in cases {
            let (out, err) = hyper_on(input, false).await;
            let wrote: Option<u16> = out
                .strip_prefix("HTTP/1.1 ")
                .and_then(|r| r.get(..3))
                .and_then(|c| c.parse().ok());
            assert_eq!(
                wrote,
                Some(want),
                "{what}: hyper wrote {out:?}, ended with {err:?}"
            );
            let err = err.unwrap_or_else(|| panic!("{what}: the connection ended without error"));
            assert_eq!(hyper_answer(&*err), Some(want), "{what}: {err}");
        }
        // A head cut short: hyper writes nothing, and nothing is counted.
        let (out, err) = hyper_on(b"GET /mcp HTTP/1.1\r\nHost: x\r\n".to_vec(), true).await;
        assert_eq!(out, "");
        let err = err.expect("a head cut short is a connection error");
        assert_eq!(hyper_answer(&*err), None, "{err}");
        let io: Box<dyn std::error::Error + Send + Sync> = Box::new(std::io::Error::other("x"));
        assert_eq!(hyper_answer(&*io), None);
    }
}
