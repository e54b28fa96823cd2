//! Turning a call in flight into an HTTP response: a single `application/json` body when the
//! first thing back is the final answer, otherwise a request-scoped SSE stream that carries
//! notifications and server requests, then the final answer, then ends. Dropping the stream
//! (the client hung up) drops the call handle, which cancels the call upstream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::call::{CallEvent, Outcome};
use crate::error::BridgeError;
use crate::framing;
use crate::jsonrpc::{self, code};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};
use crate::upstream::child::CallHandle;

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How long a call may stay silent before its response switches to an SSE stream.
pub const SSE_AFTER: Duration = Duration::from_secs(1);

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A JSON response.
pub fn json(status: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A JSON-RPC error as an HTTP response.
pub fn rpc_error(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    msg: &str,
    data: Option<&serde_json::Value>,
) -> Response<Body> {
    json(status, jsonrpc::error(id, code, msg, data))
}

pub fn status_only(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(empty());
    *r.status_mut() = status;
    r
}

/// Where a call's server requests are recorded so the client's answers can be checked.
pub trait ServerRequestSink: Send + Sync {
    fn register(&self, child_id: &RawValue);
}

/// Everything the responder needs about the request it answers.
pub struct Responder {
    pub metrics: Arc<Metrics>,
    pub server: Arc<str>,
    pub method: String,
    pub orig_id: Box<RawValue>,
    /// The caller's progress token, restored on progress notifications.
    pub orig_token: Option<Box<RawValue>>,
    pub client_era: Era,
    pub accept_json: bool,
    pub accept_sse: bool,
    pub deadline: Instant,
    pub timeout: Duration,
    /// Explicit cancellation (a 2025 client's `notifications/cancelled`, or shutdown).
    pub cancel: CancellationToken,
    pub keepalive: Duration,
    pub server_requests: Option<Arc<dyn ServerRequestSink>>,
    pub extra_headers: Vec<(&'static str, String)>,
    pub started: Instant,
    /// Dropped when the response is complete (e.g. forgets a 2025 call's cancel handle).
    pub on_done: Option<Box<dyn Send + Sync>>,
}

enum Step {
    Event(Option<CallEvent>),
    Done(Outcome),
    Timeout,
    Cancelled,
}

impl Responder {
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

    fn final_frame(&self, outcome: Outcome) -> (StatusCode, Bytes) {
        let id = self.orig_id.get();
        self.metrics.latency(
            &self.server,
            &self.method,
            self.started.elapsed().as_secs_f64(),
        );
        match outcome {
            Outcome::Result(r) => (StatusCode::OK, jsonrpc::result(id, r.get())),
            Outcome::Error(e) => (
                self.status_for(protocol::error_code(&e)),
                jsonrpc::error_raw(Some(id), e.get()),
            ),
            Outcome::Failed(be) => {
                self.metrics.rpc_error(
                    &self.server,
                    &self.method,
                    code::UPSTREAM_UNAVAILABLE,
                    "bridge",
                );
                (
                    StatusCode::OK,
                    jsonrpc::error_raw(Some(id), &be.error_object()),
                )
            }
        }
    }

    fn event_frame(&self, ev: CallEvent) -> Option<Bytes> {
        match ev {
            CallEvent::Notification { method, params } => {
                let params = params.map(|p| self.restore_ids(&method, p));
                Some(jsonrpc::notification(
                    &method,
                    params.as_deref().map(RawValue::get),
                ))
            }
            CallEvent::ServerRequest { id, method, params } => {
                if let Some(s) = &self.server_requests {
                    s.register(&id);
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
            ev = h.events.recv(), if !h.events.is_closed() || !h.events.is_empty() => match ev {
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

    /// Wait for the first thing the call produces and answer accordingly.
    pub async fn respond(self, mut h: CallHandle) -> Response<Body> {
        // A call that takes a while gets its headers anyway (as an SSE stream with keep-alives),
        // so clients and proxies with header timeouts do not give up on long tool calls.
        let first = if self.accept_sse {
            tokio::select! {
                s = self.step(&mut h) => s,
                _ = tokio::time::sleep(SSE_AFTER) => return self.sse(h, None),
            }
        } else {
            self.step(&mut h).await
        };
        let outcome = match first {
            Step::Done(o) => Some(o),
            Step::Timeout => Some(self.timeout_outcome(&mut h)),
            Step::Cancelled => Some(self.cancelled_outcome(&mut h)),
            Step::Event(None) => Some(Outcome::Failed(BridgeError::ChildExited(
                "the call was dropped".into(),
            ))),
            Step::Event(Some(ev)) if !self.accept_sse => {
                // The client cannot take a stream: drop what is not the answer, but a server
                // request it cannot see would hang the call, so refuse it to the child.
                drop(ev);
                None
            }
            Step::Event(Some(ev)) => return self.sse(h, Some(ev)),
        };
        if let Some(o) = outcome {
            if self.accept_json || !self.accept_sse {
                let (status, body) = self.final_frame(o);
                return self.with_headers(json(status, body));
            }
            return self.sse_single(o);
        }
        // JSON-only client: wait for the final answer, dropping interim traffic.
        loop {
            match self.step(&mut h).await {
                Step::Event(Some(_)) => continue,
                Step::Event(None) => {}
                Step::Done(o) => {
                    let (status, body) = self.final_frame(o);
                    return self.with_headers(json(status, body));
                }
                Step::Timeout => {
                    let o = self.timeout_outcome(&mut h);
                    let (status, body) = self.final_frame(o);
                    return self.with_headers(json(status, body));
                }
                Step::Cancelled => {
                    let o = self.cancelled_outcome(&mut h);
                    let (status, body) = self.final_frame(o);
                    return self.with_headers(json(status, body));
                }
            }
        }
    }

    fn sse_headers(&self, body: Body) -> Response<Body> {
        let mut r = Response::new(body);
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        self.with_headers(r)
    }

    fn sse_single(self, o: Outcome) -> Response<Body> {
        let (_, frame) = self.final_frame(o);
        self.sse_headers(full(framing::sse_event(&frame)))
    }

    fn sse(self, h: CallHandle, first: Option<CallEvent>) -> Response<Body> {
        struct St {
            r: Responder,
            h: CallHandle,
            first: Option<CallEvent>,
            done: bool,
            _gauge: GaugeGuard,
        }
        let gauge = GaugeGuard::new(self.metrics.sse_streams().clone());
        let st = St {
            r: self,
            h,
            first,
            done: false,
            _gauge: gauge,
        };
        let headers_from = Responder {
            metrics: st.r.metrics.clone(),
            server: st.r.server.clone(),
            method: String::new(),
            orig_id: jsonrpc::raw("null"),
            orig_token: None,
            client_era: st.r.client_era,
            accept_json: false,
            accept_sse: true,
            deadline: st.r.deadline,
            timeout: st.r.timeout,
            cancel: CancellationToken::new(),
            keepalive: st.r.keepalive,
            server_requests: None,
            extra_headers: st.r.extra_headers.clone(),
            started: st.r.started,
            on_done: None,
        };
        let stream = futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            if let Some(ev) = st.first.take() {
                let f = st.r.event_frame(ev).map(|b| framing::sse_event(&b));
                return Some((Ok::<_, Infallible>(Frame::data(f.unwrap_or_default())), st));
            }
            loop {
                let ka = tokio::time::sleep(st.r.keepalive);
                let step = tokio::select! {
                    s = st.r.step(&mut st.h) => s,
                    _ = ka => {
                        return Some((Ok(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                    }
                };
                let o = match step {
                    Step::Event(Some(ev)) => match st.r.event_frame(ev) {
                        Some(b) => return Some((Ok(Frame::data(framing::sse_event(&b))), st)),
                        None => continue,
                    },
                    Step::Event(None) => {
                        Outcome::Failed(BridgeError::ChildExited("the call was dropped".into()))
                    }
                    Step::Done(o) => o,
                    Step::Timeout => st.r.timeout_outcome(&mut st.h),
                    Step::Cancelled if st.r.client_era == Era::Legacy => {
                        // 2025: a cancelled request gets no response; end the stream.
                        let _ = st.r.cancelled_outcome(&mut st.h);
                        return None;
                    }
                    Step::Cancelled => st.r.cancelled_outcome(&mut st.h),
                };
                st.done = true;
                let (_, frame) = st.r.final_frame(o);
                return Some((Ok(Frame::data(framing::sse_event(&frame))), st));
            }
        });
        headers_from.sse_headers(BodyExt::boxed_unsync(StreamBody::new(stream)))
    }
}

/// Keeps a gauge incremented while alive.
pub struct GaugeGuard(prometheus::IntGauge);

impl GaugeGuard {
    pub fn new(g: prometheus::IntGauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
