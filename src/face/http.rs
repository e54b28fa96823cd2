//! The Streamable HTTP face: accepts connections, guards them (Host, Origin, body size), and
//! routes each POST to the 2026 stateless path or the 2025 session path; GET opens a 2025
//! session stream; DELETE ends a session. Health endpoints live here too.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use crate::auth::http as auth;

use crate::call::{Call, CallCtx};
use crate::call::{CallHandle, SharedUpstream, UpstreamEvent, UpstreamInfo};
use crate::face::metrics_http;
use crate::face::observe::{self, answered};
use crate::face::respond::{self, rpc_error, status_only, Body, Responder};
use crate::face::session::{mint_id, InflightGuard, Session, Sessions};
use crate::framing;
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};
use crate::upstream::SessionSpawner;

/// How one HTTP face behaves.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub path: String,
    /// Exact origins allowed besides loopback ones (`*` allows all; `*.example.com` a suffix).
    pub allow_origins: Vec<String>,
    /// Check `Host` against loopback names (set when bound to a loopback address).
    pub loopback_only_host: bool,
    pub max_body: usize,
    pub call_timeout: Duration,
    /// How long a call waits for a (re)starting child.
    pub start_wait: Duration,
    pub session_idle: Duration,
    pub max_sessions: usize,
    pub isolation_session: bool,
    pub keepalive: Duration,
    /// Authentication on the MCP endpoint (none: open).
    pub auth: crate::auth::AuthSlot,
    /// TLS termination (none: plain HTTP).
    pub tls: Option<Arc<crate::auth::tls::Tls>>,
    /// Also serve `/metrics` on this listener (behind the same guards).
    pub metrics_on_main: bool,
}

/// Shared state of the face.
pub struct App {
    pub cfg: HttpConfig,
    pub server: Arc<str>,
    pub upstream: SharedUpstream,
    /// Starts a child of its own for a 2025 session (`--isolation session`).
    pub spawn_for_session: Option<SessionSpawner>,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    /// Cancelled when shutdown begins: long-lived streams end, calls may still finish.
    pub stopping: CancellationToken,
    /// Cancelled when children must stop (after the drain).
    pub children: CancellationToken,
    pub tracker: TaskTracker,
    /// 2026 clients' calls to a 2025 child, parked while the client gathers input.
    pub parked: Arc<crate::mrtr::ParkStore<CallHandle>>,
    pub signer: Arc<crate::mrtr::StateSigner>,
    /// The shared child's resource subscriptions held for 2026 listeners.
    pub resource_subs: Arc<crate::notifications::ResourceSubs>,
}

impl App {
    /// An app for one server: spawns its shared child on `tracker`; the child stops when
    /// `children` is cancelled. Fails (with a message for the operator) when the upstream
    /// cannot be set up.
    pub fn start(
        name: &str,
        cfg: HttpConfig,
        upstream: crate::upstream::UpstreamSpec,
        metrics: Arc<Metrics>,
        stopping: CancellationToken,
        children: CancellationToken,
        tracker: TaskTracker,
    ) -> Result<Arc<App>, String> {
        let launched = crate::upstream::launch(name, upstream, &metrics, &children, &tracker)?;
        let spawn_for_session = match (cfg.isolation_session, launched.spawn_for_session) {
            (false, _) => None,
            (true, Some(s)) => Some(s),
            (true, None) => {
                return Err(
                    "isolation = \"session\" needs a child process (a remote is shared)".into(),
                )
            }
        };
        Ok(Arc::new(App {
            server: Arc::from(name),
            cfg,
            upstream: launched.shared,
            spawn_for_session,
            sessions: Sessions::default(),
            metrics,
            stopping,
            children,
            tracker,
            parked: Arc::new(crate::mrtr::ParkStore::new(10_000)),
            signer: Arc::new(crate::mrtr::StateSigner::new()),
            resource_subs: Arc::default(),
        }))
    }
}

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

