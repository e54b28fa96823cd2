//! The stdio face (`connect`): one host on our stdin/stdout, in front of a `SharedUpstream`
//! (the core's `Upstream` trait; today a remote built with an inbox the host owns,
//! `crate::core::inbox::Inbox::owned_by`, never a concrete upstream). Reads newline-delimited JSON-RPC,
//! writes only MCP messages to stdout (one writer task; logs go to stderr), serves a 2025 host
//! (`initialize`, then a session-like lifecycle) and a 2026 host (per-request `_meta`) alike,
//! restores the host's ids on every answer, carries host cancellations to the upstream (by
//! dropping the call), and relays the remote's 2025 server requests under ids of our own
//! (`"mcpb-N"`, `crate::era::mrtr::mint_request_id`) so they cannot collide with the host's.
//!
//! Across eras (the same translations as `serve`, with `crate::era::mrtr`):
//! - 2026 host, 2025 remote: a server request on the stream of a `tools/call`/`prompts/get`/
//!   `resources/read` parks the remote call and answers the host `input_required` (signed
//!   `requestState`); the host's retry hands its `inputResponses` to the remote as responses
//!   under the remote's ids, and the parked call's answer goes out under the retry's id.
//! - 2025 host, 2026 remote: an `input_required` result becomes requests to the host
//!   (`"mcpb-N"`, `crate::era::mrtr::mint_request_id` ids); with every answer in, the remote is retried with `inputResponses`
//!   and the exact `requestState` under a new id, at most `MAX_ROUNDS` times.
//!
//! Notifications and logging across eras (with `crate::era::notifications`, as `serve` does):
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
//!   `-32042` becomes `input_required` (or `-32021`) for a 2026 host (see `crate::era::mrtr`).
//!
//! Accounting (`core::meter`, the same as the HTTP face's): each host request is tracked from `handle_request` to
//! `reply`; errors the face makes itself are `Outcome::Failed` (`BridgeError::Refused`), so
//! that `reply` counts them, and `Outcome::Error` is only ever what the remote answered (or
//! its `-32042` translated for a 2026 host, counted at the remote as the error it was).
//!
//! Layout: this file holds the face, `serve` and line handling (requests, notifications,
//! responses, initialize); `park` runs calls and their rounds (park via `crate::era::park`,
//! resume, the host's side of `crate::era::rounds`),
//! `listen` the listens and the held listen, `events` the forwarding of call events and
//! server requests.

mod events;
mod listen;
mod park;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{
    Call, CallCtx, CallEvent, CallHandle, Outcome, SharedUpstream, UpstreamEvent, UpstreamInfo,
    RELEASED_BY_BRIDGE,
};
use crate::core::caller::{Bounded, Caller};
use crate::core::held::Subscriptions;
use crate::core::meter::{Meter, Tracked};
use crate::era::mrtr::{self, ParkStore, StateSigner};
use crate::era::notifications::{Honoured, ResourceSubs};
use crate::error::BridgeError;
use crate::framing::{single_line, Line, LineDecoder};
use crate::jsonrpc::{self, code, Envelope, Fields, Kind};
use crate::protocol::{self, Era};

/// Which era the host speaks (learned from its first message; what a 2025 host said at
/// `initialize` is the core's per-caller state, `Face::caller`).
#[derive(Default)]
struct Host {
    era: Option<Era>,
}

/// The one caller a stdio face has, as far as `requestState` binding goes.
const PRINCIPAL: &str = "stdio-host";

/// Most calls parked at once for a 2026 host's input.
const MAX_PARKED: usize = 256;

/// Most 2025 server requests of the remote waiting for the host's answer at once (serve's
/// sessions keep the same bound): one more is refused to the remote with `-32603` (counted
/// as `dropped_frames_total{reason="slow_consumer"}`). A 2026 remote's input requests to a
/// 2025 host wait in the core's `Caller` (`core::caller::MAX_ANSWERS`).
const MAX_SERVER_REQUESTS: usize = 10_000;

