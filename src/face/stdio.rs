//! The stdio face (`connect`): one host on our stdin/stdout. Reads newline-delimited JSON-RPC,
//! writes only MCP messages to stdout (one writer task; logs go to stderr), serves a 2025 host
//! (`initialize`, then a session-like lifecycle) and a 2026 host (per-request `_meta`) alike,
//! restores the host's ids on every answer, carries host cancellations to the upstream (by
//! dropping the call), and relays the remote's 2025 server requests under ids of our own
//! (`"mcpb-N"`, `crate::mrtr::mint_request_id`) so they cannot collide with the host's.
//!
//! Across eras (the same translations as `serve`, with `crate::mrtr`):
//! - 2026 host, 2025 remote: a server request on the stream of a `tools/call`/`prompts/get`/
//!   `resources/read` parks the remote call and answers the host `input_required` (signed
//!   `requestState`); the host's retry hands its `inputResponses` to the remote as responses
//!   under the remote's ids, and the parked call's answer goes out under the retry's id.
//! - 2025 host, 2026 remote: an `input_required` result becomes requests to the host
//!   (`"mcpb-N"`, `crate::mrtr::mint_request_id` ids); with every answer in, the remote is retried with `inputResponses`
//!   and the exact `requestState` under a new id, at most `MAX_ROUNDS` times.
//!
//! Notifications and logging across eras (with `crate::notifications`, as `serve` does):
//! - 2026 host, 2025 remote: `subscriptions/listen` is answered here: the acknowledgement
//!   first (the honoured subset of the filter, once the remote's GET stream is open), then the
//!   list-changed / resource-updated notifications of the GET stream (or of any call's stream)
//!   that listen asked for, tagged with its id as `subscriptionId`; `resourceSubscriptions`
//!   become `resources/subscribe` on the remote, reference-counted across listens, and
//!   `resources/unsubscribe` when the last listen holding a URI is cancelled
//!   (`notifications/cancelled`) or at shutdown (where each listen gets its completion result).
//!   A request's `_meta` logLevel lowers the session's level with `logging/setLevel` (once per
//!   change) and its `notifications/message` are filtered by that request's level; a request
//!   without one gets none.
//! - 2026 host, 2026 remote: the listen is carried as a call; the remote's tags (our ids) are
//!   replaced by the host's listen id.
//! - 2025 host, 2026 remote: after `initialize` the bridge holds one `subscriptions/listen` on
//!   the remote (the list-changed types its capabilities offer, plus the host's
//!   `resources/subscribe` URIs, which re-open it and are answered `{}` once it is
//!   acknowledged), forwards its notifications without `subscriptionId`, re-opens it with
//!   backoff when it ends, and closes it at shutdown. The host's `logging/setLevel` is kept and
//!   stamped as `_meta` logLevel on its later requests.
//! - URL elicitation: `elicitationId` dropped toward a 2026 host, minted toward a 2025 host;
//!   `notifications/elicitation/complete` is not relayed to a 2026 host; a 2025 remote's
//!   `-32042` becomes `input_required` (or `-32021`) for a 2026 host (see `crate::mrtr`).
//!
//! Accounting (`face::stdio_observe`): each host request is tracked from `handle_request` to
//! `reply`; errors the face makes itself are `Outcome::Failed` (`BridgeError::Refused`), so
//! that `reply` counts them, and `Outcome::Error` is only ever what the remote answered (or
//! its `-32042` translated for a 2026 host, counted at the remote as the error it was).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{Call, CallCtx, CallEvent, Outcome, EVENT_QUEUE};
use crate::error::BridgeError;
use crate::face::respond::input_required_result;
use crate::face::rounds::MAX_ROUNDS;
use crate::face::stdio_observe::{HostObserver, Tracked};
use crate::framing::{single_line, Line, LineDecoder};
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::mrtr::{self, ParkStore, Parked, StateSigner};
use crate::notifications::{
    acknowledgement, completion_result, is_listen_notification, legacy_filter, retagged,
    subscription_id, tagged, untagged, Honoured, ResourceSubs,
};
use crate::protocol::{self, Era};
use crate::upstream::remote::Remote;

/// What the host told us in `initialize` (2025 host), stamped onto its calls for a 2026 remote.
#[derive(Default)]
struct Host {
    era: Option<Era>,
    stamp: Arc<Vec<(String, Box<RawValue>)>>,
    /// The level of the 2025 host's last `logging/setLevel`.
    log_level: Option<&'static str>,
    /// The capabilities the 2025 host declared at `initialize`: the gate before it is asked
    /// anything (`mrtr::may_ask`, as serve does for a 2025 session).
    caps: Option<Box<RawValue>>,
}

/// The one caller a stdio face has, as far as `requestState` binding goes.
const PRINCIPAL: &str = "stdio-host";

/// Most calls parked at once for a 2026 host's input.
const MAX_PARKED: usize = 256;

