//! The bounded accept loop every HTTP listener of the bridge runs (plain `serve` and the
//! daemon's named servers alike): it owns what a connection may cost before any route sees a
//! request. A cap on connections (a semaphore around accept; beyond it a short `503` with
//! `Retry-After`), a cap on requests open at once (HTTP/1 requests and HTTP/2 streams, held
//! until their response body ends, so long calls and SSE streams count), the clocks of
//! [`watch`] (header, idle), the body deadline of [`body`], HTTP/2's own limits, and the
//! counting of every answer written here or by hyper below the handler. Each connection starts
//! as the HTTP version [`sniff`] finds (hyper's HTTP/1 buffer stays at 8 KB that way).
//!
//! It is shaped as one function taking the request handler as a closure so that the listener
//! knows nothing of routes or apps (the daemon's router is the only handler today) beyond the
//! paths the router names as never capped (`AcceptCfg::uncapped`: the liveness probe).

mod body;
mod sniff;
mod watch;

pub use body::{BodyTimeout, ReqBody};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth::tls::Tls;
pub use crate::config::limits::{auto_max_connections, ConnLimits, H2Limits};
use crate::face::metrics_http;
use crate::face::respond::{status_only, Body};
use crate::metrics::Metrics;
use watch::{ConnState, Expired, Stream, Watched};

/// The `route` label of a connection refused at `--max-connections`.
pub const ROUTE_CONNECTION_CAP: &str = "connection_cap";
/// The `route` label of a request refused at `--max-streams`.
pub const ROUTE_STREAM_CAP: &str = "stream_cap";

/// The same field-count limit as hyper's HTTP/1 parser, for HTTP/2 heads.
const H2_MAX_FIELDS: usize = 100;
/// Streams the bridge may reset for the client's errors before it closes the connection
/// (hyper's default is 1024; an MCP client makes few).
const H2_LOCAL_ERROR_RESETS: usize = 256;
/// Refusals at the connection cap being written at once; beyond it a refused connection is
/// closed without a word (the refusal must stay cheaper than what it protects).
const REFUSALS_AT_ONCE: usize = 64;
/// How long a refusal, or a connection its clock closed, may take to finish writing.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

impl H2Limits {
    /// What the h2 library enforces itself (advertised to peers).
    fn hard_header_list(&self) -> u32 {
        u32::try_from(self.max_header_list.saturating_mul(2)).unwrap_or(u32::MAX)
    }
}

/// Everything a listener's loop needs besides the listener and the handler.
#[derive(Clone)]
pub struct AcceptCfg {
    /// TLS on every connection, when set.
    pub tls: Option<Arc<Tls>>,
    /// After `stopping`: how long open connections may finish.
    pub grace: Duration,
    pub metrics: Arc<Metrics>,
    pub limits: ConnLimits,
    /// Paths whose `GET` is answered at once and never counted against `max_streams`: the
    /// liveness probe, so that a bridge full of long streams is not restarted for being busy.
    pub uncapped: &'static [&'static str],
}

/// What every connection task of one listener shares.
struct Shared {
    cfg: AcceptCfg,
    /// Reads the version itself: for a connection [`sniff`] could not tell.
    builder: Builder<TokioExecutor>,
    /// The same settings, started as HTTP/1 or HTTP/2 directly.
    http1: Builder<TokioExecutor>,
    http2: Builder<TokioExecutor>,
    streams: Arc<Semaphore>,
    stopping: CancellationToken,
    /// Cancelled once the grace (and `CLOSE_GRACE` after it) is over: every connection still
    /// open is dropped, so no connection task outlives the accept loop.
    closed: CancellationToken,
}

/// Accept connections on `listener` and answer each request with `handler` until `stopping`
/// is cancelled; then let open connections finish for up to `cfg.grace`. True when they all
/// finished in time.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    cfg: AcceptCfg,
    stopping: CancellationToken,
    handler: F,
) -> bool
where
    F: Fn(Request<ReqBody>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let l = &cfg.limits;
    info!(
        max_connections = l.max_connections,
        max_streams = l.max_streams,
        header_timeout_ms = l.header_timeout.as_millis() as u64,
        body_timeout_ms = l.body_timeout.as_millis() as u64,
        idle_timeout_ms = l.idle_timeout.as_millis() as u64,
        "connection limits"
    );
    let conns = Arc::new(Semaphore::new(cfg.limits.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let builder = builder(&cfg.limits);
    let shared = Arc::new(Shared {
        http1: builder.clone().http1_only(),
        http2: builder.clone().http2_only(),
        builder,
        streams: Arc::new(Semaphore::new(cfg.limits.max_streams)),
        stopping: stopping.clone(),
        closed: CancellationToken::new(),
        cfg,
    });
    let tracker = TaskTracker::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors, mostly: back off while some are freed (or stop).
                    warn!("accept failed: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                        _ = stopping.cancelled() => break,
                    }
                    continue;
                }
            },
            _ = stopping.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = conns.clone().try_acquire_owned() else {
            refuse(stream, &shared, &refusals, &tracker);
            continue;
        };
        tracker.spawn(serve_one(
            stream,
            peer,
            shared.clone(),
            handler.clone(),
            permit,
        ));
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(shared.cfg.grace, tracker.wait())
        .await
        .is_ok()
    {
        info!("all connections drained");
        return true;
    }
    // The grace is over: whoever runs the handler ends the requests still open now (each
    // gets its answer), which takes a moment to write; then what is left is closed.
    if tokio::time::timeout(CLOSE_GRACE, tracker.wait())
        .await
        .is_err()
    {
        shared.closed.cancel();
        tracker.wait().await;
    }
    false
}