/// How long the face waits for the upstream to be known (its era probe) before a call.
const UPSTREAM_WAIT: Duration = Duration::from_secs(60);

/// How a host request is stopped early, and why: the reason is handed to its upstream call
/// (whose handle counts the cancellation when it drops it unanswered); where no call is
/// pending, the face counts it itself.
#[derive(Clone, Default)]
struct Stop {
    token: CancellationToken,
    why: Arc<OnceLock<&'static str>>,
}

impl Stop {
    fn cancel(&self, why: &'static str) {
        let _ = self.why.set(why);
        self.token.cancel();
    }
    async fn cancelled(&self) {
        self.token.cancelled().await
    }
    fn why(&self) -> &'static str {
        self.why.get().copied().unwrap_or("client cancelled")
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
    stop: Stop,
    /// Its logLevel rank (2026 host), to route untargeted log messages.
    log_rank: Option<usize>,
    /// A 2026 host's listen: released by the bridge at shutdown (and answered with its
    /// completion result) rather than cancelled.
    listen: bool,
}

/// A 2026 host's listen that the bridge serves itself (2025 remote).
struct Listener {
    /// The listen request's id (exact JSON).
    id: Box<RawValue>,
    honoured: Honoured,
}

/// How long a listen's acknowledgement may wait for the remote's side to be in place.
const LISTEN_SETUP: Duration = Duration::from_secs(10);

struct Face {
    up: SharedUpstream,
    /// The 2025 host's `initialize` params, for an upstream that opens its session with them.
    hello: Arc<crate::core::Hello>,
    out: mpsc::Sender<Bytes>,
    host: Mutex<Host>,
    /// What a 2025 host said at `initialize`, its log level, the answers the bridge waits
    /// for from it (a 2026 remote's input requests): the per-caller state serve's sessions
    /// hold too.
    caller: Caller,
    /// Host request id (exact JSON text) → its call (at most `--max-inflight`).
    inflight: Bounded<String, Inflight>,
    /// 2026 host's listens served by the bridge (2025 remote), by listen id (exact JSON text).
    listens: Mutex<HashMap<String, Arc<Listener>>>,
    /// The 2025 remote's resource subscriptions held for those listens.
    resource_subs: ResourceSubs,
    /// The listen held for a 2025 host (2026 remote) has started.
    held_started: AtomicBool,
    /// The 2025 host's resource subscriptions (the held listen's filter).
    subs: Arc<Subscriptions>,
    /// Cancelled when the face shuts down (before the calls in flight are cancelled).
    stopping: CancellationToken,
    /// Our id for a server request sent to the host → the remote's id (at most
    /// `MAX_SERVER_REQUESTS`).
    server_requests: Bounded<String, Box<RawValue>>,
    signer: StateSigner,
    parked: ParkStore<CallHandle>,
    /// The host's id of a request answered `input_required` → its parked call, so that the
    /// host's `notifications/cancelled` for it releases the park (at most `MAX_PARKED` live).
    parked_requests: Mutex<HashMap<String, u64>>,
    /// How long a parked call waits for the host's retry (`--park-timeout`).
    park_ttl: Duration,
    /// A 2026 host's calls that may park, by host request id: where a 2025 remote's server
    /// request from its GET stream (which names no call) goes when exactly one such call is
    /// running, the rule untargeted log messages follow too (at most one per call in flight).
    askable: Mutex<HashMap<String, mpsc::Sender<CallEvent>>>,
    tracker: TaskTracker,
    obs: Meter,
}

