//! `serve`, every form of it: the daemon. Plain `serve -- CMD` / `--demo` / `--upstream URL` is
//! a one-server [`Plan`] (`cli::plan::solo`: the server at `--path`, answering every request on the
//! listener itself); `--config FILE` / `--servers-json FILE` give several named servers behind
//! one set of listeners ([`router`]). Listeners are bound or adopted from systemd
//! (`LISTEN_FDS`), the readiness protocol ([`notify`]), and SIGHUP reload: added servers start,
//! removed ones drain and stop, changed ones restart (the new child starts before the old one
//! drains), unchanged ones are not touched; auth settings are rebuilt and swapped into every
//! running face (`auth::AuthSlot`) (unchanged ones re-read token files and JWKS as parts of the
//! same pass of `crate::reload`); a configuration that does not load is rejected with a log line
//! and the running one stays.
//! Plain `serve` gets the same readiness protocol and SIGHUP (its plan is rebuilt from the
//! flags, so token files, JWKS, certificates and a url server's token are read again).

pub mod notify;
mod reload;
pub mod router;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::auth::Prepared;
use crate::cli::plan::Given;
use crate::cli::{CheckConfigArgs, ServeArgs};
use crate::cluster::Cluster;
use crate::config::{self, Plan, ServerSpec, Sources};
use crate::metrics::Metrics;
use crate::reload::{Hangups, Part, Reloader};
use router::{Router, Routes, ServerRt};

const EX_USAGE: u8 = 64;
const EX_CONFIG: u8 = 78;

/// `check-config --explain IDENTITY`: the `[[policy]]` rules that apply to that caller, per
/// endpoint (64 when the identity is not one).
fn explain(plan: &Plan, who: &str) -> ExitCode {
    let id = match config::policy::parse_identity(who) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("mcp-bridge check-config: --explain {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    for s in &plan.servers {
        if let config::Target::Endpoint(e) = &s.target {
            println!("endpoint {} ({}) for {who}:", s.name, s.path);
            for l in config::policy::explain(&e.policy, &id) {
                println!("  {l}");
            }
        }
    }
    ExitCode::SUCCESS
}

