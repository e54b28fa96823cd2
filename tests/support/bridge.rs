//! The one way the integration tests start the real `mcp-bridge` binary: `Bridge::builder()`
//! says what to run (subcommand, args, environment, log level, stdio piped or not) and then
//! how to wait for it — `spawn()` until it logs the address it bound (a `Bridge`),
//! `spawn_proc()` not at all (a bare `Proc`, e.g. for the stdio host), `run()` until it exits
//! (an `Output`). Every process runs in a process group of its own, its stderr is collected
//! into a `Log`, and dropping it stops the group: SIGTERM, a bounded grace, then SIGKILL.
//!
//! The address is read from the `listening on SCHEME://ADDR/PATH` line rather than probed
//! for, so port 0 works and a bridge that dies at start fails the test with its log.
//!
//! The binary is the one cargo built for this test run (`bin()`) unless a test names another
//! with `.binary(path)` (the soak does, to run a release build); nothing here reads the
//! environment to choose it, so no other test can be pointed at a different build by accident.

use std::ffi::OsString;
use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use super::http::client;
use super::log::{word_after, Log};

/// Path of the binary cargo built for this test run (the default of `BridgeBuilder::binary`).
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-bridge")
}

/// How long `spawn()` waits for the `listening on` line.
const LISTEN_WAIT: Duration = Duration::from_secs(20);
/// How long `output()` lets a one-shot run take.
const RUN_WAIT: Duration = Duration::from_secs(30);
/// How long a dropped process gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Variables a service manager sets; a test must not inherit them by accident.
const SYSTEMD_ENV: [&str; 5] = [
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "LISTEN_PID",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

type Configure = Box<dyn FnOnce(&mut Command)>;

/// What to run; see the module comment. Made by `Bridge::builder()`.
pub struct BridgeBuilder {
    /// The `mcp-bridge` to run; `bin()` unless `binary` said otherwise.
    binary: OsString,
    /// A program (and its args) that execs the binary, e.g. `sh -c SCRIPT`.
    wrapper: Vec<OsString>,
    log_level: Option<String>,
    sub: Vec<OsString>,
    args: Vec<OsString>,
    /// In order: `Some` sets, `None` removes.
    env: Vec<(OsString, Option<OsString>)>,
    piped_stdio: bool,
    configure: Vec<Configure>,
}

impl BridgeBuilder {
    fn new() -> Self {
        BridgeBuilder {
            binary: bin().into(),
            wrapper: Vec::new(),
            log_level: Some("info".into()),
            sub: Vec::new(),
            args: Vec::new(),
            env: vec![("RUST_LOG".into(), None), ("MCP_BRIDGE_LOG".into(), None)],
            piped_stdio: false,
            configure: Vec::new(),
        }
    }

    /// Run this `mcp-bridge` instead of the one cargo built (e.g. a release build).
    pub fn binary(mut self, path: impl Into<OsString>) -> Self {
        self.binary = path.into();
        self
    }

    /// The subcommand and anything that must come right after it.
    pub fn sub<I, S>(mut self, words: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.sub = words.into_iter().map(Into::into).collect();
        self
    }

    /// `serve`.
    pub fn serve(self) -> Self {
        self.sub(["serve"])
    }

    /// `connect URL`.
    pub fn connect(self, url: &str) -> Self {
        self.sub(["connect", url])
    }

    /// `serve --config FILE`, with no service-manager variables inherited.
    pub fn config(self, file: impl Into<OsString>) -> Self {
        self.sub([OsString::from("serve"), "--config".into(), file.into()])
            .no_systemd_env()
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: impl Into<OsString>, v: impl Into<OsString>) -> Self {
        self.env.push((k.into(), Some(v.into())));
        self
    }

    pub fn envs(mut self, kv: &[(&str, &str)]) -> Self {
        for (k, v) in kv {
            self.env.push(((*k).into(), Some((*v).into())));
        }
        self
    }

    pub fn env_remove(mut self, k: impl Into<OsString>) -> Self {
        self.env.push((k.into(), None));
        self
    }

    /// Remove `NOTIFY_SOCKET`, `LISTEN_*`, `WATCHDOG_*` (later `env` calls still apply).
    pub fn no_systemd_env(mut self) -> Self {
        for k in SYSTEMD_ENV {
            self.env.push((k.into(), None));
        }
        self
    }

    /// `--log-level LEVEL` before the subcommand (the default is `info`).
    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = Some(level.into());
        self
    }

    /// Pass no `--log-level` (the binary's own default).
    pub fn no_log_level(mut self) -> Self {
        self.log_level = None;
        self
    }

    /// stdin and stdout piped (for a stdio host); otherwise both are /dev/null.
    pub fn piped_stdio(mut self) -> Self {
        self.piped_stdio = true;
        self
    }

    /// Run the binary through `program args… BIN …` (the wrapper must exec it).
    pub fn wrapper<I, S>(mut self, program: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = program.into_iter().map(Into::into).collect();
        self
    }

    /// A last touch to the `Command` that the builder has no word for (e.g. fd mappings).
    pub fn configure(mut self, f: impl FnOnce(&mut Command) + 'static) -> Self {
        self.configure.push(Box::new(f));
        self
    }

    /// The command as it would be run (stderr piped, own process group).
    pub fn command(self) -> Command {
        let mut cmd = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        if let Some(level) = &self.log_level {
            cmd.arg("--log-level").arg(level);
        }
        cmd.args(&self.sub).args(&self.args);
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let io = || match self.piped_stdio {
            true => Stdio::piped(),
            false => Stdio::null(),
        };
        cmd.stdin(io())
            .stdout(io())
            .stderr(Stdio::piped())
            .process_group(0);
        for f in self.configure {
            f(&mut cmd);
        }
        cmd
    }

    /// Start it and return at once.
    pub fn spawn_proc(self) -> Proc {
        Proc::spawn(self.command())
    }

    /// Start it and wait (bounded) for the address it logs.
    pub async fn spawn(self) -> Bridge {
        Bridge::listening(self.spawn_proc()).await
    }

    /// Run it to the end with stdout and stderr captured, like `Command::output` but bounded
    /// (by `RUN_WAIT`).
    pub fn output(self) -> Output {
        self.run(RUN_WAIT)
    }

    /// Run it to the end (bounded by `timeout`) with stdout and stderr captured.
    pub fn run(self, timeout: Duration) -> Output {
        let mut cmd = self.command();
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mcp-bridge");
        let (tx, rx) = mpsc::channel();
        let out = read_all(child.stdout.take(), tx.clone(), true);
        let err = read_all(child.stderr.take(), tx, false);
        let until = Instant::now() + timeout;
        let status = loop {
            if let Ok(Some(st)) = child.try_wait() {
                break st;
            }
            if Instant::now() >= until {
                stop_group(&mut child);
                let mut said = String::new();
                while let Ok((is_out, b)) = rx.recv_timeout(STOP_GRACE) {
                    let name = if is_out { "stdout" } else { "stderr" };
                    said.push_str(&format!("{name}:\n{}\n", String::from_utf8_lossy(&b)));
                }
                panic!("mcp-bridge did not exit within {timeout:?}; {said}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        for _ in 0..(out as u8 + err as u8) {
            match rx.recv_timeout(STOP_GRACE) {
                Ok((true, b)) => stdout = b,
                Ok((false, b)) => stderr = b,
                Err(_) => panic!("mcp-bridge exited but its output did not close"),
            }
        }
        Output {
            status,
            stdout,
            stderr,
        }
    }
}

/// Read `from` to its end on a thread; the bytes go to `tx` tagged `tag`. False if no pipe.
fn read_all(
    from: Option<impl Read + Send + 'static>,
    tx: mpsc::Sender<(bool, Vec<u8>)>,
    tag: bool,
) -> bool {
    let Some(mut from) = from else {
        return false;
    };
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = from.read_to_end(&mut buf);
        let _ = tx.send((tag, buf));
    });
    true
}

