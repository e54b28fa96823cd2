//! Unit tests of the call lifecycle: detached calls, their reaper, cancel causes.
use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A peer's call: pending until answered or cancelled; remembers the cancel reason.
#[derive(Default)]
struct FakeCall {
    done: AtomicBool,
    cancelled: Mutex<Option<String>>,
}

impl Cancel for FakeCall {
    fn pending(&self) -> bool {
        !self.done.load(Ordering::SeqCst)
    }
    fn cancel(&self, reason: &str) -> bool {
        if self.done.swap(true, Ordering::SeqCst) {
            return false;
        }
        *self.cancelled.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.into());
        true
    }
}

/// A guard for `call` detached for `for_`, handed to a reaper on `tracker` when dropped.
fn detached_guard(
    call: &Arc<FakeCall>,
    answered: Answered,
    for_: Duration,
    reaper: &Detached,
) -> CancelOnDrop {
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let mut g = CancelOnDrop::new(call.clone(), 1, answered, metrics, reaper);
    g.detach_until(Instant::now() + for_);
    g
}

/// A reaper on its own tracker, and what stops it.
fn reaper() -> (
    Detached,
    tokio_util::task::TaskTracker,
    tokio_util::sync::CancellationToken,
) {
    let (tracker, stop) = (
        tokio_util::task::TaskTracker::new(),
        tokio_util::sync::CancellationToken::new(),
    );
    let metrics = Arc::new(crate::metrics::Metrics::new());
    (
        Detached::start(&tracker, stop.clone(), metrics),
        tracker,
        stop,
    )
}

/// Stop the reaper and wait (bounded) until it has ended.
async fn stop_reaper(
    tracker: tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
) {
    stop.cancel();
    tracker.close();
    tokio::time::timeout(Duration::from_secs(5), tracker.wait())
        .await
        .expect("the reaper did not end at stop");
}

const HOUR: Duration = Duration::from_secs(3600);

