//! Supervising a child's process: spawn it (own process group, the safe environment
//! baseline unless told to pass everything), run its stdio tasks (a batching stdin writer, the
//! stdout reader in `route`, a rate-limited stderr drain), probe it, wait for its exit and
//! restart it with backoff, and stop it with the close-stdin → SIGTERM → SIGKILL ladder,
//! making sure nothing of its process group survives.
//!
//! It is the top of `upstream::child`: it drives `route` and `probe` and fails the calls of a
//! process that ended through `mux`; nothing below calls back into it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::mux::Proc;
use super::{ChildUpstream, State};
use crate::call::UpstreamEvent;

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

impl ChildUpstream {
    pub(super) async fn supervise(self) {
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
            self.set_up(false);
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
        self.set_up(false);
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
        let proc = Arc::new(Proc::new(stdin_tx, &self.inner.detached));
        let io_done = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();
        if let Some(stdin) = child.stdin.take() {
            let (weak, close) = (Arc::downgrade(&proc), proc.close_stdin.clone());
            tasks.spawn(write_stdin(stdin, stdin_rx, weak, close));
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
                proc.fail_all("exited during start-up");
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
        self.set_up(true);

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
            proc.fail_all("shutting down");
            self.stop_process(&mut child, &proc).await;
            self.inner.metrics.child_exited(&cfg.name, "stopped");
        } else {
            // Let the reader deliver what the child wrote before it died.
            let _ = tokio::time::timeout(Duration::from_millis(200), io_done.cancelled()).await;
            proc.fail_all("exited");
            kill_group(pid, &cfg.name, Duration::from_millis(200)).await;
        }
        tasks.abort_all();
        Ok(stopped)
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
}

/// The child's stdin: frames from the queue, one line each, as few writes as the traffic
/// allows. Every write wakes the child, and tokio runs a task it has just woken next (its LIFO
/// slot), so without help each frame would be written alone: at 16 clients the profile had 11 %
/// of serve's CPU in the pipe writes, one per frame. So when other calls of this process are
/// in flight, the writer first yields once: the tasks already runnable (other connections with
/// their requests read) queue their frames, and one write carries them all. With one call in
/// flight it writes at once (no added latency for a lone caller). `proc` is weak: the writer
/// must not keep the queue's sender alive, or the queue would never close.
async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<Bytes>,
    proc: std::sync::Weak<Proc>,
    close: CancellationToken,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let first = tokio::select! {
            m = rx.recv() => match m { Some(m) => m, None => break },
            _ = close.cancelled() => break,
        };
        if rx.is_empty() && proc.upgrade().is_some_and(|p| p.in_flight() > 1) {
            tokio::task::yield_now().await;
        }
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
    // Polled, on purpose: the kernel has no event for a process group becoming empty (the
    // members are not our children, so no wait or SIGCHLD sees them, and a pidfd covers one
    // process, not a group). Bounded: one `kill(-pgid, 0)` every 20 ms for at most `grace`,
    // then SIGKILL.
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
