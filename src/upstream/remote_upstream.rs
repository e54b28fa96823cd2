//! A remote Streamable HTTP server as an [`Upstream`]: the seam that lets the HTTP face sit in
//! front of a remote (`serve --upstream URL`, `url = "…"` in the config) exactly as it sits in
//! front of a child process.
//!
//! [`Remote`] owns the HTTP client side (era probe, sessions, SSE, resumption, faults); this
//! module only adapts its call shape (an async function that yields events and returns the
//! outcome) to the core's handle (events on a bounded queue, the outcome on a oneshot, cancel
//! on drop). Each call runs as a task; dropping its handle aborts the task, which drops the
//! remote exchange: a 2026 remote sees its POST stream closed, a 2025 remote gets
//! `notifications/cancelled` (the remote's own guard sends it). The remote's observer counts
//! its HTTP answers, transport failures, JSON-RPC errors and tool results; this adapter counts
//! cancellations and `upstream_up`.
//!
//! The upstream does not know who stands in front of it. What its 2025 peer sends outside any
//! call (the GET stream) goes to the [`Inbox`] it is built with, which the core decides
//! (`crate::core::inbox`: broadcast to many callers, or held for the one caller that owns the
//! session). When the peer's session is to be opened with a caller's own `initialize` (a
//! [`Hello`] is given), the era probe waits for that caller's first call; otherwise the
//! remote is probed at start-up, so that `/readyz` and the era are known before any call.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, OnceCell};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info};

use crate::call::{
    sinks, Call, CallEvent, CallHandle, CancelOnDrop, EventReceiver, Outcome, SharedUpstream,
    Upstream, UpstreamEvent, UpstreamInfo,
};
use crate::core::inbox::Inbox;
use crate::core::Hello;
use crate::error::BridgeError;
use crate::jsonrpc::{self, Envelope};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};
use crate::upstream::remote::{Remote, RemoteConfig};

/// The caller name under which the one host's GET-stream requests are published.
pub const HOST_SESSION: &str = "host";

/// How long one host's upstream waits for the host to make room in its queue before a
/// request of the remote is refused (and a notification lost).
pub const HOST_ROOM_WAIT: Duration = Duration::from_secs(10);

/// A remote server behind a face. Cheap to share (`Arc`).
pub struct RemoteUpstream {
    name: Arc<str>,
    remote: Arc<Remote>,
    inbox: Inbox,
    info: OnceCell<UpstreamInfo>,
    ready: AtomicBool,
    /// Bridge-side call numbers (the remote mints its own JSON-RPC ids per exchange).
    next_id: AtomicU64,
    metrics: Arc<Metrics>,
    tracker: TaskTracker,
    stop: CancellationToken,
    /// Where calls a 2025 caller hung up on wait for their answer or deadline (a reaper on
    /// `tracker`, until `stop`).
    detached: crate::call::Detached,
    /// The tasks it runs for callers of the bridge (`crate::core::tasks`).
    tasks: Arc<crate::core::tasks::TaskBook>,
}

