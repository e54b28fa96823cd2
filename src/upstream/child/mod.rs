//! A stdio child process as an upstream: spawn it in its own process group, probe its era,
//! carry calls to it under bridge-minted ids and progress tokens, route what it writes back,
//! restart it with backoff when it dies, and stop it with the close-stdin → SIGTERM → SIGKILL
//! ladder.
//!
//! This file is the handle (`ChildUpstream`, its `Upstream` impl, waiting for readiness);
//! each job has a file of its own, and among them the arrows point one way:
//! `process` (spawn, supervise, restart, stop ladder, stdio tasks) → `route` (what the child
//! writes: responses, notifications, its requests, log routing) → `probe` (era probe, tool
//! list and its refresh) → `mux` (one process's pending map, minted ids, cancellation). The
//! first three extend `ChildUpstream`; `mux` knows nothing of it.
//!
//! Tasks per process: one stdin writer (bounded queue), one stdout reader, one stderr drain,
//! all owned by the supervisor task that also waits for the exit.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::call::{Call, CallCtx, CallHandle, Upstream, UpstreamEvent, UpstreamInfo};
use crate::error::BridgeError;
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::protocol::{self, Era};

mod mux;
mod probe;
mod process;
mod route;

use mux::Proc;

/// How to start and treat one child.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// Server name for logs and metrics.
    pub name: String,
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Extra environment (`-e KEY=VALUE`).
    pub env: Vec<(String, String)>,
    /// Pass the bridge's whole environment instead of the safe baseline.
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    /// Longest stdout line accepted; longer ones are skipped and counted.
    pub max_line: usize,
    /// How long to wait for the `server/discover` probe and for `initialize`.
    pub probe_timeout: Duration,
    /// How long a call that may be asked waits for a 2025 child busy with another such
    /// caller (`--attribution-wait`).
    pub attribution_wait: Duration,
    /// close stdin → wait this long → SIGTERM the group.
    pub stdin_grace: Duration,
    /// SIGTERM → wait this long → SIGKILL the group.
    pub term_grace: Duration,
    /// Restart backoff ceiling.
    pub max_backoff: Duration,
    /// How many children run it (one unless a pool is configured: `upstream::pool`).
    pub pool: super::pool::PoolSize,
}

/// Where the supervised child is in its life.
#[derive(Clone)]
enum State {
    Starting,
    Ready(Arc<Proc>),
    Stopped,
}

/// Whom a supervised child serves.
#[derive(Debug, Clone)]
pub enum Role {
    /// Every caller of its server (the one child of a pool of one).
    Shared,
    /// One 2025 session (`--isolation session`): the addressee of requests no call claims.
    Session(Arc<str>),
    /// One child of a pool (`upstream::pool`), which reports `upstream_up` for them all.
    PoolMember,
}

/// What every task of one supervised child shares, across restarts.
struct Inner {
    cfg: ChildConfig,
    owner_session: Option<Arc<str>>,
    /// Does this child's readiness set `upstream_up` (only a child its server has alone)?
    reports_up: bool,
    state: watch::Sender<State>,
    events: broadcast::Sender<UpstreamEvent>,
    /// The next call id: never reused, also across restarts.
    next_id: AtomicU64,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
    /// Where the child's own tasks run (its supervisor, tool-list refreshes, log-level
    /// calls): the owner waits for it at shutdown, so none outlives the child.
    tracker: tokio_util::task::TaskTracker,
    /// Where the calls of every process of this child that a 2025 caller hung up on wait for
    /// their answer or deadline (one reaper on `tracker`, until `shutdown`).
    detached: crate::call::Detached,
    /// The tasks it runs for callers (`crate::core::tasks`; a pool member's are the pool's).
    tasks: Arc<crate::core::tasks::TaskBook>,
}

/// Handle to a supervised child. Cheap to clone.
#[derive(Clone)]
pub struct ChildUpstream {
    inner: Arc<Inner>,
}