fn accepts(h: &HeaderMap) -> (bool, bool) {
    let Some(a) = h.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return (true, true);
    };
    // Media types are case-insensitive; lower-case only the rare header that needs it.
    let lowered;
    let a = if a.bytes().any(|b| b.is_ascii_uppercase()) {
        lowered = a.to_ascii_lowercase();
        lowered.as_str()
    } else {
        a
    };
    let any = a.contains("*/*");
    (
        any || a.contains("application/json") || a.contains("application/*"),
        any || a.contains("text/event-stream") || a.contains("text/*"),
    )
}

fn header_str<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

async fn mcp(app: &Arc<App>, req: Request<Incoming>, arrived: Instant) -> Response<Body> {
    match *req.method() {
        Method::POST => post(app, req, arrived).await,
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

async fn post(app: &Arc<App>, req: Request<Incoming>, arrived: Instant) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let h = parts.headers;
    if let Some(ct) = header_str(&h, header::CONTENT_TYPE.as_str()) {
        if !ct
            .get(..16)
            .is_some_and(|p| p.eq_ignore_ascii_case("application/json"))
        {
            return rpc_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                code::INVALID_REQUEST,
                "Content-Type must be application/json",
                None,
            );
        }
    }
    let (accept_json, accept_sse) = accepts(&h);
    if !accept_json && !accept_sse {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            code::INVALID_REQUEST,
            "Accept must include application/json and text/event-stream",
            None,
        );
    }
    let bytes = match Limited::new(body, app.cfg.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return rpc_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    None,
                    code::INVALID_REQUEST,
                    &format!("request body exceeds {} bytes", app.cfg.max_body),
                    None,
                );
            }
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::PARSE_ERROR,
                "could not read the request body",
                None,
            );
        }
    };
    let env = match Envelope::parse(&bytes) {
        Ok(e) => e,
        Err(jsonrpc::FrameError::Batch) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "JSON-RPC batches are not supported by mcp-bridge: send one message per POST",
                None,
            )
        }
        Err(jsonrpc::FrameError::Json(e)) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::PARSE_ERROR,
                &format!("Parse error: {e}"),
                None,
            )
        }
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                &e.to_string(),
                None,
            )
        }
    };
    let kind = match env.kind() {
        Ok(k) => k,
        Err(e) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                env.id.map(RawValue::get),
                code::INVALID_REQUEST,
                &e.to_string(),
                None,
            )
        }
    };
    let principal = parts
        .extensions
        .get::<crate::auth::Caller>()
        .map_or_else(|| "anonymous".to_owned(), |c| format!("caller:{}", c.name));
    let view = if kind == Kind::Response {
        jsonrpc::ParamsView::default()
    } else {
        jsonrpc::ParamsView::parse(env.params)
    };
    let ctx = PostCtx {
        principal,
        headers: &h,
        env: &env,
        view,
        kind,
        body: &bytes,
        accept_json,
        accept_sse,
        arrived,
    };
    let pv_header = header_str(&h, protocol::H_PROTOCOL_VERSION);
    let method = env.method();
    observe::received(app, kind, method);
    if method == "initialize" {
        return answered(app, method, initialize(app, &ctx).await);
    }
    let has_modern_meta =
        kind == Kind::Request && ctx.view.meta(protocol::META_PROTOCOL_VERSION).is_some();
    if pv_header == Some(protocol::MODERN) || has_modern_meta {
        let r = crate::face::modern::handle(app, &ctx).await;
        return answered(app, method, r);
    }
    if let Some(sid) = header_str(&h, protocol::H_SESSION_ID) {
        return answered(app, method, legacy(app, &ctx, sid).await);
    }
    if let Some(v) = pv_header {
        if !protocol::is_legacy_version(v) {
            let r = rpc_error(
                StatusCode::BAD_REQUEST,
                env.id.map(RawValue::get),
                code::UNSUPPORTED_PROTOCOL_VERSION,
                &format!("Unsupported protocol version: {v}"),
                Some(&json!({"supported": protocol::ALL_VERSIONS, "requested": v})),
            );
            return answered(app, method, r);
        }
    }
    let r = rpc_error(
        StatusCode::BAD_REQUEST,
        env.id.map(RawValue::get),
        code::INVALID_REQUEST,
        "Bad Request: Mcp-Session-Id header is required (send initialize first), or send a 2026-07-28 request with _meta",
        None,
    );
    answered(app, method, r)
}

