//! Wiring: the runtime, start the upstream, serve the face on a listener, and shut both down
//! in order (stop accepting → drain in-flight calls → stop children).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use crate::face::http::{self, App, HttpConfig};
use crate::metrics::Metrics;
use crate::upstream::child::ChildConfig;
use crate::upstream::remote::{Remote, RemoteConfig};

/// The multi-threaded runtime every subcommand runs on (`workers`: None = one per core). On
/// failure the reason is on stderr and the exit code is returned.
pub fn runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    b.enable_all().build().map_err(|e| {
        eprintln!("mcp-bridge: cannot start the runtime: {e}");
        std::process::ExitCode::FAILURE
    })
}

/// Run `connect`: the stdio face on our stdin/stdout, the remote behind it.
pub async fn run_connect(
    cfg: RemoteConfig,
    max_line: usize,
    shutdown: CancellationToken,
) -> Result<(), String> {
    // One crypto provider for the process, installed explicitly.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let (tx, rx) = tokio::sync::mpsc::channel(crate::call::EVENT_QUEUE);
    let remote = Remote::new(cfg, tx)?;
    tracing::info!("connect: forwarding stdio to {}", remote.origin());
    crate::face::stdio::serve(
        remote,
        rx,
        tokio::io::stdin(),
        tokio::io::stdout(),
        max_line,
        shutdown,
    )
    .await;
    Ok(())
}

/// Run `serve` on `listener` until `shutdown` is cancelled.
pub async fn run_serve(
    child: ChildConfig,
    cfg: HttpConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
    grace: Duration,
) {
    run_serve_with(child, cfg, listener, None, shutdown, grace).await
}

/// Like [`run_serve`], also serving `/metrics` on `metrics_listener` when given.
pub async fn run_serve_with(
    child: ChildConfig,
    cfg: HttpConfig,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let metrics = Arc::new(Metrics::new());
    // Scrapes go on through the drain; the listener closes once everything else has stopped.
    let metrics_stop = CancellationToken::new();
    if let Some(l) = metrics_listener {
        tokio::spawn(crate::face::metrics_http::serve(
            l,
            metrics.clone(),
            metrics_stop.clone(),
        ));
    }
    let tracker = TaskTracker::new();
    let children = CancellationToken::new();
    let stopping = CancellationToken::new();
    let name = child.name.clone();
    let app = match App::start(
        &name,
        cfg,
        crate::upstream::UpstreamSpec::Child(child),
        metrics,
        stopping.clone(),
        children.clone(),
        tracker.clone(),
    ) {
        Ok(app) => app,
        Err(e) => {
            tracing::error!("{e}");
            return;
        }
    };
    let face = tokio::spawn(http::serve(listener, app.clone(), grace));
    shutdown.cancelled().await;
    info!(
        "shutting down: no new connections; draining calls for up to {} ms",
        grace.as_millis()
    );
    app.metrics.set_shutting_down();
    stopping.cancel();
    let _ = face.await;
    info!("stopping child processes");
    children.cancel();
    tracker.close();
    tracker.wait().await;
    metrics_stop.cancel();
    info!("shutdown complete");
}
