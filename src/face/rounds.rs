//! 2026 upstream, 2025 client over HTTP: the call's response (JSON, or SSE once it takes a
//! while or needs input) and this face's side of `crate::era::rounds`, which owns the rules
//! (bounded rounds, the capability gate, `mcpb-N` ids, the retry with `inputResponses` and the
//! exact `requestState`). Here: input requests go out on the call's SSE stream, answers come
//! back as POSTs to the session, progress tokens are restored, and the call deadline
//! (`--call-timeout`) bounds the call and every wait for an answer.
//!
//! The driver is no task of its own: the POST's handler, then the SSE body, poll it as they
//! read its queue (`Feed`), so an open call costs no task and no second tokio channel
//! (benches/RESULTS.md, "2026-12-01 (c)"). A client that hangs up drops it, and with it the
//! round's call handle: the call runs detached to its deadline, cancellable by id meanwhile.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use bytes::Bytes;
use futures_channel::mpsc;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::call::{Call, CallCtx, CallEvent, CallHandle, Outcome};
use crate::era::rounds::{self, RoundsFace, Waited};
use crate::error::BridgeError;
use crate::face::respond::{self, Body, GaugeGuard, Next};
use crate::face::run::PostCtx;
use crate::face::session::{InflightGuard, Session};
use crate::face::state::App;
use crate::framing;
use crate::jsonrpc;

struct Driver {
    app: Arc<App>,
    session: Arc<Session>,
    ctx: CallCtx,
    method: String,
    params: Option<Box<RawValue>>,
    id: Box<RawValue>,
    token: Option<Box<RawValue>>,
    accept_sse: bool,
    cancel: CancellationToken,
    /// The queue to the response (`futures_channel`'s: a few hundred bytes per call, where
    /// tokio's mpsc allocates its cache-padded state and a first block of 32 slots).
    /// Behind a lock because its `poll_ready`/`start_send` take `&mut` and the rounds take
    /// the face by `&`; never held across an await.
    tx: Mutex<mpsc::Sender<Next>>,
    /// Forgets the call in the session when the driver is dropped; holds the current round's
    /// canceller, so that a call whose client hung up stays cancellable by id until its
    /// deadline, as every 2025 call does (`CallRequest::in_session`).
    done: Mutex<InflightGuard>,
    deadline: Instant,
    /// From arrival to the final answer (`calls_in_flight`, latency); never locked across
    /// an await.
    tracked: Mutex<crate::core::meter::Tracked>,
}

/// The driver's queue and the driver itself, polled by whoever reads the queue: first the
/// POST's handler, then the SSE body. Not a task of its own: a spawned driver would cost a
/// task (~1 KB) per call for as long as it runs. Dropping it (the client hung up) drops the
/// round's call handle, which detaches the call until its deadline.
struct Feed {
    rx: mpsc::Receiver<Next>,
    drive: Option<BoxFuture<'static, ()>>,
}

impl Feed {
    /// The next thing the driver queued, driving it meanwhile (None: it ended, nothing more).
    async fn next(&mut self) -> Option<Next> {
        loop {
            tokio::select! {
                biased;
                n = self.rx.next() => return n,
                _ = driving(&mut self.drive) => {}
            }
        }
    }
}

