//! Turning a call in flight into an HTTP response: a single `application/json` body when the
//! first thing back is the final answer, otherwise a request-scoped SSE stream that carries
//! notifications and server requests, then the final answer, then ends. Dropping the stream
//! (the client hung up) drops the call handle, which cancels the call upstream.
//!
//! Era details it owns on the way out: a 2025 child's server requests are parked as
//! `input_required` for 2026 clients (`MrtrCtx`; the requests it sends at once, until it is
//! quiet for `era::park::GATHER_QUIET`, are one round) or offered to the 2025 session's capability
//! gate (`ServerRequestSink::admit`); 2025-only notifications and the `-32042` error are mapped
//! for 2026 clients as `crate::era::mrtr` describes.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::call::CallHandle;
use crate::call::{CallEvent, Outcome};
use crate::core::meter::{Meter, Tracked};
use crate::error::BridgeError;
use crate::face::replay;
use crate::framing;
pub use crate::http_util::{empty, full, json, status_only, Body};
use crate::jsonrpc::{self, code};
use crate::protocol::{self, Era};

/// How long a call may stay silent before its response switches to an SSE stream.
pub const SSE_AFTER: Duration = Duration::from_secs(1);

/// An SSE response around `body`: `text/event-stream`, no caching, no proxy buffering.
pub fn sse_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.headers_mut() = sse_headers();
    r
}

/// The headers of every SSE response, in a map sized for them: a `HeaderMap::new()` grows to
/// 32 slots at its first insert (~0.5 KB, kept for as long as the stream is open).
fn sse_headers() -> HeaderMap {
    let mut h = HeaderMap::with_capacity(3);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    h
}

/// A JSON-RPC error as an HTTP response.
pub fn rpc_error(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    msg: &str,
    data: Option<&serde_json::Value>,
) -> Response<Body> {
    let mut r = json(status, jsonrpc::error(id, code, msg, data));
    r.extensions_mut().insert(BridgeRpcError(code));
    r
}

/// A JSON answer (200) for an outcome the bridge made itself under request id `id`: a
/// result, or its own error (marked as [`rpc_error`] marks it, so that it is counted as the
/// bridge's).
pub fn outcome_json(id: &str, o: crate::call::Outcome) -> Response<Body> {
    use crate::call::Outcome;
    match o {
        Outcome::Result(r) => json(StatusCode::OK, jsonrpc::result(id, r.get())),
        Outcome::Error(e) => json(StatusCode::OK, jsonrpc::error_raw(Some(id), e.get())),
        Outcome::Failed(be) => {
            let mut r = json(
                StatusCode::OK,
                jsonrpc::error_raw(Some(id), &be.error_object()),
            );
            r.extensions_mut().insert(BridgeRpcError(be.code()));
            r
        }
    }
}

/// Set on a response made by [`rpc_error`]: the JSON-RPC error code it carries (counted by
/// `observe::answered` as the bridge's own error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeRpcError(pub i64);

/// Where a call's server requests are recorded so the client's answers can be checked.
pub trait ServerRequestSink: Send + Sync {
    /// May this server request go to the client, and is it now expected back? Err: the sink
    /// has already answered the upstream with an error, for this `dropped_frames_total`
    /// reason (the client did not declare the capability; it owes too many answers).
    fn admit(
        &self,
        child_id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), &'static str>;
}

/// What every responder of one face shares: the metrics it counts in, the server name it
/// counts under, and the face's call timeout and SSE keep-alive interval.
#[derive(Clone)]
pub struct FaceCtx {
    pub meter: Meter,
    /// How long a call may take; also the message of its timeout error.
    pub timeout: Duration,
    pub keepalive: Duration,
}

/// What the request's `Accept` header takes.
#[derive(Debug, Clone, Copy)]
pub struct Accept {
    pub json: bool,
    pub sse: bool,
}