impl RemoteUpstream {
    /// Build the client for `cfg` and start it on `tracker`; at `stop` the remote's 2025
    /// session is ended (DELETE). With a `hello`, the remote is probed on first use and a 2025
    /// remote's session is opened with the `initialize` the caller keeps there; without one,
    /// it is probed at once (retrying with backoff) with the bridge's own.
    pub fn start(
        name: &str,
        cfg: RemoteConfig,
        hello: Option<Arc<Hello>>,
        inbox: Inbox,
        metrics: &Arc<Metrics>,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<SharedUpstream, String> {
        let (etx, erx) = crate::call::event_queue(256);
        let url = cfg.url.to_string();
        let probe_now = hello.is_none();
        let remote = Remote::new(cfg, etx, metrics.clone(), name, hello.unwrap_or_default())?;
        metrics.register_server(name);
        let me = Arc::new(RemoteUpstream {
            name: Arc::from(name),
            remote,
            inbox: inbox.counted(metrics, name),
            info: OnceCell::new(),
            ready: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            metrics: metrics.clone(),
            tracker: tracker.clone(),
            stop: stop.clone(),
            detached: crate::call::Detached::start(tracker, stop.clone(), metrics.clone()),
            tasks: Default::default(),
        });
        info!(server = %name, %url, "remote upstream");
        tracker.spawn(me.clone().pump(erx));
        let m = me.clone();
        tracker.spawn(async move {
            if probe_now {
                tokio::select! {
                    _ = m.stop.cancelled() => {}
                    _ = m.probe_until_known() => {}
                }
            }
            m.stop.cancelled().await;
            m.set_ready(false);
            m.remote.shutdown().await;
        });
        Ok(me)
    }

    fn set_ready(&self, up: bool) {
        self.ready.store(up, Ordering::Relaxed);
        self.metrics.set_up(&self.name, up);
    }

    /// Probe at start-up (so `/readyz` and the era are known before the first call), retrying
    /// with backoff while the remote cannot be reached.
    async fn probe_until_known(&self) {
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.probe().await {
                Ok(i) => {
                    info!(server = %self.name, era = i.era.label(), "remote ready");
                    return;
                }
                Err(e) => debug!(server = %self.name, "remote probe failed: {e}"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    async fn probe(&self) -> Result<UpstreamInfo, BridgeError> {
        let info = self
            .info
            .get_or_try_init(|| async {
                match self.remote.probe_info().await {
                    Ok((era, raw)) => Ok(UpstreamInfo {
                        era,
                        discover: (era == Era::Modern).then(|| raw.clone()),
                        initialize: (era == Era::Legacy).then_some(raw),
                    }),
                    Err(o) if self.discover_refused(&o) => Ok(UpstreamInfo {
                        era: Era::Modern,
                        discover: None,
                        initialize: None,
                    }),
                    Err(Outcome::Failed(e)) => Err(e),
                    Err(_) => Err(BridgeError::Unavailable(
                        "the remote answered the era probe with an error".into(),
                    )),
                }
            })
            .await?;
        self.set_ready(true);
        Ok(info.clone())
    }

    /// Calls do not need `server/discover`: a 2026 remote (pinned with `--protocol`) that
    /// answers it with an error or an HTTP status still takes them; a 2025 caller's
    /// `initialize` is then built from nothing.
    fn discover_refused(&self, o: &Outcome) -> bool {
        let answered = match o {
            Outcome::Error(_) => true,
            Outcome::Failed(BridgeError::Remote { reason, .. }) => *reason == "http_status",
            _ => false,
        };
        answered && self.remote.known_era() == Some(Era::Modern)
    }

    async fn pump(self: Arc<Self>, mut rx: EventReceiver) {
        // Ends at stop: the sender lives in the remote, which this task itself keeps alive.
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = self.stop.cancelled() => None,
            };
            let Some(ev) = ev else { break };
            match ev {
                CallEvent::Notification { method, params } => {
                    if method == "notifications/tools/list_changed" {
                        self.tracker.spawn(self.clone().reread_tools());
                    }
                    let frame =
                        jsonrpc::notification(&method, params.as_deref().map(RawValue::get));
                    self.inbox.notification(frame).await;
                }
                CallEvent::ServerRequest { id, method, params } => {
                    let frame =
                        jsonrpc::request(id.get(), &method, params.as_deref().map(RawValue::get));
                    // Never lost: a request the inbox cannot deliver is answered to the remote.
                    let Err(reply) = self.inbox.request(&method, frame).await else {
                        continue;
                    };
                    let remote = self.remote.clone();
                    self.tracker.spawn(async move {
                        match reply {
                            Ok(r) => remote.respond(&id, Some(&r), None).await,
                            Err(e) => remote.respond(&id, None, Some(&e)).await,
                        }
                    });
                }
            }
        }
    }

    /// Re-read the tool list so metric labels and `Mcp-Param-*` rules follow it.
    async fn reread_tools(self: Arc<Self>) {
        let mut params = String::from("{}");
        if let Some(Era::Modern) = self.info.get().map(|i| i.era) {
            params = serde_json::json!({"_meta": {
                protocol::META_PROTOCOL_VERSION: protocol::MODERN,
                protocol::META_CLIENT_CAPABILITIES: {},
            }})
            .to_string();
        }
        let call = Call {
            method: "tools/list".into(),
            params: Some(jsonrpc::raw(&params)),
            ctx: crate::call::CallCtx::modern(),
        };
        let (tx, _rx) = crate::call::event_queue(1);
        let fut = self.remote.call(call, tx);
        // The remote's observer learns the tool labels from the answer.
        let _ = tokio::time::timeout(Duration::from_secs(10), fut).await;
    }

    fn start_call(&self, call: Call) -> CallHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (s, events, outcome, signal) = sinks();
        // The remote counts its own JSON-RPC errors, tool results and HTTP answers (its
        // observer); this task only carries the outcome to the handle.
        let remote = self.remote.clone();
        let answered = Arc::new(AtomicBool::new(false));
        let done = answered.clone();
        let task = self.tracker.spawn(async move {
            let o = remote.call(call, s.events).await;
            // Before the outcome is handed over: a handle dropped right after reading it
            // must not count a cancellation.
            done.store(true, Ordering::Release);
            let _ = s.outcome.send(o);
        });
        CallHandle::new(
            events,
            outcome,
            Box::new(CancelOnDrop::new(
                Arc::new(crate::call::TaskCancel {
                    task: task.abort_handle(),
                    answered,
                }),
                id,
                signal,
                self.metrics.clone(),
                &self.detached,
            )),
        )
    }
}

impl Upstream for RemoteUpstream {
    fn name(&self) -> &str {
        &self.name
    }
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(async move {
            match tokio::time::timeout(wait, self.probe()).await {
                Ok(r) => r,
                Err(_) => Err(BridgeError::Unavailable(
                    "the remote did not answer its era probe in time".into(),
                )),
            }
        })
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        Box::pin(async move {
            if self.stop.is_cancelled() {
                return Err(BridgeError::ShuttingDown);
            }
            // The era must be known before the first call (the remote probes on first use
            // too; this bounds the wait by the face's start wait).
            if self.info.get().is_none() {
                Upstream::info(self, wait).await?;
            }
            Ok(self.start_call(call))
        })
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.inbox.subscribe()
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        let env = Envelope::parse(&frame)
            .map_err(|e| BridgeError::Unavailable(format!("unparsable answer: {e}")))?;
        let id = env
            .id
            .map(ToOwned::to_owned)
            .ok_or_else(|| BridgeError::Unavailable("an answer without an id".into()))?;
        let result = env.result.map(ToOwned::to_owned);
        let error = env.error.map(ToOwned::to_owned);
        let remote = self.remote.clone();
        self.tracker.spawn(async move {
            remote
                .respond(&id, result.as_deref(), error.as_deref())
                .await;
        });
        Ok(())
    }
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        let env = Envelope::parse(&frame)
            .map_err(|e| BridgeError::Unavailable(format!("unparsable notification: {e}")))?;
        let method = env.method().to_owned();
        let params = env.params.map(ToOwned::to_owned);
        let remote = self.remote.clone();
        self.tracker.spawn(async move {
            remote.notify(&method, params.as_deref()).await;
        });
        Ok(())
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        self.remote.tool_param_rules(tool)
    }
    fn ensure_log_level(&self, level: &'static str) -> BoxFuture<'_, ()> {
        Box::pin(self.remote.ensure_log_level(level))
    }
    fn events_ready(&self, wait: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // A 2026 remote has no GET stream: nothing flows outside its calls.
            if self.info.get().is_some_and(|i| i.era == Era::Modern) {
                return false;
            }
            self.remote.wait_get_stream(wait).await
        })
    }
    fn stop(&self) {
        self.stop.cancel();
    }
    fn task_book(&self) -> Option<Arc<crate::core::tasks::TaskBook>> {
        Some(self.tasks.clone())
    }
}