/// What the host side may cost: its longest line, how long a call parked for its input waits
/// for its retry, and how many of its requests may be in flight (`--max-line`,
/// `--park-timeout`, `--max-inflight`). One request over `max_inflight` (listens included) is
/// refused with a JSON-RPC error (counted as the bridge's, `source="bridge"`) until some are
/// answered: a desktop host stays far below the default 4096; one that floods cannot grow the
/// face without bound.
#[derive(Debug, Clone, Copy)]
pub struct HostLimits {
    pub max_line: usize,
    pub park_timeout: Duration,
    pub max_inflight: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve the host on `input`/`output` until the host closes `input` or `shutdown` fires,
/// counting its requests and the bridge's answers with `obs`.
pub async fn serve<R, W>(
    up: SharedUpstream,
    hello: Arc<crate::core::Hello>,
    input: R,
    output: W,
    limits: HostLimits,
    obs: Meter,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, out_rx) = mpsc::channel::<Bytes>(256);
    let writer = tokio::spawn(write_loop(output, out_rx));
    // Subscribed before the host's first line: nothing the upstream sends is missed.
    let server_events = up.subscribe();
    let face = Face::new(up, hello, out, obs, limits);
    let sweeper = tokio::spawn(park::sweep_parked(Arc::clone(&face)));
    // Traffic from the upstream that belongs to no call (a 2025 remote's GET stream).
    let events_task = tokio::spawn(forward_events(Arc::clone(&face), server_events));
    let mut lines = FramedRead::new(input, LineDecoder::new(limits.max_line));
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
    sweeper.abort();
    face.shut_down().await;
    events_task.abort();
    let _ = tokio::join!(sweeper, events_task);
    drop(face);
    let mut writer = writer;
    if tokio::time::timeout(Duration::from_secs(5), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
        let _ = writer.await;
    }
}

impl Face {
    fn new(
        up: SharedUpstream,
        hello: Arc<crate::core::Hello>,
        out: mpsc::Sender<Bytes>,
        obs: Meter,
        limits: HostLimits,
    ) -> Arc<Self> {
        Arc::new(Face {
            up,
            hello,
            out,
            host: Mutex::new(Host::default()),
            caller: Caller::default(),
            inflight: Bounded::new(limits.max_inflight),
            listens: Mutex::new(HashMap::new()),
            resource_subs: ResourceSubs::default(),
            held_started: AtomicBool::new(false),
            subs: Subscriptions::new(),
            stopping: CancellationToken::new(),
            server_requests: Bounded::new(MAX_SERVER_REQUESTS),
            signer: StateSigner::new(),
            parked: ParkStore::new(MAX_PARKED),
            parked_requests: Mutex::new(HashMap::new()),
            park_ttl: limits.park_timeout,
            askable: Mutex::new(HashMap::new()),
            tracker: TaskTracker::new(),
            obs,
        })
    }

    /// End the listens (with their completion results), cancel what is still running (each
    /// cancellation reaches the upstream and is counted where it lands) and wait (bounded)
    /// for the face's tasks. The upstream itself is stopped by whoever started it.
    async fn shut_down(&self) {
        self.stopping.cancel();
        for (_, c) in self.inflight.drain() {
            c.stop.cancel(if c.listen {
                RELEASED_BY_BRIDGE
            } else {
                "shutdown"
            });
        }
        for mut p in self.parked.take_all() {
            p.handle.set_cancel_reason("shutdown");
        }
        self.caller.forget_all_answers();
        self.tracker.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tracker.wait()).await;
    }
}