/// Everything the responder needs about the request it answers. Built by
/// [`Responder::new`] with what every response needs, plus `with_*` for the optional parts
/// (the HTTP face builds it in one place, `App::responder`).
pub struct Responder {
    meter: Meter,
    /// The request from its arrival to its answer (`calls_in_flight`, latency).
    tracked: Tracked,
    method: String,
    orig_id: Box<RawValue>,
    /// The caller's progress token, restored on progress notifications.
    orig_token: Option<Box<RawValue>>,
    client_era: Era,
    accept_json: bool,
    accept_sse: bool,
    deadline: Instant,
    timeout: Duration,
    /// Explicit cancellation (a 2025 client's `notifications/cancelled`, or shutdown).
    cancel: CancellationToken,
    keepalive: Duration,
    server_requests: Option<Arc<dyn ServerRequestSink>>,
    extra_headers: Vec<(&'static str, String)>,
    /// Dropped when the response is complete (e.g. forgets a 2025 call's cancel handle).
    on_done: Option<Box<dyn Send + Sync>>,
    /// Set for 2026 clients of a 2025 upstream: server requests become `input_required`.
    mrtr: Option<MrtrCtx>,
    /// Set for 2025-11-25 sessions: an SSE answer is a resumable stream (`face::replay`).
    replay: Option<ReplayCtx>,
    /// A 2025 upstream's server requests gathered for one `input_required` round (kept here,
    /// not in `next`'s future, so a keep-alive or SSE switch racing `next` loses none), and
    /// when the gathering ends at the latest.
    asked: Vec<CallEvent>,
    gather_until: Option<tokio::time::Instant>,
}

/// Where a 2025-11-25 session's resumable streams live and what they keep.
pub struct ReplayCtx {
    pub streams: replay::Streams,
    pub limits: crate::config::limits::Replay,
    /// Runs each stream's pump (the call goes on while its client reconnects).
    pub tracker: tokio_util::task::TaskTracker,
}

enum Step {
    Event(Option<CallEvent>),
    Done(Outcome),
    Timeout,
    Cancelled,
}

impl Responder {
    /// A responder for request `orig_id` (`method`, from a `client_era` client) that reached
    /// the face at `started`: its deadline is the face's timeout after that, `cancel` cancels
    /// it explicitly. It counts as a call in flight from now until its final answer, except a
    /// `subscriptions/listen` (an open-ended stream, not a call waiting for an answer).
    pub fn new(
        face: FaceCtx,
        method: &str,
        orig_id: Box<RawValue>,
        client_era: Era,
        accept: Accept,
        started: Instant,
        cancel: CancellationToken,
    ) -> Self {
        let tracked = face.meter.track(method, started);
        Self {
            meter: face.meter,
            tracked,
            method: method.to_owned(),
            orig_id,
            orig_token: None,
            client_era,
            accept_json: accept.json,
            accept_sse: accept.sse,
            deadline: started + face.timeout,
            timeout: face.timeout,
            cancel,
            keepalive: face.keepalive,
            server_requests: None,
            extra_headers: Vec::new(),
            on_done: None,
            mrtr: None,
            replay: None,
            asked: Vec::new(),
            gather_until: None,
        }
    }

    /// End the call at `deadline` instead of the face's timeout after it started.
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = deadline;
        self
    }

    /// The caller's progress token (if it sent one), restored on progress notifications.
    pub fn with_progress_token(mut self, token: Option<Box<RawValue>>) -> Self {
        self.orig_token = token;
        self
    }

    /// Record the call's server requests in `sink` (and offer them to its capability gate).
    pub fn with_server_requests(mut self, sink: Arc<dyn ServerRequestSink>) -> Self {
        self.server_requests = Some(sink);
        self
    }

    /// Keep `guard` until the response is complete.
    pub fn with_on_done(mut self, guard: Box<dyn Send + Sync>) -> Self {
        self.on_done = Some(guard);
        self
    }

    /// A 2026 client of a 2025 upstream: the upstream's requests park the call as
    /// `input_required`.
    pub fn with_mrtr(mut self, mrtr: MrtrCtx) -> Self {
        self.mrtr = Some(mrtr);
        self
    }

