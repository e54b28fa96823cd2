//! The core's seam between faces and upstreams: a `Call` (one request from a face to an
//! upstream, with its context), what comes back for it (`CallEvent`s, then exactly one
//! `Outcome`) through a `CallHandle`, and the `Upstream` trait every upstream implements.
//!
//! Faces hold a [`SharedUpstream`] and never a concrete upstream, so a face can sit in front
//! of a child process, a remote server, or (later) a pool of either. Dropping a `CallHandle`
//! before its outcome cancels the call upstream, each upstream in its peer's dialect.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::mpsc;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, oneshot};

use crate::error::BridgeError;
use crate::protocol::Era;

/// Who asks, and how to speak to the upstream on their behalf.
#[derive(Debug, Clone)]
pub struct CallCtx {
    /// The era of the peer that asked.
    pub client_era: Era,
    /// `_meta` entries to add when the upstream is 2026-era and the request lacks them
    /// (a 2025 client's session: protocol version, capabilities, client info).
    pub stamp_meta: StampMeta,
    /// The 2025 session that owns the call, if any (attribution of server requests).
    pub session: Option<Arc<str>>,
    /// Can this caller receive requests from the upstream on the call's stream?
    pub accepts_server_requests: bool,
    /// The lowest log level the caller wants on its stream (`notifications/message`), if any.
    pub log_level: Option<&'static str>,
    /// A `tools/call`'s tool name when the face has read it already (saves the upstream a
    /// parse of the params for its metrics label).
    pub tool: Option<Box<str>>,
    /// Whose call it is, for what it leaves behind at the upstream (tasks,
    /// [`crate::core::tasks`]): the caller's principal and, for a 2025 caller, its session.
    /// None: the one host of `connect`, or the bridge's own calls.
    pub owner: crate::core::tasks::Owner,
    /// What the caller's credentials say about it (an endpoint's `[[policy]]`); None: no
    /// authentication, or the bridge's own calls.
    pub who: Option<Arc<crate::config::policy::Identity>>,
}

impl CallCtx {
    pub fn modern() -> Self {
        // One shared empty list: a 2026 call stamps nothing (no allocation per call).
        static NOTHING: std::sync::OnceLock<StampMeta> = std::sync::OnceLock::new();
        Self {
            client_era: Era::Modern,
            stamp_meta: NOTHING.get_or_init(|| Arc::new(Vec::new())).clone(),
            session: None,
            accepts_server_requests: false,
            log_level: None,
            tool: None,
            owner: None,
            who: None,
        }
    }
}

/// One request on its way upstream.
#[derive(Debug)]
pub struct Call {
    pub method: String,
    pub params: Option<Box<RawValue>>,
    pub ctx: CallCtx,
}

/// Something the upstream sent for a call before its final answer.
#[derive(Debug)]
pub enum CallEvent {
    /// A request-scoped notification. Its params still hold the bridge's own progress token
    /// / subscription id; the face restores the caller's.
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// A request the upstream asks of the client (2025 era), under the upstream's own id.
    ServerRequest {
        id: Box<RawValue>,
        method: String,
        params: Option<Box<RawValue>>,
    },
}

/// The final answer for a call.
#[derive(Debug)]
pub enum Outcome {
    /// A result object, already translated into the caller's era.
    Result(Box<RawValue>),
    /// An error object from the upstream.
    Error(Box<RawValue>),
    /// The bridge answers instead of the upstream: it could not get an answer (child exited,
    /// not ready, overloaded; a remote that cannot be reached or answered an HTTP error), or
    /// the face refused the request itself. Counted as `source="bridge"`.
    Failed(crate::error::BridgeError),
}

/// The sending side of a call's event queue: `futures_channel`'s bounded mpsc, ~0.2 KB per
/// call, where tokio's allocates cache-padded state and a first block of 32 slots (~0.9 KB)
/// with every call (benches/RESULTS.md, "2026-12-01 (c)"). Its sends take `&mut`, hence the
/// lock (never held across an await); an async send waits on a clone of its own, so that
/// concurrent senders on one handle each get their wake-up.
#[derive(Debug)]
pub struct EventSender(std::sync::Mutex<mpsc::Sender<CallEvent>>);

