//! The stdio face (`connect`): one host on our stdin/stdout. Reads newline-delimited JSON-RPC,
//! writes only MCP messages to stdout (one writer task; logs go to stderr), serves a 2025 host
//! (`initialize`, then a session-like lifecycle) and a 2026 host (per-request `_meta`) alike,
//! restores the host's ids on every answer, carries host cancellations to the upstream (by
//! dropping the call), and relays the remote's 2025 server requests under ids of our own
//! (`"mcp-bridge:N"`) so they cannot collide with the host's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{Call, CallCtx, CallEvent, Outcome, EVENT_QUEUE};
use crate::framing::{single_line, Line, LineDecoder};
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::protocol::{self, Era};
use crate::upstream::remote::Remote;

/// What the host told us in `initialize` (2025 host), stamped onto its calls for a 2026 remote.
#[derive(Default)]
struct Host {
    era: Option<Era>,
    stamp: Arc<Vec<(String, Box<RawValue>)>>,
}

struct Face {
    remote: Arc<Remote>,
    out: mpsc::Sender<Bytes>,
    host: Mutex<Host>,
    /// Host request id (exact JSON text) → cancel handle of its call.
    inflight: Mutex<HashMap<String, CancellationToken>>,
    /// Our id for a server request sent to the host → the remote's id.
    server_requests: Mutex<HashMap<String, Box<RawValue>>>,
    next_server_request: AtomicU64,
    tracker: TaskTracker,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve the host on `input`/`output` until the host closes `input` or `shutdown` fires.
pub async fn serve<R, W>(
    remote: Arc<Remote>,
    mut server_events: mpsc::Receiver<CallEvent>,
    input: R,
    output: W,
    max_line: usize,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, out_rx) = mpsc::channel::<Bytes>(256);
    let writer = tokio::spawn(write_loop(output, out_rx));
    let face = Arc::new(Face {
        remote,
        out,
        host: Mutex::new(Host::default()),
        inflight: Mutex::new(HashMap::new()),
        server_requests: Mutex::new(HashMap::new()),
        next_server_request: AtomicU64::new(1),
        tracker: TaskTracker::new(),
    });
    // Traffic from the remote that belongs to no call (2025 GET stream).
    let events_task = {
        let face = Arc::clone(&face);
        tokio::spawn(async move {
            while let Some(ev) = server_events.recv().await {
                face.forward_event(ev).await;
            }
        })
    };
    let mut lines = FramedRead::new(input, LineDecoder::new(max_line));
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => { info!("shutting down"); break; }
            n = lines.next() => n,
        };
        match next {
            None => {
                info!("the host closed stdin: shutting down");
                break;
            }
            Some(Err(e)) => {
                warn!("reading stdin: {e}");
                break;
            }
            Some(Ok(Line::Oversize(n, _))) => {
                warn!("skipped a {n}-byte line from the host (over --max-line)");
                face.send(jsonrpc::error(
                    None,
                    code::INVALID_REQUEST,
                    "message too large",
                    None,
                ))
                .await;
            }
            Some(Ok(Line::Frame(f))) => face.handle_line(f).await,
        }
    }
    // Cancel what is still running (each cancellation reaches the remote), then end the
    // session and flush stdout.
    for (_, t) in lock(&face.inflight).drain() {
        t.cancel();
    }
    face.tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(5), face.tracker.wait()).await;
    face.remote.shutdown().await;
    events_task.abort();
    drop(face);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, mut rx: mpsc::Receiver<Bytes>) {
    while let Some(frame) = rx.recv().await {
        let mut buf = BytesMut::with_capacity(frame.len() + 1);
        buf.put_slice(&single_line(&frame));
        buf.put_u8(b'\n');
        // Batch whatever else is ready into the same write.
        while let Ok(more) = rx.try_recv() {
            buf.put_slice(&single_line(&more));
            buf.put_u8(b'\n');
        }
        if w.write_all(&buf).await.is_err() || w.flush().await.is_err() {
            warn!("stdout closed: the host is gone");
            return;
        }
    }
}

impl Face {
    async fn send(&self, frame: Bytes) {
        let _ = self.out.send(frame).await;
    }

