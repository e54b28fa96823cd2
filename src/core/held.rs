//! The listen the bridge holds on a 2026 upstream for a 2025 caller.
//!
//! A 2025 client learns of list changes and resource updates outside any call (the HTTP
//! face's GET stream, the stdio host's stdout). A 2026 upstream sends those only on a
//! `subscriptions/listen` call, so for such a caller the bridge holds one listen of its own and
//! relays its notifications in 2025 form (no `subscriptionId`). Both faces need exactly the same
//! rules, so they live here and a face only writes out what [`HeldListen::next`] yields:
//!
//! - the filter: every list change the upstream offers plus the caller's resource
//!   subscriptions (`notifications::legacy_filter`), kept in one bounded [`Subscriptions`] set;
//! - re-opening: at once when the subscription set changes or the upstream restarted
//!   ([`HeldListen::reopen`]), with a bounded backoff when the listen ended or could not open;
//! - giving up: an upstream that is not 2026-era (its notifications reach the face another
//!   way) or that does not know `subscriptions/listen` (-32601) gets no listen until the next
//!   `reopen`;
//! - requests the upstream sends on the listen are refused (the listen has no caller to ask);
//! - the listen is the bridge's own call: dropping it tells the upstream, but counts no
//!   client's cancellation (`RELEASED_BY_BRIDGE`).
//!
//! [`HeldListen::next`] is cancel-safe (the opening call is a stored future), so a face can
//! poll it in a `select!` beside its other sources.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::call::{
    Call, CallCtx, CallEvent, CallHandle, Outcome, SharedUpstream, RELEASED_BY_BRIDGE,
};
use crate::era::notifications::{legacy_filter, untagged};
use crate::jsonrpc::{self, code};
use crate::protocol::{self, Era};

/// Most resources one caller may subscribe to.
pub const MAX_URIS: usize = 1000;
/// The bound on opening the listen (the upstream's probe, the call's start).
const SETUP: Duration = Duration::from_secs(5);
/// The first and the longest wait before re-opening a listen that ended or failed.
const FIRST: Duration = Duration::from_millis(200);
const LONGEST: Duration = Duration::from_secs(10);
/// A listen acknowledged and alive this long resets the backoff when it ends.
const LIVED: Duration = Duration::from_secs(30);

/// A 2025 caller's resource subscriptions, and the acknowledgements of the listens held
/// with them (so that `resources/subscribe` can be answered once it is in effect).
pub struct Subscriptions {
    uris: Mutex<BTreeSet<String>>,
    /// Bumped on every change of `uris`: a held listen re-opens with the new set.
    generation: watch::Sender<u64>,
    /// 1 + the newest generation a held listen settled with: acknowledged, or ended or
    /// failed before that (0: none yet; `u64::MAX`: none will come, the upstream does not
    /// know `subscriptions/listen` or is not 2026-era). Nobody waits on a listen that ended:
    /// its re-opening (with backoff) goes on in the background.
    acked: watch::Sender<u64>,
    /// Listens held with this set right now.
    holders: AtomicUsize,
}

/// A caller asked for more than [`MAX_URIS`] resource subscriptions.
#[derive(Debug)]
pub struct TooMany;

