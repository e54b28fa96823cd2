//! Where an upstream's traffic outside any call goes: the [`Inbox`] an upstream is built with.
//!
//! A 2025 peer sends notifications and requests on its session's own stream (a remote's GET
//! stream), outside any call. The upstream cannot know who should get them — it is
//! caller-agnostic — so the core decides, once, when the upstream is built, and the upstream
//! hands every such frame to its inbox:
//!
//! - [`Inbox::shared`]: the upstream serves many callers (serve's face). Notifications are
//!   broadcast to every subscriber and never wait (a subscriber that falls behind loses its
//!   oldest frames, and says so). A request belongs to no caller that could be told apart, so
//!   it is answered for them (`crate::core`, rule 5: no roots, or `-32603` naming why).
//! - [`Inbox::owned_by`]: the peer's session is one caller's (connect's one host, whose
//!   `initialize` opened it). Requests are published under that caller's name, and the
//!   frames wait, bounded by [`Inbox::holding_back`], for room in the caller's queue, so a
//!   caller that reads slowly holds the peer's stream back instead of losing its traffic. A
//!   request with no room in time is refused with `-32603` and counted `slow_consumer`: the
//!   caller exists, so it is not "nobody to ask", and `roots/list` is refused too.
//!
//! Room is seen on a wake-up, not by polling: each frame queued by a holding-back inbox is
//! wrapped so that dropping its last copy (every subscriber has read it and let it go; tokio's
//! broadcast drops a value when its last receiver has taken it) wakes the waiter.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, Notify};
use tracing::warn;

use crate::call::UpstreamEvent;
use crate::metrics::Metrics;

/// Capacity of the queue of traffic that belongs to no call (per subscriber).
pub const CAPACITY: usize = 256;

/// The answer the upstream owes its peer for a request the inbox could not deliver: a result
/// (Ok) or an error object (Err).
pub type Reply = Result<Box<RawValue>, Box<RawValue>>;

/// Traffic of one upstream that belongs to no call, and who receives it (see the module
/// comment).
pub struct Inbox {
    events: broadcast::Sender<UpstreamEvent>,
    /// The caller the peer's session belongs to (requests are published under its name).
    owner: Option<Arc<str>>,
    /// How long a frame waits for room in the owner's queue (None: it never waits).
    hold_back: Option<Duration>,
    freed: Arc<Notify>,
    /// For the counters and the log lines (the server label); set by [`Inbox::counted`].
    metrics: Option<(Arc<Metrics>, Arc<str>)>,
}

impl Inbox {
    /// Many callers: broadcast notifications, answer requests for nobody.
    pub fn shared() -> Self {
        let (events, _) = broadcast::channel(CAPACITY);
        Self {
            events,
            owner: None,
            hold_back: None,
            freed: Arc::new(Notify::new()),
            metrics: None,
        }
    }

    /// The peer's session is `owner`'s: its requests are published under that name.
    pub fn owned_by(owner: &str) -> Self {
        Self {
            owner: Some(Arc::from(owner)),
            ..Self::shared()
        }
    }

    /// Frames wait up to `wait` for room in the queue before a request is refused (and a
    /// notification lost): for an owner that is the queue's only reader.
    pub fn holding_back(self, wait: Duration) -> Self {
        Self {
            hold_back: Some(wait),
            ..self
        }
    }