/// One POST, parsed.
pub struct PostCtx<'a> {
    /// The authenticated caller ("anonymous" without authentication).
    pub principal: String,
    pub headers: &'a HeaderMap,
    pub env: &'a Envelope<'a>,
    /// `params` and `_meta` of a request or notification, parsed once.
    pub view: jsonrpc::ParamsView<'a>,
    pub kind: Kind,
    pub body: &'a Bytes,
    pub accept_json: bool,
    pub accept_sse: bool,
    /// When the request reached the face: a call's duration and deadline count from here.
    pub arrived: Instant,
}

/// "No deadline" for open-ended streams, as a far but representable instant (~30 years).
const LISTEN_NO_DEADLINE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// A `tools/call`'s tool name from params parsed already.
pub fn tool_name(method: &str, view: &jsonrpc::ParamsView<'_>) -> Option<Box<str>> {
    if method != "tools/call" {
        return None;
    }
    let v = view.get("name")?;
    serde_json::from_str::<Box<str>>(v.get()).ok()
}

impl App {
    /// Run a call and answer the POST with JSON or SSE.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_call(
        &self,
        upstream: &SharedUpstream,
        pc: &PostCtx<'_>,
        method: &str,
        params: Option<Box<RawValue>>,
        ctx: CallCtx,
        cancel: CancellationToken,
        session: Option<Arc<Session>>,
        on_done: Option<InflightGuard>,
        mrtr: Option<respond::MrtrCtx>,
    ) -> Response<Body> {
        let started = pc.arrived;
        let id = pc.env.id.map(RawValue::get).unwrap_or("null");
        let span = crate::telemetry::call_span(&self.server, method, id);
        let params = crate::telemetry::with_trace_context(pc.headers, params);
        let client_era = ctx.client_era;
        let orig_token = pc.view.meta("progressToken").map(|t| t.to_owned());
        let call = Call {
            method: method.to_owned(),
            params,
            ctx,
        };
        // In flight from here (the responder holds the gauge) until the final answer.
        let mut r = self.responder(pc, method, client_era, cancel, started);
        let mut handle = match upstream.call(call, self.cfg.start_wait).await {
            Ok(h) => h,
            Err(e) => {
                span.in_scope(|| debug!("upstream unavailable: {e}"));
                self.metrics
                    .rpc_error(&self.server, method, code::UPSTREAM_UNAVAILABLE, "bridge");
                return respond::json(
                    StatusCode::OK,
                    jsonrpc::error_raw(Some(id), &e.error_object()),
                );
            }
        };
        if client_era == Era::Legacy {
            // A 2025 client's dropped connection is not a cancellation.
            handle.detach_until(started + self.cfg.call_timeout);
        }
        if method == "subscriptions/listen" {
            // A listen is open-ended: no call timeout (it ends with the client or shutdown).
            r.deadline = started + LISTEN_NO_DEADLINE;
        }
        r.orig_token = orig_token;
        r.server_requests = session.map(|s| s as Arc<dyn respond::ServerRequestSink>);
        r.on_done = on_done.map(|mut g| {
            g.detached = Some((handle.canceller(), started + self.cfg.call_timeout));
            Box::new(g) as Box<dyn Send + Sync>
        });
        r.mrtr = mrtr;
        crate::telemetry::record_upstream_id(&span, handle.upstream_id());
        tracing::Instrument::instrument(r.respond(handle), span).await
    }

    /// A responder for the POST `pc`, with the defaults every call shares.
    pub fn responder(
        &self,
        pc: &PostCtx<'_>,
        method: &str,
        client_era: Era,
        cancel: CancellationToken,
        started: Instant,
    ) -> Responder {
        Responder {
            metrics: self.metrics.clone(),
            server: self.server.clone(),
            method: method.to_owned(),
            orig_id: jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null")),
            orig_token: None,
            client_era,
            accept_json: pc.accept_json,
            accept_sse: pc.accept_sse,
            deadline: started + self.cfg.call_timeout,
            timeout: self.cfg.call_timeout,
            cancel,
            keepalive: self.cfg.keepalive,
            server_requests: None,
            extra_headers: Vec::new(),
            started,
            on_done: None,
            mrtr: None,
            // An open-ended listen is not a call waiting for an answer (it is an SSE stream).
            inflight: (method != "subscriptions/listen")
                .then(|| respond::GaugeGuard::new(self.metrics.calls_in_flight().clone())),
        }
    }
}