/// Let spawned tasks run (bounded) until `cond` holds.
async fn settle(cond: impl Fn() -> bool) -> bool {
    for _ in 0..1000 {
        if cond() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    cond()
}

#[tokio::test]
async fn a_detached_call_answered_later_lets_go_of_its_cancel() {
    let (reaper, tracker, stop) = reaper();
    let call = Arc::new(FakeCall::default());
    let (s, _events, _outcome, answered) = sinks();
    drop(detached_guard(&call, answered, HOUR, &reaper));
    // Still running: the reaper holds the upstream's Cancel.
    assert!(settle(|| Arc::strong_count(&call) == 2).await);
    // The upstream answers (its sinks go): the reaper lets go at once, not at the
    // deadline, and goes on running for the next one.
    call.done.store(true, Ordering::SeqCst);
    {
        let s = s;
        let _ = s.outcome.send(Outcome::Result(crate::jsonrpc::raw("{}")));
    }
    assert!(
        settle(|| Arc::strong_count(&call) == 1).await,
        "the reaper still holds the call"
    );
    assert!(call.cancelled.lock().unwrap().is_none());
    assert!(
        !tracker.is_empty(),
        "the reaper ended with its upstream still there"
    );
    stop_reaper(tracker, stop).await;
}

#[tokio::test]
async fn a_detached_call_answered_before_its_handle_went_keeps_nothing() {
    let (reaper, tracker, stop) = reaper();
    let call = Arc::new(FakeCall::default());
    let (s, _events, _outcome, answered) = sinks();
    call.done.store(true, Ordering::SeqCst);
    drop(s);
    drop(detached_guard(&call, answered, HOUR, &reaper));
    assert_eq!(Arc::strong_count(&call), 1);
    stop_reaper(tracker, stop).await;
}

#[tokio::test]
async fn a_detached_call_is_still_cancelled_at_its_deadline() {
    let (reaper, tracker, stop) = reaper();
    let call = Arc::new(FakeCall::default());
    let (_s, _events, _outcome, answered) = sinks();
    drop(detached_guard(
        &call,
        answered,
        Duration::from_millis(1),
        &reaper,
    ));
    // Bounded wait for the deadline (not a timing assert: it only has to happen).
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while Arc::strong_count(&call) > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(Arc::strong_count(&call), 1);
    assert_eq!(call.cancelled.lock().unwrap().as_deref(), Some("timeout"));
    stop_reaper(tracker, stop).await;
}

#[tokio::test]
async fn the_reaper_cancels_what_it_holds_at_stop_and_ends() {
    let (reaper, tracker, stop) = reaper();
    let call = Arc::new(FakeCall::default());
    let (_s, _events, _outcome, answered) = sinks();
    drop(detached_guard(&call, answered, HOUR, &reaper));
    assert!(settle(|| Arc::strong_count(&call) == 2).await);
    stop_reaper(tracker, stop).await;
    assert_eq!(Arc::strong_count(&call), 1);
    assert_eq!(call.cancelled.lock().unwrap().as_deref(), Some("shutdown"));
    // A call detached after the reaper ended is cancelled at once.
    let late = Arc::new(FakeCall::default());
    let (_s, _events, _outcome, answered) = sinks();
    drop(detached_guard(&late, answered, HOUR, &reaper));
    assert_eq!(late.cancelled.lock().unwrap().as_deref(), Some("shutdown"));
}

#[tokio::test]
async fn a_full_reaper_queue_cancels_the_next_detached_call_at_once() {
    let (reaper, tracker, stop) = reaper();
    // The reaper has not run yet (one thread, no await): the queue fills up.
    let mut held = Vec::new();
    for _ in 0..DETACHED_QUEUE {
        let call = Arc::new(FakeCall::default());
        let (s, _events, _outcome, answered) = sinks();
        drop(detached_guard(&call, answered, HOUR, &reaper));
        held.push((call, s));
    }
    assert!(held
        .iter()
        .all(|(c, _)| c.cancelled.lock().unwrap().is_none()));
    let over = Arc::new(FakeCall::default());
    let (_s, _events, _outcome, answered) = sinks();
    drop(detached_guard(&over, answered, HOUR, &reaper));
    assert_eq!(
        over.cancelled.lock().unwrap().as_deref(),
        Some("client disconnected")
    );
    assert_eq!(Arc::strong_count(&over), 1, "nothing kept of it");
    stop_reaper(tracker, stop).await;
    assert!(held
        .iter()
        .all(|(c, _)| c.cancelled.lock().unwrap().as_deref() == Some("shutdown")));
}

/// A control whose `try_unpark` frees the slot (notifying) right after saying "not yet"
/// the first time: the wake-up falls between the try and the wait.
struct FreedInBetween {
    freed: Arc<tokio::sync::Notify>,
    tries: std::sync::atomic::AtomicUsize,
}

impl CallControl for FreedInBetween {
    fn set_reason(&mut self, _: &'static str) {}
    fn detach_until(&mut self, _: Instant) {}
    fn upstream_id(&self) -> u64 {
        1
    }
    fn canceller(&self) -> Canceller {
        Canceller::new(Arc::new(FakeCall::default()))
    }
    fn set_parked(&mut self, _: bool) {}
    fn try_unpark(&mut self) -> Option<Arc<tokio::sync::Notify>> {
        match self.tries.fetch_add(1, Ordering::SeqCst) {
            0 => Some(self.freed.clone()),
            1 => {
                // Still busy at this try, freed before the caller waits.
                self.freed.notify_waiters();
                Some(self.freed.clone())
            }
            _ => None,
        }
    }
}

#[tokio::test]
async fn unpark_sees_a_slot_freed_between_its_try_and_its_wait() {
    let (_s, events, outcome, _answered) = sinks();
    let control = FreedInBetween {
        freed: Arc::new(tokio::sync::Notify::new()),
        tries: Default::default(),
    };
    let mut h = CallHandle::new(events, outcome, Box::new(control));
    // Done in one poll: the wake-up was registered before the try that freed the slot,
    // so nothing waits for a tick (or the hour).
    let resumed = futures_util::FutureExt::now_or_never(h.unpark(HOUR));
    assert_eq!(resumed, Some(true));
}

#[test]
fn cancel_causes() {
    assert_eq!(cancel_cause("timeout"), Some("timeout"));
    assert_eq!(
        cancel_cause("client cancelled"),
        Some("client_notification")
    );
    assert_eq!(
        cancel_cause("client disconnected"),
        Some("client_disconnect")
    );
    assert_eq!(cancel_cause(RELEASED_BY_BRIDGE), None);
}
