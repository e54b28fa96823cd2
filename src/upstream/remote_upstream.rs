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
//! Two roles, because what the adapter may do on its own depends on how many callers stand in
//! front of it: a remote shared by a face's many callers (`start`: probed at start-up for
//! readiness, requests on its 2025 GET stream refused since no caller can be told apart, the
//! tool list re-read on a change) or the one host of `connect` (`start_for_host`: probed on
//! first use, so that a 2025 remote's session is opened with the host's `initialize`; GET
//! stream requests go to that host as `UpstreamEvent::ServerRequest`; the host re-lists tools
//! itself).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, Notify, OnceCell};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::call::{
    sinks, Call, CallEvent, CallHandle, Cancel, CancelOnDrop, EventReceiver, Outcome,
    SharedUpstream, Upstream, UpstreamEvent, UpstreamInfo,
};
use crate::error::BridgeError;
use crate::jsonrpc::{self, Envelope};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};
use crate::upstream::remote::{Remote, RemoteConfig};

/// How many callers stand in front of the remote (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Shared,
    OneHost,
}

/// The session name under which the one host's GET-stream requests are published.
pub const HOST_SESSION: &str = "host";

/// Capacity of the queue of traffic that belongs to no call (per subscriber).
const EVENTS: usize = 256;
/// How long one host's upstream waits for the host to make room in that queue before a
/// request of the remote is refused (and a notification lost).
const HOST_ROOM_WAIT: Duration = Duration::from_secs(10);

/// A remote server behind a face. Cheap to share (`Arc`).
pub struct RemoteUpstream {
    name: Arc<str>,
    role: Role,
    remote: Arc<Remote>,
    events: broadcast::Sender<UpstreamEvent>,
    /// Woken each time a frame this upstream queued in `events` is let go by every
    /// subscriber (see [`Freed`]): one host's upstream waits on it for room in the queue.
    freed: Arc<Notify>,
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
}

