//! The Streamable HTTP face's front door: accepts connections (TLS, HTTP/1.1 and HTTP/2),
//! guards them (Host, Origin), authenticates, and routes each request: the MCP endpoint by
//! method (POST to `post`, GET and DELETE to the 2025 session endpoints in `session_http`),
//! health, and `/metrics` when it shares the listener. It also counts the answers hyper writes
//! on its own, and sweeps idle sessions.
//!
//! It is the top of the face's module tree: it reaches down to the handlers and the state,
//! and nothing in the face reaches up to it. `App` and `HttpConfig` live in `state` and are
//! re-exported here, the path the daemon, the config and the CLI know them by.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::auth::http as auth;
use crate::face::metrics_http;
use crate::face::respond::{self, rpc_error, status_only, Body};
use crate::face::session_http::{delete, get_stream};
use crate::jsonrpc::code;
use crate::metrics::Metrics;

pub use crate::face::state::{App, HttpConfig};

const ROUTE_MCP: &str = "mcp";
const ROUTE_HEALTH: &str = "health";
const ROUTE_OTHER: &str = "other";

/// Serve connections from `listener` until `stopping` is cancelled, then drain in-flight
/// requests for up to `grace` before returning.
pub async fn serve(listener: TcpListener, app: Arc<App>, grace: Duration) {
    spawn_sweeper(&app);
    let (tls, stopping) = (app.cfg.tls.clone(), app.stopping.clone());
    let a = app.clone();
    let metrics = app.metrics.clone();
    let drained = accept_loop(listener, tls, stopping, grace, metrics, move |req, peer| {
        handle(a.clone(), req, peer)
    })
    .await;
    if !drained {
        warn!("shutdown grace period over; cancelling remaining calls");
    }
    app.sessions.close_all();
}

/// Accept connections on `listener` (TLS when `tls` is set; HTTP/1.1 and HTTP/2) and answer
/// each request with `handler` until `stopping` is cancelled; then let open connections finish
/// for up to `grace`. True when they all finished in time. Shared by `serve` and the daemon.
/// Answers written below `handler` (hyper's own, see [`hyper_answer`]) are counted in `metrics`.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    tls: Option<Arc<crate::auth::tls::Tls>>,
    stopping: CancellationToken,
    grace: Duration,
    metrics: Arc<Metrics>,
    handler: F,
) -> bool
where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopping.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let h = handler.clone();
        let svc = hyper::service::service_fn(move |req| {
            let fut = h(req, peer);
            async move { Ok::<_, std::convert::Infallible>(fut.await) }
        });
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let metrics = metrics.clone();
        match tls.clone() {
            Some(tls) => {
                tokio::spawn(async move {
                    let Some(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        connection_failed(&metrics, &*e);
                    }
                });
            }
            None => {
                tokio::spawn(async move {
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                    if let Err(e) = watcher.watch(conn.into_owned()).await {
                        connection_failed(&metrics, &*e);
                    }
                });
            }
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => { info!("all connections drained"); true }
        _ = tokio::time::sleep(grace) => false,
    }
}

/// A connection ended in an error: count the answer hyper wrote on it itself, if it wrote one.
fn connection_failed(metrics: &Metrics, e: &(dyn std::error::Error + 'static)) {
    if let Some(status) = hyper_answer(e) {
        metrics.http_connection_response(status);
    }
    debug!("connection ended: {e}");
}

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

/// Expire idle 2025 sessions and abandoned parked calls until `app.stopping` is cancelled.
pub fn spawn_sweeper(app: &Arc<App>) {
    let app = app.clone();
    app.tracker.clone().spawn(async move {
        let every =
            (app.cfg.session_idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = app.stopping.cancelled() => break,
            }
            for p in app.parked.take_expired() {
                let mut h = p.handle;
                h.set_cancel_reason("timeout");
                info!(method = %p.method, "a call waiting for client input expired; cancelled");
            }
            let n = app.sessions.expire(app.cfg.session_idle);
            if n > 0 {
                info!(expired = n, "idle sessions expired");
            }
        }
    });
}

