//! The multiplexer of one child process: the pending map keyed by bridge-minted ids (the
//! same number is the call's progress token, so one lookup routes both responses and
//! progress), starting a call under such an id, cancelling it (also after its handle is gone,
//! for a detached 2025 call), and failing every call in flight when the process ends.
//! Once the process has ended (`fail_all`) or its stdin writer has gone, a new call is refused
//! as `child_exited` rather than queued or reported as overload: a full queue is the only
//! overload.
//!
//!
//! Attribution: a 2025 child's requests name no call, so a call whose caller may be asked
//! (`accepts_server_requests`) is started only when no other such call of another caller is
//! running and not parked (`start` refuses it as `AttributionBusy` under the same lock that
//! inserts it; the caller waits on `slot_freed` and tries again). A parked call waits for its
//! own caller's retry: it is no addressee of new requests and holds no slot.
//!
//! It is the bottom of `upstream::child`: `Proc` knows nothing of supervision or routing, so
//! the map dies with its process and failing all calls on a crash is a single `drain()`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use crate::call::{
    sinks, Call, CallHandle, CallSinks, Cancel, CancelOnDrop, Outcome, UpstreamInfo,
};
use crate::error::BridgeError;
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::protocol::{self, Era};

/// One call in flight in the child, under its minted id.
pub(super) struct Pending {
    pub(super) sinks: Option<CallSinks>,
    pub(super) method: Arc<str>,
    pub(super) session: Option<Arc<str>>,
    pub(super) accepts_server_requests: bool,
    /// Rank of the lowest log level the caller wants, if it wants logs.
    pub(super) log_rank: Option<usize>,
    /// The `tool` label of a `tools/call` (a listed name or `other`).
    pub(super) tool: Option<Arc<str>>,
    /// Parked for its caller's input (a 2026 `input_required`): not an addressee of the
    /// child's requests, and no obstacle to starting another call that may be asked.
    pub(super) parked: bool,
    /// A 2026 caller's call (not the bridge's own): its capabilities are declared per
    /// request, so when it is no addressee it declared none the child's request needs.
    pub(super) modern_caller: bool,
    /// Wakes the calls waiting for attribution when this one goes (set when it may be asked).
    _slot: Option<SlotGuard>,
}

/// Wakes every waiter of `Proc::slot_freed` when dropped with its `Pending` entry.
struct SlotGuard(Arc<Notify>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}

impl Pending {
    /// Could the child's next request be meant for this call's caller?
    pub(super) fn may_be_asked(&self) -> bool {
        self.sinks.is_some() && self.accepts_server_requests && !self.parked
    }
}

/// Would a new call of `session` (that may be asked) make the child's requests ambiguous?
/// Yes when another caller's call that may be asked is running: calls of one 2025 session
/// share its stream, so they are one addressee.
fn attribution_conflict<'a>(
    others: impl IntoIterator<Item = &'a Pending>,
    session: Option<&Arc<str>>,
) -> bool {
    others
        .into_iter()
        .filter(|p| p.may_be_asked())
        .any(|p| session.is_none() || p.session.as_ref() != session)
}

/// One running process.
pub(super) struct Proc {
    pub(super) stdin: mpsc::Sender<Bytes>,
    /// Cancelled to make the writer close the child's stdin.
    pub(super) close_stdin: CancellationToken,
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    pub(super) info: RwLock<Option<UpstreamInfo>>,
    /// The log level set on this (2025) child by the bridge.
    pub(super) log_floor: crate::era::notifications::LogFloor,
    /// tool name → (lowercase header name, property) for `Mcp-Param-*` checks.
    pub(super) tool_headers: RwLock<HashMap<String, Vec<(String, String)>>>,
    /// Tool names from the last `tools/list`: the only ones used as metric labels.
    pub(super) tool_names: RwLock<crate::metrics::ToolNames>,
    /// `tools/list_changed` seen and not yet re-read: 0 none, 1 a refresh runs, >1 one more.
    pub(super) tools_changed: std::sync::atomic::AtomicUsize,
    /// Notified when a call that may be asked ends or is parked (see the module comment).
    pub(super) slot_freed: Arc<Notify>,
    /// Why the process's calls were failed (set by `fail_all` under the `pending` lock, so a
    /// call starting after it is refused instead of waiting for an answer that cannot come).
    ended: std::sync::OnceLock<String>,
    /// Where its detached calls go when their handles are dropped (the child's reaper).
    detached: crate::call::Detached,
}

