//! A remote Streamable HTTP server as an upstream (`connect`): an HTTPS client (hyper over
//! rustls, HTTP/1.1 and HTTP/2 by ALPN) that finds the remote's era (a 2026 request first, then
//! `initialize`), carries calls under bridge-minted ids, reads JSON and SSE answers (progress
//! and 2025 server requests become `CallEvent`s), keeps a 2025 session (re-initialise on 404,
//! GET stream, `Last-Event-ID` resumption, DELETE at the end), sends the 2026 mirror headers
//! (`Mcp-Param-*` from the tool list), and turns every transport fault into a JSON-RPC error for
//! the call it hit. For the face's translations across eras it tells the remote's era and
//! capabilities, whether the 2025 GET stream is open (a listen is acknowledged once it is), and
//! keeps a 2025 session's log level (lowered with `logging/setLevel` once per change for 2026
//! hosts). A `subscriptions/listen` is exempt from `--request-timeout`.
//!
//! Cancellation is by drop: dropping a `call` future drops its response stream (the 2026
//! cancellation) and, for a 2025 remote, posts `notifications/cancelled` with the remote-side id.
//! Credentials live only in the header list sent on each request and are never logged.
//!
//! Accounting (`upstream::observe::RemoteObserver`): `send` counts every HTTP answer by
//! status, `exchange` every exchange that got none (by `Fault::transport_reason`), `call` the
//! remote's JSON-RPC errors and tool results. A fault is answered as `Outcome::Failed`, so
//! that the face counts it as the bridge's error.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, OnceCell};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{Call, CallEvent, Outcome};
use crate::error::BridgeError;
use crate::framing::{SseDecoder, SseItem};
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};
use crate::upstream::observe::RemoteObserver;

/// Everything `connect` needs to reach the remote.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub url: Uri,
    /// Extra headers for every request (`-H`, `--header-file`, the bearer token). Values are
    /// marked sensitive; they are never logged.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Was a bearer token configured (for the 401/403 advice)?
    pub has_token: bool,
    /// `None` = auto-detect; else a pinned revision.
    pub protocol: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub system_roots: bool,
    pub connect_timeout: Duration,
    /// Per-request limit; `None` = wait as long as the remote takes.
    pub request_timeout: Option<Duration>,
    pub retry_idempotent: bool,
    /// Largest JSON body or SSE event accepted from the remote.
    pub max_response: usize,
    /// How long the era probe waits before assuming a 2025 server.
    pub probe_timeout: Duration,
    /// An SSE stream silent (no event, no keep-alive comment) this long is treated as dead.
    /// `None` = no limit (TCP keep-alive still detects a vanished peer).
    pub idle_timeout: Option<Duration>,
}

/// A transport-level failure, mapped to one JSON-RPC error for the call it hit.
#[derive(Debug, Clone)]
enum Fault {
    /// No connection (refused, DNS, TLS, connect timeout): the request never left.
    Unreachable {
        reason: &'static str,
        detail: String,
    },
    /// The exchange broke after the request may have reached the server.
    Broken(String),
    Timeout(u64),
    Auth(u16),
    Status(u16, String),
    SessionGone,
    Malformed(String),
    Oversize(usize),
}

impl Fault {
    fn reason(&self) -> &'static str {
        match self {
            Fault::Unreachable { reason, .. } => reason,
            Fault::Broken(_) => "connection_lost",
            Fault::Timeout(_) => "timeout",
            Fault::Auth(401) => "unauthorized",
            Fault::Auth(_) => "forbidden",
            Fault::Status(..) => "http_status",
            Fault::SessionGone => "session_expired",
            Fault::Malformed(_) => "malformed_response",
            Fault::Oversize(_) => "response_too_large",
        }
    }

    /// The transport failure this is (no usable HTTP answer), by its metrics reason; None for
    /// an HTTP status (counted as one) or the bridge's own time limit.
    fn transport_reason(&self) -> Option<&'static str> {
        match self {
            Fault::Unreachable { .. }
            | Fault::Broken(_)
            | Fault::Malformed(_)
            | Fault::Oversize(_) => Some(self.reason()),
            Fault::Timeout(_) | Fault::Auth(_) | Fault::Status(..) | Fault::SessionGone => None,
        }
    }

    /// The bridge's answer for the call this fault hit: `-32000` with `data.reason` (and
    /// `data.httpStatus`).
    fn bridge_error(&self, origin: &str, has_token: bool) -> BridgeError {
        let msg = match self {
            Fault::Unreachable { detail, .. } => {
                format!("cannot reach the remote MCP server at {origin}: {detail}")
            }
            Fault::Broken(d) => format!(
                "the connection to {origin} broke before the answer arrived ({d}); the request \
                 may have reached the server and was not re-sent"
            ),
            Fault::Timeout(ms) => format!(
                "no answer from {origin} within {ms} ms (--request-timeout); the request was cancelled"
            ),
            Fault::Auth(status) => {
                let what = if *status == 401 {
                    "401 Unauthorized"
                } else {
                    "403 Forbidden"
                };
                if has_token {
                    format!(
                        "the remote MCP server at {origin} answered {what}: the bearer token was \
                         rejected or lacks access; supply a valid one with --bearer-token-file FILE \
                         or --bearer-token-env VAR"
                    )
                } else {
                    format!(
                        "the remote MCP server at {origin} answered {what}: it needs credentials; \
                         supply a token with --bearer-token-file FILE or --bearer-token-env VAR \
                         (or a header with -H / --header-file)"
                    )
                }
            }
            Fault::Status(s, body) => {
                format!("the remote MCP server at {origin} answered HTTP {s}: {body}")
            }
            Fault::SessionGone => format!(
                "the 2025 session with {origin} expired while this request was in flight; the \
                 bridge started a new session, retry the request"
            ),
            Fault::Malformed(d) => format!("malformed response from {origin}: {d}"),
            Fault::Oversize(n) => format!(
                "the response from {origin} exceeds the size limit ({n} bytes; --max-response)"
            ),
        };
        let mut data = json!({ "reason": self.reason() });
        if let Fault::Auth(s) | Fault::Status(s, _) = self {
            data["httpStatus"] = json!(s);
        }
        BridgeError::Remote {
            reason: self.reason(),
            message: msg,
            data,
        }
    }

    /// Could the request have reached the server?
    fn may_have_reached(&self) -> bool {
        !matches!(self, Fault::Unreachable { .. } | Fault::Auth(_))
    }
}

/// What the remote is, once known.
#[derive(Debug, Clone)]
enum Mode {
    Modern,
    Legacy { version: String },
}

#[derive(Debug, Clone)]
struct Session {
    id: Option<String>,
    version: String,
    init_result: Arc<RawValue>,
    generation: u64,
}

#[derive(Debug, Clone, Default)]
struct ToolInfo {
    /// (header name without prefix, as annotated; property)
    headers: Vec<(String, String)>,
    retry_safe: bool,
}

