//! A pool of stdio children for one server (`pool = { min, max, idle }`, `--pool-min/-max/-idle`):
//! children start on demand up to `max` and stop when idle above `min`, each supervised as a
//! lone child is (`upstream::child`: restart with backoff, stop ladder, process group).
//!
//! Placement, in one place for both eras:
//! - a call goes to the least-loaded ready child that will take it (equals take turns, so that
//!   calls one after another are spread too): a 2025 child refuses a call
//!   whose caller may be asked while another caller's such call runs (`AttributionBusy`, see
//!   `child::mux`), so such a call lands on a child with no other — starting one while the pool
//!   has room, else waiting (bounded by `attribution_wait`, counted in `calls_queued`);
//! - a 2025 session is pinned to one child for its life ([`ChildPool::pin`]: the child with the
//!   fewest sessions, a new one while there is room), so its calls, its answers to the child's
//!   requests and its GET stream all meet the same process;
//! - answers to what a child asks during a call go back to that child: the pool marks each
//!   handle with its child ([`CallHandle::answered_via`]), since child ids collide across
//!   children.
//!
//! One task per pool ticks twice a second: it stops idle children above `min` and sets the
//! pool's gauges and `upstream_up` (ready while at least `min` children are; `/readyz` asks
//! the children themselves, so only the gauge can lag, by a tick). Choosing and
//! stopping happen under one lock, so no call is placed on a child being stopped.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::broadcast;
use tokio::sync::futures::OwnedNotified;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::child::{ChildConfig, ChildUpstream, Role};
use crate::call::{Call, CallHandle, SharedUpstream, Upstream, UpstreamEvent, UpstreamInfo};
use crate::error::BridgeError;
use crate::metrics::{GaugeGuard, Metrics};

/// The most children one server's pool may run.
pub const MAX_POOL: usize = 64;

/// How often the pool task looks for idle children and refreshes the gauges.
const TICK: Duration = Duration::from_millis(500);

/// How many children a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// Kept running (and needed for `/readyz`).
    pub min: usize,
    /// Most at once.
    pub max: usize,
    /// Idle time after which a child above `min` is stopped.
    pub idle: Duration,
}

impl Default for PoolSize {
    fn default() -> Self {
        Self {
            min: 1,
            max: 1,
            idle: Duration::from_secs(60),
        }
    }
}

impl PoolSize {
    /// `1 <= min <= max <= MAX_POOL`.
    pub fn check(&self) -> Result<(), String> {
        if self.min == 0 {
            return Err("a pool keeps at least one child (min >= 1)".into());
        }
        if self.max < self.min {
            return Err(format!(
                "a pool's max ({}) is below its min ({})",
                self.max, self.min
            ));
        }
        if self.max > MAX_POOL {
            return Err(format!("a pool runs at most {MAX_POOL} children"));
        }
        Ok(())
    }

    /// More than one child: a pool rather than the lone child.
    pub fn is_pool(&self) -> bool {
        self.max > 1
    }
}

/// One child of the pool.
struct Member {
    up: Arc<ChildUpstream>,
    /// Stops this child alone.
    stop: CancellationToken,
    /// 2025 sessions pinned to it.
    pins: AtomicUsize,
    /// When it last had a call or a session (set by the pool task and on placement).
    last_busy: Mutex<Instant>,
}

impl Member {
    fn touch(&self) {
        if let Ok(mut t) = self.last_busy.lock() {
            *t = Instant::now();
        }
    }
    fn idle_for(&self) -> Duration {
        self.last_busy
            .lock()
            .map_or(Duration::ZERO, |t| t.elapsed())
    }
    fn starting(&self) -> bool {
        !self.up.is_ready() && !self.up.is_stopped()
    }
}

/// The pool as an `Upstream`.
pub struct ChildPool {
    cfg: ChildConfig,
    size: PoolSize,
    members: Mutex<Vec<Arc<Member>>>,
    /// Turns among equally loaded children, so that calls one after another take turns.
    turn: AtomicUsize,
    /// The lowest log level a caller asked of the pool: set on each child before a call is
    /// placed there, so that a child started later logs as low as the others.
    log_floor: Mutex<Option<&'static str>>,
    /// What every child sends that belongs to no call, merged.
    events: broadcast::Sender<UpstreamEvent>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    tracker: TaskTracker,
    /// The tasks its children run (`crate::core::tasks`); a child running one is not idle.
    tasks: Arc<crate::core::tasks::TaskBook>,
}

