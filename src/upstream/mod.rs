//! Upstreams: the peers that answer: a supervised stdio child process (`serve`) or a remote
//! Streamable HTTP server (`connect`, `serve --upstream URL`).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::call::SharedUpstream;
use crate::metrics::Metrics;

pub mod aggregate;
pub mod child;
pub mod observe;
pub mod pool;
pub mod remote;
pub mod remote_upstream;

/// What a face is put in front of: how to reach the peer that answers.
#[derive(Debug, Clone)]
pub enum UpstreamSpec {
    /// A stdio child process the bridge spawns and supervises.
    Child(child::ChildConfig),
    /// A remote Streamable HTTP server (`--upstream URL`, `url = "…"` in the config).
    Remote(remote::RemoteConfig),
    /// Other servers of the daemon merged behind one path ([`aggregate`]); started by the
    /// daemon with its members' upstreams, never by [`launch`].
    Endpoint(crate::config::endpoint::EndpointSpec),
}

impl UpstreamSpec {
    /// The child's settings, when the upstream is a child process.
    pub fn child(&self) -> Option<&child::ChildConfig> {
        match self {
            UpstreamSpec::Child(c) => Some(c),
            UpstreamSpec::Remote(_) | UpstreamSpec::Endpoint(_) => None,
        }
    }
}

/// Starts a child of its own for one 2025 session (`--isolation session`).
pub type SessionSpawner = Arc<dyn Fn(Arc<str>) -> SharedUpstream + Send + Sync>;

/// A started upstream, as a face holds it.
pub struct Launched {
    /// The upstream every caller shares.
    pub shared: SharedUpstream,
    /// Set for child processes: how to start one more for a single session.
    pub spawn_for_session: Option<SessionSpawner>,
    /// Set for a pool: how a 2025 session gets the one child it stays on.
    pub pin_for_session: Option<SessionSpawner>,
}

/// Start the upstream `spec` describes for server `name` on `tracker`; it stops when `stop`
/// is cancelled.
pub fn launch(
    name: &str,
    spec: UpstreamSpec,
    metrics: &Arc<Metrics>,
    stop: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<Launched, String> {
    match spec {
        UpstreamSpec::Child(cfg) if cfg.pool.is_pool() => {
            let pool = pool::ChildPool::start(
                cfg.clone(),
                cfg.pool,
                metrics.clone(),
                stop.child_token(),
                tracker,
            );
            let pins = pool.clone();
            let pin: SessionSpawner = Arc::new(move |_session: Arc<str>| pins.pin());
            Ok(Launched {
                shared: pool,
                spawn_for_session: None,
                pin_for_session: Some(pin),
            })
        }
        UpstreamSpec::Child(cfg) => {
            let shared = child::ChildUpstream::spawn(
                cfg.clone(),
                child::Role::Shared,
                metrics.clone(),
                stop.child_token(),
                tracker,
            );
            let (metrics, stop, tracker) = (metrics.clone(), stop.clone(), tracker.clone());
            let spawn: SessionSpawner = Arc::new(move |session: Arc<str>| {
                let u = child::ChildUpstream::spawn(
                    cfg.clone(),
                    child::Role::Session(session),
                    metrics.clone(),
                    stop.child_token(),
                    &tracker,
                );
                Arc::new(u) as SharedUpstream
            });
            Ok(Launched {
                shared: Arc::new(shared),
                spawn_for_session: Some(spawn),
                pin_for_session: None,
            })
        }
        UpstreamSpec::Endpoint(_) => {
            Err("an endpoint is started with its members (daemon::router)".into())
        }
        UpstreamSpec::Remote(cfg) => {
            // Many callers share the remote: its GET stream's requests belong to none of them.
            let inbox = crate::core::inbox::Inbox::shared();
            let shared = remote_upstream::RemoteUpstream::start(
                name, cfg, None, inbox, metrics, stop, tracker,
            )?;
            Ok(Launched {
                shared,
                spawn_for_session: None,
                pin_for_session: None,
            })
        }
    }
}