/// `_meta` a 2025 client's calls carry to a 2026 child.
fn session_meta(params: Option<&RawValue>) -> Vec<(String, Box<RawValue>)> {
    let f = params.and_then(Fields::parse);
    let caps = f
        .as_ref()
        .and_then(|f| f.get("capabilities"))
        .map(|c| c.to_owned())
        .unwrap_or_else(|| jsonrpc::raw("{}"));
    let mut v = vec![
        (
            protocol::META_PROTOCOL_VERSION.to_owned(),
            jsonrpc::raw(&format!("\"{}\"", protocol::MODERN)),
        ),
        (protocol::META_CLIENT_CAPABILITIES.to_owned(), caps),
    ];
    if let Some(ci) = f.as_ref().and_then(|f| f.get("clientInfo")) {
        v.push((protocol::META_CLIENT_INFO.to_owned(), ci.to_owned()));
    }
    v
}

/// The `InitializeResult` the bridge gives a 2025 client, built from what the child said.
/// The `InitializeResult` a 2025 client gets: the upstream's own, or one built from its
/// `server/discover` result (`era::lifecycle`, shared with connect).
fn initialize_result(info: &UpstreamInfo, version: &str) -> String {
    let src = info.initialize.as_ref().or(info.discover.as_ref());
    crate::era::lifecycle::initialize_from(src.map(|r| &**r), version)
}

async fn initialize(app: &Arc<App>, pc: &PostCtx<'_>) -> Response<Body> {
    let id = pc.env.id.map(RawValue::get);
    if pc.kind != Kind::Request {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "initialize must be a request",
            None,
        );
    }
    if app.sessions.len() >= app.cfg.max_sessions {
        // Make room by expiring idle ones first.
        app.sessions.expire(Duration::from_secs(1));
        if app.sessions.len() >= app.cfg.max_sessions {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                code::UPSTREAM_UNAVAILABLE,
                "too many sessions; try again later",
                None,
            );
        }
    }
    let requested = pc.env.params.and_then(Fields::parse).and_then(|f| {
        f.get("protocolVersion")
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    });
    let version = protocol::negotiate_legacy(requested.as_deref());
    let Some(sid) = mint_id() else {
        return rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            id,
            code::INTERNAL_ERROR,
            "no randomness for a session id",
            None,
        );
    };
    let (upstream, owns) = match &app.spawn_for_session {
        Some(spawn) => (spawn(Arc::from(sid.as_str())), true),
        None => (app.upstream.clone(), false),
    };
    let info = match upstream.info(app.cfg.start_wait).await {
        Ok(i) => i,
        Err(e) => {
            if owns {
                upstream.stop();
            }
            app.metrics.rpc_error(
                &app.server,
                "initialize",
                code::UPSTREAM_UNAVAILABLE,
                "bridge",
            );
            return respond::json(StatusCode::OK, jsonrpc::error_raw(id, &e.error_object()));
        }
    };
    let session = Arc::new(Session::new(
        sid.clone(),
        version.to_owned(),
        session_meta(pc.env.params),
        upstream,
        owns,
        app.metrics.sessions("2025"),
    ));
    app.sessions.insert(session);
    info!(session = %&sid[..8], version, "2025 session started");
    let body = jsonrpc::result(id.unwrap_or("null"), &initialize_result(&info, version));
    let mut r = if pc.accept_json || !pc.accept_sse {
        respond::json(StatusCode::OK, body)
    } else {
        let mut r = Response::new(respond::full(framing::sse_event(&body)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        r
    };
    if let Ok(v) = HeaderValue::from_str(&sid) {
        r.headers_mut().insert(protocol::H_SESSION_ID, v);
    }
    r
}

fn session_for(app: &App, h: &HeaderMap, id: Option<&str>) -> Result<Arc<Session>, Response<Body>> {
    let Some(sid) = header_str(h, protocol::H_SESSION_ID) else {
        return Err(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
            None,
        ));
    };
    match app.sessions.get(sid) {
        Some(s) => {
            s.touch();
            Ok(s)
        }
        None => Err(rpc_error(
            StatusCode::NOT_FOUND,
            id,
            code::INVALID_REQUEST,
            "Session not found (it expired or was deleted): initialize again",
            None,
        )),
    }
}