impl Clone for EventSender {
    fn clone(&self) -> Self {
        EventSender(std::sync::Mutex::new(self.sender().clone()))
    }
}

/// The receiving side of a call's event queue (see [`EventSender`]).
pub struct EventReceiver {
    rx: mpsc::Receiver<CallEvent>,
    /// Every sender is gone and every event was taken.
    ended: bool,
    /// `notifications/message` below this rank are dropped (`crate::core`'s log floor of a
    /// 2026 caller on a 2025 upstream); 0 lets every message through.
    log_floor: usize,
    /// What every event passes through before it is taken (None: dropped), if anything.
    map: Option<EventMap>,
}

impl std::fmt::Debug for EventReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventReceiver")
            .field("ended", &self.ended)
            .field("log_floor", &self.log_floor)
            .field("mapped", &self.map.is_some())
            .finish()
    }
}

/// A rewrite of a call's events (`crate::core::tasks`: the upstream's task ids).
pub type EventMap = Box<dyn Fn(CallEvent) -> Option<CallEvent> + Send + Sync>;

/// A queue of `capacity` events.
pub fn event_queue(capacity: usize) -> (EventSender, EventReceiver) {
    // The channel holds its buffer plus one event per sender.
    let (tx, rx) = mpsc::channel(capacity.saturating_sub(1));
    (
        EventSender(std::sync::Mutex::new(tx)),
        EventReceiver {
            rx,
            ended: false,
            log_floor: 0,
            map: None,
        },
    )
}

impl EventSender {
    fn sender(&self) -> std::sync::MutexGuard<'_, mpsc::Sender<CallEvent>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Queue `ev` unless the queue is full or closed; the event comes back then.
    pub fn try_send(&self, ev: CallEvent) -> Result<(), CallEvent> {
        self.sender().try_send(ev).map_err(|e| e.into_inner())
    }
    /// Queue `ev`, waiting for room; the event comes back when the queue is closed.
    pub async fn send(&self, ev: CallEvent) -> Result<(), CallEvent> {
        let mut tx = self.sender().clone();
        match futures_util::future::poll_fn(|cx| tx.poll_ready(cx)).await {
            Ok(()) => tx.try_send(ev).map_err(|e| e.into_inner()),
            Err(_) => Err(ev),
        }
    }
}

impl EventReceiver {
    /// The next event; None once every sender is gone and every event was taken.
    pub async fn recv(&mut self) -> Option<CallEvent> {
        loop {
            let ev = futures_util::StreamExt::next(&mut self.rx).await;
            self.ended |= ev.is_none();
            match ev {
                Some(e) if self.below_floor(&e) => continue,
                Some(e) => match self.mapped(e) {
                    Some(e) => return Some(e),
                    None => continue,
                },
                None => return None,
            }
        }
    }
    pub fn try_recv(&mut self) -> Result<CallEvent, mpsc::TryRecvError> {
        loop {
            let r = self.rx.try_recv();
            self.ended |= matches!(r, Err(mpsc::TryRecvError::Closed));
            match r {
                Ok(e) if self.below_floor(&e) => continue,
                Ok(e) => match self.mapped(e) {
                    Some(e) => return Ok(e),
                    None => continue,
                },
                r => return r,
            }
        }
    }
    /// Have every event pass through `f` from here on (None from it: the event is dropped),
    /// after any map set before.
    pub fn map_with(&mut self, f: EventMap) {
        self.map = Some(match self.map.take() {
            Some(first) => Box::new(move |e| first(e).and_then(&f)),
            None => f,
        });
    }
    fn mapped(&self, e: CallEvent) -> Option<CallEvent> {
        match &self.map {
            Some(f) => f(e),
            None => Some(e),
        }
    }
    /// Drop `notifications/message` below `rank` from here on (`usize::MAX`: every one).
    pub fn drop_logs_below(&mut self, rank: usize) {
        self.log_floor = rank;
    }
    fn below_floor(&self, ev: &CallEvent) -> bool {
        match ev {
            CallEvent::Notification { method, params } if self.log_floor > 0 => {
                method == "notifications/message"
                    && crate::protocol::message_rank(params.as_deref()) < self.log_floor
            }
            _ => false,
        }
    }
    /// Has the queue ended (`recv` said None)? Nothing more can come then.
    pub fn ended(&self) -> bool {
        self.ended
    }
}