impl ChildUpstream {
    /// Start supervising a child. It is spawned at once; calls wait until it is ready.
    pub fn spawn(
        cfg: ChildConfig,
        role: Role,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (state, _) = watch::channel(State::Starting);
        let (events, _) = broadcast::channel(256);
        metrics.register_server(&cfg.name);
        let (owner_session, reports_up) = match role {
            Role::Shared => (None, true),
            Role::Session(s) => (Some(s), false),
            Role::PoolMember => (None, false),
        };
        let inner = Arc::new(Inner {
            cfg,
            owner_session,
            reports_up,
            state,
            events,
            next_id: AtomicU64::new(1),
            detached: crate::call::Detached::start(tracker, shutdown.clone(), metrics.clone()),
            shutdown,
            metrics,
            tracker: tracker.clone(),
            tasks: Default::default(),
        });
        let this = Self { inner };
        let sup = this.clone();
        tracker.spawn(async move { sup.supervise().await });
        this
    }

    pub fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    pub fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.inner.events.subscribe()
    }

    /// Stop this child (used for per-session children).
    pub fn stop(&self) {
        self.inner.shutdown.cancel();
    }

    /// Wait until the child is ready (or stopped), up to `wait`.
    async fn ready(&self, wait: Duration) -> Result<Arc<Proc>, BridgeError> {
        // Fast path (every call while the child runs): no subscription, no timer.
        if let State::Ready(p) = &*self.inner.state.borrow() {
            return Ok(p.clone());
        }
        let mut rx = self.inner.state.subscribe();
        let fut = async {
            loop {
                match &*rx.borrow_and_update() {
                    State::Ready(p) => return Ok(p.clone()),
                    State::Stopped => return Err(BridgeError::ShuttingDown),
                    State::Starting => {}
                }
                if rx.changed().await.is_err() {
                    return Err(BridgeError::ShuttingDown);
                }
            }
        };
        match tokio::time::timeout(wait, fut).await {
            Ok(r) => r,
            Err(_) => Err(BridgeError::Unavailable(
                "the child process is not ready (starting or restarting)".into(),
            )),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(&*self.inner.state.borrow(), State::Ready(_))
    }

    /// Is it stopped for good (its shutdown token was cancelled and the supervisor ended)?
    pub fn is_stopped(&self) -> bool {
        matches!(&*self.inner.state.borrow(), State::Stopped)
    }

    /// Calls in flight in the running process (0 while it is not ready): a pool's load.
    pub fn load(&self) -> usize {
        match &*self.inner.state.borrow() {
            State::Ready(p) => mux::lock(&p.pending).len(),
            _ => 0,
        }
    }

    /// Start `call` on the running process without waiting: `Unavailable` while it is not
    /// ready, `AttributionBusy` while another caller's call that may be asked runs (a pool
    /// then tries another child).
    pub fn try_call(&self, call: &Call) -> Result<CallHandle, BridgeError> {
        let proc = match &*self.inner.state.borrow() {
            State::Ready(p) => p.clone(),
            _ => {
                return Err(BridgeError::Unavailable(
                    "the child process is not ready".into(),
                ))
            }
        };
        let era = proc.info().map(|i| i.era).unwrap_or(Era::Legacy);
        self.start_on(&proc, era, call, false)
    }

    /// Notified when a call that may be asked ends or is parked in the running process.
    pub fn slot_freed(&self) -> Option<Arc<tokio::sync::Notify>> {
        match &*self.inner.state.borrow() {
            State::Ready(p) => Some(p.slot_freed.clone()),
            _ => None,
        }
    }

    /// Set `upstream_up` when this child is the one its server reports by.
    fn set_up(&self, up: bool) {
        if self.inner.reports_up {
            self.inner.metrics.set_up(&self.inner.cfg.name, up);
        }
    }

    /// What the probe learned, once ready.
    pub async fn info(&self, wait: Duration) -> Result<UpstreamInfo, BridgeError> {
        let p = self.ready(wait).await?;
        p.info()
            .ok_or_else(|| BridgeError::Unavailable("child not probed yet".into()))
    }

    /// Header annotations of a tool, from the child's last `tools/list`.
    pub fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        match &*self.inner.state.borrow() {
            State::Ready(p) => p
                .tool_headers
                .read()
                .ok()
                .and_then(|m| m.get(tool).cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Make a 2025 child log at least at `level` (it logs per process; the bridge filters per
    /// call). Only ever lowers the level.
    pub fn ensure_log_level(&self, level: &'static str) {
        let Some((level, _)) = protocol::log_level(level) else {
            return;
        };
        let State::Ready(proc) = &*self.inner.state.borrow() else {
            return;
        };
        if !proc.log_floor.lower(level) {
            return;
        }
        let params = serde_json::json!({ "level": level }).to_string();
        let call = Call {
            method: "logging/setLevel".into(),
            params: Some(jsonrpc::raw(&params)),
            ctx: CallCtx::modern(),
        };
        if let Ok(mut h) = self.start_on(proc, Era::Legacy, &call, true) {
            self.inner.tracker.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), &mut h.outcome).await;
            });
        }
    }

    /// Send a call to the child. Waits up to `wait` for a (re)starting child, and up to
    /// `attribution_wait` while a 2025 child runs another caller's call that may be asked
    /// (see `mux`), counted in `calls_queued` meanwhile.
    pub async fn call(&self, call: Call, wait: Duration) -> Result<CallHandle, BridgeError> {
        let proc = self.ready(wait).await?;
        let era = proc.info().map(|i| i.era).unwrap_or(Era::Legacy);
        let bound = self.inner.cfg.attribution_wait;
        let deadline = tokio::time::Instant::now() + bound;
        let mut queued = None;
        loop {
            // Registered before trying, so that a slot freed in between is not missed.
            let freed = proc.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.start_on(&proc, era, &call, false) {
                Err(BridgeError::AttributionBusy(_)) => {}
                started => return started,
            }
            queued.get_or_insert_with(|| {
                crate::metrics::GaugeGuard::new(
                    self.inner.metrics.calls_queued(&self.inner.cfg.name),
                )
            });
            tokio::select! {
                _ = &mut freed => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(BridgeError::AttributionBusy(bound.as_millis() as u64));
                }
            }
        }
    }

    /// Forward a 2025 client's response to a request the child made (the child's own id).
    pub fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        match &*self.inner.state.borrow() {
            State::Ready(p) => p.stdin.try_send(frame).map_err(|e| mux::stdin_error(&e)),
            _ => Err(BridgeError::Unavailable("child restarting".into())),
        }
    }

    /// Forward a client notification as-is (e.g. `notifications/roots/list_changed`).
    pub fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        self.send_response(frame)
    }

    /// Start `call` on `proc` (a `child_era` child) under a newly minted id.
    fn start_on(
        &self,
        proc: &Arc<Proc>,
        child_era: Era,
        call: &Call,
        internal: bool,
    ) -> Result<CallHandle, BridgeError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        proc.start(id, child_era, call, internal, &self.inner.metrics)
    }
}

impl Upstream for ChildUpstream {
    fn name(&self) -> &str {
        ChildUpstream::name(self)
    }
    fn is_ready(&self) -> bool {
        ChildUpstream::is_ready(self)
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(ChildUpstream::info(self, wait))
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        Box::pin(ChildUpstream::call(self, call, wait))
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        ChildUpstream::subscribe(self)
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        ChildUpstream::send_response(self, frame)
    }
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        ChildUpstream::send_notification(self, frame)
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        ChildUpstream::tool_headers(self, tool)
    }
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()> {
        // Written to the child's stdin before any later call: nothing to wait for.
        ChildUpstream::ensure_log_level(self, level);
        Box::pin(async {})
    }
    fn stop(&self) {
        ChildUpstream::stop(self)
    }
    fn task_book(&self) -> Option<Arc<crate::core::tasks::TaskBook>> {
        Some(self.inner.tasks.clone())
    }
}