impl std::fmt::Display for TooMany {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "too many resource subscriptions (at most {MAX_URIS})")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Subscriptions {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            uris: Mutex::new(BTreeSet::new()),
            generation: watch::Sender::new(0),
            acked: watch::Sender::new(0),
            holders: AtomicUsize::new(0),
        })
    }

    pub fn uris(&self) -> Vec<String> {
        lock(&self.uris).iter().cloned().collect()
    }

    /// Add (`on`) or remove a subscription. When the set changed and a listen is held with
    /// it, waits (at most `settle`) until the listen re-opened with the new set is
    /// acknowledged, so that the caller's `resources/subscribe` is answered once in effect.
    pub async fn set(&self, uri: &str, on: bool, settle: Duration) -> Result<(), TooMany> {
        let generation = {
            let mut g = lock(&self.uris);
            let changed = if !on {
                g.remove(uri)
            } else if g.contains(uri) {
                false
            } else if g.len() >= MAX_URIS {
                return Err(TooMany);
            } else {
                g.insert(uri.to_owned())
            };
            if !changed {
                return Ok(());
            }
            // Bumped under the lock: generations and sets change in the same order.
            self.generation.send_modify(|n| *n += 1);
            *self.generation.borrow()
        };
        self.settled(generation + 1, settle).await;
        Ok(())
    }

    /// Wait (at most `limit`) until a listen held with this set is settled at all (a 2025
    /// host's `initialize` is answered once notifications can flow, or once the listen
    /// ended or failed: waiting longer would not make them flow sooner).
    pub async fn first_acknowledged(&self, limit: Duration) {
        self.settled(1, limit).await;
    }

    async fn settled(&self, at_least: u64, limit: Duration) {
        if self.holders.load(Ordering::Acquire) == 0 {
            return; // nobody holds a listen: nothing will be acknowledged
        }
        let mut rx = self.acked.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n >= at_least)).await;
    }

    /// The listen opened with `generation` was acknowledged, or ended or failed first.
    fn settle(&self, generation: u64) {
        self.acked
            .send_modify(|n| *n = (*n).max(generation.saturating_add(1)));
    }
}

/// Makes the context of each listen call (the caller's `_meta` stamp may change).
pub type MakeCtx = Box<dyn Fn() -> CallCtx + Send + Sync>;

/// Where the held listen is.
enum State {
    /// Opening: the upstream's probe and the call's start.
    Opening(BoxFuture<'static, Opened>),
    /// Open: its notifications flow (`ended` once its outcome came; its events still drain).
    Open { call: CallHandle, ended: bool },
    /// Waiting to re-open.
    Waiting(tokio::time::Instant),
    /// No listen until the next `reopen` (not a 2026 upstream, or it does not know listen).
    Dormant,
}

enum Opened {
    /// The listen call, opened with this generation of the subscriptions.
    Call(CallHandle, u64),
    NotModern,
    /// It could not open, with this generation of the subscriptions.
    Failed(String, u64),
}

/// The listen held for one 2025 caller. Dropping it releases the listen at the upstream.
pub struct HeldListen {
    up: SharedUpstream,
    subs: Arc<Subscriptions>,
    ctx: MakeCtx,
    generation: watch::Receiver<u64>,
    state: State,
    backoff: Duration,
    opened_at: Instant,
    /// The generation of the subscriptions the open listen was made with.
    opened_with: u64,
    acked: bool,
}

impl Drop for HeldListen {
    fn drop(&mut self) {
        self.subs.holders.fetch_sub(1, Ordering::AcqRel);
    }
}

impl HeldListen {
    /// Hold a listen on `up` for the caller whose subscriptions are `subs`; it opens at the
    /// first [`HeldListen::next`].
    pub fn new(up: SharedUpstream, subs: Arc<Subscriptions>, ctx: MakeCtx) -> Self {
        subs.holders.fetch_add(1, Ordering::AcqRel);
        let generation = subs.generation.subscribe();
        let mut me = Self {
            up,
            subs,
            ctx,
            generation,
            state: State::Dormant,
            backoff: FIRST,
            opened_at: Instant::now(),
            opened_with: 0,
            acked: false,
        };
        me.reopen();
        me
    }

    /// Open it again now, with the backoff reset (the upstream restarted: what was held on
    /// the old one is gone).
    pub fn reopen(&mut self) {
        if let State::Open { call, .. } = &mut self.state {
            call.set_cancel_reason(RELEASED_BY_BRIDGE);
        }
        self.backoff = FIRST;
        self.state = State::Opening(self.opening());
    }