/// Senders kept in the upstream's pending map. Dropping them (the answer was sent, the call
/// failed or was cancelled) resolves the call's [`Answered`].
pub struct CallSinks {
    pub events: EventSender,
    pub outcome: oneshot::Sender<Outcome>,
    _answered: oneshot::Sender<()>,
}

/// Resolves once the upstream has let go of a call's [`CallSinks`]: nothing of the call is
/// left to wait for. A detached call's deadline task ends on it instead of sleeping on.
pub struct Answered(oneshot::Receiver<()>);

impl Answered {
    /// Has the upstream let go of the call already?
    fn is_done(&mut self) -> bool {
        !matches!(self.0.try_recv(), Err(oneshot::error::TryRecvError::Empty))
    }
    /// Wait until it does.
    async fn wait(self) {
        let _ = self.0.await;
    }
}

/// `_meta` entries stamped onto a call, shared by every call of a session.
pub type StampMeta = Arc<Vec<(String, Box<RawValue>)>>;

/// Capacity of a call's event queue. A consumer that falls this far behind loses
/// notifications (counted), never the final answer.
pub const EVENT_QUEUE: usize = 64;

/// A call's senders (for the upstream's pending map), its receivers (for its [`CallHandle`])
/// and its [`Answered`] (for its [`CancelOnDrop`]).
pub fn sinks() -> (
    CallSinks,
    EventReceiver,
    oneshot::Receiver<Outcome>,
    Answered,
) {
    let (etx, erx) = event_queue(EVENT_QUEUE);
    let (otx, orx) = oneshot::channel();
    let (atx, arx) = oneshot::channel();
    (
        CallSinks {
            events: etx,
            outcome: otx,
            _answered: atx,
        },
        erx,
        orx,
        Answered(arx),
    )
}

/// What an upstream's era probe learned.
#[derive(Debug, Clone)]
pub struct UpstreamInfo {
    pub era: Era,
    /// The upstream's `server/discover` result (2026 upstream).
    pub discover: Option<Arc<RawValue>>,
    /// The upstream's `InitializeResult` (2025 upstream).
    pub initialize: Option<Arc<RawValue>>,
}

impl UpstreamInfo {
    /// The upstream's server capabilities (from its discover or initialize result); null when
    /// it declared none.
    pub fn capabilities(&self) -> serde_json::Value {
        let raw = self.discover.as_ref().or(self.initialize.as_ref());
        raw.and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
            .and_then(|mut v| v.get_mut("capabilities").map(serde_json::Value::take))
            .unwrap_or(serde_json::Value::Null)
    }
}

/// Traffic from an upstream that belongs to no call.
#[derive(Debug, Clone)]
pub enum UpstreamEvent {
    /// A notification frame (list changes, resource updates, log messages), as the peer sent it.
    Notification(Bytes),
    /// A request from the peer that only a 2025 session's GET stream can carry.
    ServerRequest { session: Arc<str>, frame: Bytes },
    /// The upstream was restarted (or reconnected): state tied to the old one is gone.
    Restarted,
}

/// The cancel reason of a call the bridge holds for its own purposes (a 2025 session's listen
/// on a 2026 upstream): the peer is told as usual, but no cancellation is counted, since no
/// client cancelled anything when the bridge lets go of it.
pub const RELEASED_BY_BRIDGE: &str = "released by the bridge";

/// The `cause` label of `mcp_bridge_cancellations_total` for a cancel reason; None when the
/// cancellation is not counted (the bridge released its own call).
pub fn cancel_cause(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "timeout" => "timeout",
        "shutdown" => "shutdown",
        "client cancelled" => "client_notification",
        RELEASED_BY_BRIDGE => return None,
        _ => "client_disconnect",
    })
}

