//! Wiring: the runtimes the subcommands run on, and `connect`'s stdio face in front of its
//! remote. `serve` (every form) is the daemon in `crate::daemon`.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::upstream::remote::RemoteConfig;
use crate::upstream::remote_upstream::{self, RemoteUpstream};

/// The runtime a subcommand runs on (multi-threaded, or `connect`'s current-thread), and one check at the
/// end of each `block_on` that nothing the subcommand spawned outlives it.
pub struct Runtime(tokio::runtime::Runtime);

/// How long the runtime, once the subcommand is done, waits for blocking work still running
/// before the process goes on to exit: a read of a stdin that is not a pipe (a terminal;
/// `crate::pipes`) cannot be interrupted and would otherwise hold the process until the
/// host closes it.
const BLOCKING_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// How long the exit check lets tasks that have just finished be released (see
/// [`Runtime::block_on`]).
const SETTLE: std::time::Duration = std::time::Duration::from_millis(20);

impl Runtime {
    /// Run `f` to completion; then log how many tokio tasks are still alive. Every task the
    /// bridge spawns is owned (joined, aborted or tracked) and `f` is not a task itself, so
    /// the number is 0 unless something leaked (the shutdown tests read this line).
    ///
    /// A task counts as alive until tokio has released it, a few microseconds *after* its
    /// awaiter (a `JoinHandle`, a `TaskTracker`) has seen it finish; tokio has no signal for
    /// that release, so the check looks again (yielding the thread, bounded by `SETTLE`)
    /// while the count is above 0. A leaked task is still there after it.
    ///
    /// The runtime is then shut down, waiting at most `BLOCKING_WAIT` for blocking work.
    pub fn block_on<F: std::future::Future>(self, f: F) -> F::Output {
        let out = self.0.block_on(f);
        let m = self.0.metrics();
        let until = std::time::Instant::now() + SETTLE;
        while m.num_alive_tasks() > 0 && std::time::Instant::now() < until {
            std::thread::yield_now();
        }
        let alive = m.num_alive_tasks();
        if alive == 0 {
            tracing::info!(tasks = alive, "runtime: tasks alive at exit");
        } else {
            tracing::warn!(tasks = alive, "runtime: tasks alive at exit");
        }
        self.0.shutdown_timeout(BLOCKING_WAIT);
        out
    }
}

/// The multi-threaded runtime every subcommand but `connect` runs on (`workers`: None =
/// tokio's default, TOKIO_WORKER_THREADS or one per core). On failure the reason is on stderr and the exit code is returned.
pub fn runtime(workers: Option<usize>) -> Result<Runtime, std::process::ExitCode> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    build(b)
}

/// How many workers serve's runtime gets: `--workers`; else tokio's own default when
/// TOKIO_WORKER_THREADS is set (None: tokio reads it); else one per core less one, at least
/// one. The core left over is the stdio children's (and, on a small host, the clients'): with
/// a worker per core, every hand-off of a call (connection task → child writer → child →
/// reader → connection task) tended to wake the other, idle worker (a futex wake and a context
/// switch, ~30 % of serve's CPU at one client), and on two cores one worker answered 1.10× (one
/// client) to 1.39× (16 clients) the requests of two (benches/RESULTS.md, 2026-12-07).
pub fn serve_workers(flag: Option<u16>) -> Option<usize> {
    if let Some(n) = flag {
        return Some(usize::from(n));
    }
    if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    Some(cores.saturating_sub(1).max(1))
}

/// `connect`'s runtime: tokio's current-thread runtime, every task on the calling thread.
/// connect is one host's pipe in front of one remote; on two workers each hop of a call
/// (stdin → the face's task → the remote's task → hyper's connection → back) could wake the
/// other thread, and those wake-ups were most of a sequential call's cost over the floor
/// (benches/RESULTS.md, 2026-12-07). Blocking work (the OAuth store's files) still goes to
/// the blocking pool.
pub fn current_thread_runtime() -> Result<Runtime, std::process::ExitCode> {
    build(tokio::runtime::Builder::new_current_thread())
}

fn build(mut b: tokio::runtime::Builder) -> Result<Runtime, std::process::ExitCode> {
    b.enable_all().build().map(Runtime).map_err(|e| {
        eprintln!("mcp-bridge: cannot start the runtime: {e}");
        std::process::ExitCode::FAILURE
    })
}

