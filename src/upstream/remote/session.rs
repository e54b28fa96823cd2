//! The 2025 session of the remote upstream: `initialize`, the session headers, re-initialising
//! after a lost session, the GET stream loop and its (re)opening.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT};
use http::{HeaderMap, Method, StatusCode};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::fault::Fault;
use super::transport::header_str;
use super::{Remote, Session, GET_CONNECTING, GET_NONE, GET_OPEN};
use crate::framing::SseDecoder;
use crate::jsonrpc::{self, Envelope};
use crate::protocol;

/// How long a new session's first call waits for the GET stream to open (or be refused).
const GET_READY_WAIT: Duration = Duration::from_secs(1);

impl Remote {
    pub(super) fn session_headers(&self, s: &Session) -> HeaderMap {
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
    pub(super) async fn ensure_session(self: &Arc<Self>, version: &str) -> Result<Session, Fault> {
        let g = self.session.lock().await;
        if let Some(s) = &*g {
            return Ok(s.clone());
        }
        // Boxed: every call's future would otherwise carry the opening's (`mode`).
        Box::pin(self.open_session(g, version)).await
    }

    /// Open a session while holding the lock `g` (other calls wait for it).
    async fn open_session(
        self: &Arc<Self>,
        mut g: tokio::sync::MutexGuard<'_, Option<Session>>,
        version: &str,
    ) -> Result<Session, Fault> {
        let s = self.initialize_remote(version).await?;
        *g = Some(s.clone());
        drop(g);
        self.start_get_stream(s.clone());
        // The first call waits (briefly) for the GET stream: a server may send a request for
        // that call on it, and some (the TypeScript SDK's) drop what they would send there
        // while no GET stream is open, which would leave the call waiting for ever.
        if !self.wait_get_stream(GET_READY_WAIT).await {
            debug!(
                "GET stream not open within {} ms: going on without it",
                GET_READY_WAIT.as_millis()
            );
        }
        Ok(s)
    }

    /// Forget session `generation` (after a 404) so the next call starts a new one.
    pub(super) async fn drop_session(&self, generation: u64) {
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

    pub(super) async fn initialize_remote(&self, version: &str) -> Result<Session, Fault> {
        let host = self
            .hello
            .get()
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
    pub(super) fn start_get_stream(self: &Arc<Self>, s: Session) {
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

    pub(super) async fn get_stream_loop(&self, s: Session) {
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
                    self.get_state.send_replace(GET_NONE);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
                Err(f) => {
                    self.count_fault(&f);
                    self.get_state.send_replace(GET_NONE);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }
}