/// How an upstream controls one call in flight. Dropping it before the outcome cancels the
/// call at the peer (unless detached).
pub trait CallControl: Send {
    /// Why the call is being dropped; an explicit reason also cancels a detached call at once.
    fn set_reason(&mut self, reason: &'static str);
    /// Keep the call running after its handle is dropped, until `deadline`.
    fn detach_until(&mut self, deadline: Instant);
    /// The id the peer sees for this call (for logs and spans).
    fn upstream_id(&self) -> u64;
    /// A way to cancel the call that outlives the handle.
    fn canceller(&self) -> Canceller;
    /// The call is parked waiting for its own caller's input (or no longer is): the
    /// upstream must not attribute its peer's new requests to it meanwhile.
    fn set_parked(&mut self, parked: bool);
    /// Resume a parked call if its peer's next request could only be meant for it; else
    /// what to wait on before trying again (see [`Cancel::try_unpark`]).
    fn try_unpark(&mut self) -> Option<Arc<tokio::sync::Notify>>;
}

/// Cancels one call after its handle is gone.
pub trait Cancel: Send + Sync {
    /// Is the call still waiting for the peer's answer?
    fn pending(&self) -> bool;
    /// Cancel it at the peer; true if it was still pending.
    fn cancel(&self, reason: &str) -> bool;
    /// Flag the call as parked for its caller's input (see [`CallControl::set_parked`]);
    /// nothing to do for an upstream that attributes nothing (a remote).
    fn set_parked(&self, _parked: bool) {}
    /// Resume a parked call unless another caller's call that may be asked is running on
    /// the same peer (its next request would be ambiguous); then the notifier that wakes when
    /// that changes. An upstream that attributes nothing resumes at once.
    fn try_unpark(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.set_parked(false);
        None
    }
}

/// A call run as a task of its own (a remote's exchange, an endpoint's own answer): aborting
/// the task cancels it (dropping a remote exchange cancels it at the remote).
pub struct TaskCancel {
    pub task: tokio::task::AbortHandle,
    /// Set once the answer is in.
    pub answered: Arc<std::sync::atomic::AtomicBool>,
}

impl Cancel for TaskCancel {
    fn pending(&self) -> bool {
        !self.answered.load(std::sync::atomic::Ordering::Acquire) && !self.task.is_finished()
    }
    fn cancel(&self, _reason: &str) -> bool {
        let was = self.pending();
        self.task.abort();
        was
    }
}

/// Cancels one call after its handle is gone (a detached 2025 call). Cheap to clone.
#[derive(Clone)]
pub struct Canceller(Arc<dyn Cancel>);

impl Canceller {
    pub fn new(c: Arc<dyn Cancel>) -> Self {
        Self(c)
    }
    pub fn pending(&self) -> bool {
        self.0.pending()
    }
    pub fn cancel(&self, reason: &str) -> bool {
        self.0.cancel(reason)
    }
}

/// The one `CallControl` every upstream uses: it cancels through the upstream's [`Cancel`]
/// when dropped (counting the cause), or, once detached, at its deadline (counted as
/// `timeout`). Upstreams only say how one call is cancelled at their peer.
///
/// A detached call that is still running when its handle goes is handed to its upstream's
/// [`Detached`] reaper (nothing is spawned from `Drop`), which waits for the first of its
/// deadline and its [`Answered`]: nothing of an answered call (the upstream's `Cancel`, what
/// that holds) outlives its answer.
pub struct CancelOnDrop {
    cancel: Arc<dyn Cancel>,
    id: u64,
    reason: &'static str,
    detach_until: Option<Instant>,
    answered: Option<Answered>,
    metrics: Arc<crate::metrics::Metrics>,
    detached: Detached,
}

impl CancelOnDrop {
    /// A guard for call `id` (the id its peer sees), cancelled by `cancel`; `answered` is the
    /// call's, from [`sinks`]; a detached call goes to `detached` when the guard is dropped.
    pub fn new(
        cancel: Arc<dyn Cancel>,
        id: u64,
        answered: Answered,
        metrics: Arc<crate::metrics::Metrics>,
        detached: &Detached,
    ) -> Self {
        Self {
            cancel,
            id,
            reason: "client disconnected",
            detach_until: None,
            answered: Some(answered),
            metrics,
            detached: detached.clone(),
        }
    }