async fn legacy(app: &Arc<App>, pc: &PostCtx<'_>, _sid: &str) -> Response<Body> {
    let id = pc.env.id.map(RawValue::get);
    let s = match session_for(app, pc.headers, id) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Some(v) = header_str(pc.headers, protocol::H_PROTOCOL_VERSION) {
        if !protocol::is_legacy_version(v) {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                id,
                code::INVALID_REQUEST,
                &format!("Bad Request: unsupported MCP-Protocol-Version {v}"),
                Some(&json!({"supported": protocol::LEGACY_VERSIONS, "requested": v})),
            );
        }
    }
    let method = pc.env.method().to_owned();
    match pc.kind {
        Kind::Notification => {
            match method.as_str() {
                "notifications/initialized" => {}
                "notifications/cancelled" => {
                    let target = jsonrpc_field(pc.env.params, "requestId");
                    if let Some(t) = target {
                        if s.cancel_call(&t) {
                            debug!(request = %t, "client cancelled a call");
                        }
                    }
                }
                _ => {
                    let legacy_child = s
                        .upstream
                        .info(Duration::ZERO)
                        .await
                        .map(|i| i.era == Era::Legacy)
                        .unwrap_or(false);
                    if legacy_child {
                        let _ = s.upstream.send_notification(framing::single_line(pc.body));
                    }
                }
            }
            status_only(StatusCode::ACCEPTED)
        }
        Kind::Response => {
            let rid = id.unwrap_or("null");
            let answer = match (pc.env.result, pc.env.error) {
                (Some(r), _) => Ok(r.to_owned()),
                (None, Some(e)) => Err(e.to_owned()),
                (None, None) => Err(jsonrpc::raw("{}")),
            };
            if s.deliver_answer(rid, answer) {
                // An answer to a request the bridge made on a 2026 upstream's behalf.
            } else if s.take_server_request(rid) {
                if let Err(e) = s.upstream.send_response(framing::single_line(pc.body)) {
                    warn!("could not forward the client's answer to the child: {e}");
                }
            } else {
                app.metrics.dropped("unknown_id");
                debug!(
                    id = rid,
                    "client answered a request the bridge did not send it; dropped"
                );
            }
            status_only(StatusCode::ACCEPTED)
        }
        Kind::Request => {
            let rid = id.unwrap_or("null");
            if method == "ping" {
                return respond::json(StatusCode::OK, jsonrpc::result(rid, "{}"));
            }
            let child_era = s
                .upstream
                .info(app.cfg.start_wait)
                .await
                .map(|i| i.era)
                .unwrap_or(Era::Legacy);
            if method == "logging/setLevel" {
                let level = jsonrpc_field(pc.env.params, "level")
                    .and_then(|l| serde_json::from_str::<String>(&l).ok())
                    .and_then(|l| protocol::log_level(&l));
                let Some((level, _)) = level else {
                    return rpc_error(
                        StatusCode::OK,
                        Some(rid),
                        code::INVALID_PARAMS,
                        "invalid or missing logging level",
                        None,
                    );
                };
                s.set_log_level(level);
            }
            if child_era == Era::Modern {
                match method.as_str() {
                    // The level travels as `_meta` logLevel on this session's later requests.
                    "logging/setLevel" => {
                        return respond::json(StatusCode::OK, jsonrpc::result(rid, "{}"))
                    }
                    // Kept by the bridge; the session's GET stream holds a listen stream on
                    // the child with these URIs.
                    "resources/subscribe" | "resources/unsubscribe" => {
                        let Some(uri) = jsonrpc_field(pc.env.params, "uri")
                            .and_then(|u| serde_json::from_str::<String>(&u).ok())
                        else {
                            return rpc_error(
                                StatusCode::OK,
                                Some(rid),
                                code::INVALID_PARAMS,
                                "params.uri is required",
                                None,
                            );
                        };
                        s.set_resource_subscription(&uri, method == "resources/subscribe");
                        return respond::json(StatusCode::OK, jsonrpc::result(rid, "{}"));
                    }
                    _ => {}
                }
            }
            let ctx = CallCtx {
                client_era: Era::Legacy,
                stamp_meta: s.call_meta(),
                session: Some(s.id.clone()),
                accepts_server_requests: pc.accept_sse,
                log_level: Some(s.log_level().unwrap_or("debug")),
                tool: tool_name(&method, &pc.view),
            };
            if child_era == Era::Modern && crate::mrtr::is_mrtr_method(&method) {
                let cancel = s.begin_call(rid);
                let done = InflightGuard {
                    session: s.clone(),
                    id: rid.to_owned(),
                    detached: None,
                };
                return crate::face::rounds::run(
                    app.clone(),
                    pc,
                    s.clone(),
                    ctx,
                    cancel,
                    Box::new(done),
                )
                .await;
            }
            let cancel = s.begin_call(rid);
            let done = InflightGuard {
                session: s.clone(),
                id: rid.to_owned(),
                detached: None,
            };
            let params = pc.env.params.map(|p| p.to_owned());
            let upstream = s.upstream.clone();
            app.run_call(
                &upstream,
                pc,
                &method,
                params,
                ctx,
                cancel,
                Some(s.clone()),
                Some(done),
                None,
            )
            .await
        }
    }
}

