//! The 2025 session endpoints of the HTTP face: `initialize` (which mints a session and, with
//! `--isolation session`, its own child), POSTs on a session (notifications, the client's
//! answers to server requests, requests), the session's GET stream and DELETE.
//!
//! The GET stream carries what the upstream sends outside any call. A 2026 upstream has no
//! such stream, so the session's GET stream holds a `subscriptions/listen` of the bridge's own
//! on it (`core::held`, the same rules as connect's stdio face: filter, re-opening, backoff)
//! and writes out what that yields; a child restart re-opens it, so the stream never goes
//! silent while it stays open. Calls go through `run` like every other POST
//! (or `rounds`, for a 2026 upstream that may ask for input); this module reaches down to
//! those, `respond`, `session` and the state, never up to `post` or `http`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::call::{CallCtx, UpstreamEvent};
use crate::core::held::HeldListen;
use crate::face::replay;
use crate::face::respond::{self, rpc_error, status_only, Body};
use crate::face::run::{accepts, header_str, tool_name, CallRequest, PostCtx};
use crate::face::session::{mint_id, InflightGuard, Session};
use crate::face::state::App;
use crate::framing;
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::protocol::{self, Era};

/// `initialize`: a new 2025 session (refused when the face holds `max_sessions` already).
pub async fn initialize(app: &Arc<App>, pc: &PostCtx<'_>) -> Response<Body> {
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
    let sid = match &app.cfg.cluster {
        Some(c) => c.mint_session_id(),
        None => mint_id(),
    };
    let Some(sid) = sid else {
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
            app.meter.refused("initialize", code::UPSTREAM_UNAVAILABLE);
            return respond::json(StatusCode::OK, jsonrpc::error_raw(id, &e.error_object()));
        }
    };
    let session = Arc::new(Session::new(
        sid.clone(),
        version.to_owned(),
        crate::core::caller::Caller::initialized(pc.env.params),
        upstream,
        owns,
        app.metrics.sessions("2025"),
    ));
    let streams = session.streams.clone();
    app.sessions.insert(session);
    info!(session = %&sid[..8], version, "2025 session started");
    let body = jsonrpc::result(
        id.unwrap_or("null"),
        &crate::core::initialize_result(&info, version),
    );
    let mut r = if pc.accept_json || !pc.accept_sse {
        respond::json(StatusCode::OK, body)
    } else {
        let log = protocol::resumable_sse(version)
            .then(|| replay::StreamLog::open(replay::StreamKind::Post, app.cfg.replay))
            .flatten();
        let sse = match log {
            // A 2025-11-25 client's stream is resumable, this one-event stream too.
            Some(log) => {
                log.push(&body);
                log.end();
                streams.insert(log.clone());
                log.backlog_from(0).concat().into()
            }
            _ => framing::sse_event(&body),
        };
        let mut r = Response::new(respond::full(sse));
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

/// A POST on a 2025 session: a notification, the client's answer to a server request, or a
/// request.
pub async fn session_post(app: &Arc<App>, pc: &PostCtx<'_>) -> Response<Body> {
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
    match pc.kind {
        Kind::Notification => session_notification(&s, pc).await,
        Kind::Response => session_answer(app, &s, pc),
        Kind::Request => session_request(app, &s, pc).await,
    }
}

/// A session's notification: a cancellation is the bridge's to act on; others go to a 2025
/// child as they are (a 2026 child has no session to tell).
async fn session_notification(s: &Session, pc: &PostCtx<'_>) -> Response<Body> {
    match pc.env.method() {
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

/// The client answers a request: one the bridge made on a 2026 upstream's behalf, or one the
/// 2025 child made (forwarded under the child's own id).
fn session_answer(app: &App, s: &Session, pc: &PostCtx<'_>) -> Response<Body> {
    let rid = pc.env.id.map(RawValue::get).unwrap_or("null");
    let answer = match (pc.env.result, pc.env.error) {
        (Some(r), _) => Ok(r.to_owned()),
        (None, Some(e)) => Err(e.to_owned()),
        (None, None) => Err(jsonrpc::raw("{}")),
    };
    if s.caller.deliver_answer(rid, answer) {
        // An answer to a request the bridge made on a 2026 upstream's behalf.
    } else if s.take_server_request(rid) {
        if let Err(e) = s.upstream.send_response(framing::single_line(pc.body)) {
            warn!("could not forward the client's answer to the child: {e}");
        }
    } else {
        app.meter.dropped("unknown_id");
        debug!(
            id = rid,
            "client answered a request the bridge did not send it; dropped"
        );
    }
    status_only(StatusCode::ACCEPTED)
}

/// A session's request: answered by the bridge (ping, and what a 2026 child has no
/// counterpart for), run in `input_required` rounds (a 2026 child that may ask for input), or
/// run as one call.
async fn session_request(app: &Arc<App>, s: &Arc<Session>, pc: &PostCtx<'_>) -> Response<Body> {
    let rid = pc.env.id.map(RawValue::get).unwrap_or("null");
    let method = pc.env.method();
    if method == "ping" {
        return respond::json(StatusCode::OK, jsonrpc::result(rid, "{}"));
    }
    // The era of the peer that answers (an endpoint: the member the call goes to).
    let child_era = s
        .upstream
        .call_era(method, pc.env.params, Era::Legacy, app.cfg.start_wait)
        .await
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
        s.caller.set_log_level(level);
    }
    if child_era == Era::Modern {
        // `crate::core`, rule 8.
        let kept = crate::core::kept_by_bridge(Some(child_era), method, pc.env.params, &s.subs);
        if let Some(o) = kept.await {
            return respond::outcome_json(rid, o);
        }
    }
    let ctx = CallCtx {
        client_era: Era::Legacy,
        stamp_meta: s.caller.call_meta(),
        session: Some(s.id.clone()),
        // Asked only on a stream, and only what it declared at `initialize`.
        accepts_server_requests: pc.accept_sse
            && crate::era::mrtr::declares_any_input(s.client_caps().as_deref()),
        log_level: Some(s.caller.log_level().unwrap_or("debug")),
        tool: tool_name(method, &pc.view),
        // A 2025 caller's tasks are its session's (the session id is its secret).
        owner: Some(s.id.clone()),
        who: pc.who.clone(),
    };
    let Some(cancel) = s.begin_call(rid) else {
        let msg =
            "mcp-bridge: too many requests in flight on this session; retry once some are answered";
        // Counted once, as the bridge's answer (`observe::answered`).
        return rpc_error(
            StatusCode::OK,
            Some(rid),
            code::UPSTREAM_UNAVAILABLE,
            msg,
            None,
        );
    };
    let done = InflightGuard {
        session: s.clone(),
        id: rid.to_owned(),
        cancel: cancel.clone(),
        detached: None,
    };
    if child_era == Era::Modern && crate::era::mrtr::is_mrtr_method(method) {
        return crate::face::rounds::run(app.clone(), pc, s.clone(), ctx, cancel, done).await;
    }
    let params = pc.env.params.map(|p| p.to_owned());
    let upstream = s.upstream.clone();
    let call = CallRequest::new(&upstream, method, params, ctx, cancel).in_session(s.clone(), done);
    app.run_call(pc, call).await
}

/// A top-level params field as raw JSON text.
fn jsonrpc_field(params: Option<&RawValue>, key: &str) -> Option<String> {
    Fields::parse(params?)?.get(key).map(|v| v.get().to_owned())
}

/// The listen held on the session's child for its GET stream (it stays dormant while the
/// child speaks 2025: those notifications come on the child's own stream).
fn held_listen(s: &Arc<Session>) -> HeldListen {
    let me = Arc::clone(s);
    let ctx = move || CallCtx {
        client_era: Era::Legacy,
        stamp_meta: me.caller.call_meta(),
        session: Some(me.id.clone()),
        accepts_server_requests: false,
        log_level: None,
        tool: None,
        owner: Some(me.id.clone()),
        who: None,
    };
    HeldListen::new(s.upstream.clone(), Arc::clone(&s.subs), Box::new(ctx))
}

/// GET on a session: its stream of what the upstream sends outside any call (one per
/// session). A 2026 client has no GET stream.
pub async fn get_stream(app: &Arc<App>, h: &HeaderMap) -> Response<Body> {
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
    let resumable = protocol::resumable_sse(&s.version);
    let mut log = None;
    if resumable {
        if let Some(last) = header_str(h, "last-event-id") {
            match resume(app, &s, last) {
                Resumed::Get(l, backlog) => log = Some((l, backlog)),
                Resumed::Answer(r) => return r,
            }
        }
    }
    // Subscribed before an older stream is ended: what the upstream sends meanwhile reaches
    // this stream (the old one may have written some of it too: a repeat, never a loss).
    let rx = s.upstream.subscribe();
    if s.get_stream_open.load(Ordering::Acquire) {
        // A second GET takes the place of the first: a client that reopens its stream (one
        // resuming it, or one that reconnects without closing the old, as some hosts do) has
        // given up on the old one, even if the bridge has not noticed yet. The old stream
        // ends cleanly at its next poll.
        s.stop_get_stream();
        for _ in 0..100 {
            if !s.get_stream_open.load(Ordering::Acquire) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        debug!(session = %&s.id[..s.id.len().min(8)], "a new GET stream replaces the session's open one");
    }
    if s.get_stream_open.swap(true, Ordering::AcqRel) {
        // The old stream did not end within a second (its body is not being polled).
        return rpc_error(
            StatusCode::CONFLICT,
            None,
            code::INVALID_REQUEST,
            "Conflict: this session's GET stream is still open and did not end in time",
            None,
        );
    }
    let (log, backlog) = match log {
        Some((l, backlog)) => {
            l.reopen();
            (Some(l), backlog)
        }
        None if resumable => match replay::StreamLog::open(replay::StreamKind::Get, app.cfg.replay)
        {
            Some(l) => {
                s.streams.insert(l.clone());
                let priming = l.backlog_from(0);
                (Some(l), priming)
            }
            None => (None, Vec::new()),
        },
        None => (None, Vec::new()),
    };
    // A 2026 child has no GET stream: a listen is held on it for this session instead.
    let held = held_listen(&s);
    let st = GetStream {
        stop: s.get_stream_token(),
        s,
        held,
        log,
        backlog: backlog.into(),
        rx,
        stopping: app.stopping.clone(),
        keepalive: app.cfg.keepalive,
        metrics: app.metrics.clone(),
        _g: respond::GaugeGuard::new(app.metrics.sse_streams().clone()),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let bytes = st.next_bytes().await?;
        Some((Ok::<_, Infallible>(hyper::body::Frame::data(bytes)), st))
    });
    respond::sse_response(BodyExt::boxed_unsync(http_body_util::StreamBody::new(
        stream,
    )))
}

/// What a GET with `Last-Event-ID` comes to.
enum Resumed {
    /// The session's GET stream, resumed: its log and the events to write again first.
    Get(Arc<replay::StreamLog>, Vec<Bytes>),
    /// Answered here: a POST stream's rest, or the refusal.
    Answer(Response<Body>),
}

/// A 2025-11-25 client resumes a stream of its session from `last` (`Last-Event-ID`): the
/// events after it are replayed, then the stream goes on (a POST's up to its final answer).
/// An id that names nothing replayable is a 400, counted by why.
fn resume(app: &App, s: &Session, last: &str) -> Resumed {
    let found = s
        .streams
        .locate(last)
        .and_then(|(log, seq)| log.backlog(seq).map(|b| (log, seq, b)));
    let (log, seq, backlog) = match found {
        Ok(f) => f,
        Err(why) => {
            app.metrics.sse_resumption(why.label());
            debug!(reason = why.label(), "Last-Event-ID not resumable");
            return Resumed::Answer(rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "Bad Request: Last-Event-ID names no stream of this session that can be resumed \
                 from there (unknown, expired, or its events left the replay buffer)",
                Some(&json!({ "reason": why.label() })),
            ));
        }
    };
    app.metrics.sse_resumption("replayed");
    match log.kind {
        replay::StreamKind::Get => Resumed::Get(log, backlog),
        replay::StreamKind::Post => {
            let cfg = replay::ReaderCfg {
                keepalive: app.cfg.keepalive,
                metrics: app.metrics.clone(),
            };
            Resumed::Answer(respond::sse_response(replay::reader(log, seq + 1, cfg)))
        }
    }
}

/// One session's open GET stream. Dropping it (the client went, the session ended, shutdown)
/// marks the session's stream closed and releases the held listen call.
struct GetStream {
    s: Arc<Session>,
    /// The listen held on a 2026 child for this session.
    held: HeldListen,
    /// A 2025-11-25 session's: every event written is numbered and kept here.
    log: Option<Arc<replay::StreamLog>>,
    /// Written before anything new: the priming event, or a resumed stream's replay.
    backlog: std::collections::VecDeque<Bytes>,
    /// Cancelled when a resumed GET stream takes this one's place (or the session ends).
    stop: CancellationToken,
    rx: broadcast::Receiver<UpstreamEvent>,
    stopping: CancellationToken,
    keepalive: Duration,
    metrics: Arc<crate::metrics::Metrics>,
    _g: respond::GaugeGuard,
}

impl Drop for GetStream {
    fn drop(&mut self) {
        // The log first: a resumed stream may reopen it as soon as the flag is down.
        if let Some(l) = &self.log {
            l.end();
        }
        self.s.get_stream_open.store(false, Ordering::Release);
        self.s.touch();
    }
}

/// What to do with one thing that arrived for the stream.
enum Then {
    Send(Bytes),
    Skip,
    /// The upstream restarted: what was held on the old one is gone.
    Restarted,
    End,
}

impl GetStream {
    /// The next bytes to write (an SSE event or a keep-alive); None ends the stream.
    async fn next_bytes(&mut self) -> Option<Bytes> {
        if let Some(b) = self.backlog.pop_front() {
            return Some(b);
        }
        loop {
            let ev = tokio::select! {
                ev = self.rx.recv() => ev,
                f = self.held.next() => return Some(self.event(&f)),
                _ = tokio::time::sleep(self.keepalive) => {
                    self.s.touch();
                    return Some(Bytes::from_static(framing::SSE_KEEPALIVE));
                }
                _ = self.stop.cancelled() => return None,
                _ = self.stopping.cancelled() => return None,
            };
            match self.on_upstream_event(ev) {
                Then::Send(b) => return Some(b),
                Then::Skip => continue,
                // The old child's listen is gone with it: hold one on the new child.
                Then::Restarted => self.held.reopen(),
                Then::End => return None,
            }
        }
    }

    /// One JSON frame as an SSE event (numbered and kept when the stream is resumable).
    fn event(&self, frame: &[u8]) -> Bytes {
        match &self.log {
            Some(l) => l.push(frame),
            None => framing::sse_event(frame),
        }
    }

    /// `frame` with the upstream's task ids as this session knows them (`crate::core::tasks`);
    /// None: a status notification about a task of someone else.
    fn task_view(&self, frame: Bytes) -> Option<Bytes> {
        let Some(book) = self.s.upstream.task_book() else {
            return Some(frame);
        };
        let owner = Some(self.s.id.clone());
        match book.stream_frame(&frame, &owner) {
            crate::core::tasks::Frame::Keep => Some(frame),
            crate::core::tasks::Frame::Drop => None,
            crate::core::tasks::Frame::Rewritten(f) => Some(Bytes::from(f)),
        }
    }

    /// Upstream traffic outside any call: notifications, and server requests for this session
    /// (offered to its capability gate first).
    fn on_upstream_event(&self, ev: Result<UpstreamEvent, broadcast::error::RecvError>) -> Then {
        match ev {
            Ok(UpstreamEvent::Notification(f)) => match self.task_view(f) {
                Some(f) => Then::Send(self.event(&f)),
                None => Then::Skip,
            },
            Ok(UpstreamEvent::ServerRequest { session, frame }) if session == self.s.id => {
                let Some(frame) = self.task_view(frame) else {
                    return Then::Skip;
                };
                if let Ok(env) = Envelope::parse(&frame) {
                    if let Some(id) = env.id {
                        let admitted = respond::ServerRequestSink::admit(
                            &*self.s,
                            id,
                            env.method(),
                            env.params,
                        );
                        if let Err(reason) = admitted {
                            self.metrics.dropped(reason);
                            return Then::Skip;
                        }
                    }
                }
                Then::Send(self.event(&frame))
            }
            Ok(UpstreamEvent::Restarted) => Then::Restarted,
            Ok(_) => Then::Skip,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                warn!(lost = n, "GET stream fell behind; notifications lost");
                Then::Skip
            }
            Err(broadcast::error::RecvError::Closed) => Then::End,
        }
    }
}

/// DELETE on a session: the client ends it.
pub fn delete(app: &Arc<App>, h: &HeaderMap) -> Response<Body> {
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