    /// Let a detached call run on until its deadline or its answer, whichever comes first:
    /// hand it to the reaper (never waits; a full or ended reaper cancels it now).
    fn run_detached(&mut self, deadline: Instant) {
        let Some(mut answered) = self.answered.take() else {
            return;
        };
        if answered.is_done() || !self.cancel.pending() {
            return; // answered already: nothing to wait for
        }
        self.detached.hand_over(DetachedCall {
            cancel: self.cancel.clone(),
            answered,
            deadline,
        });
    }
}

/// A detached call on its way to the reaper.
struct DetachedCall {
    cancel: Arc<dyn Cancel>,
    answered: Answered,
    deadline: Instant,
}

/// How many detached calls one reaper's queue holds before a hand-over cancels at once.
/// The reaper takes them as fast as they come; only a stalled runtime fills it.
pub const DETACHED_QUEUE: usize = 1024;

/// Where an upstream's detached calls wait for their answer or their deadline: one reaper
/// task per upstream, on the upstream's tracker, that runs every detached call's race in a
/// `FuturesUnordered` of its own and ends at the upstream's `stop` (cancelling what is left,
/// as `shutdown`) or once every sender is gone and nothing is left. Cheap to clone.
#[derive(Clone)]
pub struct Detached {
    tx: Option<tokio::sync::mpsc::Sender<DetachedCall>>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Detached {
    /// Start the reaper on `tracker`; it ends at `stop`.
    pub fn start(
        tracker: &tokio_util::task::TaskTracker,
        stop: tokio_util::sync::CancellationToken,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(DETACHED_QUEUE);
        tracker.spawn(reap(rx, stop, metrics.clone()));
        Self {
            tx: Some(tx),
            metrics,
        }
    }

    /// No reaper: a detached call is cancelled when its handle goes (for guards whose calls
    /// are never detached, and tests).
    pub fn none(metrics: Arc<crate::metrics::Metrics>) -> Self {
        Self { tx: None, metrics }
    }

    fn hand_over(&self, call: DetachedCall) {
        use tokio::sync::mpsc::error::TrySendError;
        let Some(tx) = &self.tx else {
            return cancel_now(&call.cancel, "client disconnected", &self.metrics);
        };
        match tx.try_send(call) {
            Ok(()) => {}
            Err(TrySendError::Full(call)) => {
                tracing::warn!(
                    queue = DETACHED_QUEUE,
                    "too many detached calls waiting for their deadline: cancelling this one now"
                );
                cancel_now(&call.cancel, "client disconnected", &self.metrics);
            }
            // The reaper ended: the upstream is stopping.
            Err(TrySendError::Closed(call)) => cancel_now(&call.cancel, "shutdown", &self.metrics),
        }
    }
}

/// Cancel at the peer for `reason`, counting its cause.
fn cancel_now(cancel: &Arc<dyn Cancel>, reason: &'static str, metrics: &crate::metrics::Metrics) {
    if cancel.cancel(reason) {
        if let Some(cause) = cancel_cause(reason) {
            metrics.cancelled(cause);
        }
    }
}

/// The reaper of [`Detached`]: takes detached calls until `stop` or until every sender is
/// gone; each one's race (answered / deadline / stop) runs in `races`, so that an answered
/// call is let go of at once.
async fn reap(
    mut rx: tokio::sync::mpsc::Receiver<DetachedCall>,
    stop: tokio_util::sync::CancellationToken,
    metrics: Arc<crate::metrics::Metrics>,
) {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let race = |c: DetachedCall| {
        let (stop, metrics) = (stop.clone(), metrics.clone());
        async move {
            tokio::select! {
                _ = c.answered.wait() => {}
                _ = tokio::time::sleep_until(c.deadline.into()) => {
                    cancel_now(&c.cancel, "timeout", &metrics);
                }
                _ = stop.cancelled() => cancel_now(&c.cancel, "shutdown", &metrics),
            }
        }
    };
    let mut races = FuturesUnordered::new();
    let mut open = true;
    while open || !races.is_empty() {
        tokio::select! {
            got = rx.recv(), if open => match got {
                Some(c) => races.push(race(c)),
                None => open = false,
            },
            Some(()) = races.next(), if !races.is_empty() => {}
            _ = stop.cancelled() => break,
        }
    }
    // At stop every race left ends at once (it cancels its call as `shutdown`); so does any
    // call still queued.
    rx.close();
    while let Some(c) = rx.recv().await {
        races.push(race(c));
    }
    while races.next().await.is_some() {}
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(deadline) = self.detach_until {
            self.run_detached(deadline);
            return;
        }
        cancel_now(&self.cancel, self.reason, &self.metrics);
    }
}

impl CallControl for CancelOnDrop {
    fn set_reason(&mut self, reason: &'static str) {
        self.reason = reason;
        // An explicit reason means: cancel now, even a detached call.
        self.detach_until = None;
    }
    fn detach_until(&mut self, deadline: Instant) {
        self.detach_until = Some(deadline);
    }
    fn upstream_id(&self) -> u64 {
        self.id
    }
    fn canceller(&self) -> Canceller {
        Canceller::new(self.cancel.clone())
    }
    fn set_parked(&mut self, parked: bool) {
        self.cancel.set_parked(parked);
    }
    fn try_unpark(&mut self) -> Option<Arc<tokio::sync::Notify>> {
        self.cancel.try_unpark()
    }
}

/// What turns an upstream's outcome into the one its caller reads (set by the core).
type Translate = Box<dyn FnOnce(Outcome) -> Outcome + Send>;

/// The final answer of a call as its caller reads it: the upstream's outcome off the oneshot,
/// translated on the way (when the core set a translation: the caller speaks another era than
/// the upstream). Awaited like the oneshot it wraps.
pub struct OutcomeRx {
    rx: oneshot::Receiver<Outcome>,
    translate: Option<Translate>,
}

impl OutcomeRx {
    /// Translate the outcome with `f` when it arrives.
    /// Have the outcome pass through `f` on its way to the caller (after any earlier `f`).
    pub fn translate_with(&mut self, f: Translate) {
        self.translate = Some(match self.translate.take() {
            Some(first) => Box::new(move |o| f(first(o))),
            None => f,
        });
    }
    fn deliver(&mut self, o: Outcome) -> Outcome {
        match self.translate.take() {
            Some(f) => f(o),
            None => o,
        }
    }
    /// The outcome if it is there already.
    pub fn try_recv(&mut self) -> Result<Outcome, oneshot::error::TryRecvError> {
        let o = self.rx.try_recv()?;
        Ok(self.deliver(o))
    }
}

impl std::future::Future for OutcomeRx {
    type Output = Result<Outcome, oneshot::error::RecvError>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match std::pin::Pin::new(&mut self.rx).poll(cx) {
            std::task::Poll::Ready(Ok(o)) => std::task::Poll::Ready(Ok(self.deliver(o))),
            std::task::Poll::Ready(Err(e)) => std::task::Poll::Ready(Err(e)),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// A call in flight: interim events on a bounded queue, the final answer on a oneshot.
/// Dropping it before the outcome cancels the call upstream.
pub struct CallHandle {
    pub events: EventReceiver,
    pub outcome: OutcomeRx,
    control: Box<dyn CallControl>,
    /// Where answers to the requests the upstream makes during this call go, when that is
    /// not the upstream the call was made on (a pool: the one child that runs it).
    via: Option<SharedUpstream>,
}

impl CallHandle {
    pub fn new(
        events: EventReceiver,
        outcome: oneshot::Receiver<Outcome>,
        control: Box<dyn CallControl>,
    ) -> Self {
        Self {
            events,
            outcome: OutcomeRx {
                rx: outcome,
                translate: None,
            },
            control,
            via: None,
        }
    }
    /// This handle, with the requests its upstream makes answered through `via` (the pool
    /// child that runs the call) instead of the upstream the call was made on.
    pub fn answered_via(mut self, via: SharedUpstream) -> Self {
        self.via = Some(via);
        self
    }
    /// Where to send a caller's answer to a request the upstream made during this call:
    /// `via` when set, else `made_on` (the upstream the call was made on).
    pub fn replies_to<'a>(&'a self, made_on: &'a SharedUpstream) -> &'a SharedUpstream {
        self.via.as_ref().unwrap_or(made_on)
    }
    /// `via`, if set (see [`CallHandle::answered_via`]).
    pub fn via(&self) -> Option<&SharedUpstream> {
        self.via.as_ref()
    }
    /// Why the call is being dropped, told to the peer as the cancellation reason.
    pub fn set_cancel_reason(&mut self, reason: &'static str) {
        self.control.set_reason(reason);
    }
    /// A way to cancel this call that outlives the handle.
    pub fn canceller(&self) -> Canceller {
        self.control.canceller()
    }
    /// The bridge's id for this call (the peer sees this id).
    pub fn upstream_id(&self) -> u64 {
        self.control.upstream_id()
    }
    /// Keep the call running after this handle is dropped (2025 clients: a dropped connection
    /// is not a cancellation); it is still cancelled at `deadline`.
    pub fn detach_until(&mut self, deadline: Instant) {
        self.control.detach_until(deadline);
    }
    /// The call is parked waiting for its own caller's input (true), or resumed (false).
    /// Told by the face that parks it, so that the upstream does not offer the parked call
    /// as the addressee of its peer's next request, nor count it as one that may be asked.
    pub fn set_parked(&mut self, parked: bool) {
        self.control.set_parked(parked);
    }

    /// Resume a parked call once the upstream can attribute its peer's requests to it (a
    /// 2025 child running another caller's call that may be asked cannot: both would be
    /// addressees), waiting up to `wait`; false if it could not within that.
    pub async fn unpark(&mut self, wait: Duration) -> bool {
        let until = tokio::time::Instant::now() + wait;
        let Some(mut freed) = self.control.try_unpark() else {
            return true;
        };
        loop {
            // Registered before the next try: a slot freed between the try and the wait
            // wakes this waiter (`notify_waiters` wakes every registered `Notified`).
            let notify = freed.clone();
            let woken = notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            match self.control.try_unpark() {
                None => return true,
                // The same notifier: wait on it. Another (the peer was replaced): register
                // on that one before trying again.
                Some(n) if Arc::ptr_eq(&n, &freed) => {}
                Some(n) => {
                    freed = n;
                    continue;
                }
            }
            if tokio::time::timeout_at(until, woken).await.is_err() {
                return self.control.try_unpark().is_none();
            }
        }
    }
}

/// The peer that answers, as every face sees it.
pub trait Upstream: Send + Sync {
    /// Server name for logs and metric labels.
    fn name(&self) -> &str;
    /// Is it ready to take calls (probed, not restarting)?
    fn is_ready(&self) -> bool;
    /// What the era probe learned, waiting up to `wait` for a (re)starting upstream.
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>>;
    /// The era of the peer that answers `method` (an aggregation endpoint: the member it is
    /// routed to; what the endpoint answers itself is in the `caller`'s era already); None
    /// when that is not known within `wait`.
    fn call_era<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        caller: Era,
        wait: Duration,
    ) -> BoxFuture<'a, Option<Era>> {
        let _ = (method, params, caller);
        Box::pin(async move { self.info(wait).await.ok().map(|i| i.era) })
    }
    /// Start a call, waiting up to `wait` for a (re)starting upstream.
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>>;
    /// Traffic that belongs to no call.
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent>;
    /// A client's answer to a request the upstream made (the upstream's own id), one frame.
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError>;
    /// A client notification for the upstream, as-is (e.g. `notifications/roots/list_changed`).
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError>;
    /// `Mcp-Param-*` rules of a tool: (lower-case header name, property), from its last list.
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)>;
    /// Make a 2025 upstream log at least at `level` (it logs per session; the bridge filters
    /// per call). Only ever lowers the level. Done once the change is on its way (a child:
    /// written to its stdin at once) or answered (a remote), so that a call started after it
    /// is logged at the new level.
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()>;
    /// Wait (at most `wait`) until traffic that belongs to no call can reach
    /// [`Upstream::subscribe`]rs (a 2025 remote's GET stream is open); false when it cannot
    /// (yet). A child's stdout always carries it.
    fn events_ready(&self, _wait: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }
    /// Stop it (a per-session upstream whose session ended).
    fn stop(&self);
    /// The tasks this upstream runs for callers of the bridge ([`crate::core::tasks`]); None
    /// for an upstream whose calls do not leave tasks behind.
    fn task_book(&self) -> Option<Arc<crate::core::tasks::TaskBook>> {
        None
    }
}

/// How faces hold an upstream.
pub type SharedUpstream = Arc<dyn Upstream>;

#[cfg(test)]
mod tests;