/// `mcp-bridge check-config FILE`: 0 when the daemon would start with it, 78 and the error
/// otherwise. Token files and certificates are read too.
pub fn check_config(a: &CheckConfigArgs) -> ExitCode {
    let sources = Sources {
        config: Some(a.file.clone()),
        servers_json: a.servers_json.clone(),
    };
    let checked = config::load(&sources).and_then(|(plan, notes)| {
        if plan.servers.is_empty() {
            return Err(no_servers());
        }
        crate::auth::prepare(&plan.auth, auth_host(&plan.listen))?;
        // The advertise URL may come from the flag of each replica: check what the file has.
        crate::cluster::check(
            plan.cluster_key_file.as_deref(),
            plan.advertise_url.as_deref(),
        )?;
        Ok((plan, notes))
    });
    match checked {
        Ok((plan, notes)) => {
            for n in notes {
                eprintln!("note: {n}");
            }
            let (eps, servers): (Vec<&ServerSpec>, Vec<&ServerSpec>) = plan
                .servers
                .iter()
                .partition(|s| matches!(s.target, crate::config::Target::Endpoint(_)));
            let names = |v: &[&ServerSpec]| {
                v.iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let plural = |n: usize| if n == 1 { "" } else { "s" };
            let mut line = format!(
                "{}: ok ({} server{}: {}",
                a.file.display(),
                servers.len(),
                plural(servers.len()),
                names(&servers)
            );
            if !eps.is_empty() {
                let paths: Vec<String> = eps
                    .iter()
                    .map(|e| format!("{} at {}", e.name, e.path))
                    .collect();
                line.push_str(&format!(
                    "; {} endpoint{}: {}",
                    eps.len(),
                    plural(eps.len()),
                    paths.join(", ")
                ));
            }
            println!("{line})");
            match &a.explain {
                Some(who) => explain(&plan, who),
                None => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("mcp-bridge check-config: {e}");
            ExitCode::from(EX_CONFIG)
        }
    }
}

fn no_servers() -> String {
    "no servers configured: add [servers.<name>] tables or --servers-json".into()
}

/// The address the auth module judges exposure by: the first non-loopback one, if any.
fn auth_host(addrs: &[SocketAddr]) -> IpAddr {
    addrs
        .iter()
        .map(|a| a.ip())
        .find(|ip| !ip.is_loopback())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// No file: plain `serve`, one server from the flags.
fn is_solo(sources: &Sources) -> bool {
    sources.config.is_none() && sources.servers_json.is_none()
}

/// Read the sources and apply the explicit flags (plain `serve`: the flags alone).
fn load_plan(sources: &Sources, args: &ServeArgs, given: &Given) -> Result<Plan, String> {
    if is_solo(sources) {
        return crate::cli::plan::solo(args);
    }
    let (mut plan, notes) = config::load(sources)?;
    for n in notes {
        warn!("{n}");
    }
    crate::cli::plan::apply_overrides(&mut plan, args, given)?;
    if plan.servers.is_empty() {
        return Err(no_servers());
    }
    Ok(plan)
}

/// Listeners passed by the service manager (`LISTEN_FDS`, `LISTEN_PID`). Must run before any
/// thread starts: it removes those variables from the environment.
fn adopt_listeners() -> Result<Vec<std::net::TcpListener>, String> {
    let mut fds = listenfd::ListenFd::from_env();
    let mut out = Vec::new();
    for i in 0..fds.len() {
        match fds.take_tcp_listener(i) {
            Ok(Some(l)) => out.push(l),
            Ok(None) => {}
            Err(e) => return Err(format!("socket activation: passed fd {}: {e}", 3 + i)),
        }
    }
    Ok(out)
}

/// `serve`: with a configuration file, or one server from the flags.
pub fn main(args: ServeArgs, given: Given) -> ExitCode {
    let sources = Sources {
        config: args.config.clone(),
        servers_json: args.servers_json.clone(),
    };
    let solo = is_solo(&sources);
    let checked = if solo {
        crate::cli::plan::check_solo(&args, &given)
    } else {
        crate::cli::plan::check_overrides(&given)
    };
    if let Err(e) = checked {
        eprintln!("mcp-bridge serve: {e}");
        return ExitCode::from(EX_USAGE);
    }
    // Plain `serve`'s settings are flags: a bad one is a usage error. A file's is a
    // configuration error.
    let bad_input = ExitCode::from(if solo { EX_USAGE } else { EX_CONFIG });
    let plan = match load_plan(&sources, &args, &given) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return bad_input;
        }
    };
    // Single-threaded still: the environment may be edited here (LISTEN_*, the token variable).
    let adopted = match adopt_listeners() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let mut exposed: Vec<SocketAddr> = adopted.iter().filter_map(|l| l.local_addr().ok()).collect();
    if exposed.is_empty() {
        exposed = plan.listen.clone();
    }
    let security = match crate::auth::prepare(&plan.auth, auth_host(&exposed)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return bad_input;
        }
    };
    let cluster = match plan.cluster().and_then(|c| {
        c.map(|(file, url)| Cluster::load(file, url, plan.cluster_ca_file.as_deref()).map(Arc::new))
            .transpose()
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-bridge serve: {e}");
            return bad_input;
        }
    };
    let rt = match crate::app::runtime(crate::app::serve_workers(args.workers)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let metrics = Arc::new(Metrics::new());
    let audit = match plan
        .audit
        .as_ref()
        .map(|a| crate::audit::Audit::open(a, metrics.clone()))
    {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            eprintln!("mcp-bridge serve: {e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let d = Daemon {
        audit,
        reloader: Reloader::new(
            Some(&metrics),
            &TaskTracker::new(),
            &CancellationToken::new(),
        ),
        sources,
        args,
        given,
        security: Mutex::new(Arc::new(security)),
        metrics: metrics.clone(),
        bound: Vec::new(),
        loopback: true,
        plan: Mutex::new(plan),
        cluster,
        router: Router::new(Routes::default(), metrics),
        drains: TaskTracker::new(),
        hurry: CancellationToken::new(),
    };
    rt.block_on(run(d, adopted, bad_input))
}

/// Run `f`, which reads files, on the blocking pool: no runtime thread waits on the disk
/// while the daemon serves (a reload runs beside the traffic).
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("a blocking task failed: {e}"))?
}