    /// The next notification for the caller, in 2025 form; pending while there is none.
    pub async fn next(&mut self) -> Bytes {
        loop {
            match &mut self.state {
                State::Dormant => std::future::pending::<()>().await,
                State::Waiting(at) => {
                    let at = *at;
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = self.generation.changed() => {}
                    }
                    self.state = State::Opening(self.opening());
                }
                State::Opening(f) => {
                    let opened = tokio::select! {
                        o = f => o,
                        _ = self.generation.changed() => {
                            self.state = State::Opening(self.opening());
                            continue;
                        }
                    };
                    self.on_opened(opened);
                }
                State::Open { call, ended } => {
                    let ev = if *ended {
                        match call.events.try_recv() {
                            Ok(ev) => Some(ev),
                            Err(_) => {
                                // Drained (an acknowledgement in it came first): settled.
                                self.subs.settle(self.opened_with);
                                self.state = State::Dormant;
                                self.retry("it ended");
                                continue;
                            }
                        }
                    } else {
                        tokio::select! {
                            biased;
                            _ = self.generation.changed() => {
                                debug!("the subscriptions changed: re-opening the held listen");
                                self.reopen();
                                continue;
                            }
                            ev = call.events.recv(), if !call.events.ended() => ev,
                            o = &mut call.outcome => {
                                *ended = true;
                                if self.on_outcome(o.ok()) {
                                    continue;
                                }
                                None
                            }
                        }
                    };
                    if let Some(b) = ev.and_then(|ev| self.on_event(ev)) {
                        return b;
                    }
                }
            }
        }
    }