/// The error a call gets from a process whose calls were failed for `why`.
fn ended_error(why: &str) -> BridgeError {
    if why == "shutting down" {
        BridgeError::ShuttingDown
    } else {
        BridgeError::ChildExited(why.to_owned())
    }
}

/// What a refused frame on the child's stdin queue means: full is overload; closed means the
/// writer ended because the child's stdin is gone (the child exited or closed it).
pub(super) fn stdin_error(e: &mpsc::error::TrySendError<Bytes>) -> BridgeError {
    match e {
        mpsc::error::TrySendError::Full(_) => BridgeError::Overloaded,
        mpsc::error::TrySendError::Closed(_) => {
            BridgeError::ChildExited("its stdin is closed".into())
        }
    }
}

/// Cancels one call in the child after its handle is gone (a detached 2025 call).
struct ChildCancel {
    proc: Arc<Proc>,
    id: u64,
}

impl Cancel for ChildCancel {
    fn pending(&self) -> bool {
        lock(&self.proc.pending).contains_key(&self.id)
    }
    fn cancel(&self, reason: &str) -> bool {
        self.proc.cancel(self.id, reason)
    }
    fn set_parked(&self, parked: bool) {
        self.proc.set_parked(self.id, parked);
    }
    fn try_unpark(&self) -> Option<Arc<Notify>> {
        self.proc.try_unpark(self.id)
    }
}

impl Proc {
    /// How many calls of this process wait for the child's answer.
    pub(super) fn in_flight(&self) -> usize {
        lock(&self.pending).len()
    }

    /// A fresh process's state around the sender of its stdin queue.
    pub(super) fn new(stdin: mpsc::Sender<Bytes>, detached: &crate::call::Detached) -> Self {
        Self {
            stdin,
            close_stdin: CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            info: RwLock::new(None),
            log_floor: crate::era::notifications::LogFloor::default(),
            tool_headers: RwLock::new(HashMap::new()),
            tool_names: RwLock::new(crate::metrics::ToolNames::default()),
            tools_changed: std::sync::atomic::AtomicUsize::new(0),
            slot_freed: Arc::new(Notify::new()),
            ended: std::sync::OnceLock::new(),
            detached: detached.clone(),
        }
    }

    /// Start `call` on this `child_era` child under the minted `id`, which is also its
    /// progress token (a 2025 caller's `_meta` envelope is the core's to stamp, before the
    /// call gets here). Dropping the handle cancels the call, counted in
    /// `metrics` by its reason. A call that may be asked, on a 2025 child, is refused as
    /// `AttributionBusy` while another caller's may be (see the module comment).
    pub(super) fn start(
        self: &Arc<Self>,
        id: u64,
        child_era: Era,
        call: &Call,
        internal: bool,
        metrics: &Arc<Metrics>,
    ) -> Result<CallHandle, BridgeError> {
        let id_s = id.to_string();
        // A 2025 caller's envelope was stamped on by the core (`core::start`).
        let rewritten = jsonrpc::rewrite_request_params(call.params.as_deref(), Some(&id_s), &[]);
        let params = rewritten
            .as_deref()
            .or(call.params.as_deref().map(RawValue::get));
        let frame = jsonrpc::request(&id_s, &call.method, params);
        let (s, events, outcome, answered) = sinks();
        let mut pending = lock(&self.pending);
        if let Some(why) = self.ended.get() {
            return Err(ended_error(why));
        }
        let may_be_asked = call.ctx.accepts_server_requests && !internal;
        if may_be_asked
            && child_era == Era::Legacy
            && attribution_conflict(pending.values(), call.ctx.session.as_ref())
        {
            return Err(BridgeError::AttributionBusy(0));
        }
        pending.insert(
            id,
            Pending {
                sinks: Some(s),
                method: Arc::from(call.method.as_str()),
                session: call.ctx.session.clone(),
                accepts_server_requests: may_be_asked,
                log_rank: call
                    .ctx
                    .log_level
                    .and_then(protocol::log_level)
                    .map(|(_, r)| r),
                tool: crate::upstream::observe::tool_label(&self.tool_names, call),
                parked: false,
                modern_caller: call.ctx.client_era == Era::Modern && !internal,
                _slot: may_be_asked.then(|| SlotGuard(self.slot_freed.clone())),
            },
        );
        drop(pending);
        if let Err(e) = self.stdin.try_send(frame) {
            lock(&self.pending).remove(&id);
            return Err(stdin_error(&e));
        }
        Ok(CallHandle::new(
            events,
            outcome,
            Box::new(CancelOnDrop::new(
                Arc::new(ChildCancel {
                    proc: self.clone(),
                    id,
                }),
                id,
                answered,
                metrics.clone(),
                &self.detached,
            )),
        ))
    }