fn builder(l: &ConnLimits) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    b.http1().timer(TokioTimer::new());
    let per_conn = u32::try_from(l.max_streams)
        .unwrap_or(u32::MAX)
        .clamp(1, l.h2.max_concurrent_streams);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(per_conn)
        .max_header_list_size(l.h2.hard_header_list())
        .max_pending_accept_reset_streams(l.h2.max_pending_resets)
        .max_local_error_reset_streams(H2_LOCAL_ERROR_RESETS);
    b
}

/// Beyond the connection cap: a plain `503` with `Retry-After` once the request head is in
/// (or, past the refusals in progress or after `header_timeout` capped at 2 s, just a close),
/// counted. On TLS listeners the 503 goes inside a handshake.
fn refuse(
    stream: TcpStream,
    shared: &Arc<Shared>,
    refusals: &Arc<Semaphore>,
    tracker: &TaskTracker,
) {
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        debug!("connection cap reached and refusals busy; closing a new connection");
        return;
    };
    let shared = shared.clone();
    tracker.spawn(async move {
        let _permit = permit;
        const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
            Content-Type: text/plain\r\nContent-Length: 28\r\nConnection: close\r\n\r\n\
            too many connections; retry";
        let bound = shared.cfg.limits.header_timeout.min(CLOSE_GRACE * 2);
        let wrote = tokio::time::timeout(bound, async {
            let s = match &shared.cfg.tls {
                None => Stream::Plain(stream),
                Some(tls) => Stream::Tls(Box::new(tls.accept(stream).await?)),
            };
            write_and_close(s, REFUSAL).await
        })
        .await;
        if let Ok(Some(())) = wrote {
            shared
                .cfg
                .metrics
                .http_response(ROUTE_CONNECTION_CAP, "other", 503);
        }
    });
}

