//! 2025-era sessions of the HTTP face: minting ids, the per-session state (negotiated version,
//! the `_meta` stamped on its calls, calls in flight, requests the child asked of it), expiry,
//! and the capability gate for the child's server requests (the client's `initialize`
//! capabilities; the shared child was told every capability the bridge can carry).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::call::{Canceller, SharedUpstream};
use crate::core::caller::{Bounded, Caller};
use crate::face::respond::ServerRequestSink;

/// How to cancel a call a 2025 client started.
enum Inflight {
    /// Its response is still being produced: cancel the responder.
    Live(CancellationToken),
    /// The client hung up; the child still works on it until the deadline.
    Detached(Canceller, Instant),
}

/// Forgets (or detaches) a 2025 call's cancel handle once its response is over.
pub struct InflightGuard {
    pub session: Arc<Session>,
    pub id: String,
    /// The call's token from [`Session::begin_call`]: cancelled when the client cancelled
    /// the call (or the session closed).
    pub cancel: CancellationToken,
    pub detached: Option<(Canceller, Instant)>,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let cancelled = self.cancel.is_cancelled();
        self.session
            .end_call(&self.id, self.detached.take(), cancelled);
    }
}

/// A client's response: its `result`, or its `error` object.
pub type ClientAnswer = crate::core::caller::Answer;

/// Most calls one 2025 session has in flight (or detached, running to their deadline) at
/// once: one more is refused with a JSON-RPC error until some end.
pub const MAX_CALLS: usize = 4096;

/// Most requests of the upstream one 2025 session owes an answer to at once: one more is
/// refused to the upstream (`-32603`) rather than kept.
pub const MAX_SERVER_REQUESTS: usize = 10_000;

pub struct Session {
    pub id: Arc<str>,
    /// The protocol version negotiated with the client.
    pub version: String,
    /// What the client said at `initialize`, its log level, the answers the bridge waits for
    /// from it: the per-caller state both faces share.
    pub caller: Caller,
    pub upstream: SharedUpstream,
    /// Does this session own its child (`--isolation session`)?
    pub owns_child: bool,
    last_seen: Mutex<Instant>,
    /// Client request id (raw JSON) → how to cancel it, for `notifications/cancelled`.
    inflight: Bounded<String, Inflight>,
    /// Ids (raw JSON) of requests the child sent this session and that await an answer.
    server_requests: Bounded<String, ()>,
    /// The session's resource subscriptions (a 2026 child: the listen its GET stream holds).
    pub subs: Arc<crate::core::held::Subscriptions>,
    pub get_stream_open: AtomicBool,
    /// Ends the open GET stream (a resumed one takes its place).
    get_stream_stop: Mutex<CancellationToken>,
    /// Its SSE streams kept for `Last-Event-ID` resumption (2025-11-25, `face::replay`).
    pub streams: crate::face::replay::Streams,
    /// Cancelled when the session ends (DELETE, expiry, shutdown).
    pub closed: CancellationToken,
    _gauge: crate::face::respond::GaugeGuard,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A session id: 32 bytes from the OS CSPRNG, hex (visible ASCII).
pub fn mint_id() -> Option<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    let mut s = String::with_capacity(64);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    Some(s)
}

impl Session {
    pub fn new(
        id: String,
        version: String,
        caller: Caller,
        upstream: SharedUpstream,
        owns_child: bool,
        gauge: prometheus::IntGauge,
    ) -> Self {
        Self {
            id: Arc::from(id),
            version,
            caller,
            upstream,
            owns_child,
            last_seen: Mutex::new(Instant::now()),
            inflight: Bounded::new(MAX_CALLS),
            server_requests: Bounded::new(MAX_SERVER_REQUESTS),
            subs: crate::core::held::Subscriptions::new(),
            get_stream_open: AtomicBool::new(false),
            get_stream_stop: Mutex::new(CancellationToken::new()),
            streams: Default::default(),
            closed: CancellationToken::new(),
            _gauge: crate::face::respond::GaugeGuard::new(gauge),
        }
    }

    /// A token for the GET stream opening now; [`Session::stop_get_stream`] cancels it.
    pub fn get_stream_token(&self) -> CancellationToken {
        let t = self.closed.child_token();
        *lock(&self.get_stream_stop) = t.clone();
        t
    }

    /// End the open GET stream, if any (its body ends at its next poll).
    pub fn stop_get_stream(&self) {
        lock(&self.get_stream_stop).cancel();
    }

    pub fn touch(&self) {
        *lock(&self.last_seen) = Instant::now();
    }

    pub fn idle_for(&self) -> Duration {
        let now = Instant::now();
        self.inflight.retain(|_, f| match f {
            Inflight::Live(_) => true,
            Inflight::Detached(c, until) => *until > now && c.pending(),
        });
        let busy = !self.inflight.is_empty();
        if busy || self.get_stream_open.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        lock(&self.last_seen).elapsed()
    }

    /// Track a call so a later `notifications/cancelled` can reach it; None when the session
    /// has [`MAX_CALLS`] in flight already (the call is refused).
    pub fn begin_call(&self, client_id: &str) -> Option<CancellationToken> {
        let t = self.closed.child_token();
        self.inflight
            .insert(client_id.to_owned(), Inflight::Live(t.clone()))
            .ok()?;
        Some(t)
    }