    /// Fail every call in flight: the process is gone (`why`), or the bridge is shutting down.
    pub(super) fn fail_all(&self, why: &str) {
        let drained: Vec<Pending> = {
            let mut pending = lock(&self.pending);
            let _ = self.ended.set(why.to_owned());
            pending.drain().map(|(_, p)| p).collect()
        };
        for p in drained {
            if let Some(s) = p.sinks {
                let _ = s.outcome.send(Outcome::Failed(ended_error(why)));
            }
        }
    }

    /// Remove a pending call and tell the child. Returns whether it was still pending.
    pub(super) fn cancel(&self, id: u64, reason: &str) -> bool {
        let removed = lock(&self.pending).remove(&id).is_some();
        if removed {
            let params = serde_json::json!({ "requestId": id, "reason": reason }).to_string();
            let frame = jsonrpc::notification("notifications/cancelled", Some(&params));
            let _ = self.stdin.try_send(frame);
        }
        removed
    }

    /// Flag call `id` as parked for its caller's input, or as running again. Parking frees
    /// its attribution slot, so the calls waiting for one are woken.
    pub(super) fn set_parked(&self, id: u64, parked: bool) {
        let mut pending = lock(&self.pending);
        if let Some(p) = pending.get_mut(&id) {
            p.parked = parked;
        }
        drop(pending);
        if parked {
            self.slot_freed.notify_waiters();
        }
    }

    /// Resume parked call `id` unless another caller's call that may be asked is running
    /// (the same rule as `start`, under the same lock): None when resumed (or gone), else
    /// the notifier to wait on.
    pub(super) fn try_unpark(&self, id: u64) -> Option<Arc<Notify>> {
        let mut pending = lock(&self.pending);
        let session = pending.get(&id)?.session.clone();
        let others = pending.iter().filter(|(k, _)| **k != id).map(|(_, p)| p);
        if attribution_conflict(others, session.as_ref()) {
            return Some(self.slot_freed.clone());
        }
        if let Some(p) = pending.get_mut(&id) {
            p.parked = false;
        }
        None
    }

    /// What the probe learned, once it has.
    pub(super) fn info(&self) -> Option<UpstreamInfo> {
        self.info.read().ok().and_then(|g| g.clone())
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallCtx, Detached};
    use std::time::Duration;

    fn call() -> Call {
        Call {
            method: "tools/call".into(),
            params: None,
            ctx: CallCtx::modern(),
        }
    }

