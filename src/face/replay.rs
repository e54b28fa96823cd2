//! SSE resumability of 2025-11-25 sessions (Streamable HTTP "Resumability and Redelivery",
//! SEP-1699 polling). It owns the log of one SSE stream (every event numbered
//! `<stream key>-<seq>`, a priming event with `retry:` first, a bounded replay buffer), a
//! session's set of such logs, finding a log from a `Last-Event-ID`, and the two halves of a
//! resumable POST stream: a pump task that drives the call into its log whether or not a client
//! is connected, and the reader body that writes the log out (replaying from a resume point,
//! then following it) and may end early when `close_after` says so.
//!
//! The stream key is 128 random bits, and a log is found only among its own session's, so an id
//! from another session names nothing. Pure bookkeeping over bytes and channels: it knows no
//! route, session or call type.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::config::limits::{Replay, MAX_STREAMS};
use crate::framing;
use crate::http_util::Body;
use crate::metrics::{GaugeGuard, Metrics};

/// Which kind of stream a log belongs to: a POST's (one call) or the session's GET stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Post,
    Get,
}

/// One kept event.
struct Kept {
    seq: u64,
    at: Instant,
    bytes: Bytes,
}

struct Inner {
    events: VecDeque<Kept>,
    /// The seq the next event gets.
    next: u64,
    bytes: usize,
    /// When the stream ended (a POST's final answer, a GET stream's client gone).
    ended: Option<Instant>,
}

/// The log of one SSE stream.
pub struct StreamLog {
    key: String,
    pub kind: StreamKind,
    limits: Replay,
    inner: Mutex<Inner>,
    /// Bumped on every event and at the end, for readers following the log.
    tick: watch::Sender<u64>,
}

/// Why a `Last-Event-ID` cannot be resumed (the `outcome` label of
/// `mcp_bridge_sse_resumptions_total`, besides `replayed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an id the bridge mints.
    Malformed,
    /// No stream of this session has that key (never, or forgotten after `max_age`), or the
    /// seq was never sent.
    Unknown,
    /// The events after it left the replay buffer (its size or age limit).
    BeyondBuffer,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Unknown => "unknown",
            Refusal::BeyondBuffer => "beyond_buffer",
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// 16 bytes from the OS CSPRNG, hex.
fn mint_key() -> Option<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The priming event: an id, the `retry:` field, empty data.
fn priming(id: &str, retry: Duration) -> Bytes {
    let mut out = BytesMut::with_capacity(id.len() + 40);
    out.put_slice(b"id: ");
    out.put_slice(id.as_bytes());
    out.put_slice(format!("\nretry: {}\ndata: \n\n", retry.as_millis()).as_bytes());
    out.freeze()
}

impl StreamLog {
    /// A new stream's log, its priming event (seq 0) already in it. None without randomness.
    pub fn open(kind: StreamKind, limits: Replay) -> Option<Arc<Self>> {
        let key = mint_key()?;
        let first = priming(&format!("{key}-0"), limits.retry);
        let log = StreamLog {
            key,
            kind,
            limits,
            inner: Mutex::new(Inner {
                events: VecDeque::new(),
                next: 0,
                bytes: 0,
                ended: None,
            }),
            tick: watch::Sender::new(0),
        };
        log.append(first);
        Some(Arc::new(log))
    }

    fn append(&self, bytes: Bytes) {
        let now = Instant::now();
        let mut g = lock(&self.inner);
        let seq = g.next;
        g.next += 1;
        g.bytes += bytes.len();
        g.events.push_back(Kept {
            seq,
            at: now,
            bytes,
        });
        // The newest event always stays, whatever its size: a live reader still needs it.
        while g.events.len() > 1
            && (g.events.len() > self.limits.max_events || g.bytes > self.limits.max_bytes)
        {
            if let Some(k) = g.events.pop_front() {
                g.bytes -= k.bytes.len();
            }
        }
        drop(g);
        self.tick.send_modify(|t| *t += 1);
    }

    /// Record one JSON frame as the stream's next event; returns it as written (with its id).
    pub fn push(&self, frame: &[u8]) -> Bytes {
        let seq = lock(&self.inner).next;
        let bytes = framing::sse_event_with_id(&format!("{}-{seq}", self.key), frame);
        self.append(bytes.clone());
        bytes
    }

    /// The stream ended (or, for a GET stream, its client went away).
    pub fn end(&self) {
        lock(&self.inner).ended = Some(Instant::now());
        self.tick.send_modify(|t| *t += 1);
    }

    /// A GET stream resumed: it runs again.
    pub fn reopen(&self) {
        lock(&self.inner).ended = None;
    }

