//! The HTTP face's shared state: how it is configured (`HttpConfig`) and what every request
//! handler reaches through one `Arc<App>` (the upstream, 2025 sessions, parked 2026 calls,
//! metrics, the shutdown tokens).
//!
//! It sits at the bottom of the face's module tree: the listener (`http`), the POST
//! classification (`post`), the 2025 session endpoints (`session_http`) and the call runner
//! (`run`) all read it, and it reads none of them, so the tree points one way.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::call::{CallHandle, SharedUpstream};
use crate::face::session::Sessions;
use crate::metrics::Metrics;
use crate::upstream::SessionSpawner;

/// How one HTTP face behaves.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub path: String,
    /// Exact origins allowed besides loopback ones (`*` allows all; `*.example.com` a suffix).
    pub allow_origins: Vec<String>,
    /// Check `Host` against loopback names (set when bound to a loopback address).
    pub loopback_only_host: bool,
    pub max_body: usize,
    pub call_timeout: Duration,
    /// How long a call waits for a (re)starting child.
    pub start_wait: Duration,
    /// How long a parked 2026 call waits for its client's retry (`--park-timeout`).
    pub park_timeout: Duration,
    /// How long a retried call waits to be resumed while its 2025 child runs another
    /// client's call that may be asked (`--attribution-wait`).
    pub attribution_wait: Duration,
    pub session_idle: Duration,
    pub max_sessions: usize,
    pub isolation_session: bool,
    pub keepalive: Duration,
    /// SSE resumability of 2025-11-25 sessions (`face::replay`).
    pub replay: crate::config::limits::Replay,
    /// Authentication on the MCP endpoint (none: open).
    pub auth: crate::auth::AuthSlot,
    /// TLS termination (none: plain HTTP).
    pub tls: Option<Arc<crate::auth::tls::Tls>>,
    /// Also serve `/metrics` on this listener (behind the same guards).
    pub metrics_on_main: bool,
    /// Replicas (`--cluster-key-file`): session ids and states name their owner, requests
    /// are forwarded to it (`face::hop`).
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
}

/// Shared state of the face.
pub struct App {
    pub cfg: HttpConfig,
    pub server: Arc<str>,
    pub upstream: SharedUpstream,
    /// Starts a child of its own for a 2025 session (`--isolation session`).
    pub spawn_for_session: Option<SessionSpawner>,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    /// What the face's callers send and are answered, counted as on every face.
    pub meter: crate::core::meter::Meter,
    /// Cancelled when shutdown begins: long-lived streams end, calls may still finish.
    pub stopping: CancellationToken,
    /// Cancelled when children must stop (after the drain).
    pub children: CancellationToken,
    pub tracker: TaskTracker,
    /// 2026 clients' calls to a 2025 child, parked while the client gathers input.
    pub parked: Arc<crate::era::mrtr::ParkStore<CallHandle>>,
    pub signer: Arc<crate::era::mrtr::StateSigner>,
    /// The shared child's resource subscriptions held for 2026 listeners.
    pub resource_subs: Arc<crate::era::notifications::ResourceSubs>,
}

impl App {
    /// The face of one server in front of `launched` (started by whoever owns the server:
    /// the face only holds it; its children stop when `children` is cancelled). Fails (with
    /// a message for the operator) when the configuration cannot hold.
    pub fn start(
        name: &str,
        cfg: HttpConfig,
        launched: crate::upstream::Launched,
        metrics: Arc<Metrics>,
        stopping: CancellationToken,
        children: CancellationToken,
        tracker: TaskTracker,
    ) -> Result<Arc<App>, String> {
        // A pool pins each 2025 session to one child; `isolation = session` gives it its own.
        let spawn_for_session = match (cfg.isolation_session, launched.spawn_for_session) {
            (false, _) => launched.pin_for_session,
            (true, Some(s)) => Some(s),
            (true, None) => {
                return Err(
                    "isolation = \"session\" needs a child process (a remote is shared)".into(),
                )
            }
        };
        let signer = match &cfg.cluster {
            Some(c) => crate::era::mrtr::StateSigner::for_cluster(
                &c.state_keys(),
                c.sealed_me().to_owned(),
            ),
            None => crate::era::mrtr::StateSigner::new(),
        };
        let server: Arc<str> = Arc::from(name);
        Ok(Arc::new(App {
            meter: crate::core::meter::Meter::new(metrics.clone(), server.clone()),
            server,
            cfg,
            upstream: launched.shared,
            spawn_for_session,
            sessions: Sessions::default(),
            metrics,
            stopping,
            children,
            tracker,
            parked: Arc::new(crate::era::mrtr::ParkStore::new(10_000)),
            signer: Arc::new(signer),
            resource_subs: Arc::default(),
        }))
    }
}