/// Why a server did not start.
enum StartError {
    /// Its auth settings (for plain `serve`, flags).
    Auth(String),
    /// Its upstream could not be set up.
    Upstream(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Auth(m) | StartError::Upstream(m) => f.write_str(m),
        }
    }
}

/// The running daemon.
struct Daemon {
    sources: Sources,
    args: ServeArgs,
    given: Given,
    /// Auth and TLS in force; every server's face gets a copy. Replaced by a reload that
    /// changes the auth settings (the certificate object stays: it reloads itself).
    security: Mutex<Arc<Prepared>>,
    metrics: Arc<Metrics>,
    /// What SIGHUP reloads: the configuration (registered first), then every certificate,
    /// token file and JWKS in the order the servers registered them.
    reloader: Arc<Reloader>,
    bound: Vec<SocketAddr>,
    loopback: bool,
    /// The configuration running now.
    plan: Mutex<Plan>,
    /// This replica's part in a cluster (read at start; a reload keeps it).
    cluster: Option<Arc<Cluster>>,
    router: Arc<Router>,
    /// Servers draining after a reload removed or replaced them.
    drains: TaskTracker,
    /// Cancelled at shutdown: drains stop waiting.
    hurry: CancellationToken,
    /// The endpoints' audit log (`[audit]`; its settings change only on restart).
    audit: Option<Arc<crate::audit::Audit>>,
}