/// An answer from one POST (or resumed GET).
struct Answer {
    frame: Option<Bytes>,
    session: Option<String>,
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The remote upstream. Cheap to share (`Arc`).
pub struct Remote {
    cfg: RemoteConfig,
    client: HttpClient,
    origin: String,
    next_id: AtomicU64,
    mode: OnceCell<Mode>,
    discover: Mutex<Option<Arc<RawValue>>>,
    session: tokio::sync::Mutex<Option<Session>>,
    generation: AtomicU64,
    /// The host's `initialize` params, reused for (re-)initialising a 2025 remote.
    init_params: Mutex<Option<Box<RawValue>>>,
    tools: Mutex<HashMap<String, ToolInfo>>,
    /// Consecutive connection failures and when the next attempt may go out.
    failures: Mutex<(u32, Option<Instant>)>,
    /// Traffic belonging to no call (2025 GET stream) for the face.
    events: mpsc::Sender<CallEvent>,
    get_stream: Mutex<Option<CancellationToken>>,
    /// Where the 2025 GET stream stands (`GET_*`), so that a listen is acknowledged once
    /// notifications can flow.
    get_state: tokio::sync::watch::Sender<u8>,
    /// The level the 2025 session logs at for 2026 hosts, and the lock that orders its changes.
    log_floor: crate::notifications::LogFloor,
    log_lock: tokio::sync::Mutex<()>,
    tracker: TaskTracker,
    obs: RemoteObserver,
}

/// The GET stream is being opened (or re-opened).
const GET_CONNECTING: u8 = 0;
/// The GET stream is open.
const GET_OPEN: u8 = 1;
/// The remote offers no GET stream (405) or the session is gone.
const GET_NONE: u8 = 2;

/// Build the HTTPS client: webpki roots (or the OS roots), plus `--ca-file`.
fn build_client(cfg: &RemoteConfig) -> Result<HttpClient, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if cfg.system_roots {
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            warn!("system root certificates: {e}");
        }
        let (added, _) = roots.add_parsable_certificates(native.certs);
        info!("using {added} system root certificates");
    } else {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = &cfg.ca_file {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("--ca-file {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "--ca-file {}: no certificates found",
                path.display()
            ));
        }
        let (added, bad) = roots.add_parsable_certificates(certs);
        if bad > 0 || added == 0 {
            return Err(format!(
                "--ca-file {}: {bad} unusable certificate(s)",
                path.display()
            ));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(30)));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(https))
}

/// Text of an error and its sources, for messages (never contains headers).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn classify_connect(detail: &str) -> &'static str {
    let d = detail.to_ascii_lowercase();
    if d.contains("dns") || d.contains("failed to lookup") || d.contains("name or service") {
        "dns"
    } else if d.contains("certificate") || d.contains("tls") || d.contains("handshake") {
        "tls"
    } else if d.contains("timed out") || d.contains("timeout") {
        "connect_timeout"
    } else {
        "unreachable"
    }
}

fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A short, single-line, bounded excerpt of a body for error messages.
fn snippet(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(200)]);
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Remote {
    /// Create the upstream. `events` receives traffic that belongs to no call; its traffic is
    /// counted in `metrics` under the server name `server`.
    pub fn new(
        cfg: RemoteConfig,
        events: mpsc::Sender<CallEvent>,
        metrics: Arc<Metrics>,
        server: &str,
    ) -> Result<Arc<Self>, String> {
        let client = build_client(&cfg)?;
        let origin = match (cfg.url.scheme_str(), cfg.url.host()) {
            (Some(s), Some(h)) => match cfg.url.port_u16() {
                Some(p) => format!("{s}://{h}:{p}"),
                None => format!("{s}://{h}"),
            },
            _ => return Err(format!("not an http(s) URL: {}", cfg.url)),
        };
        if !matches!(cfg.url.scheme_str(), Some("http" | "https")) {
            return Err(format!("URL must be http:// or https://, got {origin}"));
        }
        Ok(Arc::new(Self {
            cfg,
            client,
            origin,
            next_id: AtomicU64::new(1),
            mode: OnceCell::new(),
            discover: Mutex::new(None),
            session: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
            init_params: Mutex::new(None),
            tools: Mutex::new(HashMap::new()),
            failures: Mutex::new((0, None)),
            events,
            get_stream: Mutex::new(None),
            get_state: tokio::sync::watch::Sender::new(GET_CONNECTING),
            log_floor: crate::notifications::LogFloor::default(),
            log_lock: tokio::sync::Mutex::new(()),
            tracker: TaskTracker::new(),
            obs: RemoteObserver::new(metrics, server),
        }))
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    fn mint(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fault is the bridge's answer (`Outcome::Failed`), never the remote's error.
    fn fault_outcome(&self, f: &Fault) -> Outcome {
        Outcome::Failed(f.bridge_error(&self.origin, self.cfg.has_token))
    }

    /// The remote's answer to a call was no usable JSON-RPC response (after the exchange).
    fn malformed(&self, what: &str) -> Outcome {
        let f = Fault::Malformed(what.into());
        self.count_fault(&f);
        self.fault_outcome(&f)
    }

    fn count_fault(&self, f: &Fault) {
        if let Some(reason) = f.transport_reason() {
            self.obs.transport_failure(reason);
        }
    }

    // -----------------------------------------------------------------------------------------
    // HTTP exchange
    // -----------------------------------------------------------------------------------------

    fn request(&self, method: Method, headers: &HeaderMap, body: Bytes) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(self.cfg.url.clone());
        if let Some(h) = b.headers_mut() {
            h.insert(
                ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            if !body.is_empty() {
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            }
            for (k, v) in &self.cfg.headers {
                h.append(k.clone(), v.clone());
            }
            for (k, v) in headers {
                h.insert(k.clone(), v.clone());
            }
        }
        // The builder cannot fail: the URI and every header were validated up front.
        b.body(Full::new(body))
            .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
    }

    /// Send one request, with backoff after repeated connection failures.
    async fn send(&self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Fault> {
        let wait = {
            let f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            f.1.map(|t| t.saturating_duration_since(Instant::now()))
        };
        if let Some(w) = wait.filter(|w| !w.is_zero()) {
            debug!("backing off {} ms before reconnecting", w.as_millis());
            tokio::time::sleep(w).await;
        }
        let (method, sent) = (req.method().clone(), Instant::now());
        match self.client.request(req).await {
            Ok(r) => {
                let secs = sent.elapsed().as_secs_f64();
                self.obs
                    .http_answer(method.as_str(), r.status().as_u16(), secs);
                let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                if f.0 > 0 {
                    info!("reconnected to {}", self.origin);
                }
                *f = (0, None);
                Ok(r)
            }
            Err(e) if e.is_connect() => {
                let detail = chain(&e);
                let reason = classify_connect(&detail);
                let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                f.0 = f.0.saturating_add(1);
                let backoff = Duration::from_millis(100u64 << f.0.min(6).saturating_sub(1))
                    .min(Duration::from_secs(5));
                f.1 = Some(Instant::now() + backoff);
                warn!(
                    "cannot reach {} ({reason}): {detail}; failure {} in a row, next attempt \
                     after {} ms",
                    self.origin,
                    f.0,
                    backoff.as_millis()
                );
                Err(Fault::Unreachable { reason, detail })
            }
            Err(e) => Err(Fault::Broken(chain(&e))),
        }
    }

    /// POST one JSON-RPC frame and read its answer: the response to `our_id` (JSON or SSE),
    /// forwarding notifications and server requests met on the way to `events`. An exchange
    /// that gets no usable answer is counted once, by reason.
    async fn exchange(
        &self,
        frame: Bytes,
        headers: &HeaderMap,
        our_id: Option<u64>,
        events: Option<&mpsc::Sender<CallEvent>>,
        legacy: Option<&Session>,
    ) -> Result<Answer, Fault> {
        let r = self
            .exchange_once(frame, headers, our_id, events, legacy)
            .await;
        if let Err(f) = &r {
            self.count_fault(f);
        }
        r
    }

    async fn exchange_once(
        &self,
        frame: Bytes,
        headers: &HeaderMap,
        our_id: Option<u64>,
        events: Option<&mpsc::Sender<CallEvent>>,
        legacy: Option<&Session>,
    ) -> Result<Answer, Fault> {
        let req = self.request(Method::POST, headers, frame);
        let resp = self.send(req).await?;
        let status = resp.status();
        debug!(
            "remote answered {} over {:?}",
            status.as_u16(),
            resp.version()
        );
        let session = header_str(resp.headers(), protocol::H_SESSION_ID);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(Fault::Auth(status.as_u16()));
        }
        if status == StatusCode::NOT_FOUND && legacy.is_some_and(|s| s.id.is_some()) {
            return Err(Fault::SessionGone);
        }
        if status == StatusCode::ACCEPTED {
            return Ok(Answer {
                frame: None,
                session,
            });
        }
        let ct = header_str(resp.headers(), "content-type").unwrap_or_default();
        if ct.starts_with("text/event-stream") {
            if !status.is_success() {
                return Err(Fault::Status(status.as_u16(), "(event stream)".into()));
            }
            let Some(our_id) = our_id else {
                return Ok(Answer {
                    frame: None,
                    session,
                });
            };
            let mut dec = SseDecoder::new(self.cfg.max_response);
            let mut body = resp.into_body();
            let mut attempts = 0u32;
            loop {
                match self.read_sse(&mut body, &mut dec, our_id, events).await {
                    Ok(Some(frame)) => {
                        return Ok(Answer {
                            frame: Some(frame),
                            session,
                        })
                    }
                    outcome => {
                        // Ended (or broke) without the answer: 2025 servers that gave event
                        // ids may be resumed with GET + Last-Event-ID.
                        let (Some(sess), Some(last)) = (legacy, dec.last_event_id.clone()) else {
                            return Err(match outcome {
                                Err(f) => f,
                                _ => Fault::Broken(
                                    "the response stream ended without an answer".into(),
                                ),
                            });
                        };
                        attempts += 1;
                        if attempts > 5 {
                            return Err(Fault::Broken(
                                "the response stream could not be resumed".into(),
                            ));
                        }
                        let wait = Duration::from_millis(dec.retry_ms.unwrap_or(500).min(30_000));
                        debug!(
                            "resuming the response stream after {} ms (Last-Event-ID)",
                            wait.as_millis()
                        );
                        tokio::time::sleep(wait).await;
                        let mut h = self.session_headers(sess);
                        if let Ok(v) = HeaderValue::from_str(&last) {
                            h.insert(HeaderName::from_static(protocol::H_LAST_EVENT_ID), v);
                        }
                        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                        let r = self
                            .send(self.request(Method::GET, &h, Bytes::new()))
                            .await?;
                        if !r.status().is_success() {
                            return Err(Fault::Broken(format!(
                                "the response stream broke and resuming it got HTTP {}",
                                r.status().as_u16()
                            )));
                        }
                        body = r.into_body();
                        dec = {
                            let mut d = SseDecoder::new(self.cfg.max_response);
                            d.last_event_id = Some(last);
                            d.retry_ms = dec.retry_ms;
                            d
                        };
                    }
                }
            }
        }
        // JSON (or anything else): read it whole, bounded.
        let bytes = self.read_body(resp.into_body()).await?;
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            if status.is_success() {
                return Ok(Answer {
                    frame: None,
                    session,
                });
            }
            return Err(Fault::Status(status.as_u16(), "(empty body)".into()));
        }
        match Envelope::parse(&bytes).and_then(|e| e.kind()) {
            Ok(Kind::Response) => Ok(Answer {
                frame: Some(bytes),
                session,
            }),
            _ if !status.is_success() => Err(Fault::Status(status.as_u16(), snippet(&bytes))),
            Ok(_) => Err(Fault::Malformed("expected a JSON-RPC response".into())),
            Err(e) => Err(Fault::Malformed(e.to_string())),
        }
    }

    /// The next body frame, or None at the end; a stream silent past `--idle-timeout` is an
    /// error.
    async fn next_frame(
        &self,
        body: &mut Incoming,
    ) -> Option<Result<hyper::body::Frame<Bytes>, Fault>> {
        let fut = body.frame();
        let r = match self.cfg.idle_timeout {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r,
                Err(_) => {
                    return Some(Err(Fault::Broken(format!(
                        "the event stream was silent for {} ms (--idle-timeout)",
                        t.as_millis()
                    ))))
                }
            },
            None => fut.await,
        };
        r.map(|f| f.map_err(|e| Fault::Broken(chain(&e))))
    }

    async fn read_body(&self, mut body: Incoming) -> Result<Bytes, Fault> {
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Fault::Broken(chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > self.cfg.max_response {
                    return Err(Fault::Oversize(buf.len() + data.len()));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf.freeze())
    }

    /// Read SSE events until the response to `our_id` (Some) or the end of the stream (None).
    async fn read_sse(
        &self,
        body: &mut Incoming,
        dec: &mut SseDecoder,
        our_id: u64,
        events: Option<&mpsc::Sender<CallEvent>>,
    ) -> Result<Option<Bytes>, Fault> {
        loop {
            while let Some(item) = dec.next_item() {
                if let Some(frame) = self.sse_item(item, Some(our_id), events).await? {
                    return Ok(Some(frame));
                }
            }
            match self.next_frame(body).await {
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        dec.push(&data);
                    }
                }
                Some(Err(f)) => return Err(f),
                None => {
                    while let Some(item) = dec.finish() {
                        if let Some(frame) = self.sse_item(item, Some(our_id), events).await? {
                            return Ok(Some(frame));
                        }
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Handle one SSE item: the response to `our_id` is returned; notifications and server
    /// requests go to `events`; other responses are dropped.
    async fn sse_item(
        &self,
        item: SseItem,
        our_id: Option<u64>,
        events: Option<&mpsc::Sender<CallEvent>>,
    ) -> Result<Option<Bytes>, Fault> {
        let data = match item {
            SseItem::Event { data, .. } => data,
            SseItem::Oversize(n) => return Err(Fault::Oversize(n)),
            SseItem::Malformed => {
                return Err(Fault::Malformed("the event stream is not UTF-8".into()))
            }
        };
        let bytes = Bytes::from(data);
        let env = Envelope::parse(&bytes)
            .map_err(|e| Fault::Malformed(format!("SSE event is not a JSON-RPC message: {e}")))?;
        match env.kind() {
            Ok(Kind::Response) => {
                if our_id.is_some() && env.id.and_then(jsonrpc::minted_u64) == our_id {
                    return Ok(Some(bytes.clone()));
                }
                debug!("dropping a response for an unknown id from the remote");
            }
            Ok(Kind::Notification) => {
                if let Some(tx) = events {
                    let _ = tx
                        .send(CallEvent::Notification {
                            method: env.method().to_owned(),
                            params: env.params.map(ToOwned::to_owned),
                        })
                        .await;
                }
            }
            Ok(Kind::Request) => {
                if let (Some(tx), Some(id)) = (events, env.id) {
                    let _ = tx
                        .send(CallEvent::ServerRequest {
                            id: ToOwned::to_owned(id),
                            method: env.method().to_owned(),
                            params: env.params.map(ToOwned::to_owned),
                        })
                        .await;
                }
            }
            Err(e) => return Err(Fault::Malformed(format!("SSE event: {e}"))),
        }
        Ok(None)
    }

    // -----------------------------------------------------------------------------------------
    // Era detection
    // -----------------------------------------------------------------------------------------

    async fn mode(&self) -> Result<Mode, Fault> {
        self.mode
            .get_or_try_init(|| async {
                let m = self.probe().await?;
                match &m {
                    Mode::Modern => info!("remote {} speaks 2026-07-28", self.origin),
                    Mode::Legacy { version } => {
                        info!("remote {} is a 2025-era server ({version})", self.origin)
                    }
                }
                Ok(m)
            })
            .await
            .cloned()
    }

    fn modern_meta(&self) -> String {
        json!({
            protocol::META_PROTOCOL_VERSION: protocol::MODERN,
            protocol::META_CLIENT_CAPABILITIES: {},
            protocol::META_CLIENT_INFO: {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        })
        .to_string()
    }

    fn modern_headers(&self, version: &str, method: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(version) {
            h.insert(HeaderName::from_static(protocol::H_PROTOCOL_VERSION), v);
        }
        if let Ok(v) = HeaderValue::from_str(&protocol::encode_header_value(method)) {
            h.insert(HeaderName::from_static(protocol::H_METHOD), v);
        }
        h
    }

    async fn probe(&self) -> Result<Mode, Fault> {
        match self.cfg.protocol.as_deref() {
            Some(protocol::MODERN) => return Ok(Mode::Modern),
            Some(v) => {
                return Ok(Mode::Legacy {
                    version: v.to_owned(),
                })
            }
            None => {}
        }
        let id = self.mint();
        let params = format!("{{\"_meta\":{}}}", self.modern_meta());
        let frame = jsonrpc::request(&id.to_string(), "server/discover", Some(&params));
        let headers = self.modern_headers(protocol::MODERN, "server/discover");
        let fut = self.exchange(frame, &headers, Some(id), None, None);
        let legacy = Mode::Legacy {
            version: protocol::LEGACY_LATEST.to_owned(),
        };
        let ans = match tokio::time::timeout(self.cfg.probe_timeout, fut).await {
            Err(_) => {
                debug!("no answer to server/discover in time: assuming a 2025 server");
                return Ok(legacy);
            }
            Ok(Ok(a)) => a,
            Ok(Err(f @ (Fault::Unreachable { .. } | Fault::Auth(_) | Fault::Broken(_)))) => {
                return Err(f)
            }
            Ok(Err(f)) => {
                debug!(
                    "server/discover failed ({}): assuming a 2025 server",
                    f.reason()
                );
                return Ok(legacy);
            }
        };
        let Some(frame) = ans.frame else {
            return Ok(legacy);
        };
        let Ok(env) = Envelope::parse(&frame) else {
            return Ok(legacy);
        };
        if let Some(r) = env.result {
            if Fields::parse(r).is_some_and(|f| f.has("supportedVersions")) {
                *self.discover.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(r.to_owned().into());
                return Ok(Mode::Modern);
            }
            return Ok(legacy);
        }
        let err = env.error.and_then(protocol::error_code);
        match err {
            Some(code::UNSUPPORTED_PROTOCOL_VERSION) => {
                // A 2026-era server that does not speak our revision: try 2025 if it lists one.
                let v: serde_json::Value = env
                    .error
                    .and_then(|e| serde_json::from_str(e.get()).ok())
                    .unwrap_or_default();
                let supported: Vec<String> = v["data"]["supported"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if supported.iter().any(|s| s == protocol::MODERN) {
                    Ok(Mode::Modern)
                } else if let Some(l) = supported.iter().find(|s| protocol::is_legacy_version(s)) {
                    Ok(Mode::Legacy { version: l.clone() })
                } else {
                    Err(Fault::Status(
                        400,
                        format!("the remote supports none of our protocol versions: {supported:?}"),
                    ))
                }
            }
            Some(code::HEADER_MISMATCH | code::MISSING_CLIENT_CAPABILITY) => Ok(Mode::Modern),
            _ => Ok(legacy),
        }
    }

    // -----------------------------------------------------------------------------------------
    // 2025 sessions
    // -----------------------------------------------------------------------------------------

    fn session_headers(&self, s: &Session) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(id) = &s.id {
            if let Ok(v) = HeaderValue::from_str(id) {
                h.insert(HeaderName::from_static(protocol::H_SESSION_ID), v);
            }
        }
        if let Ok(v) = HeaderValue::from_str(&s.version) {
            h.insert(HeaderName::from_static(protocol::H_PROTOCOL_VERSION), v);
        }
        h
    }

    /// The current 2025 session, initialising one if there is none.
    async fn ensure_session(self: &Arc<Self>, version: &str) -> Result<Session, Fault> {
        let mut g = self.session.lock().await;
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        let s = self.initialize_remote(version).await?;
        *g = Some(s.clone());
        drop(g);
        self.start_get_stream(s.clone());
        Ok(s)
    }

    /// Forget session `generation` (after a 404) so the next call starts a new one.
    async fn drop_session(&self, generation: u64) {
        let mut g = self.session.lock().await;
        if g.as_ref().is_some_and(|s| s.generation == generation) {
            info!("the 2025 session expired on the remote (404): starting a new one");
            *g = None;
            // A new session starts at the server's default log level.
            self.log_floor.reset();
            if let Some(t) = self
                .get_stream
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                t.cancel();
            }
        }
    }

    async fn initialize_remote(&self, version: &str) -> Result<Session, Fault> {
        let host = self
            .init_params
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok());
        // A 2026 host declares its capabilities per request; the bridge can carry every input
        // request to it (and refuses, per request, what that request did not declare).
        let mut params = host.unwrap_or_else(|| {
            json!({
                "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}},
                "clientInfo": {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
            })
        });
        let pinned = self.cfg.protocol.is_some();
        let requested = params
            .get("protocolVersion")
            .and_then(|v| v.as_str())
            .filter(|v| !pinned && protocol::is_legacy_version(v))
            .unwrap_or(version)
            .to_owned();
        params["protocolVersion"] = json!(requested);
        let id = self.mint();
        let frame = jsonrpc::request(&id.to_string(), "initialize", Some(&params.to_string()));
        let ans = self
            .exchange(frame, &HeaderMap::new(), Some(id), None, None)
            .await?;
        let frame = ans
            .frame
            .ok_or_else(|| Fault::Malformed("no answer to initialize".into()))?;
        let env = Envelope::parse(&frame).map_err(|e| Fault::Malformed(e.to_string()))?;
        let Some(result) = env.result else {
            let e = env.error.map(|e| e.get().to_owned()).unwrap_or_default();
            return Err(Fault::Status(
                400,
                format!("the remote refused initialize: {e}"),
            ));
        };
        let negotiated = serde_json::from_str::<serde_json::Value>(result.get())
            .ok()
            .and_then(|v| v["protocolVersion"].as_str().map(str::to_owned))
            .unwrap_or(requested);
        let s = Session {
            id: ans.session,
            version: negotiated,
            init_result: Arc::from(result.to_owned()),
            generation: self.generation.fetch_add(1, Ordering::Relaxed) + 1,
        };
        info!(
            "2025 session with {} ({}, {})",
            self.origin,
            s.version,
            if s.id.is_some() {
                "session id kept"
            } else {
                "no session id"
            }
        );
        let note = jsonrpc::notification("notifications/initialized", None);
        if let Err(f) = self
            .exchange(note, &self.session_headers(&s), None, None, Some(&s))
            .await
        {
            warn!("notifications/initialized: {}", f.reason());
        }
        Ok(s)
    }

    /// The 2025 GET stream: server requests and notifications for the face, reconnecting
    /// (with `Last-Event-ID`) until the session ends.
    fn start_get_stream(self: &Arc<Self>, s: Session) {
        let stop = CancellationToken::new();
        if let Some(old) = self
            .get_stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(stop.clone())
        {
            old.cancel();
        }
        self.get_state.send_replace(GET_CONNECTING);
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = me.get_stream_loop(s) => {}
            }
        });
    }

    async fn get_stream_loop(&self, s: Session) {
        let mut last: Option<String> = None;
        let mut retry = Duration::from_millis(1000);
        let mut backoff = Duration::from_millis(500);
        loop {
            let mut h = self.session_headers(&s);
            h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
            if let Some(l) = last.as_deref().and_then(|l| HeaderValue::from_str(l).ok()) {
                h.insert(HeaderName::from_static(protocol::H_LAST_EVENT_ID), l);
            }
            match self.send(self.request(Method::GET, &h, Bytes::new())).await {
                Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                    debug!("the remote offers no GET stream (405)");
                    self.get_state.send_replace(GET_NONE);
                    return;
                }
                Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                    debug!("GET stream: session gone (404)");
                    self.get_state.send_replace(GET_NONE);
                    return;
                }
                Ok(r)
                    if r.status().is_success()
                        && header_str(r.headers(), "content-type")
                            .is_some_and(|c| c.starts_with("text/event-stream")) =>
                {
                    backoff = Duration::from_millis(500);
                    self.get_state.send_replace(GET_OPEN);
                    let mut dec = SseDecoder::new(self.cfg.max_response);
                    dec.last_event_id = last.clone();
                    let mut body = r.into_body();
                    loop {
                        while let Some(item) = dec.next_item() {
                            if let Err(f) = self.sse_item(item, None, Some(&self.events)).await {
                                warn!("GET stream: {}", f.reason());
                                self.count_fault(&f);
                            }
                        }
                        match self.next_frame(&mut body).await {
                            Some(Ok(f)) => {
                                if let Ok(d) = f.into_data() {
                                    dec.push(&d);
                                }
                            }
                            Some(Err(f)) => {
                                self.count_fault(&f);
                                break;
                            }
                            None => break,
                        }
                    }
                    self.get_state.send_replace(GET_CONNECTING);
                    last = dec.last_event_id.clone();
                    if let Some(ms) = dec.retry_ms {
                        retry = Duration::from_millis(ms.min(60_000));
                    }
                    tokio::time::sleep(retry).await;
                }
                Ok(r) => {
                    debug!("GET stream: HTTP {}", r.status().as_u16());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
                Err(f) => {
                    self.count_fault(&f);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Tools: Mcp-Param-* headers and retry safety
    // -----------------------------------------------------------------------------------------

    /// Record the tools of a `tools/list` page; for a 2026 remote drop the ones with invalid
    /// `x-mcp-header` annotations (logged). Returns the result to pass on if it changed.
    fn learn_tools(&self, result: &RawValue, filter: bool) -> Option<String> {
        let mut v: serde_json::Value = serde_json::from_str(result.get()).ok()?;
        let tools = v.get_mut("tools")?.as_array_mut()?;
        let before = tools.len();
        let mut cache = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        tools.retain(|t| {
            let name = t["name"].as_str().unwrap_or("").to_owned();
            let headers = match protocol::tool_param_headers(&t["inputSchema"]) {
                Ok(h) => h
                    .into_iter()
                    .map(|(lower, prop)| {
                        let shown = t["inputSchema"]["properties"][&prop]["x-mcp-header"]
                            .as_str()
                            .unwrap_or(&lower)
                            .to_owned();
                        (shown, prop)
                    })
                    .collect(),
                Err(why) => {
                    if filter {
                        warn!("dropping tool {name:?} from tools/list: {why}");
                        cache.remove(&name);
                        return false;
                    }
                    Vec::new()
                }
            };
            let ann = &t["annotations"];
            let retry_safe =
                ann["readOnlyHint"] == json!(true) || ann["idempotentHint"] == json!(true);
            cache.insert(
                name,
                ToolInfo {
                    headers,
                    retry_safe,
                },
            );
            true
        });
        self.obs
            .tools_listed(tools.iter().filter_map(|t| t["name"].as_str()));
        if tools.len() == before {
            return None;
        }
        Some(v.to_string())
    }

    /// Fetch the whole tool list from a 2026 remote (bridge's own requests).
    async fn refresh_tools(&self) {
        let mut cursor: Option<String> = None;
        for _ in 0..50 {
            let id = self.mint();
            let params = match &cursor {
                Some(c) => json!({"cursor": c, "_meta": serde_json::from_str::<serde_json::Value>(&self.modern_meta()).unwrap_or_default()}).to_string(),
                None => format!("{{\"_meta\":{}}}", self.modern_meta()),
            };
            let frame = jsonrpc::request(&id.to_string(), "tools/list", Some(&params));
            let h = self.modern_headers(protocol::MODERN, "tools/list");
            let Ok(Answer {
                frame: Some(frame), ..
            }) = self.exchange(frame, &h, Some(id), None, None).await
            else {
                return;
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return;
            };
            let Some(r) = env.result else { return };
            let _ = self.learn_tools(r, true);
            cursor = Fields::parse(r)
                .and_then(|f| f.get("nextCursor"))
                .and_then(|c| serde_json::from_str::<String>(c.get()).ok());
            if cursor.is_none() {
                return;
            }
        }
    }

    fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// `Mcp-Name` and `Mcp-Param-*` headers for a request.
    fn name_headers(&self, h: &mut HeaderMap, method: &str, params: Option<&RawValue>) {
        let Some(field) = protocol::name_field(method) else {
            return;
        };
        let p: serde_json::Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        if let Some(n) = p[field].as_str() {
            if let Ok(v) = HeaderValue::from_str(&protocol::encode_header_value(n)) {
                h.insert(HeaderName::from_static(protocol::H_NAME), v);
            }
        }
        if method != "tools/call" {
            return;
        }
        let Some(tool) = p["name"].as_str().and_then(|n| self.tool(n)) else {
            return;
        };
        for (header, prop) in &tool.headers {
            let value = match &p["arguments"][prop] {
                serde_json::Value::String(s) => protocol::encode_header_value(s),
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
                serde_json::Value::Number(n) => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 => {
                        format!("{}", f as i64)
                    }
                    _ => continue,
                },
                _ => continue,
            };
            let name = format!(
                "{}{}",
                protocol::H_PARAM_PREFIX,
                header.to_ascii_lowercase()
            );
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                h.insert(n, v);
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Calls
    // -----------------------------------------------------------------------------------------

    /// The remote's era (found on first use); None when it cannot be reached.
    pub async fn era(&self) -> Option<Era> {
        match self.mode().await {
            Ok(Mode::Modern) => Some(Era::Modern),
            Ok(Mode::Legacy { .. }) => Some(Era::Legacy),
            Err(f) => {
                debug!("remote era unknown: {}", f.reason());
                None
            }
        }
    }

    /// The remote's server capabilities: from its `InitializeResult` (2025, opening the
    /// session if needed) or its `server/discover` result (2026). Null when unreachable.
    pub async fn capabilities(self: &Arc<Self>) -> serde_json::Value {
        let init = match self.mode().await {
            Ok(Mode::Legacy { version }) => match self.ensure_session(&version).await {
                Ok(s) => s.init_result.get().to_owned(),
                Err(_) => return serde_json::Value::Null,
            },
            Ok(Mode::Modern) => match self.host_initialize(None).await {
                Outcome::Result(r) => r.get().to_owned(),
                _ => return serde_json::Value::Null,
            },
            Err(_) => return serde_json::Value::Null,
        };
        serde_json::from_str::<serde_json::Value>(&init)
            .ok()
            .and_then(|mut v| v.get_mut("capabilities").map(serde_json::Value::take))
            .unwrap_or(serde_json::Value::Null)
    }

    /// Wait (at most `limit`) until the 2025 GET stream is open or known to be unavailable;
    /// true when it is open.
    pub async fn wait_get_stream(&self, limit: Duration) -> bool {
        let mut rx = self.get_state.subscribe();
        let r = tokio::time::timeout(limit, rx.wait_for(|s| *s != GET_CONNECTING)).await;
        matches!(r, Ok(Ok(s)) if *s == GET_OPEN)
    }

    /// A 2026 host asked for logs at `level` on a 2025 remote, which logs per session: lower
    /// the session's level with `logging/setLevel` when `level` is below it (once per change;
    /// each call's messages are filtered by its own level in the face).
    pub async fn ensure_log_level(self: &Arc<Self>, level: &'static str) {
        let _g = self.log_lock.lock().await;
        if !self.log_floor.lower(level) {
            return;
        }
        let call = Call {
            method: "logging/setLevel".into(),
            params: Some(jsonrpc::raw(&json!({ "level": level }).to_string())),
            ctx: crate::call::CallCtx {
                client_era: Era::Legacy,
                ..crate::call::CallCtx::modern()
            },
        };
        let (tx, _rx) = mpsc::channel(1);
        let o = tokio::time::timeout(Duration::from_secs(10), self.call(call, tx)).await;
        match o {
            Ok(Outcome::Result(_)) => {
                info!("the 2025 remote now logs at {level} (logging/setLevel)")
            }
            Ok(_) | Err(_) => {
                warn!(
                    "logging/setLevel {level} failed at the remote; will retry on the next request"
                );
                self.log_floor.reset();
            }
        }
    }

    /// Keep the host's `initialize` params: a 2025 remote is initialised with them.
    pub fn set_host_init(&self, params: Option<&RawValue>) {
        *self.init_params.lock().unwrap_or_else(|p| p.into_inner()) = params.map(ToOwned::to_owned);
    }

    /// Answer a 2025 host's `initialize`: from the remote's own `InitializeResult` (2025
    /// remote) or from its `server/discover` result (2026 remote).
    pub async fn host_initialize(self: &Arc<Self>, requested: Option<String>) -> Outcome {
        let mode = match self.mode().await {
            Ok(m) => m,
            Err(f) => return self.fault_outcome(&f),
        };
        match mode {
            Mode::Legacy { version } => match self.ensure_session(&version).await {
                Ok(s) => Outcome::Result(jsonrpc::raw(s.init_result.get())),
                Err(f) => self.fault_outcome(&f),
            },
            Mode::Modern => {
                let d = match self.discover_result().await {
                    Ok(d) => d,
                    Err(o) => return o,
                };
                let version = protocol::negotiate_legacy(requested.as_deref());
                let r = crate::era::lifecycle::initialize_from(Some(&d), version);
                Outcome::Result(jsonrpc::raw(&r))
            }
        }
    }

    /// The 2026 remote's `server/discover` result (cached once known).
    async fn discover_result(self: &Arc<Self>) -> Result<Arc<RawValue>, Outcome> {
        let cached = self
            .discover
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(d) = cached {
            return Ok(d);
        }
        let call = Call {
            method: "server/discover".into(),
            params: Some(jsonrpc::raw(&format!(
                "{{\"_meta\":{}}}",
                self.modern_meta()
            ))),
            ctx: crate::call::CallCtx::modern(),
        };
        let (tx, _rx) = mpsc::channel(1);
        match self.call(call, tx).await {
            Outcome::Result(r) => Ok(Arc::from(r)),
            other => Err(other),
        }
    }

    /// What a face in front of this remote needs to know: its era and its `InitializeResult`
    /// (2025, opening the session) or its `server/discover` result (2026).
    pub async fn probe_info(self: &Arc<Self>) -> Result<(Era, Arc<RawValue>), Outcome> {
        match self.mode().await.map_err(|f| self.fault_outcome(&f))? {
            Mode::Legacy { version } => match self.ensure_session(&version).await {
                Ok(s) => Ok((Era::Legacy, Arc::from(jsonrpc::raw(s.init_result.get())))),
                Err(f) => Err(self.fault_outcome(&f)),
            },
            Mode::Modern => Ok((Era::Modern, self.discover_result().await?)),
        }
    }

    /// `Mcp-Param-*` rules of a tool from the remote's last `tools/list`: (lower-case header
    /// name, property).
    pub fn tool_param_rules(&self, name: &str) -> Vec<(String, String)> {
        self.tool(name)
            .map(|t| {
                t.headers
                    .iter()
                    .map(|(h, p)| (h.to_ascii_lowercase(), p.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Carry one call to the remote. Dropping the future cancels it there.
    pub async fn call(self: &Arc<Self>, call: Call, events: mpsc::Sender<CallEvent>) -> Outcome {
        let fut = self.call_inner(&call, &events);
        // A listen stream stays open as long as its subscriber wants: no request timeout.
        let limit = self
            .cfg
            .request_timeout
            .filter(|_| call.method != "subscriptions/listen");
        let o = match limit {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(o) => o,
                Err(_) => {
                    warn!("{} timed out after {} ms", call.method, t.as_millis());
                    self.obs.cancelled("timeout");
                    self.fault_outcome(&Fault::Timeout(t.as_millis() as u64))
                }
            },
            None => fut.await,
        };
        self.obs.answered(&call, &o);
        o
    }

    async fn call_inner(
        self: &Arc<Self>,
        call: &Call,
        events: &mpsc::Sender<CallEvent>,
    ) -> Outcome {
        let mode = match self.mode().await {
            Ok(m) => m,
            Err(f) => return self.fault_outcome(&f),
        };
        match mode {
            Mode::Modern => self.call_modern(call, events).await,
            Mode::Legacy { version } => self.call_legacy(call, events, &version).await,
        }
    }

    fn retry_safe(&self, call: &Call) -> bool {
        if !self.cfg.retry_idempotent {
            return false;
        }
        if call.method != "tools/call" {
            // Reads and lists have no side effects.
            return matches!(
                call.method.as_str(),
                "tools/list"
                    | "prompts/list"
                    | "prompts/get"
                    | "resources/list"
                    | "resources/read"
                    | "resources/templates/list"
                    | "server/discover"
            );
        }
        jsonrpc::Fields::parse(call.params.as_deref().unwrap_or(&jsonrpc::raw("{}")))
            .and_then(|f| f.get("name").map(|n| n.get().to_owned()))
            .and_then(|n| serde_json::from_str::<String>(&n).ok())
            .and_then(|n| self.tool(&n))
            .is_some_and(|t| t.retry_safe)
    }

    async fn call_modern(
        self: &Arc<Self>,
        call: &Call,
        events: &mpsc::Sender<CallEvent>,
    ) -> Outcome {
        // A 2025 host's `logging/setLevel` never gets here: the stdio face keeps the level and
        // stamps it on the host's later requests as `_meta` logLevel.
        let legacy_host = call.ctx.client_era == Era::Legacy;
        let stamped;
        let mut params = call.params.as_deref();
        if !call.ctx.stamp_meta.is_empty() {
            let add: Vec<(&str, &RawValue)> = call
                .ctx
                .stamp_meta
                .iter()
                .map(|(k, v)| (k.as_str(), &**v))
                .collect();
            if let Some(p) = jsonrpc::rewrite_request_params(params, None, &add) {
                stamped = jsonrpc::raw(&p);
                params = Some(&stamped);
            }
        }
        let version = jsonrpc::meta_field(params, protocol::META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .unwrap_or_else(|| protocol::MODERN.to_owned());
        if call.method == "tools/call" {
            let name = params
                .and_then(Fields::parse)
                .and_then(|f| f.get("name").map(|n| n.get().to_owned()))
                .and_then(|n| serde_json::from_str::<String>(&n).ok());
            if let Some(n) = name {
                if self.tool(&n).is_none() {
                    self.refresh_tools().await;
                }
            }
        }
        let mut header_retry_left = true;
        let mut transport_retry_left = self.retry_safe(call);
        loop {
            let mut h = self.modern_headers(&version, &call.method);
            self.name_headers(&mut h, &call.method, params);
            let id = self.mint();
            let frame = jsonrpc::request(&id.to_string(), &call.method, params.map(RawValue::get));
            let ans = match self.exchange(frame, &h, Some(id), Some(events), None).await {
                Ok(a) => a,
                Err(f)
                    if transport_retry_left
                        && f.may_have_reached()
                        && !matches!(f, Fault::Timeout(_)) =>
                {
                    warn!(
                        "{} failed ({}); retrying once (--retry-idempotent)",
                        call.method,
                        f.reason()
                    );
                    transport_retry_left = false;
                    continue;
                }
                Err(f) => return self.fault_outcome(&f),
            };
            let Some(frame) = ans.frame else {
                return self.malformed("the remote accepted the request without answering");
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return self.malformed("unparsable response");
            };
            if let Some(e) = env.error {
                if protocol::error_code(e) == Some(code::HEADER_MISMATCH) && header_retry_left {
                    info!(
                        "{} rejected with -32020: refreshing the tool list and retrying once",
                        call.method
                    );
                    header_retry_left = false;
                    self.refresh_tools().await;
                    continue;
                }
                return Outcome::Error(ToOwned::to_owned(e));
            }
            let Some(r) = env.result else {
                return self.malformed("response without result");
            };
            let filtered = if call.method == "tools/list" {
                self.learn_tools(r, true).map(|f| jsonrpc::raw(&f))
            } else {
                None
            };
            let r: &RawValue = filtered.as_deref().unwrap_or(r);
            if legacy_host
                && memchr::memmem::find(r.get().as_bytes(), b"input_required").is_some()
                && Fields::parse(r)
                    .and_then(|f| f.get("resultType").map(|v| v.get() == "\"input_required\""))
                    == Some(true)
            {
                // Left as it is: the stdio face turns it into requests to the 2025 host and
                // retries with the answers.
                return Outcome::Result(ToOwned::to_owned(r));
            }
            if legacy_host {
                // 2025 hosts do not know `resultType`/`ttlMs`/`cacheScope`.
                if let Some(t) = protocol::modern_result_to_legacy(r) {
                    return Outcome::Result(jsonrpc::raw(&t));
                }
            }
            return Outcome::Result(ToOwned::to_owned(r));
        }
    }

    async fn call_legacy(
        self: &Arc<Self>,
        call: &Call,
        events: &mpsc::Sender<CallEvent>,
        version: &str,
    ) -> Outcome {
        let modern_host = call.ctx.client_era == Era::Modern;
        let mut session_retry_left = true;
        let mut transport_retry_left = self.retry_safe(call);
        loop {
            let s = match self.ensure_session(version).await {
                Ok(s) => s,
                Err(f) => return self.fault_outcome(&f),
            };
            if call.method == "server/discover" {
                return Outcome::Result(jsonrpc::raw(&discover_from_init(&s.init_result)));
            }
            let id = self.mint();
            let stripped = modern_host
                .then(|| call.params.as_deref().and_then(strip_modern_meta))
                .flatten();
            let params = stripped
                .as_deref()
                .or(call.params.as_deref().map(RawValue::get));
            let frame = jsonrpc::request(&id.to_string(), &call.method, params);
            // The exchange runs in its own task so that a cancelled call can post
            // `notifications/cancelled` *before* its response stream is closed (a 2025 server
            // may forget the request once its stream is gone).
            let task = {
                let me = Arc::clone(self);
                let events = events.clone();
                let s = s.clone();
                tokio::spawn(async move {
                    let h = me.session_headers(&s);
                    me.exchange(frame, &h, Some(id), Some(&events), Some(&s))
                        .await
                })
            };
            let mut guard = CancelGuard {
                remote: Arc::clone(self),
                session: s.clone(),
                id,
                armed: true,
                exchange: Some(task.abort_handle()),
            };
            let res = task
                .await
                .unwrap_or_else(|e| Err(Fault::Broken(format!("internal: {e}"))));
            guard.armed = false;
            let ans = match res {
                Ok(a) => a,
                Err(Fault::SessionGone) => {
                    // A 404 means the request was not processed: safe to send again.
                    self.drop_session(s.generation).await;
                    if session_retry_left {
                        session_retry_left = false;
                        continue;
                    }
                    return self.fault_outcome(&Fault::SessionGone);
                }
                Err(f) if transport_retry_left && f.may_have_reached() => {
                    warn!(
                        "{} failed ({}); retrying once (--retry-idempotent)",
                        call.method,
                        f.reason()
                    );
                    transport_retry_left = false;
                    continue;
                }
                Err(f) => {
                    if let Fault::Broken(_) = f {
                        // The stream died: maybe the session went with it; check lazily.
                        debug!("{} lost its response stream", call.method);
                    }
                    return self.fault_outcome(&f);
                }
            };
            let Some(frame) = ans.frame else {
                return self.malformed("the remote accepted the request without answering");
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return self.malformed("unparsable response");
            };
            if let Some(e) = env.error {
                return Outcome::Error(ToOwned::to_owned(e));
            }
            let Some(r) = env.result else {
                return self.malformed("response without result");
            };
            if call.method == "tools/list" {
                let _ = self.learn_tools(r, false);
            }
            if modern_host {
                if let Some(t) = protocol::legacy_result_to_modern(&call.method, r) {
                    return Outcome::Result(jsonrpc::raw(&t));
                }
            }
            return Outcome::Result(ToOwned::to_owned(r));
        }
    }

    /// Send the host's answer to a 2025 server request back under the remote's id.
    pub async fn respond(
        self: &Arc<Self>,
        remote_id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) {
        let Ok(Mode::Legacy { version }) = self.mode().await else {
            return;
        };
        let frame = match (result, error) {
            (Some(r), _) => jsonrpc::result(remote_id.get(), r.get()),
            (None, Some(e)) => jsonrpc::error_raw(Some(remote_id.get()), e.get()),
            (None, None) => return,
        };
        let Ok(s) = self.ensure_session(&version).await else {
            return;
        };
        if let Err(f) = self
            .exchange(frame, &self.session_headers(&s), None, None, Some(&s))
            .await
        {
            warn!("could not deliver an answer to the remote: {}", f.reason());
        }
    }

    /// Forward a host notification (2025 remote only; 2026 has no client notifications on HTTP).
    pub async fn notify(self: &Arc<Self>, method: &str, params: Option<&RawValue>) {
        let Ok(Mode::Legacy { version }) = self.mode().await else {
            debug!("dropping host notification {method}: a 2026 remote takes none");
            return;
        };
        let Ok(s) = self.ensure_session(&version).await else {
            return;
        };
        let frame = jsonrpc::notification(method, params.map(RawValue::get));
        if let Err(f) = self
            .exchange(frame, &self.session_headers(&s), None, None, Some(&s))
            .await
        {
            warn!("could not deliver {method} to the remote: {}", f.reason());
        }
    }

    /// End: stop the GET stream, DELETE the session, wait (bounded) for cancellations in flight.
    pub async fn shutdown(&self) {
        if let Some(t) = self
            .get_stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.cancel();
        }
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(3), self.tracker.wait()).await;
        let s = self.session.lock().await.take();
        if let Some(s) = s.filter(|s| s.id.is_some()) {
            let req = self.request(Method::DELETE, &self.session_headers(&s), Bytes::new());
            let sent = Instant::now();
            match tokio::time::timeout(Duration::from_secs(3), self.client.request(req)).await {
                Ok(Ok(r)) => {
                    let secs = sent.elapsed().as_secs_f64();
                    self.obs.http_answer("DELETE", r.status().as_u16(), secs);
                    info!("session ended (DELETE: HTTP {})", r.status().as_u16())
                }
                Ok(Err(e)) => debug!("DELETE failed: {}", chain(&e)),
                Err(_) => debug!("DELETE timed out"),
            }
        }
    }
}

/// Posts `notifications/cancelled` to a 2025 remote when a call is dropped unanswered.
struct CancelGuard {
    remote: Arc<Remote>,
    session: Session,
    id: u64,
    armed: bool,
    /// The exchange to stop once the cancellation is delivered.
    exchange: Option<tokio::task::AbortHandle>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let remote = Arc::clone(&self.remote);
        let s = self.session.clone();
        let id = self.id;
        info!("cancelling request {id} on the remote");
        let params = format!("{{\"requestId\":{id},\"reason\":\"cancelled by the client\"}}");
        let frame = jsonrpc::notification("notifications/cancelled", Some(&params));
        let exchange = self.exchange.take();
        if tokio::runtime::Handle::try_current().is_ok() {
            self.remote.tracker.spawn(async move {
                let h = remote.session_headers(&s);
                if let Err(f) = remote.exchange(frame, &h, None, None, Some(&s)).await {
                    debug!("notifications/cancelled not delivered: {}", f.reason());
                }
                if let Some(x) = exchange {
                    x.abort();
                }
            });
        } else if let Some(x) = exchange {
            x.abort();
        }
    }
}

/// Params of a 2026 request without the 2026-only `_meta` keys (protocol version, client
/// capabilities/info, log level), for a 2025 remote. None when there is nothing to remove.
fn strip_modern_meta(params: &RawValue) -> Option<String> {
    const KEYS: [&str; 4] = [
        protocol::META_PROTOCOL_VERSION,
        protocol::META_CLIENT_CAPABILITIES,
        protocol::META_CLIENT_INFO,
        protocol::META_LOG_LEVEL,
    ];
    let p = Fields::parse(params)?;
    let meta = Fields::parse(p.get("_meta")?)?;
    if !meta.0.iter().any(|(k, _)| KEYS.contains(&k.as_ref())) {
        return None;
    }
    let kept: Vec<_> = meta
        .0
        .iter()
        .filter(|(k, _)| !KEYS.contains(&k.as_ref()))
        .cloned()
        .collect();
    let mut fields: Vec<_> = p.0.iter().filter(|(k, _)| k != "_meta").cloned().collect();
    let mut buf = BytesMut::new();
    let new_meta;
    if !kept.is_empty() {
        jsonrpc::write_object(&mut buf, &kept);
        new_meta = jsonrpc::raw(std::str::from_utf8(&buf).ok()?);
        fields.push((std::borrow::Cow::Borrowed("_meta"), &*new_meta));
    }
    let mut out = BytesMut::new();
    jsonrpc::write_object(&mut out, &fields);
    String::from_utf8(out.to_vec()).ok()
}

/// A 2026 `DiscoverResult` built from a 2025 `InitializeResult`.
/// A 2025 remote's `InitializeResult` as a 2026 `server/discover` result.
fn discover_from_init(init: &RawValue) -> String {
    crate::era::lifecycle::discover_from_initialize(Some(init))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_errors_are_classified() {
        assert_eq!(
            classify_connect("dns error: failed to lookup address"),
            "dns"
        );
        assert_eq!(
            classify_connect("invalid peer certificate: UnknownIssuer"),
            "tls"
        );
        assert_eq!(
            classify_connect("tcp connect error: Connection refused"),
            "unreachable"
        );
    }

    #[test]
    fn auth_errors_name_the_flags() {
        let e = Fault::Auth(401)
            .bridge_error("https://x", false)
            .error_object();
        assert!(e.contains("--bearer-token-file"), "{e}");
        assert!(e.contains("--bearer-token-env"), "{e}");
        assert!(e.contains("\"reason\":\"unauthorized\""), "{e}");
        assert!(!Fault::Auth(403).may_have_reached());
        assert!(Fault::Broken("x".into()).may_have_reached());
    }

    #[test]
    fn modern_meta_is_stripped_for_2025() {
        let p = jsonrpc::raw(
            r#"{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7}}"#,
        );
        assert_eq!(
            strip_modern_meta(&p).unwrap(),
            r#"{"name":"x","_meta":{"progressToken":7}}"#
        );
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#);
        assert_eq!(strip_modern_meta(&p).unwrap(), "{}");
        assert_eq!(strip_modern_meta(&jsonrpc::raw(r#"{"a":1}"#)), None);
    }

    #[test]
    fn discover_from_initialize() {
        let d = discover_from_init(&jsonrpc::raw(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}"#,
        ));
        let v: serde_json::Value = serde_json::from_str(&d).unwrap();
        assert_eq!(v["supportedVersions"][0], protocol::MODERN);
        assert_eq!(v["_meta"][protocol::META_SERVER_INFO]["name"], "s");
        assert_eq!(v["cacheScope"], "private");
    }
}