/// Wait for the client's request head (an answer before the request is, to an HTTP client,
/// a protocol error), write `msg`, end the write side, and read what the client still sends
/// until it closes (so that the close does not reset the connection before the client read the
/// answer). None when the client sent nothing or the write failed.
async fn write_and_close(s: Stream, msg: &[u8]) -> Option<()> {
    let mut ws = Watched::new(s, ConnState::new(&ConnLimits::default()));
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
        match ws.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    if head.is_empty() {
        return None;
    }
    ws.write_all(msg).await.ok()?;
    ws.shutdown().await.ok()?;
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while matches!(ws.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    Some(())
}

/// The connection's stream and protocol: a plain socket peeked at, or a TLS handshake and its
/// ALPN, both within the first head's clock. None: it did not get that far (or shutdown).
async fn open(
    tcp: TcpStream,
    shared: &Shared,
    state: &ConnState,
) -> Option<(Stream, sniff::Proto)> {
    let limits = &shared.cfg.limits;
    match &shared.cfg.tls {
        None => {
            // Within the first head's clock, and not past shutdown (as hyper's own wait for
            // the version would be cancelled).
            let first_head = state.start() + limits.header_timeout;
            let proto = tokio::select! {
                p = tokio::time::timeout_at(first_head, sniff::peek(&tcp)) => p.ok()?,
                _ = shared.stopping.cancelled() => return None,
            };
            Some((Stream::Plain(tcp), proto))
        }
        Some(tls) => match tokio::time::timeout(limits.header_timeout, tls.accept(tcp)).await {
            Ok(Some(s)) => {
                let proto = sniff::alpn(&s);
                Some((Stream::Tls(Box::new(s)), proto))
            }
            _ => None,
        },
    }
}

/// One connection, from accept to close.
async fn serve_one<F, Fut>(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    handler: F,
    _permit: OwnedSemaphorePermit,
) where
    F: Fn(Request<ReqBody>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let limits = shared.cfg.limits;
    let state = ConnState::new(&limits);
    let Some((stream, proto)) = open(tcp, &shared, &state).await else {
        return;
    };
    let svc = {
        let (shared, state) = (shared.clone(), state.clone());
        // The handler's future is boxed: hyper keeps a slot the size of the service future
        // for the whole life of the connection (also while a long SSE answer streams), and
        // the handler's future is ~12 KB; boxed, the slot is a pointer and the 12 KB are
        // freed once the response head is ready (benches/RESULTS.md, "memory per stream").
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let fut = answer(&shared, &state, req, peer, handler.clone());
            Box::pin(async move { Ok::<_, Infallible>(fut.await) })
        })
    };
    let io = TokioIo::new(Watched::new(stream, state.clone()));
    // No upgrades: the bridge answers no request with 101.
    let conn = match proto {
        sniff::Proto::Http1 => &shared.http1,
        sniff::Proto::Http2 => &shared.http2,
        sniff::Proto::Unknown => &shared.builder,
    }
    .serve_connection(io, svc);
    tokio::pin!(conn);
    let mut stopping_seen = false;
    let mut closing: Option<Instant> = None;
    // One timer for the connection's life, reset only when the time to look changes.
    let clock = tokio::time::sleep_until(state.arm(&limits));
    tokio::pin!(clock);
    let mut fired = false;
    loop {
        let wake = match closing {
            Some(at) => at + CLOSE_GRACE,
            None => state.arm(&limits),
        };
        if fired || wake != clock.deadline() {
            clock.as_mut().reset(wake);
            fired = false;
        }
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    connection_failed(&shared.cfg.metrics, &*e);
                }
                return;
            }
            _ = shared.stopping.cancelled(), if !stopping_seen => {
                stopping_seen = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = state.changed.notified() => {}
            _ = shared.closed.cancelled() => return,
            _ = &mut clock => {
                fired = true;
                if closing.is_some() {
                    return;
                }
                if let Some((at, why)) = state.deadline(&limits) {
                    if at <= Instant::now() {
                        debug!(%peer, ?why, "closing a connection at its timeout");
                        if why == Expired::Header {
                            // Mid-head there is nothing to finish: close now.
                            return;
                        }
                        // Idle: HTTP/2 peers get a GOAWAY first.
                        conn.as_mut().graceful_shutdown();
                        closing = Some(Instant::now());
                    }
                }
            }
        }
    }
}

/// One request: the HTTP/2 head check, the stream cap, the body deadline, then the handler;
/// the response body carries the guards, so the request counts until its body ends.
fn answer<F, Fut>(
    shared: &Arc<Shared>,
    state: &Arc<ConnState>,
    req: Request<Incoming>,
    peer: SocketAddr,
    handler: F,
) -> impl std::future::Future<Output = Response<Body>> + Send + 'static
where
    F: Fn(Request<ReqBody>, SocketAddr) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let busy = state.enter();
    let early = if req.version() == Version::HTTP_2
        && h2_head_too_large(&req, shared.cfg.limits.h2.max_header_list)
    {
        shared.cfg.metrics.http_connection_response(431);
        Err(status_only(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE))
    } else if req.method() == http::Method::GET && shared.cfg.uncapped.contains(&req.uri().path()) {
        Ok(None)
    } else {
        match shared.streams.clone().try_acquire_owned() {
            Ok(p) => Ok(Some(p)),
            Err(_) => {
                let m = req.method().as_str();
                shared.cfg.metrics.http_response(ROUTE_STREAM_CAP, m, 503);
                let mut r = status_only(StatusCode::SERVICE_UNAVAILABLE);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Err(r)
            }
        }
    };
    let body_timeout = shared.cfg.limits.body_timeout;
    async move {
        let permit = match early {
            Ok(p) => p,
            Err(r) => return r,
        };
        let req = req.map(|b| ReqBody::new(b, body_timeout));
        let resp = handler(req, peer).await;
        resp.map(|b| {
            b.map_frame(move |f| {
                // Held as long as the body: a streaming answer is an open request.
                let _held = (&busy, &permit);
                f
            })
            .boxed_unsync()
        })
    }
}

/// An HTTP/2 head over the limits HTTP/1 heads have (field count, size).
fn h2_head_too_large<B>(req: &Request<B>, max: usize) -> bool {
    let h = req.headers();
    if h.len() > H2_MAX_FIELDS {
        return true;
    }
    let fields: usize = h.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum();
    fields + req.uri().to_string().len() > max
}

/// A connection ended in an error: count the answer hyper wrote on it itself, if it wrote one.
fn connection_failed(metrics: &Metrics, e: &(dyn std::error::Error + 'static)) {
    if let Some(status) = metrics_http::hyper_answer(e) {
        metrics.http_connection_response(status);
    }
    debug!("connection ended: {e}");
}
