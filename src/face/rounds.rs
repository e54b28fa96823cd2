//! 2026 upstream, 2025 client: an `input_required` result becomes real requests to the client
//! on the call's SSE stream (ids the bridge mints, `mcpb-N`, which cannot collide with the
//! upstream's); when every answer is in, the bridge retries upstream with `inputResponses` and
//! the exact `requestState` under a new id. Rounds are bounded. An input request for a
//! capability the client did not declare at `initialize` fails the call instead of reaching
//! the client; URL-mode elicitation gets the `elicitationId` 2025 requires
//! (`crate::era::mrtr::to_legacy_input`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::call::{Call, CallCtx, CallEvent, Outcome};
use crate::face::respond::{self, Body, GaugeGuard, Next};
use crate::face::run::PostCtx;
use crate::face::session::Session;
use crate::face::state::App;
use crate::framing;
use crate::jsonrpc::{self, code, Fields};

/// Most `input_required` rounds one call may go through.
pub const MAX_ROUNDS: u32 = 10;

struct Driver {
    app: Arc<App>,
    session: Arc<Session>,
    ctx: CallCtx,
    method: String,
    base: Value,
    id: Box<RawValue>,
    token: Option<Box<RawValue>>,
    accept_sse: bool,
    cancel: CancellationToken,
    tx: mpsc::Sender<Next>,
    deadline: Instant,
    started: Instant,
}

/// Run a 2025 client's call to a 2026 upstream, translating `input_required` rounds.
pub async fn run(
    app: Arc<App>,
    pc: &PostCtx<'_>,
    session: Arc<Session>,
    ctx: CallCtx,
    cancel: CancellationToken,
    done: Box<dyn Send + Sync>,
) -> Response<Body> {
    let started = pc.arrived;
    // In flight until the final answer reaches the response (or the response is dropped).
    let inflight = GaugeGuard::new(app.metrics.calls_in_flight().clone());
    let (tx, mut rx) = mpsc::channel::<Next>(crate::call::EVENT_QUEUE);
    let base = pc
        .env
        .params
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    let d = Driver {
        method: pc.env.method().to_owned(),
        id: jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null")),
        token: pc.view.meta("progressToken").map(|t| t.to_owned()),
        accept_sse: pc.accept_sse,
        deadline: started + app.cfg.call_timeout,
        started,
        app: app.clone(),
        session,
        ctx,
        base,
        cancel,
        tx,
    };
    tokio::spawn(async move {
        let _done = done;
        d.drive().await;
    });
    let first = if pc.accept_sse {
        tokio::select! {
            n = rx.recv() => n,
            _ = tokio::time::sleep(respond::SSE_AFTER) => return sse(&app, None, rx, inflight),
        }
    } else {
        rx.recv().await
    };
    match first {
        Some(Next::Final(status, body)) if pc.accept_json || !pc.accept_sse => {
            respond::json(status, body)
        }
        None => respond::status_only(StatusCode::ACCEPTED),
        n => sse(&app, n, rx, inflight),
    }
}