    /// Ended longer than `max_age` ago: nothing left worth replaying.
    fn expired(&self, now: Instant) -> bool {
        lock(&self.inner)
            .ended
            .is_some_and(|t| now.duration_since(t) > self.limits.max_age)
    }

    /// The events from seq `from` on, and whether the stream has ended. Err when some of them
    /// are no longer kept (`from` was evicted, or is older than `max_age`) or were never sent.
    fn since(&self, from: u64) -> Result<(Vec<Bytes>, u64, bool), Refusal> {
        let now = Instant::now();
        let mut g = lock(&self.inner);
        while g
            .events
            .front()
            .is_some_and(|k| now.duration_since(k.at) > self.limits.max_age)
        {
            if let Some(k) = g.events.pop_front() {
                g.bytes -= k.bytes.len();
            }
        }
        if from > g.next {
            return Err(Refusal::Unknown);
        }
        let first = g.events.front().map_or(g.next, |k| k.seq);
        if from < first {
            return Err(Refusal::BeyondBuffer);
        }
        let out = g
            .events
            .iter()
            .filter(|k| k.seq >= from)
            .map(|k| k.bytes.clone())
            .collect();
        Ok((out, g.next, g.ended.is_some()))
    }

    /// Every event still kept from seq `from` on (a new GET stream's priming event).
    pub fn backlog_from(&self, from: u64) -> Vec<Bytes> {
        self.since(from).map(|(evs, _, _)| evs).unwrap_or_default()
    }

    /// The events after the one `Last-Event-ID` named (seq `after`), checked for being kept.
    pub fn backlog(&self, after: u64) -> Result<Vec<Bytes>, Refusal> {
        let from = after.checked_add(1).ok_or(Refusal::Unknown)?;
        self.since(from).map(|(evs, _, _)| evs)
    }
}

/// A session's stream logs, at most [`MAX_STREAMS`] (an ended one makes room first, else the
/// oldest). Clones share the set.
#[derive(Clone, Default)]
pub struct Streams(Arc<Mutex<VecDeque<Arc<StreamLog>>>>);

impl Streams {
    pub fn insert(&self, log: Arc<StreamLog>) {
        let now = Instant::now();
        let mut g = lock(&self.0);
        g.retain(|l| !l.expired(now));
        if g.len() >= MAX_STREAMS {
            let ended = g.iter().position(|l| lock(&l.inner).ended.is_some());
            g.remove(ended.unwrap_or(0));
        }
        g.push_back(log);
    }

    /// The log a `Last-Event-ID` names, and the seq it names.
    pub fn locate(&self, last_event_id: &str) -> Result<(Arc<StreamLog>, u64), Refusal> {
        let (key, seq) = parse_id(last_event_id).ok_or(Refusal::Malformed)?;
        let now = Instant::now();
        let mut g = lock(&self.0);
        g.retain(|l| !l.expired(now));
        let log = g.iter().find(|l| l.key == key).ok_or(Refusal::Unknown)?;
        Ok((log.clone(), seq))
    }
}

/// `<32 hex digits>-<seq>`.
fn parse_id(id: &str) -> Option<(&str, u64)> {
    let (key, seq) = id.trim().rsplit_once('-')?;
    if key.len() != 32 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((key, seq.parse().ok()?))
}

/// What a POST stream's source yields: a JSON frame, and whether it is the final answer.
pub type Source = Pin<Box<dyn Stream<Item = (Bytes, bool)> + Send>>;

