//! One POST, parsed (`PostCtx`), and running a call for it: `App::run_call` sends the call
//! upstream and hands the handle to a `Responder` (JSON or SSE), and `App::responder` is the
//! one place the HTTP face builds a responder. The header helpers every POST handler needs
//! (`accepts`, `header_str`) live here too.
//!
//! Everything that answers a POST with a call (the 2026 path in `modern`, the 2025 session
//! path in `session_http`, `rounds`, `listen`) comes here; this module reaches down only to
//! the face's state and `respond`, never back up to the handlers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderMap, Response, StatusCode};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::call::{Call, CallCtx, SharedUpstream};
use crate::face::respond::{self, Body, Responder};
use crate::face::session::{InflightGuard, Session};
use crate::face::state::App;
use crate::jsonrpc::{self, Envelope, Kind};
use crate::protocol::Era;

/// What the `Accept` header takes: (JSON, SSE). No header takes both.
pub fn accepts(h: &HeaderMap) -> (bool, bool) {
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

/// A header's value as text, when it is present and visible ASCII.
pub fn header_str<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// One POST, parsed.
pub struct PostCtx<'a> {
    /// The authenticated caller ("anonymous" without authentication).
    pub principal: String,
    /// What the caller's credentials say about it (an endpoint's `[[policy]]` reads it);
    /// None without authentication.
    pub who: Option<std::sync::Arc<crate::config::policy::Identity>>,
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

/// The answer to a call that could not start: a JSON-RPC error, as HTTP 404 for a 2026
/// caller's unknown method (an endpoint refuses one itself) and 429 with `Retry-After` for a
/// caller over an endpoint's limits (both eras).
fn refused_at_start(client_era: Era, id: &str, e: &crate::error::BridgeError) -> Response<Body> {
    let body = jsonrpc::error_raw(Some(id), &e.error_object());
    if let crate::error::BridgeError::RateLimited(secs) = e {
        let mut r = respond::json(StatusCode::TOO_MANY_REQUESTS, body);
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, http::HeaderValue::from(*secs));
        return r;
    }
    let status = if client_era == Era::Modern && e.code() == jsonrpc::code::METHOD_NOT_FOUND {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    respond::json(status, body)
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

/// One call a POST handler wants run: `method` with `params` on `upstream`, on behalf of
/// `ctx`, explicitly cancelled by `cancel`; optionally owned by a 2025 session, or parked for
/// input (a 2026 client of a 2025 upstream).
pub struct CallRequest<'a> {
    upstream: &'a SharedUpstream,
    method: &'a str,
    params: Option<Box<RawValue>>,
    ctx: CallCtx,
    cancel: CancellationToken,
    session: Option<(Arc<Session>, InflightGuard)>,
    mrtr: Option<respond::MrtrCtx>,
}

impl<'a> CallRequest<'a> {
    pub fn new(
        upstream: &'a SharedUpstream,
        method: &'a str,
        params: Option<Box<RawValue>>,
        ctx: CallCtx,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            upstream,
            method,
            params,
            ctx,
            cancel,
            session: None,
            mrtr: None,
        }
    }

    /// The call belongs to the 2025 session `s`: its server requests are recorded there, and
    /// `done` forgets the call once answered (until its deadline it stays cancellable by id,
    /// also after the client hung up).
    pub fn in_session(mut self, s: Arc<Session>, done: InflightGuard) -> Self {
        self.session = Some((s, done));
        self
    }

    /// Park the call as `input_required` when the (2025) upstream asks the client something.
    pub fn with_mrtr(mut self, mrtr: Option<respond::MrtrCtx>) -> Self {
        self.mrtr = mrtr;
        self
    }
}

impl App {
    /// Run a call and answer the POST with JSON or SSE.
    pub async fn run_call(&self, pc: &PostCtx<'_>, req: CallRequest<'_>) -> Response<Body> {
        let CallRequest {
            upstream,
            method,
            params,
            ctx,
            cancel,
            session,
            mrtr,
        } = req;
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
        let mut handle = match crate::core::start(upstream, call, self.cfg.start_wait).await {
            Ok(h) => h,
            Err(e) => {
                span.in_scope(|| debug!("upstream unavailable: {e}"));
                self.meter.refused(method, e.code());
                return refused_at_start(client_era, id, &e);
            }
        };
        if client_era == Era::Legacy {
            // A 2025 client's dropped connection is not a cancellation.
            handle.detach_until(started + self.cfg.call_timeout);
        }
        if method == "subscriptions/listen" {
            // A listen is open-ended: no call timeout (it ends with the client or shutdown).
            r = r.with_deadline(started + LISTEN_NO_DEADLINE);
        }
        r = r.with_progress_token(orig_token);
        if let Some((s, mut done)) = session {
            done.detached = Some((handle.canceller(), started + self.cfg.call_timeout));
            if crate::protocol::resumable_sse(&s.version) {
                r = r.with_replay(respond::ReplayCtx {
                    streams: s.streams.clone(),
                    limits: self.cfg.replay,
                    tracker: self.tracker.clone(),
                });
            }
            r = r.with_server_requests(s).with_on_done(Box::new(done));
        }
        if let Some(m) = mrtr {
            r = r.with_mrtr(m);
        }
        crate::telemetry::record_upstream_id(&span, handle.upstream_id());
        let respond = async move {
            let response = r.respond(handle).await;
            // Inside the call's span, so `--log-format json` shows its fields on this line.
            debug!(status = response.status().as_u16(), "responding");
            response
        };
        tracing::Instrument::instrument(respond, span).await
    }

    /// A responder for the POST `pc`, with the defaults every call shares: the face's metrics,
    /// timeout and keep-alive, the request's id and `Accept`. The one place the HTTP face
    /// builds a `Responder`.
    pub fn responder(
        &self,
        pc: &PostCtx<'_>,
        method: &str,
        client_era: Era,
        cancel: CancellationToken,
        started: Instant,
    ) -> Responder {
        let face = respond::FaceCtx {
            meter: self.meter.clone(),
            timeout: self.cfg.call_timeout,
            keepalive: self.cfg.keepalive,
        };
        let accept = respond::Accept {
            json: pc.accept_json,
            sse: pc.accept_sse,
        };
        let orig_id = jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null"));
        Responder::new(face, method, orig_id, client_era, accept, started, cancel)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

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
}