impl Daemon {
    fn plan(&self) -> Plan {
        self.plan.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn security(&self) -> Arc<Prepared> {
        self.security
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The address whose port goes into default canonical URLs.
    fn first_bound(&self) -> SocketAddr {
        self.bound
            .first()
            .copied()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// A server's endpoint as far as auth goes: its canonical URL when `public_url` is set
    /// (plain `serve`: `--resource-url` is the endpoint's whole URL and stays as it is).
    fn endpoint(&self, security: &Prepared, spec: &ServerSpec, plan: &Plan) -> Prepared {
        let resource = plan
            .public_url
            .as_ref()
            .map(|u| format!("{}{}", u.trim_end_matches('/'), spec.path));
        security.for_endpoint(resource)
    }

    /// Start one server's upstream and face.
    async fn start_server(
        &self,
        spec: &ServerSpec,
        plan: &Plan,
        security: &Prepared,
        running: &BTreeMap<String, Arc<ServerRt>>,
    ) -> Result<Arc<ServerRt>, StartError> {
        // Named servers say which one failed; plain `serve` has only the one.
        let named = |e: String| {
            if plan.solo {
                e
            } else {
                format!("server {:?}: {e}", spec.name)
            }
        };
        let mut http = http_config(spec, &plan.allow_origins, self.loopback);
        http.metrics_on_main = plan.metrics_on_main;
        http.cluster = self.cluster.clone();
        let http = self
            .endpoint(security, spec, plan)
            .finish(http, self.first_bound(), &self.reloader)
            .await
            .map_err(|e| StartError::Auth(named(e)))?;
        // Off the runtime's threads: a remote upstream reads its CA file, the system's roots
        // and its stored OAuth login (at start, and when a reload starts a server).
        let (spec, origins, metrics) = (
            spec.clone(),
            plan.allow_origins.clone(),
            self.metrics.clone(),
        );
        let crate::config::Target::Endpoint(e) = &spec.target else {
            return off_runtime(move || ServerRt::start(spec, origins, http, metrics))
                .await
                .map_err(|e| StartError::Upstream(named(e)));
        };
        // An endpoint merges servers started before it (they come first in the plan).
        let mut members = Vec::new();
        for m in &e.members {
            match running.get(m) {
                Some(rt) => members.push(rt.clone()),
                None => {
                    return Err(StartError::Upstream(named(format!(
                        "member {m:?} is not running"
                    ))))
                }
            }
        }
        let wait = spec.limits.start_wait;
        let audit = self.audit.clone();
        let rt = ServerRt::start_endpoint(spec, members, origins, http, metrics, audit)
            .map_err(|e| StartError::Upstream(named(e)))?;
        if let Some((agg, _)) = &rt.endpoint {
            if let Err(e) = agg.check_names(wait).await {
                rt.drain_and_stop(std::time::Duration::ZERO, &self.hurry)
                    .await;
                return Err(StartError::Upstream(named(e)));
            }
        }
        Ok(rt)
    }

    fn status(&self) -> String {
        let routes = self.router.current();
        let addrs: Vec<String> = self.bound.iter().map(|a| a.to_string()).collect();
        format!(
            "serving {} server{} on {}",
            routes.servers.len(),
            if routes.servers.len() == 1 { "" } else { "s" },
            addrs.join(", ")
        )
    }
}

/// Bind, start every server, serve until SIGTERM/SIGINT (reloading on SIGHUP), drain, stop.
/// `bad_input` is the exit code for a server whose auth settings cannot be set up.
async fn run(mut d: Daemon, adopted: Vec<std::net::TcpListener>, bad_input: ExitCode) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    let mut hup = Hangups::watch();
    let plan = d.plan();
    let listeners = match bind_listeners(&plan, adopted).await {
        Ok(l) => l,
        Err(code) => return code,
    };
    d.bound = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    d.loopback = d.bound.iter().all(|a| a.ip().is_loopback());
    // The metrics listener and the watchdog: stopped and waited for last (`background`).
    // Scrapes go on through the drain; this listener closes once everything else stopped.
    let (metrics_stop, background) = (CancellationToken::new(), TaskTracker::new());
    if let Err(code) = serve_metrics(&plan, &d.metrics, &metrics_stop, &background).await {
        return code;
    }
    let d = Arc::new(d);
    // First in every pass: a changed configuration replaces auth before the parts re-read.
    d.reloader
        .register(Part::Config, &d, |d| async move { d.reload_config().await });
    if let Some(a) = &d.audit {
        d.reloader.register(Part::Audit, a, |a| async move {
            a.reopen();
            Ok("audit log reopened".to_owned())
        });
    }
    if let Err(code) = start_all(&d, &plan, bad_input).await {
        stop_background(&d, &metrics_stop, &background).await;
        return code;
    }
    let stop_accepting = CancellationToken::new();
    let loops = spawn_accept_loops(&d, &plan, listeners, &stop_accepting);
    info!("servers: {}", router::describe(&d.router.current()));
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    info!(workers, "runtime: {workers} worker thread(s) (--workers)");
    announce_ready(&d).await;
    if let Some(p) = notify::watchdog_period() {
        info!(period_ms = p.as_millis() as u64, "systemd watchdog enabled");
        // Ends with the metrics listener, at the very end.
        notify::spawn_watchdog(p, metrics_stop.clone(), &background);
    }

    loop {
        tokio::select! {
            _ = term.recv() => { info!("SIGTERM received"); break; }
            _ = int.recv() => { info!("SIGINT received"); break; }
            _ = hup.recv() => d.on_hangup().await,
        }
    }

    let mut loops = loops;
    shut_down(&d, &plan, &mut loops, stop_accepting).await;
    // Not aborted: an accept loop ends on its own clocks (the grace, then a moment to write
    // the last answers, then it closes what is left), and an aborted loop would leave its
    // connections' tasks behind.
    while loops.join_next().await.is_some() {}
    stop_background(&d, &metrics_stop, &background).await;
    info!("shutdown complete");
    ExitCode::SUCCESS
}

/// How long the tasks that outlive the servers (the metrics listener and its connections, the
/// watchdog, the reload triggers) may take to end once told to.
const BACKGROUND_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Stop what runs beside the servers (the metrics listener, the watchdog, the auth parts'
/// reload triggers) and wait for it, bounded.
async fn stop_background(d: &Daemon, stop: &CancellationToken, background: &TaskTracker) {
    stop.cancel();
    background.close();
    if tokio::time::timeout(BACKGROUND_WAIT, background.wait())
        .await
        .is_err()
    {
        warn!("the metrics listener did not end in time");
    }
    if !d.reloader.shut_down(BACKGROUND_WAIT).await {
        warn!("a certificate check or JWKS refresh did not end in time");
    }
}

/// The listeners: the ones the service manager passed (socket activation), else `[listen]`.
async fn bind_listeners(
    plan: &Plan,
    adopted: Vec<std::net::TcpListener>,
) -> Result<Vec<TcpListener>, ExitCode> {
    let mut listeners = Vec::new();
    if adopted.is_empty() {
        for a in &plan.listen {
            match TcpListener::bind(a).await {
                Ok(l) => listeners.push(l),
                Err(e) => {
                    error!("cannot bind {a}: {e}");
                    return Err(ExitCode::from(EX_CONFIG));
                }
            }
        }
        return Ok(listeners);
    }
    info!(
        count = adopted.len(),
        "using the listening sockets passed by the service manager; [listen] addresses are not bound"
    );
    for l in adopted {
        match l
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(l))
        {
            Ok(l) => listeners.push(l),
            Err(e) => {
                error!("cannot adopt a passed listener: {e}");
                return Err(ExitCode::from(EX_CONFIG));
            }
        }
    }
    Ok(listeners)
}

/// The metrics listener of `[metrics] listen`, if any, until `stop`.
async fn serve_metrics(
    plan: &Plan,
    metrics: &Arc<Metrics>,
    stop: &CancellationToken,
    tasks: &TaskTracker,
) -> Result<(), ExitCode> {
    let Some(addr) = plan.metrics_listen else {
        return Ok(());
    };
    match TcpListener::bind(addr).await {
        Ok(l) => {
            let at = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
            info!("metrics on http://{at}/metrics");
            tasks.spawn(crate::face::metrics_http::serve(
                l,
                metrics.clone(),
                stop.clone(),
            ));
            Ok(())
        }
        Err(e) => {
            error!("cannot bind the metrics listener {addr}: {e}");
            Err(ExitCode::from(EX_CONFIG))
        }
    }
}

/// Start every server of the plan and route to them; on a failure stop those started.
async fn start_all(d: &Daemon, plan: &Plan, bad_input: ExitCode) -> Result<(), ExitCode> {
    let mut servers = BTreeMap::new();
    for spec in &plan.servers {
        match d.start_server(spec, plan, &d.security(), &servers).await {
            Ok(rt) => {
                servers.insert(spec.name.clone(), rt);
            }
            Err(e) => {
                error!("mcp-bridge serve: {e}");
                for rt in servers.values() {
                    rt.drain_and_stop(std::time::Duration::ZERO, &d.hurry).await;
                }
                return Err(match e {
                    StartError::Auth(_) => bad_input,
                    StartError::Upstream(_) => ExitCode::from(EX_CONFIG),
                });
            }
        }
    }
    d.router.replace(Routes {
        servers,
        default: plan.default_server.clone(),
        solo: plan.solo,
    });
    Ok(())
}

/// One bounded accept loop per listener, until `stop`.
fn spawn_accept_loops(
    d: &Daemon,
    plan: &Plan,
    listeners: Vec<TcpListener>,
    stop: &CancellationToken,
) -> tokio::task::JoinSet<()> {
    let scheme = d.security().scheme();
    let tls = d
        .router
        .current()
        .servers
        .values()
        .next()
        .and_then(|s| s.app.cfg.tls.clone());
    let mut loops = tokio::task::JoinSet::new();
    for l in listeners {
        let local = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        match plan.servers.first().filter(|_| plan.solo) {
            Some(one) => info!("listening on {scheme}://{local}{}", one.path),
            None => info!("listening on {scheme}://{local}/ (named servers under /servers/)"),
        }
        let cfg = crate::face::accept::AcceptCfg {
            tls: tls.clone(),
            grace: plan.shutdown_grace,
            metrics: d.metrics.clone(),
            limits: plan.conn,
            uncapped: router::UNCAPPED,
        };
        loops.spawn(router::accept_loop(l, d.router.clone(), cfg, stop.clone()));
    }
    loops
}

/// READY once the listeners are up and every child answered its probe (or its start wait
/// ran out: then it is named as down in STATUS and in /readyz).
async fn announce_ready(d: &Arc<Daemon>) {
    let waits: Vec<_> = d
        .router
        .current()
        .servers
        .values()
        .map(|rt| {
            let rt = rt.clone();
            async move {
                let wait = rt.spec.limits.start_wait;
                let ok = rt.app.upstream.info(wait).await.is_ok();
                (rt.name().to_owned(), ok)
            }
        })
        .collect();
    let down: Vec<String> = futures_util::future::join_all(waits)
        .await
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| n)
        .collect();
    if down.is_empty() {
        notify::ready(&d.status());
        info!("ready: {}", d.status());
    } else {
        let s = format!("{}; not ready: {}", d.status(), down.join(", "));
        warn!("{s}");
        notify::ready(&s);
    }
}

/// Ordered shutdown: STOPPING, no new connections (a replica first serves what it has in
/// flight, forwards from other replicas included), drain the calls, stop the children, all
/// within `--shutdown-grace`.
async fn shut_down(
    d: &Arc<Daemon>,
    plan: &Plan,
    loops: &mut tokio::task::JoinSet<()>,
    stop_accepting: CancellationToken,
) {
    notify::stopping();
    d.metrics.set_shutting_down();
    info!(
        "shutting down: no new connections; draining calls for up to {} ms",
        plan.shutdown_grace.as_millis()
    );
    let routes = d.router.current();
    for rt in routes.servers.values() {
        rt.app.stopping.cancel();
    }
    let until = tokio::time::Instant::now() + plan.shutdown_grace;
    if d.cluster.is_some() {
        // A replica: the others forward its sessions' requests and its parked calls' retries
        // here (a client's answer to a running call's question among them), so it keeps
        // accepting while it has requests in flight, within the grace; `/readyz` already
        // says 503, so balancers that check it send nothing new.
        let busy = || routes.servers.values().any(|rt| rt.in_flight() > 0);
        let all_idle = async {
            // Each server's count is watched (no polling); one that is busy again by the
            // time the last is idle is waited for once more.
            while busy() {
                futures_util::future::join_all(routes.servers.values().map(|rt| rt.idle())).await;
            }
        };
        let _ = tokio::time::timeout_at(until, all_idle).await;
    }
    stop_accepting.cancel();
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    // The children stop once the loops are done or the grace is over, whichever is first;
    // a loop still closing its connections then is waited for after (`run`).
    let _ = tokio::time::timeout(left, async { while loops.join_next().await.is_some() {} }).await;
    d.hurry.cancel();
    info!("stopping child processes");
    let stops: Vec<_> = routes
        .servers
        .values()
        .map(|rt| rt.drain_and_stop(std::time::Duration::ZERO, &d.hurry))
        .collect();
    futures_util::future::join_all(stops).await;
    d.drains.close();
    d.drains.wait().await;
}

/// A server's HTTP face configuration from its spec (auth, TLS, replicas and metrics are
/// filled in by the caller);
/// `loopback`: every listener is on a loopback address.
fn http_config(
    spec: &ServerSpec,
    allow_origins: &[String],
    loopback: bool,
) -> crate::face::http::HttpConfig {
    crate::face::http::HttpConfig {
        path: spec.path.clone(),
        allow_origins: allow_origins.to_vec(),
        loopback_only_host: loopback,
        max_body: spec.limits.max_body,
        call_timeout: spec.limits.call_timeout,
        start_wait: spec.limits.start_wait,
        park_timeout: spec.limits.park_timeout,
        attribution_wait: spec.limits.attribution_wait,
        session_idle: spec.limits.session_timeout,
        max_sessions: spec.limits.max_sessions,
        isolation_session: spec.isolation == config::Isolation::Session,
        keepalive: spec.limits.keepalive,
        replay: spec.limits.replay,
        auth: Default::default(),
        tls: None,
        metrics_on_main: false,
        cluster: None,
    }
}
