//! A remote Streamable HTTP server as an upstream (`connect`): an HTTPS client (hyper over
//! rustls, HTTP/1.1 and HTTP/2 by ALPN) that finds the remote's era (a 2026 request first, then
//! `initialize`), carries calls under bridge-minted ids, reads JSON and SSE answers (progress
//! and 2025 server requests become `CallEvent`s), keeps a 2025 session (re-initialise on 404,
//! GET stream, `Last-Event-ID` resumption, DELETE at the end), sends the 2026 mirror headers
//! (`Mcp-Param-*` from the tool list), and turns every transport fault into a JSON-RPC error for
//! the call it hit. For the faces' translations across eras (through `RemoteUpstream`) it
//! tells the remote's era and probe result, whether the 2025 GET stream is open (a listen is
//! acknowledged once it is), opens a 2025 session with a host's `initialize` params, and
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

//!
//! Layout: this file holds the configuration, the `Remote` state and its public API;
//! `fault` the transport faults, `answer` how one answer is read (pure), `transport` the HTTP
//! exchange and SSE reading, `probe` era
//! detection and tool header rules, `session` the 2025 session and GET stream, `calls` the
//! calls, answers, notifications and cancellation.

mod answer;
mod calls;
mod fault;
mod probe;
mod session;
mod transport;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Uri};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{Call, EventSender, Outcome};
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::protocol::Era;
use crate::upstream::observe::RemoteObserver;

use self::fault::chain;
use self::transport::build_client;
pub use self::transport::https_client;

/// An error and its causes on one line (for a hop's or a fetch's failure).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    self::fault::chain(e)
}

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
    /// Log in with OAuth on a 401 (`connect` without a static token); None = never.
    /// (Boxed: it is large and most remotes have none.)
    pub oauth: Option<Box<crate::oauth::OAuthSettings>>,
    /// Before a `tools/call` names a tool the remote has not listed, list the tools (once):
    /// the call's metrics then carry its `tool` label, and its `Mcp-Param-*` headers and
    /// annotations are known before it is sent. Off, the call is sent at once (a 2026 remote
    /// that needs the headers answers -32020, and the list is fetched then: the spec's
    /// recovery). On for serve's remotes (their metrics are always served); `connect` turns
    /// it on only with `--metrics-listen`, so a host calling from a cached list does not
    /// wait a round trip for labels nobody scrapes.
    pub learn_tools_first: bool,
}

impl RemoteConfig {
    /// The same settings with OAuth login on (or off).
    /// The same, with OAuth asked for explicitly (any 401 logs in); None when OAuth is off.
    pub fn oauth_always(mut self) -> Option<Self> {
        let o = self.oauth.as_mut()?;
        o.trigger = crate::oauth::Trigger::Always;
        Some(self)
    }