/// A top-level params field as raw JSON text.
fn jsonrpc_field(params: Option<&RawValue>, key: &str) -> Option<String> {
    Fields::parse(params?)?.get(key).map(|v| v.get().to_owned())
}

/// Open a `subscriptions/listen` on a 2026 child for a 2025 session's GET stream: every
/// list-changed type and the resources the session subscribed to.
async fn start_listen(s: &Arc<Session>) -> Option<CallHandle> {
    // The same filter connect holds for a 2025 host: the list changes the upstream offers,
    // plus the session's resource subscriptions (`notifications::legacy_filter`).
    let caps = s
        .upstream
        .info(Duration::from_secs(5))
        .await
        .ok()?
        .capabilities();
    let filter = crate::notifications::legacy_filter(&caps, &s.resource_uris());
    let params = json!({ "notifications": filter }).to_string();
    let call = Call {
        method: "subscriptions/listen".into(),
        params: Some(jsonrpc::raw(&params)),
        ctx: CallCtx {
            client_era: Era::Legacy,
            stamp_meta: s.call_meta(),
            session: Some(s.id.clone()),
            accepts_server_requests: false,
            log_level: None,
            tool: None,
        },
    };
    let mut h = s.upstream.call(call, Duration::from_secs(5)).await.ok()?;
    // The bridge's own call: when the session, its GET stream or this subscription set ends,
    // the child is told, but that is no client's cancellation.
    h.set_cancel_reason(crate::call::RELEASED_BY_BRIDGE);
    Some(h)
}

/// The next event of a held listen call; pending forever when there is none. `None` when the
/// listen call ended.
async fn next_listen_event(h: &mut Option<CallHandle>) -> Option<crate::call::CallEvent> {
    match h {
        None => std::future::pending().await,
        Some(h) => tokio::select! {
            ev = h.events.recv(), if !h.events.is_closed() || !h.events.is_empty() => ev,
            _ = &mut h.outcome => None,
        },
    }
}

