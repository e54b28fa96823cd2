//! A stdio child process as an upstream: spawn it in its own process group, probe its era,
//! carry calls to it under bridge-minted ids and progress tokens, route what it writes back,
//! restart it with backoff when it dies, and stop it with the close-stdin → SIGTERM → SIGKILL
//! ladder.
//!
//! Tasks per process: one stdin writer (bounded queue), one stdout reader, one stderr drain,
//! all owned by the supervisor task that also waits for the exit.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::call::{
    sinks, Call, CallControl, CallCtx, CallEvent, CallHandle, CallSinks, Cancel, Canceller,
    Outcome, Upstream, UpstreamEvent, UpstreamInfo,
};
use crate::error::BridgeError;
use crate::framing::{Line, LineDecoder};
use crate::jsonrpc::{self, Envelope, Fields, Kind};
use crate::metrics::Metrics;
use crate::protocol::{self, Era};

/// How to start and treat one child.
#[derive(Debug, Clone)]
pub struct ChildConfig {
    /// Server name for logs and metrics.
    pub name: String,
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Extra environment (`-e KEY=VALUE`).
    pub env: Vec<(String, String)>,
    /// Pass the bridge's whole environment instead of the safe baseline.
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    /// Longest stdout line accepted; longer ones are skipped and counted.
    pub max_line: usize,
    /// How long to wait for the `server/discover` probe and for `initialize`.
    pub probe_timeout: Duration,
    /// close stdin → wait this long → SIGTERM the group.
    pub stdin_grace: Duration,
    /// SIGTERM → wait this long → SIGKILL the group.
    pub term_grace: Duration,
    /// Restart backoff ceiling.
    pub max_backoff: Duration,
}

/// Variables a child gets by default: enough to find programs and behave sanely, nothing else.
const SAFE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "NODE_PATH",
    "NVM_DIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "RUST_LOG",
];

struct Pending {
    sinks: Option<CallSinks>,
    method: Arc<str>,
    client_era: Era,
    session: Option<Arc<str>>,
    accepts_server_requests: bool,
    /// Rank of the lowest log level the caller wants, if it wants logs.
    log_rank: Option<usize>,
    /// The `tool` label of a `tools/call` (a listed name or `other`).
    tool: Option<Arc<str>>,
}

/// One running process.
struct Proc {
    stdin: mpsc::Sender<Bytes>,
    /// Cancelled to make the writer close the child's stdin.
    close_stdin: CancellationToken,
    pending: Mutex<HashMap<u64, Pending>>,
    info: RwLock<Option<UpstreamInfo>>,
    /// The log level set on this (2025) child by the bridge.
    log_floor: crate::notifications::LogFloor,
    /// tool name → (lowercase header name, property) for `Mcp-Param-*` checks.
    tool_headers: RwLock<HashMap<String, Vec<(String, String)>>>,
    /// Tool names from the last `tools/list`: the only ones used as metric labels.
    tool_names: RwLock<crate::metrics::ToolNames>,
    /// `tools/list_changed` seen and not yet re-read: 0 none, 1 a refresh runs, >1 one more.
    tools_changed: std::sync::atomic::AtomicUsize,
}

#[derive(Clone)]
enum State {
    Starting,
    Ready(Arc<Proc>),
    Stopped,
}

struct Inner {
    cfg: ChildConfig,
    owner_session: Option<Arc<str>>,
    state: watch::Sender<State>,
    events: broadcast::Sender<UpstreamEvent>,
    next_id: AtomicU64,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
}

/// Handle to a supervised child. Cheap to clone.
#[derive(Clone)]
pub struct ChildUpstream {
    inner: Arc<Inner>,
}

/// Cancels one call in the child after its handle is gone (a detached 2025 call).
struct ChildCancel {
    proc: Arc<Proc>,
    id: u64,
}

impl Cancel for ChildCancel {
    fn pending(&self) -> bool {
        lock(&self.proc.pending).contains_key(&self.id)
    }
    fn cancel(&self, reason: &str) -> bool {
        self.proc.cancel(self.id, reason)
    }
}

impl CallControl for CancelGuard {
    fn set_reason(&mut self, reason: &'static str) {
        self.reason = reason;
        // An explicit reason means: cancel now, even a detached call.
        self.detach_until = None;
    }
    fn detach_until(&mut self, deadline: Instant) {
        self.detach_until = Some(deadline);
    }
    fn upstream_id(&self) -> u64 {
        self.id
    }
    fn canceller(&self) -> Canceller {
        Canceller::new(Arc::new(ChildCancel {
            proc: self.proc.clone(),
            id: self.id,
        }))
    }
}