    /// Count what cannot be delivered under `server`'s label.
    pub fn counted(self, metrics: &Arc<Metrics>, server: &str) -> Self {
        Self {
            metrics: Some((metrics.clone(), Arc::from(server))),
            ..self
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.events.subscribe()
    }

    /// A notification of the peer's, to every subscriber (after room for it, when holding
    /// back; a frame with no room in time is lost, counted by the face that reads it).
    pub async fn notification(&self, frame: Bytes) {
        self.room().await;
        let _ = self
            .events
            .send(UpstreamEvent::Notification(self.queued(frame)));
    }

    /// A request of the peer's (`method`, the whole `frame`): Ok when published for the owner,
    /// else the reply the peer is owed instead.
    pub async fn request(&self, method: &str, frame: Bytes) -> Result<(), Reply> {
        let Some(owner) = &self.owner else {
            if method != "roots/list" {
                self.dropped("unroutable_request");
                self.warn(method, "request belongs to no caller; refused");
            }
            return Err(crate::core::unroutable_reply(
                method,
                "it belongs to no caller",
            ));
        };
        if self.room().await {
            let ev = UpstreamEvent::ServerRequest {
                session: owner.clone(),
                frame: self.queued(frame),
            };
            if self.events.send(ev).is_ok() {
                return Ok(());
            }
        }
        // The owner is there but cannot keep up (or has no stream open): not "nobody to
        // ask", so even roots/list is refused rather than answered for it.
        self.dropped("slow_consumer");
        self.warn(
            method,
            "the client reads too slowly for this request; refused",
        );
        Err(Err(crate::jsonrpc::raw(&crate::jsonrpc::error_object(
            crate::jsonrpc::code::INTERNAL_ERROR,
            "mcp-bridge could not deliver this request: the client reads too slowly",
            None,
        ))))
    }

    fn dropped(&self, reason: &'static str) {
        if let Some((m, _)) = &self.metrics {
            m.dropped(reason);
        }
    }

    fn warn(&self, method: &str, what: &str) {
        let server = self.metrics.as_ref().map_or("", |(_, s)| &**s);
        warn!(%server, %method, "outside any call: {what}");
    }

    /// Wait, bounded, until the slowest subscriber has room for one more frame. True when it
    /// has (at once for an inbox that does not hold back).
    async fn room(&self) -> bool {
        let Some(wait) = self.hold_back else {
            return true;
        };
        let until = tokio::time::Instant::now() + wait;
        loop {
            // Registered before looking, so that a frame freed in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.events.len() + 1 < CAPACITY {
                return true;
            }
            if tokio::time::timeout_at(until, freed).await.is_err() {
                return self.events.len() + 1 < CAPACITY;
            }
        }
    }

    /// `frame` as queued: when holding back, its bytes wake [`Inbox::room`] when their last
    /// copy goes.
    fn queued(&self, frame: Bytes) -> Bytes {
        if self.hold_back.is_none() {
            return frame;
        }
        Bytes::from_owner(Freed {
            frame,
            freed: self.freed.clone(),
        })
    }
}

/// The bytes of a frame queued by a holding-back inbox; dropping the last copy wakes it.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The wake-up `room` relies on: a frame queued through the broadcast wakes the waiter
    /// once the last subscriber has read it and let it go, and not before.
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

    fn req(method: &str) -> Bytes {
        Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#))
    }

    /// A shared inbox answers requests for nobody (rule 5) and counts all but roots/list.
    #[tokio::test]
    async fn a_shared_inbox_answers_requests_for_nobody() {
        let m = Arc::new(Metrics::new());
        let inbox = Inbox::shared().counted(&m, "s");
        let _sub = inbox.subscribe();
        let roots = inbox.request("roots/list", req("roots/list")).await;
        assert_eq!(roots.unwrap_err().unwrap().get(), r#"{"roots":[]}"#);
        let other = inbox.request("sampling/createMessage", req("x")).await;
        assert!(other.unwrap_err().unwrap_err().get().contains("-32603"));
        assert_eq!(m.dropped_count("unroutable_request"), 1);
    }

    /// An owned inbox publishes requests under the owner's name; one holding back refuses a
    /// request once its reader has had no room for the whole wait, and counts it.
    #[tokio::test(start_paused = true)]
    async fn an_owner_gets_requests_until_it_stops_reading() {
        let m = Arc::new(Metrics::new());
        let inbox = Inbox::owned_by("host")
            .holding_back(Duration::from_secs(10))
            .counted(&m, "s");
        let mut sub = inbox.subscribe();
        inbox
            .request("roots/list", req("roots/list"))
            .await
            .unwrap();
        match sub.recv().await.unwrap() {
            UpstreamEvent::ServerRequest { session, .. } => assert_eq!(&*session, "host"),
            ev => panic!("{ev:?}"),
        }
        for _ in 0..CAPACITY - 1 {
            inbox.notification(Bytes::from_static(b"{}")).await;
        }
        let t = tokio::time::Instant::now();
        let refused = inbox.request("roots/list", req("roots/list")).await;
        assert!(refused
            .unwrap_err()
            .unwrap_err()
            .get()
            .contains("too slowly"));
        assert_eq!(t.elapsed(), Duration::from_secs(10));
        assert_eq!(m.dropped_count("slow_consumer"), 1);
    }
}