    /// The call's response is over. If the child is still working on it (the client hung up:
    /// in 2025 that is not a cancellation), keep a way to cancel it until `until`.
    ///
    /// `cancelled`: the client cancelled the call (or the session closed). The response may
    /// have ended by the client's hang-up before it saw that (a client that cancels often
    /// closes the stream right after); the cancellation wins, and the call is not kept.
    pub fn end_call(
        &self,
        client_id: &str,
        detached: Option<(Canceller, Instant)>,
        cancelled: bool,
    ) {
        let mut over = None;
        match detached {
            // The session is over: nobody is left to run it for (see `close`); or the
            // client cancelled it.
            Some((c, _)) if c.pending() && (cancelled || self.closed.is_cancelled()) => {
                self.inflight.remove(client_id);
                over = Some(c);
            }
            Some((c, until)) if c.pending() => {
                // Replaces its own live entry: never refused for room.
                if let Err(full) = self
                    .inflight
                    .insert(client_id.to_owned(), Inflight::Detached(c, until))
                {
                    if let Inflight::Detached(c, _) = full.0 {
                        over = Some(c);
                    }
                }
            }
            _ => {
                self.inflight.remove(client_id);
            }
        }
        if let Some(c) = over {
            c.cancel("client cancelled");
        }
        self.touch();
    }

    /// Cancel the call the client knows by `client_id`. Returns whether one was found.
    pub fn cancel_call(&self, client_id: &str) -> bool {
        match self.inflight.remove(client_id) {
            Some(Inflight::Live(t)) => {
                t.cancel();
                true
            }
            Some(Inflight::Detached(c, _)) => c.cancel("client cancelled"),
            None => false,
        }
    }

    /// Was this id asked of this session (and not yet answered)? Consumes it.
    pub fn take_server_request(&self, id: &str) -> bool {
        self.server_requests.remove(id).is_some()
    }

    /// The capabilities the client declared at `initialize`.
    pub fn client_caps(&self) -> Option<Box<RawValue>> {
        self.caller.caps()
    }

    /// End the session: cancel its calls and streams, stop its own child. Calls whose client
    /// hung up (detached, running to their deadline) end with it too: the client that could
    /// still cancel them by id is gone.
    pub fn close(&self) {
        self.closed.cancel();
        self.caller.forget_all_answers();
        let detached: Vec<Canceller> = self
            .inflight
            .drain()
            .into_iter()
            .filter_map(|(_, f)| match f {
                Inflight::Detached(c, _) => Some(c),
                Inflight::Live(_) => None, // cancelled with `closed`
            })
            .collect();
        for c in detached {
            c.cancel("client cancelled");
        }
        if self.owns_child {
            self.upstream.stop();
        }
    }
}

impl ServerRequestSink for Session {
    /// The child (initialised by the bridge with every capability) asks for something this
    /// client did not declare at `initialize` (e.g. URL elicitation from a form-only client):
    /// refuse it to the child with -32601, as the client itself would. A client that owes
    /// [`MAX_SERVER_REQUESTS`] answers already is not asked more: -32603 to the child.
    fn admit(
        &self,
        child_id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<(), &'static str> {
        use crate::jsonrpc::code;
        let short = self.id.get(..8).unwrap_or(&self.id);
        let refusal = if !crate::era::mrtr::may_ask(self.client_caps().as_deref(), method, params) {
            tracing::info!(session = %short, "the child sent {method}, which this 2025 client did not declare: refused");
            let msg = format!("the client did not declare the capability {method} needs");
            (code::METHOD_NOT_FOUND, msg, "undeclared_capability")
        } else if self
            .server_requests
            .insert(child_id.get().to_owned(), ())
            .is_err()
        {
            tracing::warn!(session = %short, "{method} refused: {MAX_SERVER_REQUESTS} requests already wait for this client's answer");
            let msg = "mcp-bridge could not deliver this request: too many requests already wait for the client's answer".to_owned();
            (code::INTERNAL_ERROR, msg, "slow_consumer")
        } else {
            return Ok(());
        };
        let err = crate::jsonrpc::error(Some(child_id.get()), refusal.0, &refusal.1, None);
        if let Err(e) = self.upstream.send_response(err) {
            tracing::warn!("could not refuse the child's {method}: {e}");
        }
        Err(refusal.2)
    }
}

/// All sessions of one HTTP face.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<Arc<str>, Arc<Session>>>,
}

impl Sessions {
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.map).get(id).cloned()
    }
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn insert(&self, s: Arc<Session>) {
        lock(&self.map).insert(s.id.clone(), s);
    }
    /// End session `id` (deleted by its client, or expired): its tasks go with it
    /// (`crate::core::tasks::abandon`), since nobody else may reach them.
    pub fn remove(&self, id: &str) -> Option<Arc<Session>> {
        let s = lock(&self.map).remove(id);
        if let Some(s) = &s {
            s.close();
            if let (Some(book), Ok(rt)) = (
                s.upstream.task_book(),
                tokio::runtime::Handle::try_current(),
            ) {
                let owner = Some(s.id.clone());
                rt.spawn(async move {
                    let n = crate::core::tasks::abandon(&book, &owner).await;
                    if n > 0 {
                        tracing::info!(tasks = n, "a closed session's tasks were cancelled");
                    }
                });
            }
        }
        s
    }
    /// Remove sessions idle longer than `idle`; returns how many.
    pub fn expire(&self, idle: Duration) -> usize {
        let expired: Vec<Arc<str>> = lock(&self.map)
            .iter()
            .filter(|(_, s)| s.idle_for() > idle)
            .map(|(k, _)| k.clone())
            .collect();
        for id in &expired {
            self.remove(id);
        }
        expired.len()
    }
    pub fn close_all(&self) {
        let all: Vec<Arc<Session>> = lock(&self.map).drain().map(|(_, s)| s).collect();
        for s in all {
            s.close();
        }
    }
}
