//! One connection's clock: what it is doing (serving requests, or idle between them, or in the
//! middle of sending a request head) and when it must be closed for it. The socket is wrapped
//! ([`Watched`]) so that the first bytes of a new head are noticed; requests are counted by the
//! guard the accept loop puts in each response body ([`Busy`]).
//!
//! hyper's own HTTP/1 `header_read_timeout` is not used: it starts when hyper begins waiting
//! for a head, so it would also close every keep-alive connection after the header timeout
//! and leave the idle timeout no say; and it does not cover the bytes before hyper knows the
//! protocol (an HTTP/2 preface cut short). One clock here covers both protocols.
//!
//! The connection's task sleeps until the time it armed ([`ConnState::arm`]) and recomputes
//! there; it is woken early only when a head begins that must close sooner than that, or a
//! request begins while it sleeps for longer than the busy period. While
//! requests are in flight it re-checks every `min(header_timeout, idle_timeout)`, so the end
//! of a request needs no wake-up: a keep-alive client costs the task one extra wake-up per
//! such period, not two per request (each would poll the whole connection again). An idle
//! connection is closed up to that period late when its last request ended mid-period.
//!
//! The rules, while no request is in flight: a head that started arriving must be complete
//! within `header_timeout`; a new connection must deliver its first request head within
//! `header_timeout`; after a response, the next request must begin within `idle_timeout`. An
//! HTTP/2 connection's frames between requests (PING, SETTINGS, WINDOW_UPDATE) do not start
//! the head clock: only the idle one applies to it.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use super::ConnLimits;

const NONE: u64 = u64::MAX;

/// Why a connection was closed by its clock (a log word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    Header,
    Idle,
}

/// Shared between the socket wrapper, the request guards and the connection's task.
pub struct ConnState {
    start: Instant,
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// Milliseconds since `start` when the connection last became idle.
    idle_ms: AtomicU64,
    /// Milliseconds since `start` when a new head began arriving while idle (NONE: none did).
    head_ms: AtomicU64,
    /// Decided by the first bytes: an HTTP/2 preface.
    h2: AtomicBool,
    first_read: AtomicBool,
    /// Milliseconds since `start` the connection's task sleeps until (NONE: it is
    /// recomputing, so whatever changes now it sees).
    armed_ms: AtomicU64,
    header_ms: u64,
    /// While busy the task looks again this often: min(header, idle) timeout.
    recheck_ms: u64,
    /// Woken when a head begins that must be closed before the armed time.
    pub changed: Notify,
}

impl ConnState {
    pub fn new(l: &ConnLimits) -> Arc<Self> {
        Arc::new(ConnState {
            start: Instant::now(),
            armed_ms: AtomicU64::new(NONE),
            header_ms: u64::try_from(l.header_timeout.as_millis()).unwrap_or(NONE - 1),
            recheck_ms: u64::try_from(l.header_timeout.min(l.idle_timeout).as_millis())
                .unwrap_or(NONE - 1),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_ms: AtomicU64::new(0),
            head_ms: AtomicU64::new(NONE),
            h2: AtomicBool::new(false),
            first_read: AtomicBool::new(false),
            changed: Notify::new(),
        })
    }