    fn reason(r: &Result<CallHandle, BridgeError>) -> &'static str {
        r.as_ref().err().map_or("started", BridgeError::reason)
    }

    /// A call of `session` (None: a 2026 caller) whose caller may be asked.
    fn askable(session: Option<&str>) -> Call {
        let mut c = call();
        c.ctx.accepts_server_requests = true;
        c.ctx.session = session.map(Arc::from);
        c
    }

    // Paused clock: "still waiting after 100 ms" and the 120 ms bound take no real time.
    #[tokio::test(start_paused = true)]
    async fn only_one_caller_that_may_be_asked_runs_unless_parked() {
        let m = Arc::new(Metrics::new());
        let (tx, _rx) = mpsc::channel(64);
        let p = Arc::new(Proc::new(tx, &Detached::none(m.clone())));
        let start = |id, c: &Call| p.start(id, Era::Legacy, c, false, &m);
        let mut alice = start(1, &askable(Some("s-alice"))).expect("first");
        // The same session is the same addressee; another session or a 2026 caller is not.
        let again = start(2, &askable(Some("s-alice"))).expect("same session");
        assert_eq!(
            reason(&start(3, &askable(Some("s-bob")))),
            "attribution_busy"
        );
        assert_eq!(reason(&start(4, &askable(None))), "attribution_busy");
        // A caller that can be asked nothing, and the bridge's own calls, are never held back.
        assert_eq!(reason(&start(5, &call())), "started");
        assert_eq!(
            reason(&p.start(6, Era::Legacy, &askable(None), true, &m)),
            "started"
        );
        // Toward a 2026 child nothing needs attributing.
        assert_eq!(
            reason(&p.start(7, Era::Modern, &askable(None), false, &m)),
            "started"
        );
        drop(again);
        // Parked calls hold nobody back (and are no addressee); resumed, they count again.
        alice.set_parked(true);
        assert!(lock(&p.pending).get(&1).is_some_and(|e| !e.may_be_asked()));
        let bob = start(8, &askable(Some("s-bob"))).expect("alice is parked");
        // Resumed while bob may be asked, the child's next request would have two addressees:
        // alice waits (still parked) until bob is done.
        assert!(!alice.unpark(Duration::from_millis(120)).await);
        assert!(lock(&p.pending).get(&1).is_some_and(|e| !e.may_be_asked()));
        let waiting = tokio::spawn(async move {
            let resumed = alice.unpark(Duration::from_secs(10)).await;
            (resumed, alice)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "resumed while bob runs");
        drop(bob);
        let (resumed, alice) = waiting.await.unwrap();
        assert!(resumed, "resumed once bob is done");
        assert!(lock(&p.pending).get(&1).is_some_and(Pending::may_be_asked));
        drop(alice);
        assert_eq!(reason(&start(9, &askable(None))), "started");
    }

    #[tokio::test]
    async fn a_gone_writer_is_child_exited_and_a_full_queue_overload() {
        let m = Arc::new(Metrics::new());
        let (tx, rx) = mpsc::channel(1);
        let p = Arc::new(Proc::new(tx, &Detached::none(m.clone())));
        let first = p.start(1, Era::Modern, &call(), false, &m);
        assert_eq!(reason(&first), "started");
        // The queue (capacity 1) holds the first frame: the next is overload.
        assert_eq!(
            reason(&p.start(2, Era::Modern, &call(), false, &m)),
            "overloaded"
        );
        // The writer ends (the child's stdin is gone): that is not overload.
        drop(rx);
        assert_eq!(
            reason(&p.start(3, Era::Modern, &call(), false, &m)),
            "child_exited"
        );
        assert!(!lock(&p.pending).contains_key(&3));
        drop(first);
    }

    #[tokio::test]
    async fn a_call_after_the_process_ended_is_refused_not_left_waiting() {
        let m = Arc::new(Metrics::new());
        let (tx, _rx) = mpsc::channel(8);
        let p = Arc::new(Proc::new(tx, &Detached::none(m.clone())));
        let mut before = p
            .start(1, Era::Modern, &call(), false, &m)
            .expect("started");
        p.fail_all("exited");
        match before.outcome.try_recv() {
            Ok(Outcome::Failed(e)) => assert_eq!(e.reason(), "child_exited"),
            other => panic!("in-flight call: {other:?}"),
        }
        // A caller that picked this process before it ended (the race with the supervisor).
        let after = p.start(2, Era::Modern, &call(), false, &m);
        assert_eq!(reason(&after), "child_exited");
        assert!(lock(&p.pending).is_empty());
        let (tx, _rx) = mpsc::channel(8);
        let stopping = Arc::new(Proc::new(tx, &Detached::none(m.clone())));
        stopping.fail_all("shutting down");
        let r = stopping.start(3, Era::Modern, &call(), false, &m);
        assert_eq!(reason(&r), "shutting_down");
    }
}