/// Run the driver to its end and forget it; pending for ever once it has ended.
async fn driving(d: &mut Option<BoxFuture<'static, ()>>) {
    match d.as_mut() {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
    *d = None;
}

/// Run a 2025 client's call to a 2026 upstream, translating `input_required` rounds.
pub async fn run(
    app: Arc<App>,
    pc: &PostCtx<'_>,
    session: Arc<Session>,
    ctx: CallCtx,
    cancel: CancellationToken,
    done: InflightGuard,
) -> Response<Body> {
    let started = pc.arrived;
    // In flight until the final answer (or until the response, and with it the driver, is
    // dropped).
    let tracked = app.meter.track(pc.env.method(), started);
    // EVENT_QUEUE in all: the channel adds one slot per sender to its buffer.
    let (tx, rx) = mpsc::channel::<Next>(crate::call::EVENT_QUEUE - 1);
    let resumable =
        crate::protocol::resumable_sse(&session.version).then(|| session.streams.clone());
    let d = Driver {
        params: pc.env.params.map(ToOwned::to_owned),
        method: pc.env.method().to_owned(),
        id: jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null")),
        token: pc.view.meta("progressToken").map(|t| t.to_owned()),
        accept_sse: pc.accept_sse,
        deadline: started + app.cfg.call_timeout,
        tracked: Mutex::new(tracked),
        app: app.clone(),
        session,
        ctx,
        cancel,
        tx: Mutex::new(tx),
        done: Mutex::new(done),
    };
    let mut feed = Feed {
        rx,
        drive: Some(Box::pin(d.drive())),
    };
    let first = if pc.accept_sse {
        tokio::select! {
            n = feed.next() => n,
            _ = tokio::time::sleep(respond::SSE_AFTER) => return sse(&app, None, feed, resumable),
        }
    } else {
        feed.next().await
    };
    match first {
        Some(Next::Final(status, body)) if pc.accept_json || !pc.accept_sse => {
            respond::json(status, body)
        }
        None => respond::status_only(StatusCode::ACCEPTED),
        n => sse(&app, n, feed, resumable),
    }
}

/// A 2025-11-25 session's stream: resumable (`face::replay`), the driver pumped into its log.
fn resumable_sse(
    app: &App,
    first: Option<Next>,
    feed: Feed,
    streams: &crate::face::replay::Streams,
) -> Result<Response<Body>, (Option<Next>, Feed)> {
    use crate::face::replay;
    let Some(log) = replay::StreamLog::open(replay::StreamKind::Post, app.cfg.replay) else {
        return Err((first, feed));
    };
    let src = futures_util::stream::unfold(
        (first, feed, false),
        |(mut first, mut feed, done)| async move {
            if done {
                return None;
            }
            let n = match first.take() {
                Some(n) => n,
                None => feed.next().await?,
            };
            Some(match n {
                Next::Frame(b) => ((b, false), (first, feed, false)),
                Next::Final(_, b) => ((b, true), (first, feed, true)),
            })
        },
    );
    let cfg = replay::ReaderCfg {
        keepalive: app.cfg.keepalive,
        metrics: app.metrics.clone(),
    };
    let body = replay::post_stream(log, streams, &app.tracker, cfg, Box::pin(src));
    Ok(crate::face::respond::sse_response(body))
}

fn sse(
    app: &App,
    first: Option<Next>,
    feed: Feed,
    resumable: Option<crate::face::replay::Streams>,
) -> Response<Body> {
    let (first, feed) = match resumable {
        Some(s) => match resumable_sse(app, first, feed, &s) {
            Ok(r) => return r,
            Err(back) => back,
        },
        None => (first, feed),
    };
    struct St {
        first: Option<Next>,
        feed: Feed,
        keepalive: std::time::Duration,
        done: bool,
        _g: GaugeGuard,
    }
    let st = St {
        first,
        feed,
        keepalive: app.cfg.keepalive,
        done: false,
        _g: GaugeGuard::new(app.metrics.sse_streams().clone()),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let next = match st.first.take() {
            Some(n) => n,
            None => tokio::select! {
                n = st.feed.next() => n?,
                _ = tokio::time::sleep(st.keepalive) => {
                    return Some((Ok::<_, Infallible>(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                }
            },
        };
        let b = match next {
            Next::Frame(b) => b,
            Next::Final(_, b) => {
                st.done = true;
                b
            }
        };
        Some((Ok(Frame::data(framing::sse_event(&b))), st))
    });
    crate::face::respond::sse_response(BodyExt::boxed_unsync(StreamBody::new(stream)))
}

impl Driver {
    async fn finish(&self, o: Outcome) {
        self.tracked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .answered(&self.app.meter, &o);
        let frame = match o {
            Outcome::Result(r) => jsonrpc::result(self.id.get(), r.get()),
            Outcome::Error(e) => jsonrpc::error_raw(Some(self.id.get()), e.get()),
            Outcome::Failed(be) => jsonrpc::error_raw(Some(self.id.get()), &be.error_object()),
        };
        let _ = self.send(Next::Final(StatusCode::OK, frame)).await;
    }

    async fn drive(mut self) {
        let params = self.params.take();
        let o = rounds::drive(&self, &self.method, params.as_deref(), &self.ctx).await;
        // Stopped while the client was being asked: rule 7 of `crate::core` as well.
        let o = o.or_else(|| {
            let shutting_down = self.cancel.is_cancelled() && self.app.metrics.is_shutting_down();
            crate::core::stopped_answer(shutting_down).0
        });
        if let Some(o) = o {
            self.finish(o).await;
        }
    }

    async fn follow_call(&self, mut h: CallHandle) -> Option<Outcome> {
        h.detach_until(self.deadline);
        self.done.lock().unwrap_or_else(|p| p.into_inner()).detached =
            Some((h.canceller(), self.deadline));
        loop {
            tokio::select! {
                biased;
                ev = h.events.recv(), if !h.events.ended() => {
                    if let Some(CallEvent::Notification { method, params }) = ev {
                        let params = params.map(|p| self.restore_token(&method, p));
                        let f = jsonrpc::notification(&method, params.as_deref().map(RawValue::get));
                        if !self.send(Next::Frame(f)).await {
                            return None; // the client is gone; the detached call runs out
                        }
                    }
                }
                o = &mut h.outcome => return Some(o.unwrap_or_else(|_| Outcome::Failed(
                    BridgeError::ChildExited("the call was dropped".into())))),
                _ = tokio::time::sleep_until(self.deadline.into()) => {
                    h.set_cancel_reason("timeout");
                    return Some(Outcome::Failed(BridgeError::Timeout(
                        self.app.cfg.call_timeout.as_millis() as u64)));
                }
                _ = self.cancel.cancelled() => {
                    // `crate::core`, rule 7: the client cancelled it (no response, 2025) or
                    // the bridge is shutting down (its one answer).
                    let (o, why) = crate::core::stopped_answer(self.app.metrics.is_shutting_down());
                    h.set_cancel_reason(why);
                    return o;
                }
            }
        }
    }

    /// Queue `n` for the response, waiting while the queue is full; false when the response
    /// is gone (the client hung up).
    async fn send(&self, n: Next) -> bool {
        let lock = || self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let ready = futures_util::future::poll_fn(|cx| match lock().poll_ready(cx) {
            Poll::Ready(r) => Poll::Ready(r.is_ok()),
            Poll::Pending => Poll::Pending,
        });
        ready.await && lock().start_send(n).is_ok()
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

/// The HTTP face's side of the rounds: requests go out on the call's SSE stream, answers
/// come back as POSTs to the session, and the call's deadline bounds every wait.
impl RoundsFace for Driver {
    fn caller_caps(&self) -> Option<Box<RawValue>> {
        self.session.client_caps()
    }
    fn cannot_ask(&self) -> Option<&'static str> {
        (!self.accept_sse).then_some(
            "this call needs input from the client: send it with Accept: text/event-stream",
        )
    }
    fn start(&self, call: Call) -> BoxFuture<'_, Result<CallHandle, Outcome>> {
        Box::pin(async move {
            crate::core::start(&self.session.upstream, call, self.app.cfg.start_wait)
                .await
                .map_err(Outcome::Failed)
        })
    }
    fn follow(&self, h: CallHandle) -> impl std::future::Future<Output = Option<Outcome>> + Send {
        self.follow_call(h)
    }
    fn expect_answer(&self, id: &str) -> Option<oneshot::Receiver<rounds::Answer>> {
        self.session.caller.expect_answer(id)
    }
    fn forget_answer(&self, id: &str) {
        self.session.caller.forget_answer(id)
    }
    fn send_request(&self, frame: Bytes) -> BoxFuture<'_, bool> {
        Box::pin(self.send(Next::Frame(frame)))
    }
    fn wait_answer(&self, rx: oneshot::Receiver<rounds::Answer>) -> BoxFuture<'_, Waited> {
        Box::pin(async move {
            tokio::select! {
                a = rx => a.map_or(Waited::TimedOut, Waited::Answer),
                _ = tokio::time::sleep_until(self.deadline.into()) => Waited::TimedOut,
                _ = self.cancel.cancelled() => Waited::Cancelled,
            }
        })
    }
}