    /// When the connection was accepted (its first head's clock starts here).
    pub fn start(&self) -> Instant {
        self.start
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// A request arrived: the clock stops until it (and every other one) is answered.
    pub fn enter(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.served.store(true, Ordering::SeqCst);
        self.head_ms.store(NONE, Ordering::SeqCst);
        // The task must look again within the busy period, so that the idle clock starts on
        // time once this request ends (it is not woken then).
        let soon = self.now_ms().saturating_add(self.recheck_ms);
        if self.armed_ms.load(Ordering::SeqCst) > soon {
            self.changed.notify_one();
        }
        Busy(self.clone())
    }

    /// Bytes arrived on the socket.
    fn on_read(&self, first_bytes: &[u8]) {
        if !self.first_read.swap(true, Ordering::SeqCst) && first_bytes.starts_with(b"PRI ") {
            self.h2.store(true, Ordering::SeqCst);
        }
        if self.h2.load(Ordering::SeqCst) || self.in_flight.load(Ordering::SeqCst) > 0 {
            return;
        }
        let now = self.now_ms();
        if self
            .head_ms
            .compare_exchange(NONE, now, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            && self.armed_ms.load(Ordering::SeqCst) > now.saturating_add(self.header_ms)
        {
            self.changed.notify_one();
        }
    }

    /// When the connection's task must look again (and remember it): the deadline, or while
    /// requests are in flight, the shorter of the two timeouts from now.
    pub fn arm(&self, l: &ConnLimits) -> Instant {
        // Unarmed while computing: a head that begins meanwhile wakes the task again.
        self.armed_ms.store(NONE, Ordering::SeqCst);
        let at = match self.deadline(l) {
            Some((at, _)) => at,
            None => Instant::now() + l.header_timeout.min(l.idle_timeout),
        };
        let ms = at.saturating_duration_since(self.start).as_millis();
        self.armed_ms
            .store(u64::try_from(ms).unwrap_or(NONE - 1), Ordering::SeqCst);
        at
    }

    /// When the connection must be closed, and why; None while a request is in flight.
    pub fn deadline(&self, l: &ConnLimits) -> Option<(Instant, Expired)> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        if !self.served.load(Ordering::SeqCst) {
            // Its first head, however it arrives, within the header timeout of the accept.
            return Some((self.start + l.header_timeout, Expired::Header));
        }
        let head = self.head_ms.load(Ordering::SeqCst);
        if head != NONE {
            return Some((self.at(head) + l.header_timeout, Expired::Header));
        }
        let idle = self.at(self.idle_ms.load(Ordering::SeqCst));
        Some((idle + l.idle_timeout, Expired::Idle))
    }
}

/// Held by a request (in its response body) while it is in flight.
pub struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &self.0;
        // No wake-up: the task looks again within the shorter timeout (see the module comment).
        s.idle_ms.store(s.now_ms(), Ordering::SeqCst);
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An accepted socket, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A socket that tells its [`ConnState`] when bytes arrive.
pub struct Watched {
    io: Stream,
    state: Arc<ConnState>,
}

impl Watched {
    pub fn new(io: Stream, state: Arc<ConnState>) -> Self {
        Watched { io, state }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = match &mut this.io {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.state.on_read(&buf.filled()[before..]);
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnLimits {
        ConnLimits::new(
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(120),
            Some(10),
            10,
            super::super::H2Limits::default(),
        )
    }

    fn kind(s: &ConnState) -> Option<Expired> {
        s.deadline(&limits()).map(|(_, k)| k)
    }

    #[test]
    fn the_clock_follows_the_connection() {
        let l = limits();
        let s = ConnState::new(&limits());
        // New: its first head within the header timeout of the accept, bytes or not.
        assert_eq!(
            s.deadline(&l),
            Some((s.start + l.header_timeout, Expired::Header))
        );
        s.on_read(b"GET / HT");
        assert_eq!(
            s.deadline(&l),
            Some((s.start + l.header_timeout, Expired::Header))
        );
        // Serving: no clock, until the last request in flight is answered.
        let busy = s.enter();
        let second = s.enter();
        drop(busy);
        assert_eq!(kind(&s), None, "one request still in flight");
        drop(second);
        let (idle_until, k) = s.deadline(&l).unwrap();
        assert_eq!(k, Expired::Idle);
        assert!(idle_until >= s.start + l.idle_timeout);
        // Bytes of the next head while idle: the (shorter) header clock.
        s.on_read(b"GET");
        let (head_until, k) = s.deadline(&l).unwrap();
        assert_eq!(k, Expired::Header);
        assert!(head_until < s.start + l.idle_timeout);
        s.on_read(b" / HTTP/1.1");
        assert_eq!(s.deadline(&l), Some((head_until, Expired::Header)));
    }

    #[test]
    fn only_a_head_due_before_the_armed_time_wakes_the_task() {
        let l = limits();
        let s = ConnState::new(&l);
        drop(s.enter());
        let first = std::pin::pin!(s.changed.notified());
        let _ = futures_util::FutureExt::now_or_never(first);
        // Idle, armed at the idle deadline (120 s): a head (due in 10 s) must wake the task.
        assert!(s.arm(&l) >= s.start + l.idle_timeout);
        s.on_read(b"GET");
        let woken = std::pin::pin!(s.changed.notified());
        assert!(futures_util::FutureExt::now_or_never(woken).is_some());
        // A request begins while the task sleeps for the idle deadline: it must look sooner.
        let busy = s.enter();
        let woken = std::pin::pin!(s.changed.notified());
        assert!(futures_util::FutureExt::now_or_never(woken).is_some());
        // Busy: armed for a look within the header timeout; the next head is not due earlier.
        assert!(s.arm(&l) <= Instant::now() + l.header_timeout);
        drop(busy);
        s.on_read(b"GET");
        let woken = std::pin::pin!(s.changed.notified());
        assert!(futures_util::FutureExt::now_or_never(woken).is_none());
    }

    #[test]
    fn http2_frames_between_requests_leave_the_idle_clock() {
        let s = ConnState::new(&limits());
        s.on_read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        drop(s.enter());
        s.on_read(b"\x00\x00\x08\x06"); // a PING
        assert_eq!(kind(&s), Some(Expired::Idle));
    }
}