fn sse(
    app: &App,
    first: Option<Next>,
    rx: mpsc::Receiver<Next>,
    inflight: GaugeGuard,
) -> Response<Body> {
    struct St {
        first: Option<Next>,
        rx: mpsc::Receiver<Next>,
        keepalive: std::time::Duration,
        done: bool,
        _g: GaugeGuard,
        inflight: Option<GaugeGuard>,
    }
    let st = St {
        first,
        rx,
        keepalive: app.cfg.keepalive,
        done: false,
        _g: GaugeGuard::new(app.metrics.sse_streams().clone()),
        inflight: Some(inflight),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let next = match st.first.take() {
            Some(n) => n,
            None => tokio::select! {
                n = st.rx.recv() => n?,
                _ = tokio::time::sleep(st.keepalive) => {
                    return Some((Ok::<_, Infallible>(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                }
            },
        };
        let b = match next {
            Next::Frame(b) => b,
            Next::Final(_, b) => {
                st.done = true;
                st.inflight = None; // answered: no longer in flight
                b
            }
        };
        Some((Ok(Frame::data(framing::sse_event(&b))), st))
    });
    crate::face::respond::sse_response(BodyExt::boxed_unsync(StreamBody::new(stream)))
}

impl Driver {
    async fn fail(&self, code: i64, msg: &str) {
        self.app
            .metrics
            .rpc_error(&self.app.server, &self.method, code, "bridge");
        let _ = self
            .tx
            .send(Next::Final(
                StatusCode::OK,
                jsonrpc::error(Some(self.id.get()), code, msg, None),
            ))
            .await;
    }

    async fn finish(&self, o: Outcome) {
        self.app.metrics.latency(
            &self.app.server,
            &self.method,
            self.started.elapsed().as_secs_f64(),
        );
        let frame = match o {
            Outcome::Result(r) => jsonrpc::result(self.id.get(), r.get()),
            Outcome::Error(e) => jsonrpc::error_raw(Some(self.id.get()), e.get()),
            Outcome::Failed(be) => {
                self.app.metrics.rpc_error(
                    &self.app.server,
                    &self.method,
                    code::UPSTREAM_UNAVAILABLE,
                    "bridge",
                );
                jsonrpc::error_raw(Some(self.id.get()), &be.error_object())
            }
        };
        let _ = self.tx.send(Next::Final(StatusCode::OK, frame)).await;
    }

    async fn drive(self) {
        let upstream = self.session.upstream.clone();
        let mut params = self.base.clone();
        for round in 0..=MAX_ROUNDS {
            let call = Call {
                method: self.method.clone(),
                params: Some(jsonrpc::raw(&params.to_string())),
                ctx: self.ctx.clone(),
            };
            let mut h = match upstream.call(call, self.app.cfg.start_wait).await {
                Ok(h) => h,
                Err(e) => return self.finish(Outcome::Failed(e)).await,
            };
            h.detach_until(self.deadline);
            let outcome = loop {
                tokio::select! {
                    biased;
                    ev = h.events.recv(), if !h.events.is_closed() || !h.events.is_empty() => {
                        if let Some(CallEvent::Notification { method, params }) = ev {
                            let params = params.map(|p| self.restore_token(&method, p));
                            let f = jsonrpc::notification(&method, params.as_deref().map(RawValue::get));
                            if self.tx.send(Next::Frame(f)).await.is_err() {
                                return; // the client is gone; the detached call runs out
                            }
                        }
                    }
                    o = &mut h.outcome => break o.unwrap_or_else(|_| Outcome::Failed(
                        crate::error::BridgeError::ChildExited("the call was dropped".into()))),
                    _ = tokio::time::sleep_until(self.deadline.into()) => {
                        h.set_cancel_reason("timeout");
                        return self.finish(Outcome::Failed(crate::error::BridgeError::Timeout(
                            self.app.cfg.call_timeout.as_millis() as u64))).await;
                    }
                    _ = self.cancel.cancelled() => {
                        h.set_cancel_reason("client cancelled");
                        return; // 2025: a cancelled request gets no response
                    }
                }
            };
            let Outcome::Result(r) = &outcome else {
                return self.finish(outcome).await;
            };
            let Some(f) = Fields::parse(r) else {
                return self.finish(outcome).await;
            };
            if f.get("resultType").map(RawValue::get) != Some("\"input_required\"") {
                return self.finish(outcome).await;
            }
            if round == MAX_ROUNDS {
                return self
                    .fail(
                        code::INTERNAL_ERROR,
                        &format!(
                            "the server asked for input more than {MAX_ROUNDS} times; giving up"
                        ),
                    )
                    .await;
            }
            let state = f.get("requestState").map(|s| s.to_owned());
            let answers = match f.get("inputRequests") {
                Some(reqs) => match self.ask(reqs).await {
                    Some(a) => a,
                    None => return,
                },
                None => serde_json::Map::new(),
            };
            // Retry: original params + inputResponses + the exact requestState, new id.
            params = self.base.clone();
            if let Some(o) = params.as_object_mut() {
                if !answers.is_empty() {
                    o.insert("inputResponses".into(), Value::Object(answers));
                }
                if let Some(st) = state.and_then(|s| serde_json::from_str::<Value>(s.get()).ok()) {
                    o.insert("requestState".into(), st);
                }
            }
        }
    }

    /// Send each input request to the client and collect the answers (None: stop, already
    /// answered or the client is gone).
    async fn ask(&self, reqs: &RawValue) -> Option<serde_json::Map<String, Value>> {
        let Some(reqs) = crate::era::mrtr::input_requests(reqs) else {
            self.fail(
                code::INTERNAL_ERROR,
                "the server's inputRequests is not an object",
            )
            .await;
            return None;
        };
        if !self.accept_sse {
            self.fail(
                code::INTERNAL_ERROR,
                "this call needs input from the client: send it with Accept: text/event-stream",
            )
            .await;
            return None;
        }
        let mut waits: Vec<(String, String, _)> = Vec::new();
        for r in &reqs {
            let (m, params) = (&r.method, r.params);
            if !crate::era::mrtr::may_ask(self.session.client_caps(), m, params) {
                for (_, id, _) in &waits {
                    self.session.forget_answer(id);
                }
                self.fail(
                    code::INTERNAL_ERROR,
                    &format!("the server asked for {m}, which the client did not declare"),
                )
                .await;
                return None;
            }
            // URL elicitation needs an elicitationId in 2025-11-25: minted here.
            let params = r.legacy_params();
            let id = crate::era::mrtr::mint_request_id();
            let rx = self.session.expect_answer(&id);
            let frame = jsonrpc::request(&id, m, params.as_deref().map(RawValue::get));
            if self.tx.send(Next::Frame(frame)).await.is_err() {
                self.session.forget_answer(&id);
                return None;
            }
            waits.push((r.key.to_string(), id, rx));
        }
        let mut answers = serde_json::Map::new();
        for (key, id, rx) in waits {
            let got = tokio::select! {
                a = rx => a.ok(),
                _ = tokio::time::sleep_until(self.deadline.into()) => None,
                _ = self.cancel.cancelled() => None,
            };
            self.session.forget_answer(&id);
            match got {
                Some(Ok(v)) => {
                    answers.insert(key, serde_json::from_str(v.get()).unwrap_or(Value::Null));
                }
                Some(Err(e)) => {
                    self.fail(
                        code::INTERNAL_ERROR,
                        &format!(
                            "the client answered the server's request with an error: {}",
                            e.get()
                        ),
                    )
                    .await;
                    return None;
                }
                None => {
                    if !self.cancel.is_cancelled() {
                        self.fail(
                            code::UPSTREAM_UNAVAILABLE,
                            "no answer from the client before the call timed out",
                        )
                        .await;
                    }
                    return None;
                }
            }
        }
        Some(answers)
    }

    fn restore_token(&self, method: &str, params: Box<RawValue>) -> Box<RawValue> {
        if method == "notifications/progress" {
            if let Some(t) = &self.token {
                if let Some(s) = jsonrpc::set_field(&params, "progressToken", t) {
                    return jsonrpc::raw(&s);
                }
            }
        }
        params
    }
}
