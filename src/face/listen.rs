//! `subscriptions/listen` from a 2026 client in front of a 2025 child: acknowledge first with
//! the honoured subset, map `resourceSubscriptions` to `resources/subscribe` (reference-counted
//! across listeners sharing the child), forward only the requested notification types tagged
//! with the listen request's id, and unsubscribe when the stream closes. On shutdown the stream
//! ends with the listen request's completion result. The era-neutral pieces (filter,
//! reference counts, tags) live in `crate::era::notifications`, shared with `connect`. The
//! unsubscribe runs in a task on the face's tracker that waits for the stream's end.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::call::{Call, CallCtx, Outcome};
use crate::call::{SharedUpstream, UpstreamEvent, UpstreamInfo};
use crate::era::notifications::{acknowledgement, completion, tagged, Honoured};
use crate::face::respond::{Body, GaugeGuard};
use crate::face::run::PostCtx;
use crate::face::state::App;
use crate::framing;
use crate::jsonrpc::{self, Envelope, Fields};

async fn child_request(up: &SharedUpstream, method: &str, uri: &str) -> bool {
    let call = Call {
        method: method.to_owned(),
        params: Some(jsonrpc::raw(&json!({ "uri": uri }).to_string())),
        ctx: CallCtx::modern(),
    };
    let Ok(mut h) = crate::core::start(up, call, Duration::from_secs(5)).await else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(10), &mut h.outcome).await,
        Ok(Ok(Outcome::Result(_)))
    )
}

/// How long the unsubscriber waits, once the face is stopping, for its listen stream to end
/// before it unsubscribes anyway (the stream ends at once on stopping unless its client has
/// stopped reading).
const STREAM_END_WAIT: Duration = Duration::from_secs(5);

/// Unsubscribe the child from `uris` when the listen stream ends: `ended` resolves when the
/// stream (which holds its sender) is dropped. Runs on the face's tracker, so it is awaited
/// at shutdown rather than spawned from a `Drop`.
fn unsubscribe_when_ended(
    app: &App,
    uris: Vec<String>,
    ended: tokio::sync::oneshot::Receiver<Infallible>,
) {
    if uris.is_empty() {
        return;
    }
    let (subs, up, stopping) = (
        app.resource_subs.clone(),
        app.upstream.clone(),
        app.stopping.clone(),
    );
    app.tracker.spawn(async move {
        tokio::select! {
            _ = ended => {}
            _ = async {
                stopping.cancelled().await;
                tokio::time::sleep(STREAM_END_WAIT).await;
            } => {}
        }
        for u in uris {
            if subs.release(&u) {
                child_request(&up, "resources/unsubscribe", &u).await;
            }
        }
    });
}

pub async fn listen(app: &App, pc: &PostCtx<'_>, info: &UpstreamInfo) -> Response<Body> {
    let id = jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null"));
    let caps: Value = info
        .initialize
        .as_ref()
        .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
        .and_then(|v| v.get("capabilities").cloned())
        .unwrap_or(Value::Null);
    let filter = pc
        .env
        .params
        .and_then(Fields::parse)
        .and_then(|f| f.get("notifications"));
    let mut honoured = Honoured::from(filter, &caps);
    // Subscribe the child to the resources asked for (once per URI across listeners).
    let mut kept = Vec::new();
    for uri in std::mem::take(&mut honoured.uris) {
        if app.resource_subs.acquire(&uri)
            && !child_request(&app.upstream, "resources/subscribe", &uri).await
        {
            app.resource_subs.release(&uri);
            continue;
        }
        kept.push(uri);
    }
    honoured.uris = kept;
    // Acknowledge once notifications can flow (`crate::core`, rule 4).
    crate::core::listen_ready(&app.upstream).await;
    // Dropped with the stream: that ends the listen's subscriptions.
    let (release, ended) = tokio::sync::oneshot::channel::<Infallible>();
    unsubscribe_when_ended(app, honoured.uris.clone(), ended);
    let ack = acknowledgement(&honoured, &id);
    struct St {
        ack: Option<Bytes>,
        id: Box<RawValue>,
        honoured: Honoured,
        rx: broadcast::Receiver<UpstreamEvent>,
        stopping: CancellationToken,
        keepalive: Duration,
        done: bool,
        _release: tokio::sync::oneshot::Sender<Infallible>,
        _g: GaugeGuard,
    }
    let st = St {
        ack: Some(ack),
        id,
        honoured,
        rx: app.upstream.subscribe(),
        stopping: app.stopping.clone(),
        keepalive: app.cfg.keepalive,
        done: false,
        _release: release,
        _g: GaugeGuard::new(app.metrics.sse_streams().clone()),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        if let Some(a) = st.ack.take() {
            return Some((Ok::<_, Infallible>(Frame::data(framing::sse_event(&a))), st));
        }
        loop {
            let ev = tokio::select! {
                ev = st.rx.recv() => ev,
                _ = tokio::time::sleep(st.keepalive) => {
                    return Some((Ok(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                }
                _ = st.stopping.cancelled() => {
                    // Graceful end: the listen request's completion result, then close.
                    st.done = true;
                    let f = completion(&st.id);
                    return Some((Ok(Frame::data(framing::sse_event(&f))), st));
                }
            };
            match ev {
                Ok(UpstreamEvent::Notification(frame)) => {
                    let Ok(env) = Envelope::parse(&frame) else {
                        continue;
                    };
                    if st.honoured.wants(env.method(), env.params) {
                        let f = tagged(env.method(), env.params, &st.id);
                        return Some((Ok(Frame::data(framing::sse_event(&f))), st));
                    }
                }
                Ok(UpstreamEvent::Restarted) => {
                    // The child's subscriptions died with it; a client MAY re-listen.
                    debug!("child restarted; ending listen stream");
                    return None;
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    crate::face::respond::sse_response(BodyExt::boxed_unsync(StreamBody::new(stream)))
}