    pub fn with_oauth(self, oauth: Option<crate::oauth::OAuthSettings>) -> Self {
        RemoteConfig {
            oauth: oauth.map(Box::new),
            ..self
        }
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

type HttpClient = crate::oauth::http::Https;

/// The remote upstream. Cheap to share (`Arc`).
pub struct Remote {
    cfg: RemoteConfig,
    client: HttpClient,
    /// The OAuth login for this server (`connect` without a static token).
    oauth: Option<crate::oauth::OAuth>,
    origin: String,
    next_id: AtomicU64,
    mode: OnceCell<Mode>,
    discover: Mutex<Option<Arc<RawValue>>>,
    session: tokio::sync::Mutex<Option<Session>>,
    generation: AtomicU64,
    /// The host's `initialize` params (`connect`; empty for a shared remote), reused for
    /// (re-)initialising a 2025 remote.
    pub(super) hello: Arc<crate::core::Hello>,
    tools: Mutex<HashMap<String, ToolInfo>>,
    /// Consecutive connection failures and when the next attempt may go out.
    failures: Mutex<(u32, Option<Instant>)>,
    /// Traffic belonging to no call (2025 GET stream) for the face.
    events: EventSender,
    get_stream: Mutex<Option<CancellationToken>>,
    /// Where the 2025 GET stream stands (`GET_*`), so that a listen is acknowledged once
    /// notifications can flow.
    get_state: tokio::sync::watch::Sender<u8>,
    /// The level the 2025 session logs at for 2026 hosts, and the lock that orders its changes.
    log_floor: crate::era::notifications::LogFloor,
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

impl Remote {
    /// Create the upstream. `events` receives traffic that belongs to no call; its traffic is
    /// counted in `metrics` under the server name `server`.
    /// The client for `cfg`; a 2025 session is opened with what `hello` holds by then (the
    /// bridge's own client info and every capability when it holds nothing).
    pub fn new(
        cfg: RemoteConfig,
        events: EventSender,
        metrics: Arc<Metrics>,
        server: &str,
        hello: Arc<crate::core::Hello>,
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
        let oauth = match &cfg.oauth {
            Some(o) => Some(crate::oauth::OAuth::new(
                (**o).clone(),
                &cfg.url.to_string(),
                client.clone(),
            )?),
            None => None,
        };
        Ok(Arc::new(Self {
            cfg,
            client,
            oauth,
            origin,
            next_id: AtomicU64::new(1),
            mode: OnceCell::new(),
            discover: Mutex::new(None),
            session: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
            hello,
            tools: Mutex::new(HashMap::new()),
            failures: Mutex::new((0, None)),
            events,
            get_stream: Mutex::new(None),
            get_state: tokio::sync::watch::Sender::new(GET_CONNECTING),
            log_floor: crate::era::notifications::LogFloor::default(),
            log_lock: tokio::sync::Mutex::new(()),
            tracker: TaskTracker::new(),
            obs: RemoteObserver::new(metrics, server),
        }))
    }

    fn mint(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Does the OAuth client hold a token (None: OAuth is off)?
    pub fn logged_in(&self) -> Option<bool> {
        self.oauth.as_ref().map(|o| o.logged_in())
    }

    /// The remote's era if it is known already (no probe).
    pub fn known_era(&self) -> Option<Era> {
        match self.mode.get()? {
            Mode::Modern => Some(Era::Modern),
            Mode::Legacy { .. } => Some(Era::Legacy),
        }
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
        let (tx, _rx) = crate::call::event_queue(1);
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
        let (tx, _rx) = crate::call::event_queue(1);
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

/// The smallest surface the fuzz targets (`fuzz/`) need: the answer to one POST read from its
/// parts (status, content type, body chunks) by the functions `transport` uses, without a
/// socket. Not part of the bridge's API.
#[doc(hidden)]
pub mod fuzzing {
    use bytes::{Bytes, BytesMut};
    use http::StatusCode;

    use super::answer::{self, Head};
    use super::fault::Fault;
    use crate::call::CallEvent;
    use crate::framing::SseDecoder;

    /// What the exchange made of an answer.
    #[derive(Debug)]
    pub struct Read {
        /// The response frame handed to the call.
        pub frame: Option<Bytes>,
        /// Notifications and server requests met in an event stream, in order.
        pub events: Vec<CallEvent>,
        /// The fault's accounting reason, when the answer was not usable.
        pub fault: Option<&'static str>,
    }

    /// Read an answer as `exchange_once` does (without the 2025 stream resumption).
    pub fn read_answer(
        status: u16,
        content_type: &str,
        in_session: bool,
        our_id: Option<u64>,
        chunks: &[&[u8]],
        max: usize,
    ) -> Read {
        let mut events = Vec::new();
        let r = read(
            status,
            content_type,
            in_session,
            our_id,
            chunks,
            max,
            &mut events,
        );
        let (frame, fault) = match r {
            Ok(f) => (f, None),
            Err(f) => (None, Some(f.reason())),
        };
        Read {
            frame,
            events,
            fault,
        }
    }

    fn read(
        status: u16,
        content_type: &str,
        in_session: bool,
        our_id: Option<u64>,
        chunks: &[&[u8]],
        max: usize,
        met: &mut Vec<CallEvent>,
    ) -> Result<Option<Bytes>, Fault> {
        let status = StatusCode::from_u16(status).map_err(|_| Fault::Malformed("status".into()))?;
        match answer::classify(status, content_type, in_session)? {
            Head::Accepted => Ok(None),
            Head::Stream => {
                let Some(id) = our_id else { return Ok(None) };
                let mut dec = SseDecoder::new(max);
                for c in chunks {
                    dec.push(c);
                    if let Some(f) = answer::drain_sse(&mut dec, Some(id), false, met)? {
                        return Ok(Some(f));
                    }
                }
                answer::drain_sse(&mut dec, Some(id), true, met)?
                    .map(Some)
                    .ok_or_else(|| {
                        Fault::Broken("the response stream ended without an answer".into())
                    })
            }
            Head::Body => {
                let mut buf = BytesMut::new();
                for c in chunks {
                    if !status.is_success() {
                        answer::append_bounded(&mut buf, c, max)?;
                    } else if let Some(f) = answer::feed_json(&mut buf, c, max, met)? {
                        return Ok(Some(f));
                    }
                }
                answer::json_answer(status, buf.freeze())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fault::{connect_reason, Fault};
    use super::probe::discover_from_init;
    use super::*;
    use crate::protocol;

    #[test]
    fn a_rustls_error_nested_in_io_errors_is_tls() {
        use std::io::{Error, ErrorKind};
        let corrupt = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let nested = Error::other(Error::new(ErrorKind::InvalidData, corrupt));
        assert_eq!(connect_reason(&nested), "tls");
        let refused = Error::new(ErrorKind::ConnectionRefused, "Connection refused");
        assert_eq!(connect_reason(&refused), "unreachable");
    }

    #[test]
    fn a_connect_deadline_is_connect_timeout() {
        use std::io::{Error, ErrorKind};
        // As the connector reports it: TimedOut around "deadline has elapsed", in another.
        let deadline = Error::new(ErrorKind::TimedOut, "deadline has elapsed");
        assert_eq!(connect_reason(&Error::other(deadline)), "connect_timeout");
    }

    #[test]
    fn connect_errors_are_classified_by_their_text() {
        let reason = |text: &str| connect_reason(&std::io::Error::other(text.to_owned()));
        assert_eq!(reason("dns error: failed to lookup address"), "dns");
        assert_eq!(reason("invalid peer certificate: UnknownIssuer"), "tls");
        assert_eq!(
            reason("tcp connect error: Connection refused"),
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