/// Ends the log when the pump stops, however it stops.
struct EndOnDrop(Arc<StreamLog>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Drive `src` into `log` until its final answer (or its end), connected reader or not: a
/// 2025 client's disconnect is not a cancellation, and a resumed stream must find the rest.
pub fn spawn_pump(tracker: &TaskTracker, log: Arc<StreamLog>, mut src: Source) {
    tracker.spawn(async move {
        let _end = EndOnDrop(log.clone());
        while let Some((frame, last)) = src.next().await {
            log.push(&frame);
            if last {
                break;
            }
        }
    });
}

/// How a reader writes a log out.
#[derive(Clone)]
pub struct ReaderCfg {
    pub keepalive: Duration,
    pub metrics: Arc<Metrics>,
}

struct ReaderSt {
    log: Arc<StreamLog>,
    /// The first seq not yet written.
    from: u64,
    pending: VecDeque<Bytes>,
    rx: watch::Receiver<u64>,
    close_at: Option<tokio::time::Instant>,
    cfg: ReaderCfg,
    _gauge: GaugeGuard,
}

/// What a reader does next.
enum Step {
    Write(Bytes),
    Wait,
    End,
}

impl ReaderSt {
    fn step(&mut self) -> Step {
        if let Some(b) = self.pending.pop_front() {
            return Step::Write(b);
        }
        self.rx.borrow_and_update();
        match self.log.since(self.from) {
            Ok((evs, next, ended)) => {
                if evs.is_empty() {
                    return if ended { Step::End } else { Step::Wait };
                }
                self.from = next;
                self.pending.extend(evs);
                self.step()
            }
            Err(_) => {
                // The stream outran this client's reading past the buffer.
                self.cfg.metrics.dropped("slow_consumer");
                Step::End
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            match self.step() {
                Step::Write(b) => return Some(b),
                Step::End => return None,
                Step::Wait => {}
            }
            let close = async {
                match self.close_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.rx.changed() => if r.is_err() { return None },
                _ = tokio::time::sleep(self.cfg.keepalive) => {
                    return Some(Bytes::from_static(framing::SSE_KEEPALIVE));
                }
                // SEP-1699: the client reconnects after `retry` and resumes from its last id.
                _ = close => return None,
            }
        }
    }
}

/// A body that writes `log` from seq `from` on, following it until it ends (or until
/// `close_after`, when set and the stream has not ended by then).
pub fn reader(log: Arc<StreamLog>, from: u64, cfg: ReaderCfg) -> Body {
    let close_at = log
        .limits
        .close_after
        .map(|d| tokio::time::Instant::now() + d);
    let st = ReaderSt {
        rx: log.tick.subscribe(),
        log,
        from,
        pending: VecDeque::new(),
        close_at,
        _gauge: GaugeGuard::new(cfg.metrics.sse_streams().clone()),
        cfg,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let b = st.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(b)), st))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream))
}

/// A new resumable POST stream over `src` into `log`: the log joins `streams`, a pump drives
/// `src` into it, and the returned body reads it.
pub fn post_stream(
    log: Arc<StreamLog>,
    streams: &Streams,
    tracker: &TaskTracker,
    cfg: ReaderCfg,
    src: Source,
) -> Body {
    streams.insert(log.clone());
    spawn_pump(tracker, log.clone(), src);
    reader(log, 0, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(events: usize) -> Replay {
        Replay {
            max_events: events,
            ..Replay::default()
        }
    }

    fn text(b: &[Bytes]) -> String {
        b.iter().map(|b| String::from_utf8_lossy(b)).collect()
    }

    #[test]
    fn ids_name_the_stream_and_priming_comes_first() {
        let log = StreamLog::open(StreamKind::Post, limits(10)).unwrap();
        let b = log.push(br#"{"a":1}"#);
        let s = String::from_utf8_lossy(&b).to_string();
        assert_eq!(
            s,
            format!("id: {}-1\nevent: message\ndata: {{\"a\":1}}\n\n", log.key)
        );
        let all = text(&log.since(0).unwrap().0);
        assert!(
            all.starts_with(&format!("id: {}-0\nretry: 1000\ndata: \n\n", log.key)),
            "{all}"
        );
    }

    #[test]
    fn backlog_is_what_follows_and_eviction_is_refused() {
        let log = StreamLog::open(StreamKind::Post, limits(3)).unwrap();
        for i in 1..=4 {
            log.push(format!("{{\"n\":{i}}}").as_bytes());
        }
        // Kept: seqs 2, 3, 4.
        assert_eq!(log.backlog(0).err(), Some(Refusal::BeyondBuffer));
        let after1 = text(&log.backlog(1).unwrap());
        assert!(
            after1.contains("\"n\":2") && after1.contains("\"n\":4"),
            "{after1}"
        );
        assert!(log.backlog(4).unwrap().is_empty());
        assert_eq!(log.backlog(9).err(), Some(Refusal::Unknown));
    }

    #[test]
    fn locate_parses_and_refuses() {
        let s = Streams::default();
        let log = StreamLog::open(StreamKind::Get, limits(3)).unwrap();
        s.insert(log.clone());
        let (l, seq) = s.locate(&format!("{}-7", log.key)).unwrap();
        assert!(Arc::ptr_eq(&l, &log) && seq == 7);
        assert_eq!(s.locate("nope").err(), Some(Refusal::Malformed));
        let other = "0".repeat(32) + "-1";
        assert_eq!(s.locate(&other).err(), Some(Refusal::Unknown));
    }

    #[test]
    fn the_set_is_bounded() {
        let s = Streams::default();
        for _ in 0..MAX_STREAMS + 5 {
            s.insert(StreamLog::open(StreamKind::Post, limits(3)).unwrap());
        }
        assert_eq!(lock(&s.0).len(), MAX_STREAMS);
    }
}