impl RemoteUpstream {
    /// Build the client for `cfg` and start probing the remote on `tracker`; at `stop` the
    /// remote's 2025 session is ended (DELETE).
    pub fn start(
        name: &str,
        cfg: RemoteConfig,
        metrics: &Arc<Metrics>,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<SharedUpstream, String> {
        let hello = Arc::default();
        Self::launch(Role::Shared, name, cfg, hello, metrics, stop, tracker)
    }

    /// As [`RemoteUpstream::start`], for the one host of `connect`: no probe until the host's
    /// first message (a 2025 remote's session is opened with the host's `initialize`, which
    /// the face keeps in `hello`), and requests on the remote's GET stream are published for
    /// that host.
    pub fn start_for_host(
        name: &str,
        cfg: RemoteConfig,
        hello: Arc<crate::core::Hello>,
        metrics: &Arc<Metrics>,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<SharedUpstream, String> {
        Self::launch(Role::OneHost, name, cfg, hello, metrics, stop, tracker)
    }

    fn launch(
        role: Role,
        name: &str,
        cfg: RemoteConfig,
        hello: Arc<crate::core::Hello>,
        metrics: &Arc<Metrics>,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<SharedUpstream, String> {
        let (etx, erx) = crate::call::event_queue(256);
        let url = cfg.url.to_string();
        let remote = Remote::new(cfg, etx, metrics.clone(), name, hello)?;
        metrics.register_server(name);
        let (events, _) = broadcast::channel(EVENTS);
        let me = Arc::new(RemoteUpstream {
            name: Arc::from(name),
            role,
            remote,
            events,
            freed: Arc::new(Notify::new()),
            info: OnceCell::new(),
            ready: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            metrics: metrics.clone(),
            tracker: tracker.clone(),
            stop: stop.clone(),
            detached: crate::call::Detached::start(tracker, stop.clone(), metrics.clone()),
        });
        info!(server = %name, %url, "remote upstream");
        tracker.spawn(me.clone().pump(erx));
        let m = me.clone();
        tracker.spawn(async move {
            if role == Role::Shared {
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

    /// The one host's calls do not need `server/discover`: a 2026 remote (pinned with
    /// `--protocol`) that answers it with an error or an HTTP status still takes them, as it
    /// always did; a 2025 host's `initialize` is then built from nothing.
    fn discover_refused(&self, o: &Outcome) -> bool {
        let answered = match o {
            Outcome::Error(_) => true,
            Outcome::Failed(BridgeError::Remote { reason, .. }) => *reason == "http_status",
            _ => false,
        };
        answered && self.role == Role::OneHost && self.remote.known_era() == Some(Era::Modern)
    }

    /// Traffic from the remote's 2025 GET stream: notifications go to the face's listeners;
    /// requests cannot be attributed to one caller of a shared remote, so they are refused.
    /// One host's upstream (connect): wait, bounded by `HOST_ROOM_WAIT`, until the slowest
    /// subscriber has room in the event queue, so a host that reads slowly holds the remote's
    /// GET stream back instead of losing its traffic. False when there is still no room.
    /// A shared upstream never waits (its subscribers are per-session streams).
    async fn room_for_host(&self) -> bool {
        if self.role != Role::OneHost {
            return true;
        }
        let until = tokio::time::Instant::now() + HOST_ROOM_WAIT;
        loop {
            // Registered before looking, so that a frame freed in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.events.len() + 1 < EVENTS {
                return true;
            }
            if tokio::time::timeout_at(until, freed).await.is_err() {
                return self.events.len() + 1 < EVENTS;
            }
        }
    }

    /// `frame` as queued for the one host: its bytes wake `room_for_host` when the last
    /// copy goes, i.e. once every subscriber has taken it from the queue (tokio's broadcast
    /// drops a value when its last receiver has read it) and is done with it.
    fn queued(&self, frame: Bytes) -> Bytes {
        if self.role != Role::OneHost {
            return frame;
        }
        Bytes::from_owner(Freed {
            frame,
            freed: self.freed.clone(),
        })
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
                    if method == "notifications/tools/list_changed" && self.role == Role::Shared {
                        self.tracker.spawn(self.clone().reread_tools());
                    }
                    let frame = self.queued(jsonrpc::notification(
                        &method,
                        params.as_deref().map(RawValue::get),
                    ));
                    // A notification the host has no room for is lost (counted by the face).
                    self.room_for_host().await;
                    let _ = self.events.send(UpstreamEvent::Notification(frame));
                }
                CallEvent::ServerRequest { id, method, params } => {
                    // A request is never lost in the queue: with no room for it in time, the
                    // remote is told it cannot be delivered.
                    if self.role == Role::OneHost && self.room_for_host().await {
                        let frame = self.queued(jsonrpc::request(
                            id.get(),
                            &method,
                            params.as_deref().map(RawValue::get),
                        ));
                        let ev = UpstreamEvent::ServerRequest {
                            session: Arc::from(HOST_SESSION),
                            frame,
                        };
                        if self.events.send(ev).is_ok() {
                            continue;
                        }
                    }
                    let reply = if self.role == Role::OneHost {
                        // The one host exists but cannot keep up: it is not "nobody to ask",
                        // so even roots/list is refused rather than answered for it.
                        self.metrics.dropped("slow_consumer");
                        warn!(server = %self.name, %method, "the host reads too slowly for a request on the remote's GET stream; refused");
                        Err(jsonrpc::raw(&jsonrpc::error_object(
                            jsonrpc::code::INTERNAL_ERROR,
                            "mcp-bridge could not deliver this request: the client reads too slowly",
                            None,
                        )))
                    } else {
                        if method != "roots/list" {
                            self.metrics.dropped("unroutable_request");
                            warn!(server = %self.name, %method, "request on the remote's GET stream belongs to no caller; refused");
                        }
                        // `crate::core`, rule 5: no roots, or an error naming why.
                        crate::core::unroutable_reply(&method, "it belongs to no caller")
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
                Arc::new(RemoteCancel {
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

/// The bytes of a frame queued for one host; dropping the last copy wakes the pump.
struct Freed {
    frame: Bytes,
    freed: Arc<Notify>,
}

impl AsRef<[u8]> for Freed {
    fn as_ref(&self) -> &[u8] {
        &self.frame
    }
}

impl Drop for Freed {
    fn drop(&mut self) {
        self.freed.notify_waiters();
    }
}

/// A call's task: aborting it drops the remote exchange (which cancels it at the remote).
struct RemoteCancel {
    task: AbortHandle,
    /// Set once the remote's answer is in.
    answered: Arc<AtomicBool>,
}

impl Cancel for RemoteCancel {
    fn pending(&self) -> bool {
        !self.answered.load(Ordering::Acquire) && !self.task.is_finished()
    }
    fn cancel(&self, _reason: &str) -> bool {
        let was = self.pending();
        self.task.abort();
        was
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
        self.events.subscribe()
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wake-up `room_for_host` relies on: a frame queued through the broadcast wakes the
    /// waiter once the last subscriber has read it and let it go, and not before.
    #[tokio::test]
    async fn a_frame_read_by_every_subscriber_wakes_the_waiter() {
        let freed = Arc::new(Notify::new());
        let (tx, mut a) = broadcast::channel::<Bytes>(4);
        let mut b = tx.subscribe();
        let frame = Bytes::from_owner(Freed {
            frame: Bytes::from_static(b"{}"),
            freed: freed.clone(),
        });
        let wake = freed.notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        tx.send(frame).unwrap();
        assert_eq!(tx.len(), 1);
        drop(a.recv().await.unwrap());
        assert!(
            futures_util::poll!(wake.as_mut()).is_pending(),
            "b has not read it"
        );
        let kept = b.recv().await.unwrap();
        assert_eq!(tx.len(), 0);
        assert!(
            futures_util::poll!(wake.as_mut()).is_pending(),
            "b still holds it"
        );
        drop(kept);
        tokio::time::timeout(Duration::from_secs(5), wake)
            .await
            .expect("woken once the last copy went");
    }
}