/// A remote call running in its own task, so that it can be parked while a 2026 host gathers
/// input. Dropping it cancels the call at the remote.
struct Running {
    events: mpsc::Receiver<CallEvent>,
    task: tokio::task::JoinHandle<Outcome>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What parking a 2026 host's call needs to know.
struct ParkCtx {
    method: String,
    digest: String,
    /// This request's `clientCapabilities`.
    caps: Option<Box<RawValue>>,
    /// The round the host's request answered (0 for a first request).
    round: u32,
    /// Reuse this parked-call id when resuming.
    park_id: Option<u64>,
}

/// A host's answer to one of our input requests: its result, or its error.
type HostAnswer = Result<Box<RawValue>, Box<RawValue>>;

/// Who a call's traffic goes to, and what it may receive.
#[derive(Default)]
struct Who {
    /// A 2026 host (notifications are request-scoped or go to its listens).
    modern: bool,
    /// The rank of the request's `_meta` logLevel (2026 host); None: no log messages.
    log_rank: Option<usize>,
    /// A 2026 host's listen carried to a 2026 remote: its id, to tag the remote's traffic with.
    listen: Option<Box<RawValue>>,
}

impl Who {
    fn of(ctx: &CallCtx) -> Self {
        Self {
            modern: ctx.client_era == Era::Modern,
            log_rank: ctx.log_level.and_then(protocol::log_level).map(|(_, r)| r),
            listen: None,
        }
    }
}

/// A host request in flight.
struct Inflight {
    token: CancellationToken,
    /// Its logLevel rank (2026 host), to route untargeted log messages.
    log_rank: Option<usize>,
    /// A 2026 host's listen: ended by `stopping` at shutdown (with its completion result), so
    /// that its token means the host cancelled it.
    listen: bool,
}

/// A 2026 host's listen that the bridge serves itself (2025 remote).
struct Listener {
    /// The listen request's id (exact JSON).
    id: Box<RawValue>,
    honoured: Honoured,
}

/// The one listen the bridge holds on a 2026 remote for a 2025 host.
struct Held {
    started: AtomicBool,
    /// The host's resource subscriptions.
    uris: Mutex<BTreeSet<String>>,
    /// Woken when `uris` changes: the listen is re-opened with the new set.
    resubscribe: Notify,
    /// Acknowledgements received so far.
    acks: watch::Sender<u64>,
    /// The remote does not know `subscriptions/listen`: nothing to wait for.
    unsupported: AtomicBool,
}

/// Most resources a 2025 host may subscribe to.
const MAX_HOST_URIS: usize = 1000;
/// How long a listen's acknowledgement may wait for the remote's side to be in place.
const LISTEN_SETUP: Duration = Duration::from_secs(10);

struct Face {
    remote: Arc<Remote>,
    out: mpsc::Sender<Bytes>,
    host: Mutex<Host>,
    /// Host request id (exact JSON text) → its call.
    inflight: Mutex<HashMap<String, Inflight>>,
    /// 2026 host's listens served by the bridge (2025 remote), by listen id (exact JSON text).
    listens: Mutex<HashMap<String, Arc<Listener>>>,
    /// The 2025 remote's resource subscriptions held for those listens.
    resource_subs: ResourceSubs,
    /// The listen held for a 2025 host (2026 remote).
    held: Held,
    /// Cancelled when the face shuts down (before the calls in flight are cancelled).
    stopping: CancellationToken,
    /// Our id for a server request sent to the host → the remote's id.
    server_requests: Mutex<HashMap<String, Box<RawValue>>>,
    /// Our id for an input request of a 2026 remote sent to a 2025 host → its waiter.
    input_waits: Mutex<HashMap<String, oneshot::Sender<HostAnswer>>>,
    signer: StateSigner,
    parked: ParkStore<Running>,
    tracker: TaskTracker,
    obs: HostObserver,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve the host on `input`/`output` until the host closes `input` or `shutdown` fires,
/// counting its requests and the bridge's answers with `obs`.
pub async fn serve<R, W>(
    remote: Arc<Remote>,
    mut server_events: mpsc::Receiver<CallEvent>,
    input: R,
    output: W,
    max_line: usize,
    obs: HostObserver,
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
        listens: Mutex::new(HashMap::new()),
        resource_subs: ResourceSubs::default(),
        held: Held {
            started: AtomicBool::new(false),
            uris: Mutex::new(BTreeSet::new()),
            resubscribe: Notify::new(),
            acks: watch::Sender::new(0),
            unsupported: AtomicBool::new(false),
        },
        stopping: CancellationToken::new(),
        server_requests: Mutex::new(HashMap::new()),
        input_waits: Mutex::new(HashMap::new()),
        signer: StateSigner::new(),
        parked: ParkStore::new(MAX_PARKED),
        tracker: TaskTracker::new(),
        obs,
    });
    // Parked calls whose host never came back are cancelled at the remote.
    let sweeper = {
        let face = Arc::clone(&face);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                for p in face.parked.take_expired() {
                    info!(
                        "a {} waiting for the host's input expired: cancelled",
                        p.method
                    );
                    face.obs.cancelled("timeout");
                }
            }
        })
    };
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
                face.obs.unreadable(code::INVALID_REQUEST);
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
    // End the listens (with their completion results), cancel what is still running (each
    // cancellation reaches the remote), then end the session and flush stdout.
    face.stopping.cancel();
    for (_, c) in lock(&face.inflight).drain() {
        if !c.listen {
            c.token.cancel();
            face.obs.cancelled("shutdown");
        }
    }
    sweeper.abort();
    for _ in face.parked.take_all() {
        face.obs.cancelled("shutdown");
    }
    lock(&face.input_waits).clear();
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

    /// Answer the host's request `t` (id `id`) with `o`, and count the answer.
    async fn reply(&self, t: Tracked, id: &str, o: Outcome) {
        self.obs.answered(t, &o);
        self.send(answer(id, o)).await;
    }

    /// Answer the host's request `t` with the face's own error, from a task of its own.
    fn refuse(self: &Arc<Self>, t: Tracked, id: String, c: i64, msg: &str) {
        let me = Arc::clone(self);
        let o = refused(c, msg);
        tokio::spawn(async move { me.reply(t, &id, o).await });
    }

    async fn handle_line(self: &Arc<Self>, f: Bytes) {
        if f.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let env = match Envelope::parse(&f) {
            Ok(e) => e,
            Err(jsonrpc::FrameError::Json(e)) => {
                warn!("unparsable line from the host: {e}");
                self.obs.unreadable(code::PARSE_ERROR);
                self.send(jsonrpc::error(None, code::PARSE_ERROR, "parse error", None))
                    .await;
                return;
            }
            Err(e) => {
                self.obs.unreadable(code::INVALID_REQUEST);
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
                self.obs.unreadable(code::INVALID_REQUEST);
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
        let t = self.obs.request(&method);
        let params = env.params.map(ToOwned::to_owned);
        if method == "initialize" {
            self.start_initialize(t, id, params);
            return;
        }
        if method == "ping" {
            let me = Arc::clone(self);
            let pong = Outcome::Result(jsonrpc::raw("{}"));
            tokio::spawn(async move { me.reply(t, &id, pong).await });
            return;
        }
        let modern = jsonrpc::meta_field(params.as_deref(), protocol::META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .is_some_and(|v| !protocol::is_legacy_version(&v));
        let ctx = if modern {
            let Ok(level) = protocol::request_log_level(params.as_deref()) else {
                let msg = "invalid io.modelcontextprotocol/logLevel";
                self.refuse(t, id, code::INVALID_PARAMS, msg);
                return;
            };
            let mut h = lock(&self.host);
            if h.era.is_none() {
                info!("the host speaks 2026-07-28");
                h.era = Some(Era::Modern);
            }
            CallCtx {
                log_level: level,
                ..CallCtx::modern()
            }
        } else {
            let mut h = lock(&self.host);
            if method == "logging/setLevel" {
                // Kept before the next request is read: it is stamped on the host's later
                // requests to a 2026 remote.
                let level = params
                    .as_deref()
                    .and_then(Fields::parse)
                    .and_then(|f| f.get("level").map(ToOwned::to_owned))
                    .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
                    .and_then(|l| protocol::log_level(&l));
                let Some((level, _)) = level else {
                    drop(h);
                    let msg = "invalid or missing logging level";
                    self.refuse(t, id, code::INVALID_PARAMS, msg);
                    return;
                };
                h.log_level = Some(level);
            }
            CallCtx {
                client_era: Era::Legacy,
                stamp_meta: protocol::stamp_with_log_level(&h.stamp, h.log_level),
                session: None,
                accepts_server_requests: true,
                log_level: None,
                tool: None,
            }
        };
        let token = CancellationToken::new();
        let listen = modern && method == "subscriptions/listen";
        {
            let mut inflight = lock(&self.inflight);
            if inflight.contains_key(&id) {
                drop(inflight);
                let msg = "a request with this id is still in flight";
                self.refuse(t, id, code::INVALID_REQUEST, msg);
                return;
            }
            inflight.insert(
                id.clone(),
                Inflight {
                    token: token.clone(),
                    // Never log messages on a listen.
                    log_rank: Who::of(&ctx).log_rank.filter(|_| !listen),
                    listen,
                },
            );
        }
        let call = Call {
            method,
            params,
            ctx,
        };
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            me.run_call(t, id, call, token).await;
        });
    }

    /// Run one call: forward its events while it runs, then its answer (or nothing, if the
    /// host cancelled it).
    async fn run_call(
        self: Arc<Self>,
        t: Tracked,
        id: String,
        call: Call,
        token: CancellationToken,
    ) {
        let outcome = self.drive(&id, call, &token).await;
        lock(&self.inflight).remove(&id);
        if let Some(o) = outcome {
            self.reply(t, &id, o).await;
        }
    }

    async fn drive(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        token: &CancellationToken,
    ) -> Option<Outcome> {
        let who = Who::of(&call.ctx);
        if who.modern {
            if call.method == "subscriptions/listen" {
                return self.listen(id, call, token).await;
            }
            if let Some(level) = call.ctx.log_level {
                if self.remote.era().await == Some(Era::Legacy) {
                    self.remote.ensure_log_level(level).await;
                }
            }
        } else if let Some(o) = self.legacy_host_local(&call).await {
            return Some(o);
        }
        if !mrtr::is_mrtr_method(&call.method) {
            let r = self.start(call);
            return self.follow(id, r, token, &who, None).await;
        }
        if !who.modern {
            return self.rounds(id, call, token).await;
        }
        let state = call
            .params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("requestState").map(ToOwned::to_owned))
            .and_then(|s| serde_json::from_str::<String>(s.get()).ok());
        let legacy_remote = self.remote.era().await == Some(Era::Legacy);
        match state {
            Some(state) if self.signer.is_ours(&state) => {
                return self.resume(id, call, &state, token).await;
            }
            // Nobody behind a 2025 remote can have minted it (serve answers the same); toward
            // a 2026 remote it is the remote's own, or another bridge's further on: untouched.
            Some(_) if legacy_remote => {
                return Some(Outcome::Error(jsonrpc::raw(&jsonrpc::error_object(
                    code::INVALID_PARAMS,
                    "requestState is unknown to this server",
                    None,
                ))));
            }
            _ => {}
        }
        let mut call = call;
        if legacy_remote {
            // A retry after a translated -32042 is the original call again (see crate::mrtr):
            // the 2025 remote never asked for these inputResponses.
            if let Some(p) = mrtr::strip_input_responses(call.params.as_deref()) {
                call.params = Some(p);
            }
        }
        let park = ParkCtx {
            method: call.method.clone(),
            digest: mrtr::params_digest(call.params.as_deref()),
            caps: client_caps(call.params.as_deref()),
            round: 0,
            park_id: None,
        };
        let caps = park.caps.clone();
        let r = self.start(call);
        let o = self.follow(id, r, token, &who, Some(park)).await;
        o.map(|o| url_required_for_modern(o, caps.as_deref()))
    }

    /// Start a call at the remote in its own task.
    fn start(self: &Arc<Self>, call: Call) -> Running {
        let (etx, events) = mpsc::channel(EVENT_QUEUE);
        let remote = Arc::clone(&self.remote);
        // Tracked, so that shutdown waits for the cancellations of dropped calls to go out.
        let task = self
            .tracker
            .spawn(async move { remote.call(call, etx).await });
        Running { events, task }
    }

    /// Forward a running call's events until its answer (None: the host cancelled it). With
    /// `park`, a server request parks the call and the answer is `input_required`.
    async fn follow(
        self: &Arc<Self>,
        id: &str,
        mut r: Running,
        token: &CancellationToken,
        who: &Who,
        park: Option<ParkCtx>,
    ) -> Option<Outcome> {
        enum Step {
            Cancelled,
            Event(CallEvent),
            Done(Outcome),
        }
        let outcome = loop {
            let step = tokio::select! {
                biased;
                _ = token.cancelled() => Step::Cancelled,
                Some(ev) = r.events.recv() => Step::Event(ev),
                o = &mut r.task => Step::Done(o.unwrap_or_else(|e| {
                    refused(code::INTERNAL_ERROR, &format!("internal: {e}"))
                })),
            };
            match step {
                Step::Cancelled => {
                    debug!("request {id} cancelled by the host");
                    return None;
                }
                Step::Done(o) => break o,
                Step::Event(CallEvent::ServerRequest {
                    id: rid,
                    method,
                    params,
                }) if park.is_some() => {
                    let Some(p) = park.as_ref() else { continue };
                    match self.try_park(r, p, who, (rid, method, params)).await {
                        Ok(o) => return Some(o),
                        Err(back) => r = back,
                    }
                }
                Step::Event(ev) => self.forward_call_event(ev, who).await,
            }
        };
        // Events sent before the answer go out before it.
        while let Ok(ev) = r.events.try_recv() {
            self.forward_call_event(ev, who).await;
        }
        Some(outcome)
    }

    /// A 2025 remote asked a 2026 host's call for input: park the call and answer the host
    /// `input_required` (Err gives the call back when nothing could be asked).
    async fn try_park(
        self: &Arc<Self>,
        mut r: Running,
        p: &ParkCtx,
        who: &Who,
        first: (Box<RawValue>, String, Option<Box<RawValue>>),
    ) -> Result<Outcome, Running> {
        let mut asked = vec![first];
        while let Ok(ev) = r.events.try_recv() {
            match ev {
                CallEvent::ServerRequest { id, method, params } => asked.push((id, method, params)),
                ev @ CallEvent::Notification { .. } => self.forward_call_event(ev, who).await,
            }
        }
        let mut waiting = Vec::new();
        for (rid, method, params) in asked {
            let declared = mrtr::required_capability(&method, params.as_deref())
                .is_some_and(|need| mrtr::capability_declared(p.caps.as_deref(), need));
            if declared {
                let key = format!("input{}", waiting.len() + 1);
                waiting.push((key, rid, method, params));
            } else {
                info!("the 2025 remote sent {method}, which this 2026 request did not declare");
                let msg = format!(
                    "the client did not declare the capability {method} needs in this request"
                );
                self.answer_remote_error(rid, code::METHOD_NOT_FOUND, &msg);
            }
        }
        if waiting.is_empty() {
            return Err(r);
        }
        let park_id = p.park_id.unwrap_or_else(|| self.parked.next_id());
        let round = p.round + 1;
        let state = self.signer.sign(
            park_id,
            round,
            mrtr::INPUT_TTL,
            PRINCIPAL,
            &p.method,
            &p.digest,
        );
        let body = input_required_result(&waiting, &state);
        let parked = Parked {
            handle: r,
            waiting,
            round,
            principal: PRINCIPAL.to_owned(),
            method: p.method.clone(),
            digest: p.digest.clone(),
            expires: std::time::Instant::now() + mrtr::INPUT_TTL,
        };
        if let Err(back) = self.parked.put(park_id, parked) {
            for (_, rid, method, _) in back.waiting {
                let msg = format!("mcp-bridge cannot hold more calls waiting for input ({method})");
                self.answer_remote_error(rid, code::INTERNAL_ERROR, &msg);
            }
            return Err(back.handle);
        }
        debug!("{} parked as {park_id} (round {round})", p.method);
        Ok(Outcome::Result(jsonrpc::raw(&body)))
    }

    fn answer_remote_error(self: &Arc<Self>, remote_id: Box<RawValue>, c: i64, msg: &str) {
        let err = jsonrpc::raw(&jsonrpc::error_object(c, msg, None));
        let remote = Arc::clone(&self.remote);
        self.tracker.spawn(async move {
            remote.respond(&remote_id, None, Some(&err)).await;
        });
    }

    /// A 2026 host retries a parked call: its answers go to the remote under the remote's
    /// ids, then the call carries on under the retry's id.
    async fn resume(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        state: &str,
        token: &CancellationToken,
    ) -> Option<Outcome> {
        let bad = |msg: String| Some(refused(code::INVALID_PARAMS, &msg));
        let params = call.params.as_deref();
        let digest = mrtr::params_digest(params);
        let claims = match self.signer.verify(state, PRINCIPAL, &call.method, &digest) {
            Ok(c) => c,
            Err(e) => return bad(format!("cannot resume: {e}")),
        };
        let Some(mut parked) = self.parked.take(claims.park) else {
            return bad(
                "cannot resume: the call is no longer waiting (answered already, \
                        expired, or the bridge restarted)"
                    .into(),
            );
        };
        if parked.round != claims.round {
            let _ = self.parked.put(claims.park, parked);
            return bad("cannot resume: requestState is from an earlier round".into());
        }
        let answers = params
            .and_then(Fields::parse)
            .and_then(|f| f.get("inputResponses").map(ToOwned::to_owned));
        let answers = answers.as_deref().and_then(Fields::parse);
        let mut still = Vec::new();
        for (key, rid, m, p) in parked.waiting.drain(..) {
            match answers.as_ref().and_then(|a| a.get(&key)) {
                Some(v) => self.remote.respond(&rid, Some(v), None).await,
                None => still.push((key, rid, m, p)),
            }
        }
        let park = ParkCtx {
            method: call.method.clone(),
            digest,
            caps: client_caps(params),
            round: parked.round,
            park_id: Some(claims.park),
        };
        if !still.is_empty() {
            // Some answers are missing: ask again for those (a new round, same parked call).
            let round = parked.round + 1;
            let st = self.signer.sign(
                claims.park,
                round,
                mrtr::INPUT_TTL,
                PRINCIPAL,
                &park.method,
                &park.digest,
            );
            let body = input_required_result(&still, &st);
            parked.waiting = still;
            parked.round = round;
            parked.expires = std::time::Instant::now() + mrtr::INPUT_TTL;
            if self.parked.put(claims.park, parked).is_err() {
                return bad("cannot resume: too many calls waiting for input".into());
            }
            return Some(Outcome::Result(jsonrpc::raw(&body)));
        }
        let who = Who::of(&call.ctx);
        self.follow(id, parked.handle, token, &who, Some(park))
            .await
    }

    /// A 2025 host's call to a 2026 remote: `input_required` results become requests to the
    /// host; the remote is retried with the answers and the exact `requestState`.
    async fn rounds(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        token: &CancellationToken,
    ) -> Option<Outcome> {
        let base: Value = call
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| Value::Object(Default::default()));
        let mut params = call.params;
        for round in 0..=MAX_ROUNDS {
            let r = self.start(Call {
                method: call.method.clone(),
                params: params.take(),
                ctx: call.ctx.clone(),
            });
            let outcome = self.follow(id, r, token, &Who::default(), None).await?;
            let Outcome::Result(res) = &outcome else {
                return Some(outcome);
            };
            let Some(f) = Fields::parse(res) else {
                return Some(outcome);
            };
            if f.get("resultType").map(RawValue::get) != Some("\"input_required\"") {
                return Some(outcome);
            }
            if round == MAX_ROUNDS {
                return Some(internal_error(&format!(
                    "the server asked for input more than {MAX_ROUNDS} times; giving up"
                )));
            }
            let state = f.get("requestState").map(ToOwned::to_owned);
            let answers = match f.get("inputRequests") {
                Some(reqs) => match self.ask_host(reqs, token).await {
                    Ok(a) => a,
                    Err(o) => return o,
                },
                None => serde_json::Map::new(),
            };
            // Retry: the original params + inputResponses + the exact requestState, new id.
            let mut next = base.clone();
            if let Some(o) = next.as_object_mut() {
                if !answers.is_empty() {
                    o.insert("inputResponses".into(), Value::Object(answers));
                }
                if let Some(st) = state.and_then(|s| serde_json::from_str::<Value>(s.get()).ok()) {
                    o.insert("requestState".into(), st);
                }
            }
            params = Some(jsonrpc::raw(&next.to_string()));
        }
        None
    }

    /// Send each input request to the 2025 host and collect its answers (Err: stop with this
    /// outcome, or with none if the host cancelled the call).
    async fn ask_host(
        self: &Arc<Self>,
        reqs: &RawValue,
        token: &CancellationToken,
    ) -> Result<serde_json::Map<String, Value>, Option<Outcome>> {
        let Some(reqs) = mrtr::input_requests(reqs) else {
            return Err(Some(internal_error(
                "the server's inputRequests is not an object",
            )));
        };
        let caps = lock(&self.host).caps.clone();
        if let Some(r) = reqs
            .iter()
            .find(|r| !mrtr::may_ask(caps.as_deref(), &r.method, r.params))
        {
            return Err(Some(internal_error(&format!(
                "the server asked for {}, which the client did not declare",
                r.method
            ))));
        }
        let mut waits = Vec::new();
        for r in &reqs {
            let m = &r.method;
            let ours = mrtr::mint_request_id();
            let (tx, rx) = oneshot::channel();
            lock(&self.input_waits).insert(ours.clone(), tx);
            debug!("asking the host {m} as {ours} for the 2026 remote");
            // URL elicitation needs an elicitationId in 2025-11-25 (see crate::mrtr).
            let params = r.legacy_params();
            self.send(jsonrpc::request(
                &ours,
                m,
                params.as_deref().map(RawValue::get),
            ))
            .await;
            waits.push((r.key.to_string(), ours, rx));
        }
        let mut answers = serde_json::Map::new();
        let mut failed = None;
        for (key, ours, rx) in waits {
            if failed.is_some() {
                lock(&self.input_waits).remove(&ours);
                continue;
            }
            let got = tokio::select! {
                a = rx => a.ok(),
                _ = token.cancelled() => None,
            };
            lock(&self.input_waits).remove(&ours);
            match got {
                Some(Ok(v)) => {
                    answers.insert(key, serde_json::from_str(v.get()).unwrap_or(Value::Null));
                }
                Some(Err(e)) => {
                    failed = Some(Some(internal_error(&format!(
                        "the client answered the server's request with an error: {}",
                        e.get()
                    ))));
                }
                None => failed = Some(None),
            }
        }
        match failed {
            Some(f) => Err(f),
            None => Ok(answers),
        }
    }

    async fn forward_call_event(self: &Arc<Self>, ev: CallEvent, who: &Who) {
        match ev {
            CallEvent::Notification { method, .. }
                if who.modern && mrtr::is_legacy_only_notification(&method) =>
            {
                debug!("not relaying {method} to a 2026 host");
            }
            CallEvent::Notification { method, params } => {
                let params = params.as_deref();
                if who.modern {
                    if method == "notifications/message" {
                        // Only for a request that asked, at or above its level.
                        if who
                            .log_rank
                            .is_none_or(|r| protocol::message_rank(params) < r)
                        {
                            debug!("log message below the request's logLevel dropped");
                            return;
                        }
                    } else if let Some(lid) = &who.listen {
                        if subscription_id(params).is_some() {
                            self.send(retagged(&method, params, lid)).await;
                            return;
                        }
                    } else if is_listen_notification(&method) && subscription_id(params).is_none() {
                        // A 2025 remote's change notification on a call's stream.
                        self.fan_out(&method, params).await;
                        return;
                    }
                }
                self.send(jsonrpc::notification(&method, params.map(RawValue::get)))
                    .await
            }
            CallEvent::ServerRequest { id, method, params } => {
                if who.modern {
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
                let params = params.as_deref();
                if modern_host && method != "notifications/progress" {
                    if is_listen_notification(&method) {
                        self.fan_out(&method, params).await;
                    } else if method == "notifications/message" {
                        self.route_log(params).await;
                    } else {
                        debug!("not relaying {method} to a 2026 host");
                    }
                    return;
                }
                self.send(jsonrpc::notification(&method, params.map(RawValue::get)))
                    .await
            }
            ev @ CallEvent::ServerRequest { .. } => {
                let who = Who {
                    modern: modern_host,
                    ..Who::default()
                };
                self.forward_call_event(ev, &who).await
            }
        }
    }

    /// A 2025 remote's change notification to every listen of the 2026 host that asked for
    /// it, tagged with the listen's id.
    async fn fan_out(self: &Arc<Self>, method: &str, params: Option<&RawValue>) {
        let to: Vec<Arc<Listener>> = lock(&self.listens)
            .values()
            .filter(|l| l.honoured.wants(method, params))
            .cloned()
            .collect();
        if to.is_empty() {
            debug!("no listen asked for {method}: dropped");
        }
        for l in to {
            self.send(tagged(method, params, &l.id)).await;
        }
    }

    /// A 2025 remote's log message that names no request (GET stream): a 2026 host gets it
    /// when exactly one request in flight asked for logs, filtered by that request's level.
    async fn route_log(self: &Arc<Self>, params: Option<&RawValue>) {
        let rank = {
            let g = lock(&self.inflight);
            let mut asking = g.values().filter_map(|c| c.log_rank);
            match (asking.next(), asking.next()) {
                (Some(r), None) => Some(r),
                _ => None,
            }
        };
        if rank.is_some_and(|r| protocol::message_rank(params) >= r) {
            self.send(jsonrpc::notification(
                "notifications/message",
                params.map(RawValue::get),
            ))
            .await;
        } else {
            debug!("a log message for no single request dropped");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Listens and logging across eras
    // -----------------------------------------------------------------------------------------

    /// A 2026 host's `subscriptions/listen`. A 2026 remote serves it (carried as a call, tags
    /// replaced); for a 2025 remote the bridge serves it from the GET stream. Ends with no
    /// answer when the host cancels it, with the completion result at shutdown.
    async fn listen(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        token: &CancellationToken,
    ) -> Option<Outcome> {
        let hid = jsonrpc::raw(id);
        if self.remote.era().await != Some(Era::Legacy) {
            let who = Who {
                modern: true,
                log_rank: None,
                listen: Some(hid.clone()),
            };
            let r = self.start(call);
            // The host's cancellation wins over shutdown (follow looks at `token` first).
            return tokio::select! {
                biased;
                o = self.follow(id, r, token, &who, None) => o,
                _ = self.stopping.cancelled() => {
                    Some(Outcome::Result(jsonrpc::raw(&completion_result(&hid))))
                }
            };
        }
        let caps = self.remote.capabilities().await;
        let filter = call
            .params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("notifications").map(ToOwned::to_owned));
        let mut honoured = Honoured::from(filter.as_deref(), &caps);
        let mut kept = Vec::new();
        for uri in std::mem::take(&mut honoured.uris) {
            if self.resource_subs.acquire(&uri) && !self.remote_subscription(&uri, true).await {
                self.resource_subs.release(&uri);
                continue;
            }
            kept.push(uri);
        }
        honoured.uris = kept;
        // Acknowledge once notifications can flow.
        if !self.remote.wait_get_stream(LISTEN_SETUP).await {
            debug!("the remote's GET stream is not open: listen {id} may stay silent");
        }
        let uris = honoured.uris.clone();
        self.send(acknowledgement(&honoured, &hid)).await;
        lock(&self.listens).insert(
            id.to_owned(),
            Arc::new(Listener {
                id: hid.clone(),
                honoured,
            }),
        );
        info!("listen {id} open (served from the 2025 remote's notifications)");
        let graceful = tokio::select! {
            biased;
            _ = token.cancelled() => false,
            _ = self.stopping.cancelled() => true,
        };
        lock(&self.listens).remove(id);
        for uri in uris {
            if self.resource_subs.release(&uri) {
                self.remote_subscription(&uri, false).await;
            }
        }
        info!("listen {id} ended");
        graceful.then(|| Outcome::Result(jsonrpc::raw(&completion_result(&hid))))
    }

    /// `resources/subscribe` (or unsubscribe) on the 2025 remote; true when it succeeded.
    async fn remote_subscription(self: &Arc<Self>, uri: &str, on: bool) -> bool {
        let method = if on {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let call = Call {
            method: method.into(),
            params: Some(jsonrpc::raw(&serde_json::json!({ "uri": uri }).to_string())),
            ctx: CallCtx {
                client_era: Era::Legacy,
                ..CallCtx::modern()
            },
        };
        let (tx, _rx) = mpsc::channel(1);
        let o = tokio::time::timeout(LISTEN_SETUP, self.remote.call(call, tx)).await;
        let ok = matches!(o, Ok(Outcome::Result(_)));
        if ok {
            info!("{method} {uri} on the remote");
        } else {
            warn!("{method} {uri} failed on the remote");
        }
        ok
    }

    /// A 2025 host's request the bridge answers itself for a 2026 remote (None: send it on).
    async fn legacy_host_local(self: &Arc<Self>, call: &Call) -> Option<Outcome> {
        let subscribe = match call.method.as_str() {
            "logging/setLevel" => None,
            "resources/subscribe" => Some(true),
            "resources/unsubscribe" => Some(false),
            _ => return None,
        };
        if self.remote.era().await != Some(Era::Modern) {
            return None;
        }
        let empty = || Some(Outcome::Result(jsonrpc::raw("{}")));
        let Some(on) = subscribe else {
            // Kept in `handle_request`; it travels as `_meta` logLevel from now on.
            return empty();
        };
        let Some(uri) = call
            .params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("uri").map(ToOwned::to_owned))
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
        else {
            return Some(refused(code::INVALID_PARAMS, "params.uri is required"));
        };
        let changed = {
            let mut g = lock(&self.held.uris);
            if on {
                if g.len() >= MAX_HOST_URIS && !g.contains(&uri) {
                    return Some(refused(
                        code::INVALID_PARAMS,
                        "too many resource subscriptions",
                    ));
                }
                g.insert(uri)
            } else {
                g.remove(&uri)
            }
        };
        if changed {
            // Answered once the re-opened listen is acknowledged (bounded).
            let mut acks = self.held.acks.subscribe();
            let before = *acks.borrow_and_update();
            if self.ensure_held() {
                self.held.resubscribe.notify_one();
            }
            if !self.held.unsupported.load(Ordering::Acquire) {
                let _ = tokio::time::timeout(LISTEN_SETUP, acks.wait_for(|n| *n > before)).await;
            }
        }
        empty()
    }

    /// Start the listen held for a 2025 host on a 2026 remote, once. False when it was
    /// already running.
    fn ensure_held(self: &Arc<Self>) -> bool {
        if self.held.started.swap(true, Ordering::AcqRel) {
            return true;
        }
        let me = Arc::clone(self);
        self.tracker.spawn(async move { me.held_listen().await });
        false
    }

    /// Hold a `subscriptions/listen` on the 2026 remote for the 2025 host: its notifications
    /// go to stdout without `subscriptionId`; re-opened on a subscription change, and with
    /// backoff when it ends; closed (dropped) at shutdown.
    async fn held_listen(self: Arc<Self>) {
        const FIRST: Duration = Duration::from_millis(500);
        let caps = self.remote.capabilities().await;
        let mut backoff = FIRST;
        loop {
            let uris: Vec<String> = lock(&self.held.uris).iter().cloned().collect();
            let params = serde_json::json!({ "notifications": legacy_filter(&caps, &uris) });
            let stamp = Arc::clone(&lock(&self.host).stamp);
            let call = Call {
                method: "subscriptions/listen".into(),
                params: Some(jsonrpc::raw(&params.to_string())),
                ctx: CallCtx {
                    client_era: Era::Legacy,
                    stamp_meta: stamp,
                    session: None,
                    accepts_server_requests: false,
                    log_level: None,
                    tool: None,
                },
            };
            debug!(
                "holding a listen on the remote for the 2025 host ({} resources)",
                uris.len()
            );
            let mut r = self.start(call);
            let opened = std::time::Instant::now();
            let mut acked = false;
            let ended = loop {
                tokio::select! {
                    biased;
                    _ = self.stopping.cancelled() => {
                        debug!("closing the listen held on the remote");
                        return;
                    }
                    _ = self.held.resubscribe.notified() => break None,
                    Some(ev) = r.events.recv() => self.held_event(ev, &mut acked).await,
                    o = &mut r.task => break Some(o),
                }
            };
            let Some(o) = ended else {
                backoff = FIRST;
                continue;
            };
            while let Ok(ev) = r.events.try_recv() {
                self.held_event(ev, &mut acked).await;
            }
            if let Ok(Outcome::Error(e)) = &o {
                if protocol::error_code(e) == Some(code::METHOD_NOT_FOUND) {
                    warn!("the remote does not support subscriptions/listen: no notifications for the host");
                    self.held.unsupported.store(true, Ordering::Release);
                    // Wake whoever waits for an acknowledgement: none will come.
                    self.held.acks.send_modify(|n| *n += 1);
                    return;
                }
            }
            let why = match o {
                Ok(Outcome::Result(_)) => "the remote ended it".to_owned(),
                Ok(Outcome::Error(e)) => format!("error {}", e.get()),
                Ok(Outcome::Failed(e)) => e.to_string(),
                Err(e) => format!("internal: {e}"),
            };
            if acked && opened.elapsed() > Duration::from_secs(30) {
                backoff = FIRST;
            }
            warn!(
                "the listen held on the remote ended ({why}); re-opening in {} ms",
                backoff.as_millis()
            );
            tokio::select! {
                _ = self.stopping.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    async fn held_event(self: &Arc<Self>, ev: CallEvent, acked: &mut bool) {
        match ev {
            CallEvent::Notification { method, .. }
                if method == "notifications/subscriptions/acknowledged" =>
            {
                *acked = true;
                info!("the listen held on the remote for the 2025 host is acknowledged");
                self.held.acks.send_modify(|n| *n += 1);
            }
            CallEvent::Notification { method, params } => {
                self.send(untagged(&method, params.as_deref())).await
            }
            CallEvent::ServerRequest { id, method, .. } => {
                self.refuse_server_request(id, &method).await
            }
        }
    }

    async fn relay_server_request(
        self: &Arc<Self>,
        remote_id: Box<RawValue>,
        method: &str,
        params: Option<Box<RawValue>>,
    ) {
        let caps = lock(&self.host).caps.clone();
        if !mrtr::may_ask(caps.as_deref(), method, params.as_deref()) {
            info!("the remote sent {method}, which the 2025 host did not declare: refused");
            let err = jsonrpc::raw(&jsonrpc::error_object(
                code::METHOD_NOT_FOUND,
                &format!("the client did not declare the capability {method} needs"),
                None,
            ));
            let remote = Arc::clone(&self.remote);
            self.tracker.spawn(async move {
                remote.respond(&remote_id, None, Some(&err)).await;
            });
            return;
        }
        let ours = mrtr::mint_request_id();
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

    fn start_initialize(self: &Arc<Self>, t: Tracked, id: String, params: Option<Box<RawValue>>) {
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
            h.caps = field("capabilities");
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
            if matches!(o, Outcome::Result(_)) && me.remote.era().await == Some(Era::Modern) {
                // Notifications flow once the host has its answer (bounded wait).
                let mut acks = me.held.acks.subscribe();
                let before = *acks.borrow_and_update();
                if !me.ensure_held() {
                    let _ =
                        tokio::time::timeout(LISTEN_SETUP, acks.wait_for(|n| *n > before)).await;
                }
            }
            me.reply(t, &id, o).await;
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
                    Some(c) => {
                        info!("the host cancelled request {rid}");
                        c.token.cancel();
                        self.obs.cancelled("client_notification");
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
        let id = id.get().trim();
        let Some(remote_id) = lock(&self.server_requests).remove(id) else {
            if let Some(tx) = lock(&self.input_waits).remove(id) {
                let a = match (env.result, env.error) {
                    (Some(r), _) => Ok(ToOwned::to_owned(r)),
                    (None, Some(e)) => Err(ToOwned::to_owned(e)),
                    (None, None) => Err(jsonrpc::raw("null")),
                };
                let _ = tx.send(a);
                return;
            }
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

/// The `clientCapabilities` a 2026 request declared in its `_meta`.
fn client_caps(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    jsonrpc::meta_field(params, protocol::META_CLIENT_CAPABILITIES).map(ToOwned::to_owned)
}

/// A 2025 remote's `-32042` (retired in 2026) for a 2026 host: `input_required` with the URL
/// elicitations, or `-32021` without `elicitation.url` (see `crate::mrtr`). The host's retry
/// reaches the remote as the same call again (plus `inputResponses`, which 2025 ignores).
fn url_required_for_modern(o: Outcome, caps: Option<&RawValue>) -> Outcome {
    let Outcome::Error(e) = &o else { return o };
    match mrtr::url_required_for_modern(e, caps) {
        Some(Ok(r)) => Outcome::Result(jsonrpc::raw(&r)),
        Some(Err(obj)) => Outcome::Error(jsonrpc::raw(&obj)),
        None => o,
    }
}

fn internal_error(msg: &str) -> Outcome {
    refused(code::INTERNAL_ERROR, msg)
}

/// The face's own error for a request (counted as the bridge's).
fn refused(c: i64, msg: &str) -> Outcome {
    Outcome::Failed(BridgeError::Refused {
        code: c,
        message: msg.to_owned(),
    })
}

/// The response frame for an outcome, under the host's id.
fn answer(id: &str, o: Outcome) -> Bytes {
    match o {
        Outcome::Result(r) => jsonrpc::result(id, r.get()),
        Outcome::Error(e) => jsonrpc::error_raw(Some(id), e.get()),
        Outcome::Failed(e) => jsonrpc::error_raw(Some(id), &e.error_object()),
    }
}