    /// Answer on SSE with a resumable stream (a 2025-11-25 session).
    pub fn with_replay(mut self, replay: ReplayCtx) -> Self {
        self.replay = Some(replay);
        self
    }

    /// One more header on the response.
    pub fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.extra_headers.push((name, value));
        self
    }

    /// HTTP status for a final JSON-RPC error on the 2026 path.
    fn status_for(&self, code: Option<i64>) -> StatusCode {
        if self.client_era != Era::Modern {
            return StatusCode::OK;
        }
        match code {
            Some(code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
            Some(code::HEADER_MISMATCH)
            | Some(code::MISSING_CLIENT_CAPABILITY)
            | Some(code::UNSUPPORTED_PROTOCOL_VERSION) => StatusCode::BAD_REQUEST,
            _ => StatusCode::OK,
        }
    }

    fn final_frame(&mut self, outcome: Outcome) -> (StatusCode, Bytes) {
        self.tracked.answered(&self.meter, &outcome);
        let id = self.orig_id.get();
        match outcome {
            Outcome::Result(r) => (StatusCode::OK, jsonrpc::result(id, r.get())),
            Outcome::Error(e) => {
                // A 2025 child's -32042 (retired in 2026) for a 2026 client: see crate::era::mrtr.
                match self
                    .mrtr
                    .as_ref()
                    .and_then(|m| crate::era::mrtr::url_required_for_modern(&e, m.caps.as_deref()))
                {
                    Some(Ok(r)) => (StatusCode::OK, jsonrpc::result(id, &r)),
                    Some(Err(obj)) => (
                        self.status_for(Some(code::MISSING_CLIENT_CAPABILITY)),
                        jsonrpc::error_raw(Some(id), &obj),
                    ),
                    None => (
                        self.status_for(protocol::error_code(&e)),
                        jsonrpc::error_raw(Some(id), e.get()),
                    ),
                }
            }
            Outcome::Failed(be) => (
                StatusCode::OK,
                jsonrpc::error_raw(Some(id), &be.error_object()),
            ),
        }
    }

    fn event_frame(&self, ev: CallEvent) -> Option<Bytes> {
        match ev {
            CallEvent::Notification { method, params } => {
                if self.client_era == Era::Modern
                    && crate::era::mrtr::is_legacy_only_notification(&method)
                {
                    tracing::debug!("not relaying {method} to a 2026 client");
                    self.meter.dropped("legacy_only_notification");
                    return None;
                }
                let params = params.map(|p| self.restore_ids(&method, p));
                Some(jsonrpc::notification(
                    &method,
                    params.as_deref().map(RawValue::get),
                ))
            }
            CallEvent::ServerRequest { id, method, params } => {
                if let Some(s) = &self.server_requests {
                    if let Err(reason) = s.admit(&id, &method, params.as_deref()) {
                        self.meter.dropped(reason);
                        return None;
                    }
                }
                Some(jsonrpc::request(
                    id.get(),
                    &method,
                    params.as_deref().map(RawValue::get),
                ))
            }
        }
    }

    /// Put the caller's own progress token / subscription id back into a notification.
    fn restore_ids(&self, method: &str, params: Box<RawValue>) -> Box<RawValue> {
        if method == "notifications/progress" {
            if let Some(t) = &self.orig_token {
                if let Some(s) = jsonrpc::set_field(&params, "progressToken", t) {
                    return jsonrpc::raw(&s);
                }
            }
            return params;
        }
        if jsonrpc::meta_field(Some(&params), protocol::META_SUBSCRIPTION_ID).is_some() {
            if let Some(s) =
                jsonrpc::replace_meta_field(&params, protocol::META_SUBSCRIPTION_ID, &self.orig_id)
            {
                return jsonrpc::raw(&s);
            }
        }
        params
    }

    async fn step(&self, h: &mut CallHandle) -> Step {
        // Interim events first: everything the upstream sent before the outcome is queued
        // before the outcome is, so draining the queue first keeps their order.
        let first = tokio::select! {
            biased;
            ev = h.events.recv(), if !h.events.ended() => match ev {
                Some(ev) => return Step::Event(Some(ev)),
                None => None,
            },
            o = &mut h.outcome => Some(o),
            _ = tokio::time::sleep_until(self.deadline.into()) => return Step::Timeout,
            _ = self.cancel.cancelled() => return Step::Cancelled,
        };
        let o = match first {
            Some(o) => o,
            // The event queue closed: only the outcome can still come.
            None => tokio::select! {
                o = &mut h.outcome => o,
                _ = tokio::time::sleep_until(self.deadline.into()) => return Step::Timeout,
                _ = self.cancel.cancelled() => return Step::Cancelled,
            },
        };
        match o {
            Ok(o) => Step::Done(o),
            Err(_) => Step::Done(Outcome::Failed(BridgeError::ChildExited(
                "the call was dropped".into(),
            ))),
        }
    }

    fn timeout_outcome(&self, h: &mut CallHandle) -> Outcome {
        h.set_cancel_reason("timeout");
        Outcome::Failed(BridgeError::Timeout(self.timeout.as_millis() as u64))
    }

    fn cancelled_outcome(&self, h: &mut CallHandle) -> Outcome {
        h.set_cancel_reason("client cancelled");
        Outcome::Failed(BridgeError::Cancelled)
    }

    fn with_headers(&self, mut r: Response<Body>) -> Response<Body> {
        for (k, v) in &self.extra_headers {
            if let Ok(v) = HeaderValue::from_str(v) {
                r.headers_mut().insert(*k, v);
            }
        }
        r
    }

    /// Advance the call to the next thing to send: an interim frame, the final frame, or
    /// nothing (a cancelled 2025 call ends without a response). `h` is taken when parked.
    async fn next(&mut self, h: &mut Option<CallHandle>) -> Option<Next> {
        loop {
            let hh = h.as_mut()?;
            if !self.asked.is_empty() {
                let until = *self.gather_until.get_or_insert_with(|| {
                    tokio::time::Instant::now() + crate::era::park::GATHER_MAX
                });
                crate::era::park::gather(hh, &mut self.asked, until).await;
                self.gather_until = None;
                let asked = std::mem::take(&mut self.asked);
                match self.try_park(h, asked) {
                    Some(frame) => return Some(Next::Final(StatusCode::OK, frame)),
                    None => continue,
                }
            }
            let o = match self.step(hh).await {
                Step::Event(Some(ev @ CallEvent::ServerRequest { .. })) if self.mrtr.is_some() => {
                    // Gathered with whatever else the upstream asks at once (above).
                    self.asked.push(ev);
                    continue;
                }
                Step::Event(Some(ev)) => match self.event_frame(ev) {
                    Some(b) => return Some(Next::Frame(b)),
                    None => continue,
                },
                Step::Event(None) => {
                    Outcome::Failed(BridgeError::ChildExited("the call was dropped".into()))
                }
                Step::Done(o) => o,
                Step::Timeout => self.timeout_outcome(hh),
                Step::Cancelled
                    if self.client_era == Era::Modern && self.method == "subscriptions/listen" =>
                {
                    // Only shutdown cancels a listen here (see `modern::handle`): end it
                    // gracefully with its completion result; the upstream's listen is
                    // cancelled as the handle drops.
                    hh.set_cancel_reason("shutdown");
                    let frame = crate::era::notifications::completion(&self.orig_id);
                    return Some(Next::Final(StatusCode::OK, frame));
                }
                Step::Cancelled if self.meter.metrics().is_shutting_down() => {
                    // `crate::core`, rule 7: the bridge's own shutdown, not the client,
                    // cancelled it: its one answer, 2025 callers' too.
                    let (o, why) = crate::core::stopped_answer(true);
                    hh.set_cancel_reason(why);
                    o?
                }
                Step::Cancelled if self.client_era == Era::Legacy && self.accept_sse => {
                    // 2025: a request the client cancelled gets no response.
                    let _ = self.cancelled_outcome(hh);
                    return None;
                }
                Step::Cancelled => self.cancelled_outcome(hh),
            };
            let (status, frame) = self.final_frame(o);
            return Some(Next::Final(status, frame));
        }
    }

    /// A 2025 upstream asks the client something during a 2026 client's call: park the call
    /// and answer with `input_required` (only for capabilities this request declared; the
    /// upstream gets an error for the others). Returns the final frame, or None to go on.
    fn try_park(&mut self, h: &mut Option<CallHandle>, asked: Vec<CallEvent>) -> Option<Bytes> {
        let m = self.mrtr.as_ref()?;
        let asked = asked
            .into_iter()
            .filter_map(|ev| match ev {
                CallEvent::ServerRequest { id, method, params } => Some((id, method, params)),
                // Interim notifications cannot follow an input_required answer.
                CallEvent::Notification { .. } => None,
            })
            .collect();
        let site = crate::era::park::Site {
            signer: &m.signer,
            caps: m.caps.as_deref(),
            principal: &m.principal,
            method: &self.method,
            digest: &m.digest,
            round: m.round,
            park_id: m.park_id,
            ttl: m.ttl,
        };
        let handle = h.take()?;
        let via = handle.replies_to(&m.upstream).clone();
        let p = crate::era::park::park(&m.store, &site, handle, asked);
        for _ in 0..p.undeclared {
            self.meter.dropped("undeclared_capability");
        }
        for f in p.refusals {
            let _ = via.send_response(f);
        }
        let body = match p.answer {
            Ok(body) => body,
            Err(handle) => {
                // Nothing asked (undeclared, or the store is full): the call goes on.
                *h = Some(handle);
                return None;
            }
        };
        self.tracked.answered_with(&self.meter, None);
        Some(jsonrpc::result(self.orig_id.get(), &body))
    }

    /// Wait for the first thing the call produces and answer accordingly.
    pub async fn respond(mut self, h: CallHandle) -> Response<Body> {
        let mut h = Some(h);
        // A call that takes a while gets its headers anyway (as an SSE stream with keep-alives),
        // so clients and proxies with header timeouts do not give up on long tool calls.
        let first = if self.accept_sse {
            tokio::select! {
                n = self.next(&mut h) => n,
                _ = tokio::time::sleep(SSE_AFTER) => return self.sse(h, None),
            }
        } else {
            self.next(&mut h).await
        };
        match first {
            Some(Next::Final(status, body)) if self.accept_json || !self.accept_sse => {
                self.with_headers(json(status, body))
            }
            Some(Next::Final(status, body)) if self.replay.is_some() => {
                self.sse(h, Some(Next::Final(status, body)))
            }
            Some(Next::Final(_, body)) => self.sse_headers(full(framing::sse_event(&body))),
            Some(frame @ Next::Frame(_)) if self.accept_sse => self.sse(h, Some(frame)),
            Some(Next::Frame(_)) => {
                // JSON-only client: wait for the final answer, dropping interim traffic.
                loop {
                    match self.next(&mut h).await {
                        Some(Next::Frame(_)) => continue,
                        Some(Next::Final(status, body)) => {
                            return self.with_headers(json(status, body))
                        }
                        None => return status_only(StatusCode::ACCEPTED),
                    }
                }
            }
            None => self.sse_headers(empty()),
        }
    }

    fn sse_headers(&self, body: Body) -> Response<Body> {
        self.with_headers(sse_response(body))
    }

    /// A resumable SSE answer: a pump drives the call into the stream's log, the body reads
    /// it (a client that reconnects with `Last-Event-ID` reads it too, `session_http`).
    fn resumable_sse(
        mut self,
        rc: ReplayCtx,
        h: Option<CallHandle>,
        first: Option<Next>,
    ) -> Response<Body> {
        let Some(log) = replay::StreamLog::open(replay::StreamKind::Post, rc.limits) else {
            return self.sse(h, first);
        };
        let extra = std::mem::take(&mut self.extra_headers);
        let cfg = replay::ReaderCfg {
            keepalive: self.keepalive,
            metrics: self.meter.metrics().clone(),
        };
        let src = futures_util::stream::unfold(
            (self, h, first, false),
            |(mut r, mut h, mut first, done)| async move {
                if done {
                    return None;
                }
                let n = match first.take() {
                    Some(n) => n,
                    None => r.next(&mut h).await?,
                };
                Some(match n {
                    Next::Frame(b) => ((b, false), (r, h, first, false)),
                    Next::Final(_, b) => {
                        r.tracked.settled(); // answered: no longer in flight
                        ((b, true), (r, h, first, true))
                    }
                })
            },
        );
        let body = replay::post_stream(log, &rc.streams, &rc.tracker, cfg, Box::pin(src));
        let mut r = sse_response(body);
        for (k, v) in &extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                r.headers_mut().insert(*k, v);
            }
        }
        r
    }

    fn sse(mut self, h: Option<CallHandle>, first: Option<Next>) -> Response<Body> {
        if let Some(rc) = self.replay.take() {
            return self.resumable_sse(rc, h, first);
        }
        struct St {
            r: Responder,
            h: Option<CallHandle>,
            first: Option<Next>,
            done: bool,
            _gauge: GaugeGuard,
        }
        let gauge = GaugeGuard::new(self.meter.metrics().sse_streams().clone());
        let mut r = Response::new(empty());
        let h_extra: Vec<(&'static str, String)> = self.extra_headers.clone();
        let st = St {
            r: self,
            h,
            first,
            done: false,
            _gauge: gauge,
        };
        let stream = futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            let next = match st.first.take() {
                Some(n) => Some(n),
                None => {
                    let ka = tokio::time::sleep(st.r.keepalive);
                    tokio::select! {
                        n = st.r.next(&mut st.h) => n,
                        _ = ka => {
                            return Some((Ok::<_, Infallible>(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                        }
                    }
                }
            };
            match next? {
                Next::Frame(b) => Some((Ok(Frame::data(framing::sse_event(&b))), st)),
                Next::Final(_, b) => {
                    st.done = true;
                    st.r.tracked.settled(); // answered: no longer in flight
                    Some((Ok(Frame::data(framing::sse_event(&b))), st))
                }
            }
        });
        *r.body_mut() = BodyExt::boxed_unsync(StreamBody::new(stream));
        *r.headers_mut() = sse_headers();
        for (k, v) in &h_extra {
            if let Ok(v) = HeaderValue::from_str(v) {
                r.headers_mut().insert(*k, v);
            }
        }
        r
    }
}

/// What to send next on a response.
pub enum Next {
    /// An interim message (notification or server request), as a JSON frame.
    Frame(Bytes),
    /// The final response and the HTTP status it would carry as a JSON body.
    Final(StatusCode, Bytes),
}

pub use crate::era::park::input_required_result;

/// What a 2026 client's call needs to be parked for input (2025 upstream only).
pub struct MrtrCtx {
    pub store: Arc<crate::era::mrtr::ParkStore<CallHandle>>,
    pub signer: Arc<crate::era::mrtr::StateSigner>,
    /// The request's `clientCapabilities`.
    pub caps: Option<Box<RawValue>>,
    pub principal: String,
    pub digest: String,
    pub ttl: Duration,
    pub upstream: crate::call::SharedUpstream,
    /// The round the client's request answered (0 for a first request).
    pub round: u32,
    /// Reuse this parked-call id when resuming.
    pub park_id: Option<u64>,
}

pub use crate::metrics::GaugeGuard;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every open SSE stream keeps its response's header map for as long as it is open: the
    /// map must be sized for what it holds, not grown to `HeaderMap`'s default 32 slots.
    #[test]
    fn sse_headers_are_sized_for_what_they_hold() {
        let r = sse_response(empty());
        let h = r.headers();
        assert_eq!(h.len(), 3);
        assert!(h.capacity() <= 4, "capacity {}", h.capacity());
        assert_eq!(h[header::CONTENT_TYPE], "text/event-stream");
        assert_eq!(h[header::CACHE_CONTROL], "no-cache");
        assert_eq!(h["x-accel-buffering"], "no");
    }
}