/// Answer one request for `app` (whose `cfg.path` is the MCP endpoint); public so that a
/// router in front of several apps (`daemon::router`) can hand requests over.
pub async fn handle(
    app: Arc<App>,
    mut req: Request<Incoming>,
    _peer: SocketAddr,
) -> Response<Body> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = if path == app.cfg.path {
        ROUTE_MCP
    } else if path == "/healthz" || path == "/readyz" {
        ROUTE_HEALTH
    } else if app.cfg.metrics_on_main && path == "/metrics" {
        metrics_http::ROUTE
    } else {
        ROUTE_OTHER
    };
    let origin = req.headers().get(header::ORIGIN).cloned();
    let mut resp = match guard(&app, req.headers()) {
        Err(r) => r,
        Ok(()) => match auth::front(
            &app.cfg,
            &app.metrics,
            &mut req,
            route == ROUTE_MCP || route == metrics_http::ROUTE,
        )
        .await
        {
            auth::Front::Respond(r) => r,
            auth::Front::Pass(caller) => match route {
                ROUTE_MCP => {
                    let span = auth::span(&caller);
                    if let Some(c) = caller {
                        // Who asked, for binding state the bridge hands out (requestState).
                        req.extensions_mut().insert(c);
                    }
                    mcp(&app, req, started).instrument(span).await
                }
                ROUTE_HEALTH => health(&app, &path),
                metrics_http::ROUTE => metrics_http::exposition(&app.metrics, &method),
                _ => status_only(StatusCode::NOT_FOUND),
            },
        },
    };
    auth::cors(&app.cfg, origin.as_ref(), &mut resp);
    if matches!(
        resp.status(),
        StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::FORBIDDEN
            | StatusCode::UNAUTHORIZED
            | StatusCode::UNSUPPORTED_MEDIA_TYPE
            | StatusCode::NOT_ACCEPTABLE
    ) {
        // Answered without reading the whole body: the connection cannot be reused.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    app.metrics
        .http_response(route, method.as_str(), resp.status().as_u16());
    app.metrics
        .http_duration(route, method.as_str(), started.elapsed().as_secs_f64());
    resp
}

fn health(app: &App, path: &str) -> Response<Body> {
    if path == "/healthz" {
        return respond::json(StatusCode::OK, Bytes::from_static(b"{\"status\":\"ok\"}"));
    }
    if app.upstream.is_ready() {
        respond::json(
            StatusCode::OK,
            Bytes::from_static(b"{\"status\":\"ready\"}"),
        )
    } else {
        let body = json!({"status": "not ready", "down": [&*app.server]}).to_string();
        respond::json(StatusCode::SERVICE_UNAVAILABLE, Bytes::from(body))
    }
}

/// DNS-rebinding and cross-origin protection.
fn guard(app: &App, h: &HeaderMap) -> Result<(), Response<Body>> {
    if app.cfg.loopback_only_host {
        let host = h
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !host.is_empty() && !is_loopback_host(host) {
            return Err(rpc_error(
                StatusCode::FORBIDDEN,
                None,
                code::INVALID_REQUEST,
                "Forbidden: Host header is not a loopback name (DNS rebinding protection)",
                None,
            ));
        }
    }
    if let Some(origin) = h.get(header::ORIGIN) {
        let o = origin.to_str().unwrap_or("");
        if !origin_allowed(&app.cfg, o) {
            return Err(rpc_error(
                StatusCode::FORBIDDEN,
                None,
                code::INVALID_REQUEST,
                "Forbidden: Origin not allowed",
                None,
            ));
        }
    }
    Ok(())
}

fn strip_port(hostport: &str) -> &str {
    if let Some(rest) = hostport.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    hostport.rsplit_once(':').map_or(hostport, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            hostport
        }
    })
}

pub fn is_loopback_host(hostport: &str) -> bool {
    let h = strip_port(hostport);
    const SUFFIX: &str = ".localhost";
    h.eq_ignore_ascii_case("localhost")
        || h == "127.0.0.1"
        || h == "::1"
        || (h.len() > SUFFIX.len()
            && h.is_char_boundary(h.len() - SUFFIX.len())
            && h[h.len() - SUFFIX.len()..].eq_ignore_ascii_case(SUFFIX))
}

pub fn origin_allowed(cfg: &HttpConfig, origin: &str) -> bool {
    if origin == "null" {
        return cfg.allow_origins.iter().any(|a| a == "null");
    }
    for a in &cfg.allow_origins {
        if a == "*" || a.eq_ignore_ascii_case(origin) {
            return true;
        }
        if let Some(suffix) = a.strip_prefix("*.") {
            let host = origin.split("://").nth(1).map(strip_port).unwrap_or("");
            if host.len() > suffix.len()
                && host.ends_with(suffix)
                && host[..host.len() - suffix.len()].ends_with('.')
            {
                return true;
            }
        }
    }
    // Loopback pages may talk to a loopback bridge.
    cfg.loopback_only_host
        && origin
            .split("://")
            .nth(1)
            .map(is_loopback_host)
            .unwrap_or(false)
}

/// The MCP endpoint, by method.
async fn mcp(app: &Arc<App>, req: Request<Incoming>, arrived: Instant) -> Response<Body> {
    match *req.method() {
        Method::POST => crate::face::post::post(app, req, arrived).await,
        Method::GET => get_stream(app, req.headers()).await,
        Method::DELETE => delete(app, req.headers()),
        _ => {
            let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED);
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "LocalHost:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "a.localhost",
            "A.LOCALHOST:9",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "example.com",
            "localhost.evil",
            "127.0.0.2",
            "xlocalhost",
            ".localhost",
            "é.localhosté",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    type ConnEnd = Option<Box<dyn std::error::Error + Send + Sync>>;

    /// Feed `input` to a real hyper connection (the builder `accept_loop` uses), then close the
    /// write side if `close`; returns what hyper wrote back and how the connection ended.
    async fn hyper_on(input: Vec<u8>, close: bool) -> (String, ConnEnd) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(1 << 23);
        let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, std::convert::Infallible>(status_only(StatusCode::OK))
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