    /// The future that opens the listen with the current subscriptions.
    fn opening(&mut self) -> BoxFuture<'static, Opened> {
        // Marked seen before the set is read: a change after this re-opens again.
        let generation = *self.generation.borrow_and_update();
        let uris = self.subs.uris();
        let up = Arc::clone(&self.up);
        let ctx = (self.ctx)();
        Box::pin(async move {
            let caps = match up.info(SETUP).await {
                Ok(i) if i.era != Era::Modern => return Opened::NotModern,
                Ok(i) => i.capabilities(),
                Err(e) => return Opened::Failed(e.to_string(), generation),
            };
            let params = serde_json::json!({ "notifications": legacy_filter(&caps, &uris) });
            let call = Call {
                method: "subscriptions/listen".into(),
                params: Some(jsonrpc::raw(&params.to_string())),
                ctx,
            };
            debug!(
                "holding a listen for a 2025 caller ({} resources)",
                uris.len()
            );
            match crate::core::start(&up, call, SETUP).await {
                Ok(mut h) => {
                    h.set_cancel_reason(RELEASED_BY_BRIDGE);
                    Opened::Call(h, generation)
                }
                Err(e) => Opened::Failed(e.to_string(), generation),
            }
        })
    }

    fn on_opened(&mut self, opened: Opened) {
        match opened {
            Opened::Call(call, generation) => {
                self.opened_at = Instant::now();
                self.opened_with = generation;
                self.acked = false;
                self.state = State::Open { call, ended: false };
            }
            Opened::NotModern => {
                // Its notifications reach the face on the upstream's own stream.
                self.state = State::Dormant;
            }
            Opened::Failed(why, generation) => {
                self.subs.settle(generation);
                self.retry(&why);
            }
        }
    }

    /// The listen's final answer; true when the listen is given up for good.
    fn on_outcome(&mut self, o: Option<Outcome>) -> bool {
        let why = match o {
            Some(Outcome::Error(e)) if protocol::error_code(&e) == Some(code::METHOD_NOT_FOUND) => {
                warn!("the upstream does not support subscriptions/listen: no notifications for the 2025 caller");
                // Wake whoever waits for an acknowledgement: none will come.
                self.subs.acked.send_replace(u64::MAX);
                self.state = State::Dormant;
                return true;
            }
            Some(Outcome::Result(_)) => "the upstream ended it".to_owned(),
            Some(Outcome::Error(e)) => format!("error {}", e.get()),
            Some(Outcome::Failed(e)) => e.to_string(),
            None => "the call ended without an answer".to_owned(),
        };
        debug!("the held listen ended: {why}");
        false
    }

    /// Re-open after the backoff (which doubles, up to `LONGEST`).
    fn retry(&mut self, why: &str) {
        if self.acked && self.opened_at.elapsed() > LIVED {
            self.backoff = FIRST;
        }
        warn!(
            "the listen held for a 2025 caller ended or could not open ({why}); re-opening in {} ms",
            self.backoff.as_millis()
        );
        self.state = State::Waiting(tokio::time::Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(LONGEST);
    }

    /// One event of the listen call: a notification for the caller (not the acknowledgement).
    fn on_event(&mut self, ev: CallEvent) -> Option<Bytes> {
        match ev {
            CallEvent::Notification { method, .. }
                if method == "notifications/subscriptions/acknowledged" =>
            {
                self.acked = true;
                info!("the listen held for a 2025 caller is acknowledged");
                self.subs.settle(self.opened_with);
                None
            }
            CallEvent::Notification { method, params } => {
                Some(untagged(&method, params.as_deref()))
            }
            CallEvent::ServerRequest { id, method, .. } => {
                warn!("the upstream sent {method} on a listen the bridge holds: refused");
                let err = jsonrpc::error_object(
                    code::METHOD_NOT_FOUND,
                    "mcp-bridge takes no requests on a listen it holds",
                    None,
                );
                if let Err(e) = self
                    .up
                    .send_response(jsonrpc::error_raw(Some(id.get()), &err))
                {
                    debug!("a refusal for the upstream was not delivered: {e}");
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{
        sinks, CallSinks, Cancel, CancelOnDrop, Upstream, UpstreamEvent, UpstreamInfo,
    };
    use crate::error::BridgeError;
    use serde_json::Value;
    use tokio::sync::broadcast;

    /// One listen call the fake upstream took: its filter, its sinks, how it was cancelled.
    struct Taken {
        filter: Value,
        sinks: CallSinks,
        cancel: Arc<FakeCancel>,
    }

    #[derive(Default)]
    struct FakeCancel(Mutex<Option<String>>);

    impl Cancel for FakeCancel {
        fn pending(&self) -> bool {
            lock(&self.0).is_none()
        }
        fn cancel(&self, reason: &str) -> bool {
            lock(&self.0).get_or_insert_with(|| reason.to_owned());
            true
        }
    }

    /// An upstream of one era whose listen calls the test answers by hand.
    struct FakeUp {
        era: Era,
        taken: Mutex<Vec<Taken>>,
        opened: tokio::sync::Notify,
        responses: Mutex<Vec<String>>,
        events: broadcast::Sender<UpstreamEvent>,
    }

    fn fake(era: Era) -> Arc<FakeUp> {
        Arc::new(FakeUp {
            era,
            taken: Mutex::new(Vec::new()),
            opened: tokio::sync::Notify::new(),
            responses: Mutex::new(Vec::new()),
            events: broadcast::channel(4).0,
        })
    }

    impl Upstream for FakeUp {
        fn name(&self) -> &str {
            "fake"
        }
        fn is_ready(&self) -> bool {
            true
        }
        fn info(&self, _: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
            let caps = r#"{"capabilities":{"tools":{"listChanged":true},"prompts":{}}}"#;
            let raw: Arc<serde_json::value::RawValue> = Arc::from(jsonrpc::raw(caps));
            let info = UpstreamInfo {
                era: self.era,
                discover: Some(raw),
                initialize: None,
            };
            Box::pin(async move { Ok(info) })
        }
        fn call(&self, call: Call, _: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
            assert_eq!(call.method, "subscriptions/listen");
            let params: Value = call
                .params
                .as_deref()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or(Value::Null);
            let (s, events, outcome, answered) = sinks();
            let cancel = Arc::new(FakeCancel::default());
            let metrics = Arc::new(crate::metrics::Metrics::new());
            let detached = crate::call::Detached::none(metrics.clone());
            let control = CancelOnDrop::new(cancel.clone(), 1, answered, metrics, &detached);
            lock(&self.taken).push(Taken {
                filter: params["notifications"].clone(),
                sinks: s,
                cancel,
            });
            self.opened.notify_one();
            Box::pin(async move { Ok(CallHandle::new(events, outcome, Box::new(control))) })
        }
        fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
            self.events.subscribe()
        }
        fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
            lock(&self.responses).push(String::from_utf8_lossy(&frame).into_owned());
            Ok(())
        }
        fn send_notification(&self, _: Bytes) -> Result<(), BridgeError> {
            Ok(())
        }
        fn tool_headers(&self, _: &str) -> Vec<(String, String)> {
            Vec::new()
        }
        fn ensure_log_level(&self, _: &'static str) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn stop(&self) {}
    }

    fn ctx() -> MakeCtx {
        Box::new(|| CallCtx {
            client_era: Era::Legacy,
            ..CallCtx::modern()
        })
    }

    const BOUND: Duration = Duration::from_secs(5);

    /// Drive `held` in a task that forwards what it yields.
    fn drive(mut held: HeldListen) -> tokio::sync::mpsc::Receiver<String> {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                let b = held.next().await;
                if tx
                    .send(String::from_utf8_lossy(&b).into_owned())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        rx
    }

    async fn nth_open(up: &FakeUp, n: usize) {
        let ok = tokio::time::timeout(BOUND, async {
            while lock(&up.taken).len() < n {
                up.opened.notified().await;
            }
        })
        .await;
        assert!(ok.is_ok(), "listen #{n} was not opened");
    }

    fn notify(t: &Taken, method: &str, params: Value) {
        let ev = CallEvent::Notification {
            method: method.into(),
            params: Some(jsonrpc::raw(&params.to_string())),
        };
        assert!(t.sinks.events.try_send(ev).is_ok());
    }

    fn ack(t: &Taken) {
        notify(
            t,
            "notifications/subscriptions/acknowledged",
            serde_json::json!({}),
        );
    }

    #[tokio::test]
    async fn relays_untagged_and_reopens_with_a_changed_set_before_answering() {
        let up = fake(Era::Modern);
        let subs = Subscriptions::new();
        let mut out = drive(HeldListen::new(up.clone(), subs.clone(), ctx()));
        nth_open(&up, 1).await;
        {
            let t = &lock(&up.taken)[0];
            // The filter: the list changes the upstream offers (tools, not prompts), no URIs.
            assert_eq!(t.filter, serde_json::json!({ "toolsListChanged": true }));
            ack(t);
            let meta = serde_json::json!({ protocol::META_SUBSCRIPTION_ID: "s1", "k": 1 });
            notify(
                t,
                "notifications/tools/list_changed",
                serde_json::json!({ "_meta": meta }),
            );
        }
        let got = tokio::time::timeout(BOUND, out.recv()).await.ok().flatten();
        let got: Value = serde_json::from_str(got.as_deref().unwrap_or("null")).unwrap_or_default();
        assert_eq!(got["method"], "notifications/tools/list_changed");
        assert_eq!(
            got["params"]["_meta"],
            serde_json::json!({ "k": 1 }),
            "{got}"
        );

        // A subscription re-opens the listen with it; `set` returns once that one is acked.
        let set = {
            let subs = subs.clone();
            tokio::spawn(async move { subs.set("file:///a", true, BOUND).await.is_ok() })
        };
        nth_open(&up, 2).await;
        tokio::task::yield_now().await;
        assert!(
            !set.is_finished(),
            "answered before the new listen was acknowledged"
        );
        {
            let g = lock(&up.taken);
            assert_eq!(
                g[1].filter["resourceSubscriptions"],
                serde_json::json!(["file:///a"])
            );
            assert_eq!(lock(&g[0].cancel.0).as_deref(), Some(RELEASED_BY_BRIDGE));
            ack(&g[1]);
        }
        assert!(tokio::time::timeout(BOUND, set)
            .await
            .is_ok_and(|r| r.is_ok_and(|ok| ok)));
        // Unchanged: no new listen, no wait.
        assert!(subs.set("file:///a", true, BOUND).await.is_ok());
        assert_eq!(lock(&up.taken).len(), 2);
    }

    #[tokio::test]
    async fn an_ended_listen_is_reopened_and_requests_on_it_are_refused() {
        let up = fake(Era::Modern);
        let _out = drive(HeldListen::new(up.clone(), Subscriptions::new(), ctx()));
        nth_open(&up, 1).await;
        let first = lock(&up.taken).remove(0);
        let req = CallEvent::ServerRequest {
            id: jsonrpc::raw("7"),
            method: "sampling/createMessage".into(),
            params: None,
        };
        assert!(first.sinks.events.try_send(req).is_ok());
        let _ = first
            .sinks
            .outcome
            .send(Outcome::Result(jsonrpc::raw("{}")));
        nth_open(&up, 1).await; // after the first backoff
        let r = lock(&up.responses).clone();
        assert_eq!(r.len(), 1, "{r:?}");
        let r: Value = serde_json::from_str(&r[0]).unwrap_or_default();
        assert_eq!(r["id"], 7);
        assert_eq!(r["error"]["code"], code::METHOD_NOT_FOUND);
    }

    // Paused clock: "not re-opened within three retry delays" takes no real time.
    #[tokio::test(start_paused = true)]
    async fn an_upstream_without_listen_or_of_2025_gets_none_and_nobody_waits() {
        let up = fake(Era::Modern);
        let subs = Subscriptions::new();
        let _out = drive(HeldListen::new(up.clone(), subs.clone(), ctx()));
        nth_open(&up, 1).await;
        let e = jsonrpc::error_object(code::METHOD_NOT_FOUND, "no", None);
        let first = lock(&up.taken).remove(0);
        let _ = first.sinks.outcome.send(Outcome::Error(jsonrpc::raw(&e)));
        // Not re-opened, and a subscription is answered at once (a bound of an hour).
        tokio::time::timeout(BOUND, subs.first_acknowledged(Duration::from_secs(3600)))
            .await
            .expect("waited for an acknowledgement that cannot come");
        assert!(
            tokio::time::timeout(BOUND, subs.set("x:y", true, Duration::from_secs(3600)))
                .await
                .is_ok()
        );
        tokio::time::sleep(FIRST * 3).await;
        assert!(lock(&up.taken).is_empty());

        let legacy = fake(Era::Legacy);
        let _out = drive(HeldListen::new(legacy.clone(), Subscriptions::new(), ctx()));
        tokio::time::sleep(FIRST).await;
        assert!(
            lock(&legacy.taken).is_empty(),
            "a 2025 upstream was sent a listen"
        );
    }

    #[tokio::test]
    async fn a_listen_that_ends_before_its_acknowledgement_keeps_nobody_waiting() {
        let up = fake(Era::Modern);
        let subs = Subscriptions::new();
        let _out = drive(HeldListen::new(up.clone(), subs.clone(), ctx()));
        nth_open(&up, 1).await;
        let waiting = {
            let subs = subs.clone();
            tokio::spawn(async move { subs.first_acknowledged(Duration::from_secs(3600)).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "settled before the listen ended");
        let first = lock(&up.taken).remove(0);
        let _ = first
            .sinks
            .outcome
            .send(Outcome::Result(jsonrpc::raw("{}")));
        assert!(
            tokio::time::timeout(BOUND, waiting).await.is_ok(),
            "waited for an acknowledgement of a listen that ended"
        );
        // A subscription made while it re-opens, ended again at once: answered too.
        let set = {
            let subs = subs.clone();
            tokio::spawn(async move { subs.set("x:y", true, Duration::from_secs(3600)).await })
        };
        nth_open(&up, 1).await; // after the backoff, or at once for the new set
        let again = lock(&up.taken).remove(0);
        let _ = again
            .sinks
            .outcome
            .send(Outcome::Result(jsonrpc::raw("{}")));
        assert!(tokio::time::timeout(BOUND, set)
            .await
            .is_ok_and(|r| r.is_ok_and(|r| r.is_ok())));
        // And it is re-opened in the background.
        nth_open(&up, 1).await;
    }

    #[tokio::test]
    async fn a_set_is_bounded() {
        let subs = Subscriptions::new();
        for i in 0..MAX_URIS {
            assert!(subs.set(&format!("u:{i}"), true, BOUND).await.is_ok());
        }
        assert!(subs.set("u:one-more", true, BOUND).await.is_err());
        assert!(
            subs.set("u:0", true, BOUND).await.is_ok(),
            "a repeat is no new entry"
        );
        assert!(subs.set("u:0", false, BOUND).await.is_ok());
        assert!(subs.set("u:one-more", true, BOUND).await.is_ok());
    }
}