    async fn handle_line(self: &Arc<Self>, f: Bytes) {
        if f.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let env = match Envelope::parse(&f) {
            Ok(e) => e,
            Err(jsonrpc::FrameError::Json(e)) => {
                warn!("unparsable line from the host: {e}");
                self.send(jsonrpc::error(None, code::PARSE_ERROR, "parse error", None))
                    .await;
                return;
            }
            Err(e) => {
                self.send(jsonrpc::error(
                    None,
                    code::INVALID_REQUEST,
                    &e.to_string(),
                    None,
                ))
                .await;
                return;
            }
        };
        match env.kind() {
            Ok(Kind::Request) => self.handle_request(&env),
            Ok(Kind::Notification) => self.handle_notification(&env).await,
            Ok(Kind::Response) => self.handle_response(&env),
            Err(e) => {
                let id = env.id.map(RawValue::get);
                self.send(jsonrpc::error(
                    id,
                    code::INVALID_REQUEST,
                    &e.to_string(),
                    None,
                ))
                .await;
            }
        }
    }

    fn handle_request(self: &Arc<Self>, env: &Envelope<'_>) {
        let Some(id_raw) = env.id else { return };
        let id = id_raw.get().trim().to_owned();
        let method = env.method().to_owned();
        let params = env.params.map(ToOwned::to_owned);
        if method == "initialize" {
            self.start_initialize(id, params);
            return;
        }
        if method == "ping" {
            let me = Arc::clone(self);
            tokio::spawn(async move { me.send(jsonrpc::result(&id, "{}")).await });
            return;
        }
        let modern = jsonrpc::meta_field(params.as_deref(), protocol::META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .is_some_and(|v| !protocol::is_legacy_version(&v));
        let ctx = {
            let mut h = lock(&self.host);
            if modern {
                if h.era.is_none() {
                    info!("the host speaks 2026-07-28");
                    h.era = Some(Era::Modern);
                }
                CallCtx::modern()
            } else {
                CallCtx {
                    client_era: Era::Legacy,
                    stamp_meta: Arc::clone(&h.stamp),
                    session: None,
                    accepts_server_requests: true,
                    log_level: None,
                }
            }
        };
        let token = CancellationToken::new();
        {
            let mut inflight = lock(&self.inflight);
            if inflight.contains_key(&id) {
                drop(inflight);
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    me.send(jsonrpc::error(
                        Some(&id),
                        code::INVALID_REQUEST,
                        "a request with this id is still in flight",
                        None,
                    ))
                    .await
                });
                return;
            }
            inflight.insert(id.clone(), token.clone());
        }
        let call = Call {
            method,
            params,
            ctx,
        };
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            me.run_call(id, call, token).await;
        });
    }

    /// Run one call: forward its events while it runs, then its answer (or nothing, if the
    /// host cancelled it).
    async fn run_call(self: Arc<Self>, id: String, call: Call, token: CancellationToken) {
        let (etx, mut erx) = mpsc::channel(EVENT_QUEUE);
        let modern_host = call.ctx.client_era == Era::Modern;
        let method = call.method.clone();
        let remote = Arc::clone(&self.remote);
        let fut = remote.call(call, etx);
        tokio::pin!(fut);
        let outcome = loop {
            tokio::select! {
                biased;
                _ = token.cancelled() => {
                    debug!("{method} cancelled by the host");
                    break None;
                }
                Some(ev) = erx.recv() => self.forward_call_event(ev, modern_host).await,
                o = &mut fut => break Some(o),
            }
        };
        // Events sent before the answer go out before it.
        while let Ok(ev) = erx.try_recv() {
            if outcome.is_some() {
                self.forward_call_event(ev, modern_host).await;
            }
        }
        lock(&self.inflight).remove(&id);
        if let Some(o) = outcome {
            self.send(answer(&id, o)).await;
        }
    }

    async fn forward_call_event(self: &Arc<Self>, ev: CallEvent, modern_host: bool) {
        match ev {
            CallEvent::Notification { method, params } => {
                self.send(jsonrpc::notification(
                    &method,
                    params.as_deref().map(RawValue::get),
                ))
                .await
            }
            CallEvent::ServerRequest { id, method, params } => {
                if modern_host {
                    self.refuse_server_request(id, &method).await;
                } else {
                    self.relay_server_request(id, &method, params).await;
                }
            }
        }
    }

    /// Traffic from the GET stream.
    async fn forward_event(self: &Arc<Self>, ev: CallEvent) {
        let modern_host = lock(&self.host).era == Some(Era::Modern);
        match ev {
            CallEvent::Notification { method, params } => {
                if modern_host && method != "notifications/progress" {
                    debug!("not relaying {method} to a 2026 host");
                    return;
                }
                self.send(jsonrpc::notification(
                    &method,
                    params.as_deref().map(RawValue::get),
                ))
                .await
            }
            ev @ CallEvent::ServerRequest { .. } => self.forward_call_event(ev, modern_host).await,
        }
    }

    async fn relay_server_request(
        self: &Arc<Self>,
        remote_id: Box<RawValue>,
        method: &str,
        params: Option<Box<RawValue>>,
    ) {
        let n = self.next_server_request.fetch_add(1, Ordering::Relaxed);
        let ours = format!("\"mcp-bridge:{n}\"");
        lock(&self.server_requests).insert(ours.clone(), remote_id);
        debug!("relaying the remote's {method} to the host as {ours}");
        self.send(jsonrpc::request(
            &ours,
            method,
            params.as_deref().map(RawValue::get),
        ))
        .await;
    }

    async fn refuse_server_request(self: &Arc<Self>, remote_id: Box<RawValue>, method: &str) {
        warn!("the 2025 remote sent {method} to a 2026 host: refused (not supported yet)");
        let err = jsonrpc::raw(&jsonrpc::error_object(
            code::METHOD_NOT_FOUND,
            "the client (a 2026-era host behind mcp-bridge) cannot answer server requests",
            None,
        ));
        let remote = Arc::clone(&self.remote);
        self.tracker.spawn(async move {
            remote.respond(&remote_id, None, Some(&err)).await;
        });
    }

    fn start_initialize(self: &Arc<Self>, id: String, params: Option<Box<RawValue>>) {
        let p = params.as_deref();
        let field = |k: &str| {
            p.and_then(Fields::parse)
                .and_then(|f| f.get(k).map(ToOwned::to_owned))
        };
        let requested =
            field("protocolVersion").and_then(|v| serde_json::from_str::<String>(v.get()).ok());
        let mut stamp: Vec<(String, Box<RawValue>)> = vec![(
            protocol::META_PROTOCOL_VERSION.to_owned(),
            jsonrpc::raw(&format!("\"{}\"", protocol::MODERN)),
        )];
        stamp.push((
            protocol::META_CLIENT_CAPABILITIES.to_owned(),
            field("capabilities").unwrap_or_else(|| jsonrpc::raw("{}")),
        ));
        if let Some(ci) = field("clientInfo") {
            stamp.push((protocol::META_CLIENT_INFO.to_owned(), ci));
        }
        {
            let mut h = lock(&self.host);
            h.era = Some(Era::Legacy);
            h.stamp = Arc::new(stamp);
        }
        info!(
            "the host speaks 2025 ({})",
            requested.as_deref().unwrap_or("no version")
        );
        self.remote.set_host_init(p);
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            let o = me.remote.host_initialize(requested).await;
            me.send(answer(&id, o)).await;
        });
    }

    async fn handle_notification(self: &Arc<Self>, env: &Envelope<'_>) {
        match env.method() {
            "notifications/cancelled" => {
                let Some(rid) = env
                    .params
                    .and_then(Fields::parse)
                    .and_then(|f| f.get("requestId").map(|v| v.get().trim().to_owned()))
                else {
                    return;
                };
                match lock(&self.inflight).remove(&rid) {
                    Some(t) => {
                        info!("the host cancelled request {rid}");
                        t.cancel();
                    }
                    None => debug!("cancellation for unknown request {rid} ignored"),
                }
            }
            "notifications/initialized" => {}
            m => {
                let m = m.to_owned();
                let params = env.params.map(ToOwned::to_owned);
                let remote = Arc::clone(&self.remote);
                self.tracker.spawn(async move {
                    remote.notify(&m, params.as_deref()).await;
                });
            }
        }
    }

    fn handle_response(self: &Arc<Self>, env: &Envelope<'_>) {
        let Some(id) = env.id else { return };
        let Some(remote_id) = lock(&self.server_requests).remove(id.get().trim()) else {
            debug!("a response from the host for an unknown id was dropped");
            return;
        };
        let result = env.result.map(ToOwned::to_owned);
        let error = env.error.map(ToOwned::to_owned);
        let remote = Arc::clone(&self.remote);
        self.tracker.spawn(async move {
            remote
                .respond(&remote_id, result.as_deref(), error.as_deref())
                .await;
        });
    }
}

/// The response frame for an outcome, under the host's id.
fn answer(id: &str, o: Outcome) -> Bytes {
    match o {
        Outcome::Result(r) => jsonrpc::result(id, r.get()),
        Outcome::Error(e) => jsonrpc::error_raw(Some(id), e.get()),
        Outcome::Failed(e) => jsonrpc::error_raw(Some(id), &e.error_object()),
    }
}