/// Carry the upstream's traffic that belongs to no call to the host, until it ends.
async fn forward_events(face: Arc<Face>, mut rx: broadcast::Receiver<UpstreamEvent>) {
    loop {
        let ev = match rx.recv().await {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                // Only notifications: the upstream refuses a request it has no room for.
                face.obs.lost(n);
                warn!("{n} notifications from the upstream were lost (the host reads too slowly)");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => break,
        };
        if let Some(ev) = call_event(&ev) {
            face.forward_event(ev).await;
        }
    }
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
    async fn reply(&self, mut t: Tracked, id: &str, o: Outcome) {
        t.answered(&self.obs, &o);
        self.send(answer(id, o)).await;
    }

    /// Answer the host's request `t` with the face's own error before any call, from a task
    /// of its own (a refusal, counted without a call's latency: `core::meter`).
    fn refuse(self: &Arc<Self>, mut t: Tracked, id: String, c: i64, msg: &str) {
        t.refused(&self.obs, c);
        let me = Arc::clone(self);
        let o = refused(c, msg);
        self.tracker
            .spawn(async move { me.send(answer(&id, o)).await });
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
        self.obs.request(&method);
        let t = self.obs.track(&method, std::time::Instant::now());
        // params and its `_meta`, parsed once (borrowed from the line) for every check below.
        let view = jsonrpc::ParamsView::parse(env.params);
        let modern = view
            .meta(protocol::META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .is_some_and(|v| !protocol::is_legacy_version(&v));
        if modern && protocol::removed_in_modern(&method) {
            // A 2026 request for a method 2026 removed: not found, whichever era the remote is.
            let msg = protocol::removed_message(&method);
            self.refuse(t, id, code::METHOD_NOT_FOUND, &msg);
            return;
        }
        if modern {
            let caps = view.meta(protocol::META_CLIENT_CAPABILITIES);
            if let Some((c, msg, data)) = crate::core::tasks::modern_refusal(&method, caps) {
                // As the extension's server would answer (see crate::core::tasks).
                let mut t = t;
                t.refused(&self.obs, c);
                let e = jsonrpc::raw(&jsonrpc::error_object(c, &msg, data.as_ref()));
                let me = Arc::clone(self);
                self.tracker
                    .spawn(async move { me.send(answer(&id, Outcome::Error(e))).await });
                return;
            }
        }
        let params = env.params.map(ToOwned::to_owned);
        if method == "initialize" {
            self.start_initialize(t, id, params);
            return;
        }
        if method == "ping" {
            // The bridge's own answer, no call (`core::meter`: no latency), as on serve.
            let mut t = t;
            t.settled();
            let me = Arc::clone(self);
            let pong = Outcome::Result(jsonrpc::raw("{}"));
            self.tracker
                .spawn(async move { me.send(answer(&id, pong)).await });
            return;
        }
        let mut ctx = match self.call_ctx(modern, &method, &view) {
            Ok(ctx) => ctx,
            Err(msg) => return self.refuse(t, id, code::INVALID_PARAMS, msg),
        };
        // Read here already: the upstream's metrics label needs no parse of its own.
        ctx.tool = crate::face::run::tool_name(&method, &view);
        let stop = Stop::default();
        let listen = modern && method == "subscriptions/listen";
        let entry = Inflight {
            stop: stop.clone(),
            // Never log messages on a listen.
            log_rank: Who::of(&ctx).log_rank.filter(|_| !listen),
            listen,
        };
        match self.inflight.insert_new(id.clone(), entry) {
            Ok(true) => {}
            Ok(false) => {
                let msg = "a request with this id is still in flight";
                return self.refuse(t, id, code::INVALID_REQUEST, msg);
            }
            Err(_) => {
                let most = self.inflight.cap();
                warn!("refused {method}: {most} host requests are in flight (--max-inflight)");
                let msg = "mcp-bridge: too many requests in flight from this client; retry once some are answered";
                return self.refuse(t, id, code::UPSTREAM_UNAVAILABLE, msg);
            }
        }
        let call = Call {
            method,
            params,
            ctx,
        };
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            me.run_call(t, id, call, stop).await;
        });
    }

    /// The context of a host request: a 2026 request's log level from its `_meta`; a 2025
    /// host's stamp and the level its `logging/setLevel` kept (kept here, before the next
    /// request is read: it is stamped on the host's later requests to a 2026 remote). Err:
    /// the message of the -32602 refusal.
    fn call_ctx(
        &self,
        modern: bool,
        method: &str,
        view: &jsonrpc::ParamsView<'_>,
    ) -> Result<CallCtx, &'static str> {
        let mut h = lock(&self.host);
        if modern {
            let level = protocol::log_level_value(view.meta(protocol::META_LOG_LEVEL))
                .map_err(|_| "invalid io.modelcontextprotocol/logLevel")?;
            if h.era.is_none() {
                info!("the host speaks 2026-07-28");
                h.era = Some(Era::Modern);
            }
            return Ok(CallCtx {
                log_level: level,
                ..CallCtx::modern()
            });
        }
        drop(h);
        if method == "logging/setLevel" {
            let level = view
                .get("level")
                .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
                .and_then(|l| protocol::log_level(&l));
            let (level, _) = level.ok_or("invalid or missing logging level")?;
            self.caller.set_log_level(level);
        }
        Ok(CallCtx {
            client_era: Era::Legacy,
            stamp_meta: self.caller.call_meta(),
            session: None,
            accepts_server_requests: true,
            log_level: None,
            tool: None,
            owner: None,
            who: None,
        })
    }

    fn start_initialize(
        self: &Arc<Self>,
        mut t: Tracked,
        id: String,
        params: Option<Box<RawValue>>,
    ) {
        let requested = params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("protocolVersion").map(|v| v.get().to_owned()))
            .and_then(|v| serde_json::from_str::<String>(&v).ok());
        lock(&self.host).era = Some(Era::Legacy);
        self.caller.initialize(params.as_deref());
        info!(
            "the host speaks 2025 ({})",
            requested.as_deref().unwrap_or("no version")
        );
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            // Kept before the upstream is asked: a 2025 remote opens its session with them.
            me.hello.set(params.as_deref());
            let (o, era) = match me.up.info(UPSTREAM_WAIT).await {
                Ok(info) => (
                    initialize_answer(&info, requested.as_deref()),
                    Some(info.era),
                ),
                Err(e) => (Outcome::Failed(e), None),
            };
            if era == Some(Era::Modern) {
                // Notifications flow once the host has its answer (bounded wait).
                if !me.ensure_held() {
                    me.subs.first_acknowledged(LISTEN_SETUP).await;
                }
            }
            // The bridge's own answer, no call (`core::meter`), as on serve.
            match &o {
                Outcome::Failed(e) => t.refused(&me.obs, e.code()),
                _ => t.settled(),
            }
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
                let running = self.inflight.remove(&rid);
                match running {
                    Some(c) => {
                        info!("the host cancelled request {rid}");
                        // Counted where the cancellation lands (the call's handle, or the
                        // face when no call is pending).
                        c.stop.cancel("client cancelled");
                    }
                    None if self.release_park(&rid) => {
                        info!("the host cancelled request {rid}, parked for its input: released");
                    }
                    None => debug!("cancellation for unknown request {rid} ignored"),
                }
            }
            "notifications/initialized" => {}
            m => {
                let frame = jsonrpc::notification(m, env.params.map(RawValue::get));
                if let Err(e) = self.up.send_notification(frame) {
                    debug!("{m} not delivered to the upstream: {e}");
                }
            }
        }
    }

    fn handle_response(self: &Arc<Self>, env: &Envelope<'_>) {
        let Some(id) = env.id else { return };
        let id = id.get().trim();
        let Some(remote_id) = self.server_requests.remove(id) else {
            let a = match (env.result, env.error) {
                (Some(r), _) => Ok(ToOwned::to_owned(r)),
                (None, Some(e)) => Err(ToOwned::to_owned(e)),
                (None, None) => Err(jsonrpc::raw("null")),
            };
            if self.caller.deliver_answer(id, a) {
                return;
            }
            debug!("a response from the host for an unknown id was dropped");
            self.obs.dropped("unknown_id");
            return;
        };
        self.respond_upstream(&remote_id, env.result, env.error);
    }

    /// Hand the upstream an answer to one of its requests (under its own id).
    fn respond_upstream(&self, id: &RawValue, result: Option<&RawValue>, error: Option<&RawValue>) {
        let frame = match (result, error) {
            (Some(r), _) => jsonrpc::result(id.get(), r.get()),
            (None, Some(e)) => jsonrpc::error_raw(Some(id.get()), e.get()),
            (None, None) => return,
        };
        if let Err(e) = self.up.send_response(frame) {
            debug!("an answer for the upstream was not delivered: {e}");
        }
    }

    /// The upstream's era, once its probe answered (None: it cannot be reached).
    async fn era(&self) -> Option<Era> {
        self.up.info(UPSTREAM_WAIT).await.ok().map(|i| i.era)
    }

    /// The upstream's server capabilities (null when unknown).
    async fn capabilities(&self) -> serde_json::Value {
        match self.up.info(UPSTREAM_WAIT).await {
            Ok(i) => i.capabilities(),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// Start a call at the upstream (the outcome to answer when it cannot start).
    async fn start(&self, call: Call) -> Result<CallHandle, Outcome> {
        crate::core::start(&self.up, call, UPSTREAM_WAIT)
            .await
            .map_err(Outcome::Failed)
    }

    /// A call the bridge makes for itself, awaited for at most `limit` (None: no answer in
    /// time; the call is released without counting a cancellation).
    async fn own_call(&self, call: Call, limit: Duration) -> Option<Outcome> {
        let mut h = match tokio::time::timeout(limit, self.start(call)).await {
            Ok(Ok(h)) => h,
            Ok(Err(o)) => return Some(o),
            Err(_) => return None,
        };
        match tokio::time::timeout(limit, &mut h.outcome).await {
            Ok(Ok(o)) => Some(o),
            _ => {
                h.set_cancel_reason(RELEASED_BY_BRIDGE);
                None
            }
        }
    }
}

/// A 2025 host's `InitializeResult`, built as serve builds a 2025 client's (`crate::core`,
/// rule 6) from what the upstream said, at the version negotiated with the host.
fn initialize_answer(info: &UpstreamInfo, requested: Option<&str>) -> Outcome {
    let version = protocol::negotiate_legacy(requested);
    Outcome::Result(jsonrpc::raw(&crate::core::initialize_result(info, version)))
}

/// An upstream event as the call events the face forwards (None: nothing for the host).
fn call_event(ev: &UpstreamEvent) -> Option<CallEvent> {
    let frame = match ev {
        UpstreamEvent::Notification(f) | UpstreamEvent::ServerRequest { frame: f, .. } => f,
        UpstreamEvent::Restarted => return None,
    };
    let env = Envelope::parse(frame).ok()?;
    let params = env.params.map(ToOwned::to_owned);
    let method = env.method().to_owned();
    Some(match env.id {
        Some(id) => CallEvent::ServerRequest {
            id: id.to_owned(),
            method,
            params,
        },
        None => CallEvent::Notification { method, params },
    })
}

/// The `clientCapabilities` a 2026 request declared in its `_meta`.
fn client_caps(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    jsonrpc::meta_field(params, protocol::META_CLIENT_CAPABILITIES).map(ToOwned::to_owned)
}

/// A 2025 remote's `-32042` (retired in 2026) for a 2026 host: `input_required` with the URL
/// elicitations, or `-32021` without `elicitation.url` (see `crate::era::mrtr`). The host's retry
/// reaches the remote as the same call again (plus `inputResponses`, which 2025 ignores).
fn url_required_for_modern(o: Outcome, caps: Option<&RawValue>) -> Outcome {
    let Outcome::Error(e) = &o else { return o };
    match mrtr::url_required_for_modern(e, caps) {
        Some(Ok(r)) => Outcome::Result(jsonrpc::raw(&r)),
        Some(Err(obj)) => Outcome::Error(jsonrpc::raw(&obj)),
        None => o,
    }
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
