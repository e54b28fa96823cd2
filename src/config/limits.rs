//! What a connection to an HTTP listener may cost: the plain-data limits the flags and the
//! configuration file set (`--header-timeout`, `--max-connections`, `[limits]`, …) and the
//! accept loop (`face::accept`) enforces. Here, below both, so that `config` names no face type.

use std::time::Duration;

use tokio::sync::Semaphore;

/// What a connection may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// A request head (and a new connection's first one) must arrive within this.
    pub header_timeout: Duration,
    /// A request body must arrive within this of its head.
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once on one listener.
    pub max_connections: usize,
    /// Requests (HTTP/1 requests, HTTP/2 streams) open at once on one listener, each until its
    /// response body ends.
    pub max_streams: usize,
    pub h2: H2Limits,
}

impl Default for ConnLimits {
    /// Header reads of 10 s are generous for any client on any network (a head is one packet)
    /// while making a slow-head attack hold each socket briefly; a 30 s body deadline lets
    /// the default 16 MiB body through at ~550 KB/s; 120 s idle keeps a quiet client's
    /// connection across pauses between calls, as common proxies do (nginx 75 s, ALBs 60 s, so
    /// the proxy closes first). 4096 open streams are far more SSE streams and long calls than
    /// one child serves well; connections: see [`auto_max_connections`].
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: auto_max_connections(),
            max_streams: 4096,
            h2: H2Limits::default(),
        }
    }
}

/// HTTP/2's own limits, per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Limits {
    /// Streams open at once on one connection (`SETTINGS_MAX_CONCURRENT_STREAMS`; never more
    /// than `max_streams`, which bounds the listener's total).
    pub max_concurrent_streams: u32,
    /// A request head larger than this (RFC 7541 size: names, values, 32 per field) gets a
    /// counted 431 from the bridge, as HTTP/1 heads over hyper's limits do. Twice this is
    /// advertised as `SETTINGS_MAX_HEADER_LIST_SIZE`: a peer that ignores it and sends more
    /// is refused by the h2 library itself, which the bridge cannot see or count.
    pub max_header_list: usize,
    /// Streams a client may open and reset before the bridge accepts them before the
    /// connection is closed (the "rapid reset" flood, CVE-2023-44487).
    pub max_pending_resets: usize,
}

impl Default for H2Limits {
    /// 100 streams (hyper's default is 200; `--max-streams` bounds the total anyway); 64 KiB of
    /// head, far beyond any MCP request's (hyper's HTTP/1 head limit is ~400 KB and 100
    /// fields); 20 pending resets (hyper's default, already low for web browsers; an MCP
    /// client resets few streams).
    fn default() -> Self {
        H2Limits {
            max_concurrent_streams: 100,
            max_header_list: 64 << 10,
            max_pending_resets: 20,
        }
    }
}

impl H2Limits {
    /// From the settings given (None: the default), each at least 1 (a head list at least
    /// 4 KiB, at most 16 MiB).
    pub fn new(streams: Option<u32>, header_list: Option<usize>, resets: Option<usize>) -> Self {
        let d = H2Limits::default();
        H2Limits {
            max_concurrent_streams: streams.unwrap_or(d.max_concurrent_streams).max(1),
            max_header_list: header_list
                .unwrap_or(d.max_header_list)
                .clamp(4 << 10, 16 << 20),
            max_pending_resets: resets.unwrap_or(d.max_pending_resets).max(1),
        }
    }
}

/// The floor of each timeout: zero would close every connection at once.
const MIN_TIMEOUT: Duration = Duration::from_millis(100);

impl ConnLimits {
    /// From the settings as given: timeouts of at least 100 ms, caps of at least 1 (and at most
    /// what a semaphore holds), and
    /// `max_connections` (when not given) from [`auto_max_connections`].
    pub fn new(
        header_timeout: Duration,
        body_timeout: Duration,
        idle_timeout: Duration,
        max_connections: Option<usize>,
        max_streams: usize,
        h2: H2Limits,
    ) -> Self {
        ConnLimits {
            header_timeout: header_timeout.max(MIN_TIMEOUT),
            body_timeout: body_timeout.max(MIN_TIMEOUT),
            idle_timeout: idle_timeout.max(MIN_TIMEOUT),
            // A semaphore holds at most MAX_PERMITS (2^61 - 1): beyond is the same as no cap.
            max_connections: max_connections
                .unwrap_or_else(auto_max_connections)
                .clamp(1, Semaphore::MAX_PERMITS),
            max_streams: max_streams.clamp(1, Semaphore::MAX_PERMITS),
            h2,
        }
    }
}

/// 10000 connections, or fewer so that a quarter of the open-file limit (at most 1024
/// descriptors) stays free for children's pipes, the metrics listener and log files: running out
/// of descriptors breaks everything at once, a connection cap refuses only newcomers.
pub fn auto_max_connections() -> usize {
    use nix::sys::resource::{getrlimit, Resource};
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    let soft = usize::try_from(soft).unwrap_or(usize::MAX);
    let reserve = (soft / 4).min(1024);
    soft.saturating_sub(reserve).clamp(16, 10_000)
}

/// SSE resumability for 2025-11-25 sessions (`--sse-*`, `[limits] sse_*`): what each stream's
/// priming event tells the client, when the bridge closes a long call's stream early, and how
/// much of a stream is kept for a client that resumes it with `Last-Event-ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replay {
    /// The `retry:` the priming event carries: how long a client waits before it reconnects.
    pub retry: Duration,
    /// Close a call's stream after this long on one connection (the client resumes with GET
    /// and `Last-Event-ID`, SEP-1699 polling); None: never close early.
    pub close_after: Option<Duration>,
    /// Events kept per stream for replay.
    pub max_events: usize,
    /// Bytes kept per stream for replay.
    pub max_bytes: usize,
    /// Events older than this are not replayed; a stream quiet (or ended) this long is forgotten.
    pub max_age: Duration,
}

impl Default for Replay {
    /// A 1 s retry (clients reconnect promptly, a burst of reconnects stays spread); no early
    /// close (long calls keep one connection, as before); 1000 events or 1 MiB per stream,
    /// kept 60 s: room for a call's progress and its final answer across a reconnect, while a
    /// session's streams ([`MAX_STREAMS`] of them) cost at most 64 MiB.
    fn default() -> Self {
        Replay {
            retry: Duration::from_secs(1),
            close_after: None,
            max_events: 1000,
            max_bytes: 1 << 20,
            max_age: Duration::from_secs(60),
        }
    }
}

/// Streams of one 2025 session kept for resumption at once (the oldest ended one goes first).
pub const MAX_STREAMS: usize = 64;

impl Replay {
    /// From the settings given (None: the default): `close_after` of zero is off, at least
    /// 100 ms otherwise; a buffer of at least 1 event and 1 KiB; an age of at least 1 s.
    pub fn new(
        retry: Option<Duration>,
        close_after: Option<Duration>,
        max_events: Option<usize>,
        max_bytes: Option<usize>,
        max_age: Option<Duration>,
    ) -> Self {
        let d = Replay::default();
        Replay {
            retry: retry.unwrap_or(d.retry),
            close_after: close_after
                .or(d.close_after)
                .filter(|c| !c.is_zero())
                .map(|c| c.max(MIN_TIMEOUT)),
            max_events: max_events.unwrap_or(d.max_events).max(1),
            max_bytes: max_bytes.unwrap_or(d.max_bytes).max(1 << 10),
            max_age: max_age.unwrap_or(d.max_age).max(Duration::from_secs(1)),
        }
    }
}