/// SIGTERM to the group, up to `STOP_GRACE` for the leader to exit, then SIGKILL the group.
fn stop_group(child: &mut Child) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let group = Pid::from_raw(child.id() as i32);
    let _ = killpg(group, Signal::SIGTERM);
    let until = Instant::now() + STOP_GRACE;
    while Instant::now() < until {
        if child.try_wait().ok().flatten().is_some() {
            let _ = killpg(group, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------------------------
// A process
// ---------------------------------------------------------------------------------------------

/// A running `mcp-bridge` (any subcommand) with its stderr collected. Dropping it stops it.
pub struct Proc {
    child: Option<Child>,
    pub log: Log,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd.spawn().expect("spawn mcp-bridge");
        let stderr = child.stderr.take().expect("stderr piped");
        Proc {
            child: Some(child),
            log: Log::collect(stderr),
        }
    }

    /// stdin and stdout, once (`piped_stdio` must have been asked for).
    pub fn take_stdio(&mut self) -> (Option<ChildStdin>, Option<ChildStdout>) {
        match self.child.as_mut() {
            Some(c) => (c.stdin.take(), c.stdout.take()),
            None => (None, None),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The exit status, if it has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Signal the process itself (not its group).
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid() as i32), sig).expect("signal mcp-bridge");
    }

    /// Wait (bounded, async poll) for it to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_status() {
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Wait (bounded, blocking poll) for it to exit.
    pub fn wait_exit_blocking(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_status() {
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_group(&mut child);
        }
        if std::env::var_os("MCP_TEST_LOG").is_some() {
            std::thread::sleep(Duration::from_millis(50));
            eprintln!("---- mcp-bridge log ----\n{}", self.log.dump());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A bridge with an address
// ---------------------------------------------------------------------------------------------

/// A running `mcp-bridge serve` whose address is known. Dropping it stops it.
pub struct Bridge {
    proc: Proc,
    pub log: Log,
    pub addr: SocketAddr,
    /// The endpoint as logged, e.g. `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Bridge {
    pub fn builder() -> BridgeBuilder {
        BridgeBuilder::new()
    }

    /// `mcp-bridge serve --demo --port 0 <extra>`.
    pub async fn demo(extra: &[&str]) -> Bridge {
        let mut args = vec!["--demo", "--port", "0"];
        args.extend_from_slice(extra);
        Bridge::serve(&args).await
    }

    /// `mcp-bridge serve <args>`.
    pub async fn serve(args: &[&str]) -> Bridge {
        Bridge::builder().serve().args(args).spawn().await
    }

    /// Wait (bounded) for `proc` to log `listening on SCHEME://ADDR/…`.
    async fn listening(mut proc: Proc) -> Bridge {
        let until = Instant::now() + LISTEN_WAIT;
        loop {
            if let Some((addr, url)) = proc.log.lines().iter().find_map(|l| parse_listen(l)) {
                let log = proc.log.clone();
                return Bridge {
                    proc,
                    log,
                    addr,
                    url,
                };
            }
            if let Some(st) = proc.try_status() {
                panic!("mcp-bridge exited early ({st}); log:\n{}", proc.log.dump());
            }
            if Instant::now() >= until {
                panic!(
                    "mcp-bridge did not report its address; log:\n{}",
                    proc.log.dump()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Every (address, URL) logged as listening so far: one per listener, the first is `addr`.
    pub fn listeners(&self) -> Vec<(SocketAddr, String)> {
        self.log
            .lines()
            .iter()
            .filter_map(|l| parse_listen(l))
            .collect()
    }

    /// `http://ADDR` or `https://ADDR`, as logged.
    pub fn origin(&self) -> String {
        let scheme = self.url.split("://").next().unwrap_or("http");
        format!("{scheme}://{}", self.addr)
    }

    /// The origin + `path`.
    pub fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.origin())
    }

    /// Signal the bridge process itself.
    pub fn signal(&self, sig: Signal) {
        self.proc.signal(sig);
    }

    /// Wait (bounded) for the bridge to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.proc.wait_exit(timeout).await
    }

    /// Wait (bounded) until `/readyz` says the upstream is up.
    pub async fn wait_ready(&self, timeout: Duration) {
        let c = client();
        let until = Instant::now() + timeout;
        loop {
            if let Ok(r) = c.get(self.endpoint("/readyz")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            if Instant::now() >= until {
                panic!("bridge not ready in {timeout:?}; log:\n{}", self.log.dump());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// (address, endpoint URL) from a `listening on SCHEME://ADDR/PATH …` line.
fn parse_listen(line: &str) -> Option<(SocketAddr, String)> {
    let url = word_after(line, "listening on ")?;
    let (_, rest) = url.split_once("://")?;
    let addr = rest.split('/').next()?.parse().ok()?;
    Some((addr, url))
}

impl AsRef<Log> for Bridge {
    fn as_ref(&self) -> &Log {
        &self.log
    }
}