/// What a call placement found.
enum Placed {
    Call(CallHandle),
    /// No child took it: wait for this one (starting) to be ready, then try again.
    WaitFor(Arc<Member>),
    /// Every child runs a call of another caller it may ask, and the pool is full: the
    /// wake-ups of those children's freed slots, each registered before its child was tried.
    Busy(Vec<Pin<Box<OwnedNotified>>>),
    Failed(BridgeError),
}

impl ChildPool {
    /// Start `size.min` children of `cfg` and the pool task; everything stops with `stop`.
    pub fn start(
        cfg: ChildConfig,
        size: PoolSize,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
        tracker: &TaskTracker,
    ) -> Arc<Self> {
        let (events, _) = broadcast::channel(256);
        let pool = Arc::new(Self {
            cfg,
            size,
            members: Mutex::new(Vec::new()),
            turn: AtomicUsize::new(0),
            log_floor: Mutex::new(None),
            events,
            metrics,
            stop,
            tracker: tracker.clone(),
            tasks: Default::default(),
        });
        {
            let mut g = pool.lock();
            for _ in 0..size.min {
                pool.add_member(&mut g);
            }
        }
        let weak = Arc::downgrade(&pool);
        let stop = pool.stop.clone();
        tracker.spawn(async move { tend(weak, stop).await });
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Member>>> {
        self.members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Start one more child (the caller checked there is room) and merge its events.
    fn add_member(&self, members: &mut Vec<Arc<Member>>) -> Arc<Member> {
        let stop = self.stop.child_token();
        let up = ChildUpstream::spawn(
            self.cfg.clone(),
            Role::PoolMember,
            self.metrics.clone(),
            stop.clone(),
            &self.tracker,
        );
        let mut rx = up.subscribe();
        let tx = self.events.clone();
        let until = stop.clone();
        self.tracker.spawn(async move {
            loop {
                let ev = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = until.cancelled() => return,
                };
                match ev {
                    Ok(ev) => {
                        let _ = tx.send(ev);
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let m = Arc::new(Member {
            up: Arc::new(up),
            stop,
            pins: AtomicUsize::new(0),
            last_busy: Mutex::new(Instant::now()),
        });
        members.push(m.clone());
        self.set_gauges(members);
        tracing::info!(server = %self.cfg.name, children = members.len(), "pool child added");
        m
    }

    /// Try the ready children, least loaded first; see [`Placed`].
    fn place(&self, call: &Call) -> Placed {
        let mut g = self.lock();
        let mut ready: Vec<&Arc<Member>> = g.iter().filter(|m| m.up.is_ready()).collect();
        if !ready.is_empty() {
            // Least loaded first; among equals, the next in turn (the sort is stable).
            let turn = self.turn.fetch_add(1, Ordering::Relaxed) % ready.len();
            ready.rotate_left(turn);
        }
        ready.sort_by_key(|m| m.up.load());
        // The pool grows when this call finds no idle child: a lone call on an idle child is no
        // reason to start another process (a child serves concurrent calls itself).
        let all_busy = !ready.is_empty() && ready.iter().all(|m| m.up.load() > 0);
        let mut busy = Vec::new();
        let mut failed = None;
        let floor = self.log_floor.lock().ok().and_then(|f| *f);
        for m in &ready {
            if let Some(level) = floor {
                // Written to the child's stdin before the call, if it lowers its level.
                m.up.ensure_log_level(level);
            }
            // Registered before the try: a slot freed between the try and the wait wakes it
            // (`notify_waiters` wakes every registered waiter).
            let freed = m.up.slot_freed().map(|n| {
                let mut w = Box::pin(n.notified_owned());
                w.as_mut().enable();
                w
            });
            match m.up.try_call(call) {
                Ok(h) => {
                    m.touch();
                    let via: SharedUpstream = m.up.clone();
                    if all_busy && !g.iter().any(|m| m.starting()) && g.len() < self.size.max {
                        self.add_member(&mut g);
                    }
                    return Placed::Call(h.answered_via(via));
                }
                Err(BridgeError::AttributionBusy(_)) => busy.extend(freed),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if busy.is_empty() {
            if let Some(e) = failed {
                return Placed::Failed(e);
            }
        }
        // Nothing ready took it: a starting child, else a new one while there is room.
        if let Some(m) = g.iter().find(|m| m.starting()) {
            return Placed::WaitFor(m.clone());
        }
        if g.len() < self.size.max {
            return Placed::WaitFor(self.add_member(&mut g));
        }
        if busy.is_empty() {
            return Placed::Failed(BridgeError::Unavailable(
                "no child of the pool is running".into(),
            ));
        }
        Placed::Busy(busy)
    }

    async fn call(&self, call: Call, wait: Duration) -> Result<CallHandle, BridgeError> {
        let bound = self.cfg.attribution_wait;
        let deadline = Instant::now() + bound;
        let mut queued = None;
        loop {
            match self.place(&call) {
                Placed::Call(h) => return Ok(h),
                Placed::Failed(e) => return Err(e),
                Placed::WaitFor(m) => {
                    m.up.info(wait).await?;
                }
                Placed::Busy(freed) => {
                    queued.get_or_insert_with(|| {
                        GaugeGuard::new(self.metrics.calls_queued(&self.cfg.name))
                    });
                    // A child that ends fails its calls, which frees their slots: that
                    // wakes this too; a child that starts meanwhile is found by the next
                    // placement, which waits for it (`WaitFor`).
                    let any = futures_util::future::select_all(freed);
                    tokio::select! {
                        _ = any => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            return Err(BridgeError::AttributionBusy(bound.as_millis() as u64));
                        }
                    }
                }
            }
        }
    }

    /// Pin a 2025 session to one child for its life: the child with the fewest sessions (then
    /// the least loaded), or a new one while a session would otherwise share and there is room.
    pub fn pin(&self) -> SharedUpstream {
        let mut g = self.lock();
        let best = g
            .iter()
            .filter(|m| !m.up.is_stopped())
            .min_by_key(|m| (m.pins.load(Ordering::Relaxed), m.up.load()))
            .cloned();
        let m = match best {
            Some(m) if m.pins.load(Ordering::Relaxed) == 0 => m,
            _ if g.len() < self.size.max => self.add_member(&mut g),
            Some(m) => m,
            None => self.add_member(&mut g),
        };
        m.pins.fetch_add(1, Ordering::Relaxed);
        m.touch();
        Arc::new(Pinned {
            member: m,
            released: std::sync::atomic::AtomicBool::new(false),
            tasks: self.tasks.clone(),
        })
    }

    /// One tick of the pool task: stop an idle child above `min`, refresh the gauges.
    fn tend_once(&self) {
        let mut g = self.lock();
        g.retain(|m| !m.up.is_stopped());
        for m in g.iter() {
            let on: SharedUpstream = m.up.clone();
            if m.up.load() > 0 || m.pins.load(Ordering::Relaxed) > 0 || self.tasks.runs_on(&on) {
                m.touch();
            }
        }
        if g.len() > self.size.min {
            let idle = g.iter().rposition(|m| {
                m.up.is_ready()
                    && m.up.load() == 0
                    && m.pins.load(Ordering::Relaxed) == 0
                    && m.idle_for() >= self.size.idle
            });
            if let Some(i) = idle {
                let m = g.remove(i);
                m.stop.cancel();
                tracing::info!(server = %self.cfg.name, children = g.len(), "idle pool child stopped");
            }
        }
        self.set_gauges(&g);
    }

    /// The pool's size, busy children and `upstream_up` (ready while `min` children are).
    fn set_gauges(&self, members: &[Arc<Member>]) {
        let ready = members.iter().filter(|m| m.up.is_ready()).count();
        let busy = members.iter().filter(|m| m.up.load() > 0).count();
        self.metrics.set_pool(&self.cfg.name, members.len(), busy);
        self.metrics.set_up(&self.cfg.name, ready >= self.size.min);
    }

    fn ready_members(&self) -> Vec<Arc<Member>> {
        self.lock()
            .iter()
            .filter(|m| m.up.is_ready())
            .cloned()
            .collect()
    }

    /// A ready child, else the first (starting) one.
    fn any_member(&self) -> Option<Arc<Member>> {
        let g = self.lock();
        g.iter()
            .find(|m| m.up.is_ready())
            .or_else(|| g.first())
            .cloned()
    }
}

/// The pool task: ticks until the pool is gone or stopped.
async fn tend(pool: Weak<ChildPool>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.cancelled() => return,
        }
        match pool.upgrade() {
            Some(p) => p.tend_once(),
            None => return,
        }
    }
}

impl Upstream for ChildPool {
    fn name(&self) -> &str {
        &self.cfg.name
    }
    fn is_ready(&self) -> bool {
        self.lock().iter().filter(|m| m.up.is_ready()).count() >= self.size.min
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(async move {
            match self.any_member() {
                Some(m) => m.up.info(wait).await,
                None => Err(BridgeError::ShuttingDown),
            }
        })
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        Box::pin(ChildPool::call(self, call, wait))
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.events.subscribe()
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        // Answers normally go through the call's child (`CallHandle::replies_to`) or a
        // session's pinned child; with one child running there is no doubt either.
        match self.ready_members().as_slice() {
            [only] => only.up.send_response(frame),
            _ => Err(BridgeError::Unavailable(
                "an answer that names no call cannot be placed among several children".into(),
            )),
        }
    }
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        let mut last = Ok(());
        for m in self.ready_members() {
            if let Err(e) = m.up.send_notification(frame.clone()) {
                last = Err(e);
            }
        }
        last
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        self.any_member()
            .map(|m| m.up.tool_headers(tool))
            .unwrap_or_default()
    }
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()> {
        let Some((level, rank)) = crate::protocol::log_level(level) else {
            return Box::pin(async {});
        };
        if let Ok(mut f) = self.log_floor.lock() {
            let lower = f
                .and_then(crate::protocol::log_level)
                .is_none_or(|(_, now)| rank < now);
            if lower {
                *f = Some(level);
            }
        }
        for m in self.ready_members() {
            m.up.ensure_log_level(level);
        }
        Box::pin(async {})
    }
    fn stop(&self) {
        self.stop.cancel();
    }
    fn task_book(&self) -> Option<Arc<crate::core::tasks::TaskBook>> {
        Some(self.tasks.clone())
    }
}

/// A 2025 session's hold on one child of a pool: everything goes to that child; dropping it
/// (or `stop`, when the session ends) lets go of the pin, and the child stays.
struct Pinned {
    member: Arc<Member>,
    released: std::sync::atomic::AtomicBool,
    tasks: Arc<crate::core::tasks::TaskBook>,
}

impl Pinned {
    fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.member.pins.fetch_sub(1, Ordering::AcqRel);
            self.member.touch();
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.release();
    }
}

impl Upstream for Pinned {
    fn name(&self) -> &str {
        self.member.up.name()
    }
    fn is_ready(&self) -> bool {
        self.member.up.is_ready()
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(self.member.up.info(wait))
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        // Marked with the child itself, so that what outlives the pin (a task) names it.
        let via: SharedUpstream = self.member.up.clone();
        Box::pin(async move { Ok(self.member.up.call(call, wait).await?.answered_via(via)) })
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.member.up.subscribe()
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        self.member.up.send_response(frame)
    }
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        self.member.up.send_notification(frame)
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        self.member.up.tool_headers(tool)
    }
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()> {
        self.member.up.ensure_log_level(level);
        Box::pin(async {})
    }
    fn stop(&self) {
        self.release();
    }
    fn task_book(&self) -> Option<Arc<crate::core::tasks::TaskBook>> {
        Some(self.tasks.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_checked() {
        let s = |min, max| PoolSize {
            min,
            max,
            idle: Duration::from_secs(1),
        };
        assert!(s(1, 1).check().is_ok());
        assert!(s(2, 4).check().is_ok());
        assert!(s(0, 1).check().is_err());
        assert!(s(3, 2).check().is_err());
        assert!(s(1, MAX_POOL + 1).check().is_err());
        assert!(!s(1, 1).is_pool());
        assert!(s(1, 2).is_pool());
    }
}