/// Run `connect`: the stdio face on our stdin/stdout, the remote behind it.
/// `mcp-bridge auth login URL`: what connect does before its first answer (the era probe,
/// which meets the 401 and logs in through the OAuth client), then the remote's session is
/// ended. The login stays in the store for later runs. Ok: the remote's era.
pub async fn login_only(cfg: RemoteConfig) -> Result<&'static str, String> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let (events, _rx) = crate::call::event_queue(16);
    let remote =
        crate::upstream::remote::Remote::new(cfg, events, metrics, "login", Default::default())?;
    let probed = remote.probe_info().await;
    remote.shutdown().await;
    if probed.is_ok() && remote.logged_in() != Some(true) {
        return Err("the server answered without asking for a login: nothing to keep".into());
    }
    match probed {
        Ok((crate::protocol::Era::Legacy, _)) => Ok("2025 (sessions)"),
        Ok((crate::protocol::Era::Modern, _)) => Ok("2026-07-28"),
        Err(crate::call::Outcome::Failed(e)) => Err(e.to_string()),
        Err(crate::call::Outcome::Error(e)) | Err(crate::call::Outcome::Result(e)) => {
            Err(format!("the server answered the probe with {}", e.get()))
        }
    }
}

pub async fn run_connect(
    cfg: RemoteConfig,
    limits: crate::face::stdio::HostLimits,
    name: Option<&str>,
    metrics_listen: Option<std::net::SocketAddr>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    // One crypto provider for the process, installed explicitly.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let server = name
        .or(cfg.url.host())
        .unwrap_or("remote")
        .trim_matches(['[', ']'])
        .to_owned();
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let metrics_stop = CancellationToken::new();
    // Bound first (a bad address fails before anything starts), served once the upstream has
    // registered its series, so the first scrape already shows them at zero.
    let metrics_listener = match metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot bind the metrics listener {addr}: {e}"))?,
        ),
        None => None,
    };
    let (stop, tracker) = (CancellationToken::new(), TaskTracker::new());
    // The origin only: a URL's path or query may carry a secret.
    let origin = match (cfg.url.scheme_str(), cfg.url.host(), cfg.url.port_u16()) {
        (Some(s), Some(h), Some(p)) => format!("{s}://{h}:{p}"),
        (Some(s), Some(h), None) => format!("{s}://{h}"),
        _ => String::from("the remote"),
    };
    tracing::info!("connect: forwarding stdio to {origin}");
    // The host's `initialize` params: kept by the face, read by the remote's 2025 session.
    let hello = std::sync::Arc::new(crate::core::Hello::default());
    // The remote's session is the host's: what it asks on its GET stream goes to the host,
    // held back while the host reads slowly.
    let inbox = crate::core::inbox::Inbox::owned_by(remote_upstream::HOST_SESSION)
        .holding_back(remote_upstream::HOST_ROOM_WAIT);
    let upstream = RemoteUpstream::start(
        &server,
        cfg,
        Some(hello.clone()),
        inbox,
        &metrics,
        &stop,
        &tracker,
    )?;
    let metrics_task = metrics_listener.map(|l| {
        let at = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!("metrics on http://{at}/metrics");
        tokio::spawn(crate::face::metrics_http::serve(
            l,
            metrics.clone(),
            metrics_stop.clone(),
        ))
    });
    // The host's pipes on the reactor (no blocking-pool hop per read and write: `pipes`).
    let (input, output) = crate::pipes::open();
    crate::face::stdio::serve(
        upstream,
        hello,
        input,
        output,
        limits,
        crate::core::meter::Meter::new(metrics, std::sync::Arc::from(server.as_str())),
        shutdown,
    )
    .await;
    // O_NONBLOCK lives on descriptions the host shares: back to blocking before anything else.
    crate::pipes::restore();
    // The remote's session ends (a 2025 remote gets its DELETE), bounded.
    stop.cancel();
    tracker.close();
    if tokio::time::timeout(std::time::Duration::from_secs(10), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("the remote did not finish closing in time");
    }
    // Scrapes go on while the remote closes; then the listener and its connections end.
    metrics_stop.cancel();
    if let Some(mut t) = metrics_task {
        // Its connections end at the stop too; aborted only if that somehow takes longer.
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut t)
            .await
            .is_err()
        {
            tracing::warn!("the metrics listener did not end in time");
            t.abort();
            let _ = t.await;
        }
    }
    Ok(())
}