async fn get_stream(app: &Arc<App>, h: &HeaderMap) -> Response<Body> {
    let (_, sse) = accepts(h);
    if !sse {
        return status_only(StatusCode::NOT_ACCEPTABLE);
    }
    if header_str(h, protocol::H_SESSION_ID).is_none() {
        // A 2026 client (or none): there is no GET stream in 2026-07-28.
        let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED);
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let s = match session_for(app, h, None) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if s.get_stream_open.swap(true, Ordering::AcqRel) {
        return rpc_error(
            StatusCode::CONFLICT,
            None,
            code::INVALID_REQUEST,
            "Conflict: this session already has a GET stream open",
            None,
        );
    }
    let rx = s.upstream.subscribe();
    // A 2026 child has no GET stream: hold a listen stream on it for this session instead.
    let modern_child = s
        .upstream
        .info(Duration::ZERO)
        .await
        .is_ok_and(|i| i.era == Era::Modern);
    let listen = if modern_child {
        start_listen(&s).await
    } else {
        None
    };
    struct St {
        s: Arc<Session>,
        modern_child: bool,
        listen: Option<CallHandle>,
        rx: tokio::sync::broadcast::Receiver<UpstreamEvent>,
        stopping: CancellationToken,
        keepalive: Duration,
        _g: respond::GaugeGuard,
    }
    impl Drop for St {
        fn drop(&mut self) {
            self.s.get_stream_open.store(false, Ordering::Release);
            self.s.touch();
        }
    }
    let st = St {
        s,
        modern_child,
        listen,
        rx,
        stopping: app.stopping.clone(),
        keepalive: app.cfg.keepalive,
        _g: respond::GaugeGuard::new(app.metrics.sse_streams().clone()),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            let ev = tokio::select! {
                ev = st.rx.recv() => ev,
                lev = next_listen_event(&mut st.listen) => {
                    match lev {
                        Some(crate::call::CallEvent::Notification { method, params })
                            if method != "notifications/subscriptions/acknowledged" =>
                        {
                            let f = jsonrpc::notification(&method, params.as_deref().map(RawValue::get));
                            return Some((Ok(hyper::body::Frame::data(framing::sse_event(&f))), st));
                        }
                        Some(_) => continue,
                        None => {
                            st.listen = None; // the child ended it; re-listen on the next change
                            continue;
                        }
                    }
                }
                _ = st.s.resubscribe.notified(), if st.modern_child => {
                    st.listen = None;
                    st.listen = start_listen(&st.s).await;
                    continue;
                }
                _ = tokio::time::sleep(st.keepalive) => {
                    st.s.touch();
                    return Some((Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                }
                _ = st.s.closed.cancelled() => return None,
                _ = st.stopping.cancelled() => return None,
            };
            match ev {
                Ok(UpstreamEvent::Notification(f)) => {
                    return Some((Ok(hyper::body::Frame::data(framing::sse_event(&f))), st));
                }
                Ok(UpstreamEvent::ServerRequest { session, frame }) if session == st.s.id => {
                    if let Ok(env) = Envelope::parse(&frame) {
                        if let Some(id) = env.id {
                            if !respond::ServerRequestSink::admit(
                                &*st.s,
                                id,
                                env.method(),
                                env.params,
                            ) {
                                continue;
                            }
                            respond::ServerRequestSink::register(&*st.s, id);
                        }
                    }
                    return Some((Ok(hyper::body::Frame::data(framing::sse_event(&frame))), st));
                }
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    warn!(lost = n, "GET stream fell behind; notifications lost");
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    respond::sse_response(BodyExt::boxed_unsync(http_body_util::StreamBody::new(
        stream,
    )))
}

fn delete(app: &Arc<App>, h: &HeaderMap) -> Response<Body> {
    let Some(sid) = header_str(h, protocol::H_SESSION_ID) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
            None,
        );
    };
    match app.sessions.remove(sid) {
        Some(_) => {
            info!(session = %sid.get(..8).unwrap_or(sid), "session deleted by the client");
            status_only(StatusCode::OK)
        }
        None => rpc_error(
            StatusCode::NOT_FOUND,
            None,
            code::INVALID_REQUEST,
            "Session not found",
            None,
        ),
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

    #[test]
    fn accept_header() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            accepts(&m)
        };
        assert_eq!(h("application/json, text/event-stream"), (true, true));
        assert_eq!(h("Application/JSON"), (true, false));
        assert_eq!(h("TEXT/Event-Stream"), (false, true));
        assert_eq!(h("*/*"), (true, true));
        assert_eq!(h("image/png"), (false, false));
        assert_eq!(accepts(&HeaderMap::new()), (true, true));
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
