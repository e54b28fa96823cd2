//! The Streamable HTTP face's front door for one app: guards each request (Host, Origin),
//! authenticates, and routes it: the MCP endpoint by method (POST to `post`, GET and DELETE to
//! the 2025 session endpoints in `session_http`), health, and `/metrics` when it shares the
//! listener. It also sweeps idle sessions. Connections (TLS, HTTP/1.1 and HTTP/2, their limits)
//! are `accept`'s: it hands requests here through the daemon's router.
//!
//! It is the top of the face's module tree: it reaches down to the handlers and the state,
//! and nothing in the face reaches up to it. `App` and `HttpConfig` live in `state` and are
//! re-exported here, the path the daemon, the config and the CLI know them by.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use serde_json::json;
use tracing::{info, Instrument};

use crate::auth::http as auth;
use crate::face::accept::ReqBody;
use crate::face::metrics_http;
use crate::face::respond::{self, rpc_error, status_only, Body};
use crate::face::session_http::{delete, get_stream};
use crate::jsonrpc::code;

pub use crate::face::state::{App, HttpConfig};

const ROUTE_MCP: &str = "mcp";
const ROUTE_HEALTH: &str = "health";
const ROUTE_OTHER: &str = "other";

/// Expire idle 2025 sessions and abandoned parked calls until `app.stopping` is cancelled.
pub fn spawn_sweeper(app: &Arc<App>) {
    let app = app.clone();
    app.tracker.clone().spawn(async move {
        // Often enough for both deadlines (a short --park-timeout is swept soon after).
        let every = (app.cfg.session_idle.min(app.cfg.park_timeout) / 4)
            .clamp(Duration::from_millis(200), Duration::from_secs(30));
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
pub async fn handle(app: Arc<App>, mut req: Request<ReqBody>, _peer: SocketAddr) -> Response<Body> {
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
            | StatusCode::REQUEST_TIMEOUT
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
    if app.stopping.is_cancelled() {
        // Draining (SIGTERM): take this process out of rotation.
        return respond::json(
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(b"{\"status\":\"stopping\"}"),
        );
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
async fn mcp(app: &Arc<App>, req: Request<ReqBody>, arrived: Instant) -> Response<Body> {
    if matches!(*req.method(), Method::GET | Method::DELETE) {
        let m = req.method().clone();
        if let Some(r) =
            crate::face::hop::by_session(app, m, req.headers(), Bytes::new(), None).await
        {
            return r;
        }
    }
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
}