struct CancelGuard {
    proc: Arc<Proc>,
    id: u64,
    reason: &'static str,
    detach_until: Option<Instant>,
    metrics: Arc<Metrics>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(deadline) = self.detach_until {
            let proc = self.proc.clone();
            let id = self.id;
            // Only spawn when a runtime is there (always, in practice).
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let metrics = self.metrics.clone();
                rt.spawn(async move {
                    tokio::time::sleep_until(deadline.into()).await;
                    if proc.cancel(id, "timeout") {
                        metrics.cancelled("timeout");
                    }
                });
            }
            return;
        }
        if self.proc.cancel(self.id, self.reason) {
            if let Some(cause) = crate::call::cancel_cause(self.reason) {
                self.metrics.cancelled(cause);
            }
        }
    }
}

impl Proc {
    /// Remove a pending call and tell the child. Returns whether it was still pending.
    fn cancel(&self, id: u64, reason: &str) -> bool {
        let removed = lock(&self.pending).remove(&id).is_some();
        if removed {
            let params = serde_json::json!({ "requestId": id, "reason": reason }).to_string();
            let frame = jsonrpc::notification("notifications/cancelled", Some(&params));
            let _ = self.stdin.try_send(frame);
        }
        removed
    }

    fn info(&self) -> Option<UpstreamInfo> {
        self.info.read().ok().and_then(|g| g.clone())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ChildUpstream {
    /// Start supervising a child. It is spawned at once; calls wait until it is ready.
    pub fn spawn(
        cfg: ChildConfig,
        owner_session: Option<Arc<str>>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
        tracker: &tokio_util::task::TaskTracker,
    ) -> Self {
        let (state, _) = watch::channel(State::Starting);
        let (events, _) = broadcast::channel(256);
        metrics.register_server(&cfg.name);
        let inner = Arc::new(Inner {
            cfg,
            owner_session,
            state,
            events,
            next_id: AtomicU64::new(1),
            shutdown,
            metrics,
        });
        let this = Self { inner };
        let sup = this.clone();
        tracker.spawn(async move { sup.supervise().await });
        this
    }

    pub fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    pub fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        self.inner.events.subscribe()
    }

    /// Stop this child (used for per-session children).
    pub fn stop(&self) {
        self.inner.shutdown.cancel();
    }

    /// Wait until the child is ready (or stopped), up to `wait`.
    async fn ready(&self, wait: Duration) -> Result<Arc<Proc>, BridgeError> {
        // Fast path (every call while the child runs): no subscription, no timer.
        if let State::Ready(p) = &*self.inner.state.borrow() {
            return Ok(p.clone());
        }
        let mut rx = self.inner.state.subscribe();
        let fut = async {
            loop {
                match &*rx.borrow_and_update() {
                    State::Ready(p) => return Ok(p.clone()),
                    State::Stopped => return Err(BridgeError::ShuttingDown),
                    State::Starting => {}
                }
                if rx.changed().await.is_err() {
                    return Err(BridgeError::ShuttingDown);
                }
            }
        };
        match tokio::time::timeout(wait, fut).await {
            Ok(r) => r,
            Err(_) => Err(BridgeError::Unavailable(
                "the child process is not ready (starting or restarting)".into(),
            )),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(&*self.inner.state.borrow(), State::Ready(_))
    }

    /// What the probe learned, once ready.
    pub async fn info(&self, wait: Duration) -> Result<UpstreamInfo, BridgeError> {
        let p = self.ready(wait).await?;
        p.info()
            .ok_or_else(|| BridgeError::Unavailable("child not probed yet".into()))
    }

    /// Header annotations of a tool, from the child's last `tools/list`.
    pub fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        match &*self.inner.state.borrow() {
            State::Ready(p) => p
                .tool_headers
                .read()
                .ok()
                .and_then(|m| m.get(tool).cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Make a 2025 child log at least at `level` (it logs per process; the bridge filters per
    /// call). Only ever lowers the level.
    pub fn ensure_log_level(&self, level: &'static str) {
        let Some((level, _)) = protocol::log_level(level) else {
            return;
        };
        let State::Ready(proc) = &*self.inner.state.borrow() else {
            return;
        };
        if !proc.log_floor.lower(level) {
            return;
        }
        let params = serde_json::json!({ "level": level }).to_string();
        let call = Call {
            method: "logging/setLevel".into(),
            params: Some(jsonrpc::raw(&params)),
            ctx: CallCtx::modern(),
        };
        if let Ok(mut h) = self.start_on(proc, Era::Legacy, call, true) {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), &mut h.outcome).await;
            });
        }
    }

    /// Send a call to the child. Waits up to `wait` for a (re)starting child.
    pub async fn call(&self, call: Call, wait: Duration) -> Result<CallHandle, BridgeError> {
        let proc = self.ready(wait).await?;
        let era = proc.info().map(|i| i.era).unwrap_or(Era::Legacy);
        self.start_on(&proc, era, call, false)
    }

    /// Forward a 2025 client's response to a request the child made (the child's own id).
    pub fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        match &*self.inner.state.borrow() {
            State::Ready(p) => p.stdin.try_send(frame).map_err(|_| BridgeError::Overloaded),
            _ => Err(BridgeError::Unavailable("child restarting".into())),
        }
    }

    /// Forward a client notification as-is (e.g. `notifications/roots/list_changed`).
    pub fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        self.send_response(frame)
    }

    fn start_on(
        &self,
        proc: &Arc<Proc>,
        child_era: Era,
        call: Call,
        internal: bool,
    ) -> Result<CallHandle, BridgeError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let id_s = id.to_string();
        let stamp: Vec<(&str, &RawValue)> = if child_era == Era::Modern && !internal {
            call.ctx
                .stamp_meta
                .iter()
                .map(|(k, v)| (k.as_str(), &**v))
                .collect()
        } else {
            Vec::new()
        };
        let rewritten =
            jsonrpc::rewrite_request_params(call.params.as_deref(), Some(&id_s), &stamp);
        let params = rewritten
            .as_deref()
            .or(call.params.as_deref().map(RawValue::get));
        let frame = jsonrpc::request(&id_s, &call.method, params);
        let (s, events, outcome) = sinks();
        lock(&proc.pending).insert(
            id,
            Pending {
                sinks: Some(s),
                method: Arc::from(call.method.as_str()),
                client_era: if internal {
                    child_era
                } else {
                    call.ctx.client_era
                },
                session: call.ctx.session.clone(),
                accepts_server_requests: call.ctx.accepts_server_requests,
                log_rank: call
                    .ctx
                    .log_level
                    .and_then(protocol::log_level)
                    .map(|(_, r)| r),
                tool: crate::upstream::observe::tool_label(&proc.tool_names, &call),
            },
        );
        if proc.stdin.try_send(frame).is_err() {
            lock(&proc.pending).remove(&id);
            return Err(BridgeError::Overloaded);
        }
        Ok(CallHandle::new(
            events,
            outcome,
            Box::new(CancelGuard {
                proc: proc.clone(),
                id,
                reason: "client disconnected",
                detach_until: None,
                metrics: self.inner.metrics.clone(),
            }),
        ))
    }

    /// An internal request (probe, tools/list) with a timeout; returns the result or None.
    async fn internal(
        &self,
        proc: &Arc<Proc>,
        era: Era,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
    ) -> Option<Result<Box<RawValue>, Box<RawValue>>> {
        let call = Call {
            method: method.to_owned(),
            params: params.map(jsonrpc::raw),
            ctx: CallCtx::modern(),
        };
        let mut h = self.start_on(proc, era, call, true).ok()?;
        h.set_cancel_reason("timeout");
        match tokio::time::timeout(timeout, &mut h.outcome).await {
            Ok(Ok(Outcome::Result(r))) => Some(Ok(r)),
            Ok(Ok(Outcome::Error(e))) => Some(Err(e)),
            _ => None,
        }
    }

    async fn supervise(self) {
        let name = self.inner.cfg.name.clone();
        let mut backoff = Duration::from_millis(100);
        loop {
            if self.inner.shutdown.is_cancelled() {
                break;
            }
            let started = Instant::now();
            match self.run_once().await {
                Ok(true) => break, // stopped on purpose
                Ok(false) => {}
                Err(e) => warn!(server = %name, "child failed to start: {e}"),
            }
            self.inner.metrics.set_up(&name, false);
            let _ = self.inner.events.send(UpstreamEvent::Restarted);
            self.inner.metrics.child_restarted(&name);
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(100);
            }
            info!(server = %name, "restarting child in {} ms", backoff.as_millis());
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.inner.shutdown.cancelled() => break,
            }
            backoff = (backoff * 2).min(self.inner.cfg.max_backoff);
        }
        self.inner.metrics.set_up(&name, false);
        self.inner.state.send_replace(State::Stopped);
    }

    fn command(&self) -> Command {
        let cfg = &self.inner.cfg;
        let mut cmd = Command::new(&cfg.command);
        cmd.args(&cfg.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if !cfg.pass_environment {
            cmd.env_clear();
            for k in SAFE_ENV {
                if let Some(v) = std::env::var_os(k) {
                    cmd.env(k, v);
                }
            }
        }
        for (k, v) in &cfg.env {
            cmd.env(k, v);
        }
        if let Some(d) = &cfg.cwd {
            cmd.current_dir(d);
        }
        cmd
    }

    /// Run one process from spawn to exit. Ok(true) when stopped by shutdown.
    async fn run_once(&self) -> std::io::Result<bool> {
        let cfg = &self.inner.cfg;
        let mut child: Child = self.command().spawn()?;
        let pid = child.id().unwrap_or(0);
        self.inner.metrics.child_started(&cfg.name);
        info!(server = %cfg.name, pid, command = %cfg.command.display(), "child started");
        let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(1024);
        let proc = Arc::new(Proc {
            stdin: stdin_tx,
            close_stdin: CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            info: RwLock::new(None),
            log_floor: crate::notifications::LogFloor::default(),
            tool_headers: RwLock::new(HashMap::new()),
            tool_names: RwLock::new(crate::metrics::ToolNames::default()),
            tools_changed: std::sync::atomic::AtomicUsize::new(0),
        });
        let io_done = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(stdin) = child.stdin.take() {
            tasks.spawn(write_stdin(stdin, stdin_rx, proc.close_stdin.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tasks.spawn(drain_stderr(cfg.name.clone(), stderr));
        }
        if let Some(stdout) = child.stdout.take() {
            let me = self.clone();
            let p = proc.clone();
            let done = io_done.clone();
            tasks.spawn(async move {
                me.read_stdout(p, stdout).await;
                done.cancel();
            });
        }

        // Probe, unless the child dies or we are told to stop first.
        let probe = self.probe(&proc);
        let probed = tokio::select! {
            r = probe => r,
            st = child.wait() => {
                self.fail_all(&proc, "exited during start-up");
                self.inner.metrics.child_exited(&cfg.name, "startup");
                return Err(std::io::Error::other(format!("child exited during start-up: {:?}", st.ok())));
            }
            _ = self.inner.shutdown.cancelled() => None,
        };
        let Some(info) = probed else {
            if self.inner.shutdown.is_cancelled() {
                self.stop_process(&mut child, &proc).await;
                return Ok(true);
            }
            self.stop_process(&mut child, &proc).await;
            self.inner.metrics.child_exited(&cfg.name, "probe_failed");
            return Err(std::io::Error::other(
                "the child answered neither server/discover nor initialize in time",
            ));
        };
        info!(server = %cfg.name, era = info.era.label(), "child ready");
        if let Ok(mut g) = proc.info.write() {
            *g = Some(info.clone());
        }
        let n = self.refresh_tools(&proc, info.era).await;
        debug!(server = %cfg.name, tools = n, "tool list read");
        self.inner.state.send_replace(State::Ready(proc.clone()));
        self.inner.metrics.set_up(&cfg.name, true);

        let stopped = tokio::select! {
            st = child.wait() => {
                let how = match st {
                    Ok(s) if s.success() => "exit_ok",
                    Ok(_) => "exit_error",
                    Err(_) => "wait_failed",
                };
                warn!(server = %cfg.name, pid, status = ?st.ok(), "child exited");
                self.inner.metrics.child_exited(&cfg.name, how);
                false
            }
            _ = self.inner.shutdown.cancelled() => true,
        };
        self.inner.state.send_replace(State::Starting);
        if stopped {
            self.fail_all(&proc, "shutting down");
            self.stop_process(&mut child, &proc).await;
            self.inner.metrics.child_exited(&cfg.name, "stopped");
        } else {
            // Let the reader deliver what the child wrote before it died.
            let _ = tokio::time::timeout(Duration::from_millis(200), io_done.cancelled()).await;
            self.fail_all(&proc, "exited");
            kill_group(pid, &cfg.name, Duration::from_millis(200)).await;
        }
        tasks.abort_all();
        Ok(stopped)
    }

    fn fail_all(&self, proc: &Proc, why: &str) {
        let drained: Vec<Pending> = lock(&proc.pending).drain().map(|(_, p)| p).collect();
        for p in drained {
            if let Some(s) = p.sinks {
                let e = if why == "shutting down" {
                    BridgeError::ShuttingDown
                } else {
                    BridgeError::ChildExited(why.to_owned())
                };
                let _ = s.outcome.send(Outcome::Failed(e));
            }
        }
    }

    /// close stdin → wait → SIGTERM group → wait → SIGKILL group.
    async fn stop_process(&self, child: &mut Child, proc: &Arc<Proc>) {
        let cfg = &self.inner.cfg;
        let pid = child.id().unwrap_or(0);
        proc.close_stdin.cancel();
        if tokio::time::timeout(cfg.stdin_grace, child.wait())
            .await
            .is_ok()
        {
            kill_group(pid, &cfg.name, cfg.term_grace).await;
            return;
        }
        info!(server = %cfg.name, pid, "child still running after stdin closed: SIGTERM");
        signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(cfg.term_grace, child.wait())
            .await
            .is_ok()
        {
            kill_group(pid, &cfg.name, cfg.term_grace).await;
            return;
        }
        warn!(server = %cfg.name, pid, "child ignored SIGTERM: SIGKILL");
        signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait().await;
    }

    /// Decide the child's era: `server/discover` first; a 2026 answer (or a recognised 2026
    /// error) means 2026; anything else (other error, silence) means `initialize`.
    async fn probe(&self, proc: &Arc<Proc>) -> Option<UpstreamInfo> {
        let t = self.inner.cfg.probe_timeout;
        let meta = serde_json::json!({"_meta": {
            protocol::META_PROTOCOL_VERSION: protocol::MODERN,
            protocol::META_CLIENT_CAPABILITIES: {},
            protocol::META_CLIENT_INFO: {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        }})
        .to_string();
        match self
            .internal(proc, Era::Modern, "server/discover", Some(&meta), t)
            .await
        {
            Some(Ok(r)) => {
                let supports = Fields::parse(&r)
                    .and_then(|f| {
                        f.get("supportedVersions")
                            .map(|v| v.get().contains(protocol::MODERN))
                    })
                    .unwrap_or(true);
                if supports {
                    return Some(UpstreamInfo {
                        era: Era::Modern,
                        discover: Some(Arc::from(r)),
                        initialize: None,
                    });
                }
            }
            Some(Err(e)) => {
                if protocol::error_code(&e) == Some(jsonrpc::code::UNSUPPORTED_PROTOCOL_VERSION) {
                    warn!(server = %self.inner.cfg.name, "child is 2026-era but does not support {}", protocol::MODERN);
                }
            }
            None => debug!(server = %self.inner.cfg.name, "no answer to server/discover"),
        }
        let init = serde_json::json!({
            "protocolVersion": protocol::LEGACY_LATEST,
            "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")},
        })
        .to_string();
        match self
            .internal(proc, Era::Legacy, "initialize", Some(&init), t)
            .await
        {
            Some(Ok(r)) => {
                let _ = proc
                    .stdin
                    .send(jsonrpc::notification("notifications/initialized", None))
                    .await;
                Some(UpstreamInfo {
                    era: Era::Legacy,
                    discover: None,
                    initialize: Some(Arc::from(r)),
                })
            }
            Some(Err(e)) => {
                warn!(server = %self.inner.cfg.name, error = %e.get(), "child refused initialize");
                None
            }
            None => None,
        }
    }

    /// Learn which tools carry `x-mcp-header` annotations (for `Mcp-Param-*` validation).
    async fn refresh_tools(&self, proc: &Arc<Proc>, era: Era) -> usize {
        let mut map = HashMap::new();
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        for _page in 0..20 {
            let mut params = serde_json::Map::new();
            if era == Era::Modern {
                params.insert(
                    "_meta".into(),
                    serde_json::json!({
                        protocol::META_PROTOCOL_VERSION: protocol::MODERN,
                        protocol::META_CLIENT_CAPABILITIES: {},
                    }),
                );
            }
            if let Some(c) = &cursor {
                params.insert("cursor".into(), serde_json::Value::String(c.clone()));
            }
            let p = serde_json::Value::Object(params).to_string();
            let Some(Ok(r)) = self
                .internal(
                    proc,
                    era,
                    "tools/list",
                    Some(&p),
                    self.inner.cfg.probe_timeout,
                )
                .await
            else {
                break;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(r.get()) else {
                break;
            };
            for t in v
                .get("tools")
                .and_then(|t| t.as_array())
                .into_iter()
                .flatten()
            {
                names.extend(t.get("name").and_then(|n| n.as_str()).map(str::to_owned));
                let (Some(name), Some(schema)) =
                    (t.get("name").and_then(|n| n.as_str()), t.get("inputSchema"))
                else {
                    continue;
                };
                match protocol::tool_param_headers(schema) {
                    Ok(h) if !h.is_empty() => {
                        map.insert(name.to_owned(), h);
                    }
                    Ok(_) => {}
                    Err(why) => {
                        warn!(server = %self.inner.cfg.name, tool = name, "invalid x-mcp-header: {why}")
                    }
                }
            }
            cursor = v
                .get("nextCursor")
                .and_then(|c| c.as_str())
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        if let Ok(mut g) = proc.tool_headers.write() {
            *g = map;
        }
        if let Ok(mut g) = proc.tool_names.write() {
            *g = crate::metrics::ToolNames::new(names.iter().map(String::as_str));
        }
        names.len()
    }

    async fn read_stdout(&self, proc: Arc<Proc>, stdout: tokio::process::ChildStdout) {
        let name = self.inner.cfg.name.clone();
        let mut lines =
            FramedRead::with_capacity(stdout, LineDecoder::new(self.inner.cfg.max_line), 64 * 1024);
        while let Some(item) = lines.next().await {
            match item {
                Ok(Line::Frame(f)) => self.on_frame(&proc, f),
                Ok(Line::Oversize(n, head)) => {
                    self.inner.metrics.dropped("oversize");
                    warn!(server = %name, bytes = n, "child wrote a line over the limit; skipped");
                    self.fail_oversize_response(&proc, &head, n);
                }
                Err(e) => {
                    warn!(server = %name, "reading child stdout failed: {e}");
                    break;
                }
            }
        }
        debug!(server = %name, "child stdout closed");
    }

    /// An over-long line that starts like a response to one of our calls fails that call now
    /// instead of leaving it to its timeout.
    fn fail_oversize_response(&self, proc: &Arc<Proc>, head: &[u8], len: usize) {
        let Some(id) = response_id_in_head(head) else {
            return;
        };
        let Some(p) = lock(&proc.pending).remove(&id) else {
            return;
        };
        if let Some(s) = p.sinks {
            let msg = format!(
                "the upstream's response ({len} bytes) exceeds the bridge's line limit ({} bytes; see --max-line)",
                self.inner.cfg.max_line
            );
            let e = jsonrpc::error_object(
                jsonrpc::code::INTERNAL_ERROR,
                &msg,
                Some(&serde_json::json!({"reason": "response_too_large"})),
            );
            self.inner.metrics.rpc_error(
                &self.inner.cfg.name,
                &p.method,
                jsonrpc::code::INTERNAL_ERROR,
                "bridge",
            );
            let _ = s.outcome.send(Outcome::Error(jsonrpc::raw(&e)));
        }
    }

    fn on_frame(&self, proc: &Arc<Proc>, f: Bytes) {
        if jsonrpc::first_non_ws(&f).is_none() {
            return; // blank line
        }
        let env = match Envelope::parse(&f) {
            Ok(e) => e,
            Err(e) => {
                self.inner.metrics.dropped("malformed");
                warn!(server = %self.inner.cfg.name, "child wrote a line that is not a JSON-RPC message ({e}); skipped");
                return;
            }
        };
        match env.kind() {
            Ok(Kind::Response) => self.on_response(proc, &env),
            Ok(Kind::Notification) => self.on_notification(proc, &env, &f),
            Ok(Kind::Request) => self.on_request(proc, &env, &f),
            Err(_) => {
                self.inner.metrics.dropped("malformed");
                warn!(server = %self.inner.cfg.name, "child wrote a JSON object that is not a JSON-RPC message; skipped");
            }
        }
    }

    fn on_response(&self, proc: &Arc<Proc>, env: &Envelope<'_>) {
        let Some(id) = env.id.and_then(jsonrpc::minted_u64) else {
            self.inner.metrics.dropped("unknown_id");
            warn!(server = %self.inner.cfg.name, id = env.id.map(|i| i.get()).unwrap_or(""), "response with an id the bridge never sent; dropped");
            return;
        };
        let Some(p) = lock(&proc.pending).remove(&id) else {
            self.inner.metrics.dropped("unknown_id");
            debug!(server = %self.inner.cfg.name, id, "response for no pending call (late or cancelled); dropped");
            return;
        };
        let Some(sinks) = p.sinks else { return };
        let child_era = proc.info().map(|i| i.era);
        let outcome = match (env.result, env.error) {
            (Some(r), _) => {
                if &*p.method == "tools/call" {
                    self.inner.metrics.tool_result(
                        &self.inner.cfg.name,
                        p.tool.as_deref().unwrap_or("other"),
                        protocol::is_tool_error(r),
                    );
                }
                let translated = match (child_era, p.client_era) {
                    (Some(Era::Legacy), Era::Modern) => {
                        protocol::legacy_result_to_modern(&p.method, r)
                    }
                    (Some(Era::Modern), Era::Legacy) => protocol::modern_result_to_legacy(r),
                    _ => None,
                };
                match translated {
                    Some(s) => Outcome::Result(jsonrpc::raw(&s)),
                    None => Outcome::Result(r.to_owned()),
                }
            }
            (None, Some(e)) => {
                self.inner.metrics.rpc_error(
                    &self.inner.cfg.name,
                    &p.method,
                    protocol::error_code(e).unwrap_or(0),
                    "upstream",
                );
                Outcome::Error(e.to_owned())
            }
            (None, None) => return,
        };
        let _ = sinks.outcome.send(outcome);
    }

    /// The child's tool list changed: read it again (header rules and metric labels), one
    /// refresh at a time; a change announced during a refresh gets one more.
    fn tools_changed(&self, proc: &Arc<Proc>) {
        use std::sync::atomic::Ordering::SeqCst;
        if proc.tools_changed.fetch_add(1, SeqCst) > 0 {
            return;
        }
        let (me, proc) = (self.clone(), proc.clone());
        tokio::spawn(async move {
            loop {
                let era = proc.info().map(|i| i.era).unwrap_or(Era::Legacy);
                let n = me.refresh_tools(&proc, era).await;
                info!(server = %me.inner.cfg.name, tools = n, "tool list re-read after list_changed");
                if proc
                    .tools_changed
                    .compare_exchange(1, 0, SeqCst, SeqCst)
                    .is_ok()
                {
                    break;
                }
                proc.tools_changed.store(1, SeqCst);
            }
        });
    }

    fn on_notification(&self, proc: &Arc<Proc>, env: &Envelope<'_>, frame: &Bytes) {
        let method = env.method();
        if method == "notifications/tools/list_changed" {
            self.tools_changed(proc);
        }
        // Request-scoped: progress (token = our id) and listen-stream traffic (subscription id).
        let target = if method == "notifications/progress" {
            env.params
                .and_then(Fields::parse)
                .and_then(|f| f.get("progressToken").and_then(jsonrpc::minted_u64))
        } else if env
            .params
            .map(|p| memchr::memmem::find(p.get().as_bytes(), b"subscriptionId").is_some())
            .unwrap_or(false)
        {
            jsonrpc::meta_field(env.params, protocol::META_SUBSCRIPTION_ID)
                .and_then(jsonrpc::minted_u64)
        } else {
            None
        };
        if let Some(id) = target {
            let guard = lock(&proc.pending);
            if let Some(Some(s)) = guard.get(&id).map(|p| p.sinks.as_ref()) {
                let ev = CallEvent::Notification {
                    method: method.to_owned(),
                    params: env.params.map(|p| p.to_owned()),
                };
                if s.events.try_send(ev).is_err() {
                    self.inner.metrics.dropped("slow_consumer");
                }
            } else {
                self.inner.metrics.dropped("unknown_id");
            }
            return;
        }
        if method == "notifications/progress" {
            self.inner.metrics.dropped("unknown_id");
            return;
        }
        // A log message names no request; when exactly one caller in flight asked for logs it
        // is that caller's (filtered by its level), otherwise it goes to the session streams.
        if method == "notifications/message" {
            let rank = protocol::message_rank(env.params);
            let g = lock(&proc.pending);
            let mut wanting = g
                .values()
                .filter(|p| p.sinks.is_some() && p.log_rank.is_some());
            if let (Some(p), None) = (wanting.next(), wanting.next()) {
                if let Some(s) = &p.sinks {
                    if rank >= p.log_rank.unwrap_or(0) {
                        let ev = CallEvent::Notification {
                            method: method.to_owned(),
                            params: env.params.map(|p| p.to_owned()),
                        };
                        if s.events.try_send(ev).is_err() {
                            self.inner.metrics.dropped("slow_consumer");
                        }
                    }
                    return;
                }
            }
        }
        let _ = self
            .inner
            .events
            .send(UpstreamEvent::Notification(frame.clone()));
    }

    fn on_request(&self, proc: &Arc<Proc>, env: &Envelope<'_>, frame: &Bytes) {
        let Some(id) = env.id else { return };
        let method = env.method();
        if method == "ping" {
            let _ = proc.stdin.try_send(jsonrpc::result(id.get(), "{}"));
            return;
        }
        // Attribute the request to a caller that can answer it.
        enum Route {
            Call(mpsc::Sender<CallEvent>),
            Session(Arc<str>),
            Nobody(&'static str),
        }
        let route = {
            let g = lock(&proc.pending);
            // Only calls whose caller can answer (a 2025 client on a stream, or a 2026 client
            // of a method that may return input_required) are candidates.
            let callers: Vec<&Pending> = g
                .values()
                .filter(|p| p.sinks.is_some() && p.accepts_server_requests)
                .collect();
            let sessions: std::collections::HashSet<Option<&Arc<str>>> =
                callers.iter().map(|p| p.session.as_ref()).collect();
            if callers.len() == 1 {
                match &callers[0].sinks {
                    Some(s) => Route::Call(s.events.clone()),
                    None => Route::Nobody("the call ended"),
                }
            } else if callers.len() > 1 && sessions.len() == 1 {
                match sessions.into_iter().next().flatten() {
                    Some(s) => Route::Session(s.clone()),
                    None => {
                        Route::Nobody("several 2026 calls are running; cannot tell which one asks")
                    }
                }
            } else if callers.is_empty() {
                match &self.inner.owner_session {
                    Some(s) => Route::Session(s.clone()),
                    None => Route::Nobody("no request in flight whose client can answer it"),
                }
            } else {
                Route::Nobody("several clients share this child; cannot tell whom it asks (use --isolation session)")
            }
        };
        let delivered = match route {
            Route::Call(tx) => tx
                .try_send(CallEvent::ServerRequest {
                    id: id.to_owned(),
                    method: method.to_owned(),
                    params: env.params.map(|p| p.to_owned()),
                })
                .map_err(|_| "the client's stream is not keeping up"),
            Route::Session(s) => self
                .inner
                .events
                .send(UpstreamEvent::ServerRequest {
                    session: s,
                    frame: frame.clone(),
                })
                .map(|_| ())
                .map_err(|_| "the client session has no open stream"),
            Route::Nobody(why) => Err(why),
        };
        if delivered.is_err() && method == "roots/list" {
            // Nobody to ask: the honest answer is that no roots are shared.
            let _ = proc
                .stdin
                .try_send(jsonrpc::result(id.get(), "{\"roots\":[]}"));
            return;
        }
        if let Err(why) = delivered {
            self.inner.metrics.dropped("unroutable_request");
            warn!(server = %self.inner.cfg.name, method, "cannot deliver the child's request: {why}");
            let err = jsonrpc::error(
                Some(id.get()),
                jsonrpc::code::INTERNAL_ERROR,
                &format!("mcp-bridge cannot deliver {method} to a client: {why}"),
                None,
            );
            let _ = proc.stdin.try_send(err);
        }
    }
}

/// The bridge-minted id of a response whose line starts with `head`, if it looks like one:
/// `"id":<digits>` before any `"method"` key.
fn response_id_in_head(head: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(head, b"\"id\"")?;
    if memchr::memmem::find(&head[..at], b"\"method\"").is_some() {
        return None;
    }
    let rest = &head[at + 4..];
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let rest = rest.strip_prefix(b":")?;
    let digits: Vec<u8> = rest
        .iter()
        .copied()
        .skip_while(|b| *b == b' ' || *b == b'"')
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

impl Upstream for ChildUpstream {
    fn name(&self) -> &str {
        ChildUpstream::name(self)
    }
    fn is_ready(&self) -> bool {
        ChildUpstream::is_ready(self)
    }
    fn info(&self, wait: Duration) -> BoxFuture<'_, Result<UpstreamInfo, BridgeError>> {
        Box::pin(ChildUpstream::info(self, wait))
    }
    fn call(&self, call: Call, wait: Duration) -> BoxFuture<'_, Result<CallHandle, BridgeError>> {
        Box::pin(ChildUpstream::call(self, call, wait))
    }
    fn subscribe(&self) -> broadcast::Receiver<UpstreamEvent> {
        ChildUpstream::subscribe(self)
    }
    fn send_response(&self, frame: Bytes) -> Result<(), BridgeError> {
        ChildUpstream::send_response(self, frame)
    }
    fn send_notification(&self, frame: Bytes) -> Result<(), BridgeError> {
        ChildUpstream::send_notification(self, frame)
    }
    fn tool_headers(&self, tool: &str) -> Vec<(String, String)> {
        ChildUpstream::tool_headers(self, tool)
    }
    fn ensure_log_level(&self, level: &'static str) {
        ChildUpstream::ensure_log_level(self, level)
    }
    fn stop(&self) {
        ChildUpstream::stop(self)
    }
}

async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<Bytes>,
    close: CancellationToken,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let first = tokio::select! {
            m = rx.recv() => match m { Some(m) => m, None => break },
            _ = close.cancelled() => break,
        };
        buf.clear();
        buf.put_slice(&first);
        buf.put_u8(b'\n');
        // Batch whatever else is queued into one write.
        while buf.len() < 1 << 20 {
            match rx.try_recv() {
                Ok(more) => {
                    buf.put_slice(&more);
                    buf.put_u8(b'\n');
                }
                Err(_) => break,
            }
        }
        if stdin.write_all(&buf).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    let _ = stdin.shutdown().await;
}

async fn drain_stderr(name: String, stderr: tokio::process::ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    let mut window = Instant::now();
    let mut count = 0u32;
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                if window.elapsed() > Duration::from_secs(1) {
                    window = Instant::now();
                    count = 0;
                }
                count += 1;
                if count <= 200 {
                    info!(target: "child", server = %name, "{line}");
                } else if count == 201 {
                    warn!(target: "child", server = %name, "child stderr is too chatty; dropping lines for this second");
                }
            }
            Ok(None) => break,
            Err(_) => continue, // not UTF-8: skip the line
        }
    }
}

fn signal_group(pid: u32, sig: nix::sys::signal::Signal) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), sig).is_ok()
}

/// After the leader is gone, make sure nothing of its process group survives.
async fn kill_group(pid: u32, name: &str, grace: Duration) {
    if pid == 0 || !signal_group(pid, nix::sys::signal::Signal::SIGTERM) {
        return; // group already empty
    }
    debug!(server = %name, pid, "terminating what is left of the child's process group");
    let until = Instant::now() + grace;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !group_alive(pid) {
            return;
        }
    }
    signal_group(pid, nix::sys::signal::Signal::SIGKILL);
}

fn group_alive(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), None).is_ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_response_ids_in_heads() {
        use super::response_id_in_head as f;
        assert_eq!(
            f(br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"#),
            Some(42)
        );
        assert_eq!(f(br#"{"id": "7","result""#), Some(7));
        assert_eq!(f(br#"{"jsonrpc":"2.0","method":"x","id":3"#), None);
        assert_eq!(f(b"xxxxxxxx"), None);
    }
}
