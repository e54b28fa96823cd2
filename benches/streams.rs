//! Memory per open streaming call, and memory given back after a burst of them closes.
//!
//! `cargo bench --bench streams` starts the release `mcp-bridge serve --demo` on 127.0.0.1
//! (port 0), and for every N in MCP_STREAMS_N and every era in MCP_STREAMS_MODES (on a fresh
//! bridge each time) opens N concurrent `tools/call slow` requests that stream progress (SSE),
//! waits until every one of them has its `200 text/event-stream` head, then closes them all.
//! It reads the **bridge process's** `/proc/PID/smaps_rollup` (the demo child is a process of
//! its own and is not counted) at idle, with all N open, and at MCP_STREAMS_AFTER seconds after
//! the close, and prints private KB per stream and the after/idle ratios.
//!
//! Why raw HTTP/1.1 over tokio sockets for the client: 5000 connections from one current-thread
//! runtime must cost the load generator little, and all the bench needs is the head of each
//! answer and a drain of its body.
//!
//! Under `cargo test --benches` (no `--bench` argument) it runs a smoke version only: 20 streams
//! of each era, one reading 1 s after close; it fails if any stream did not open.
//!
//! Knobs (environment):
//! - MCP_STREAMS_N=1000,2000,5000   stream counts (each on a fresh bridge)
//! - MCP_STREAMS_MODES=modern,legacy  `modern` = 2026-07-28 stateless POSTs with `_meta`;
//!   `legacy` = 2025-11-25 session POSTs (one session per MCP_STREAMS_PER_SESSION streams, 10)
//! - MCP_STREAMS_AFTER=1,5,20       seconds after the close at which memory is read
//! - MCP_STREAMS_DELETE=1           `legacy` rows DELETE their sessions right after closing
//!   the streams (default 1; the clock of MCP_STREAMS_AFTER starts once every DELETE is
//!   answered). With 0 the sessions stay open until `--session-timeout`, and so do their calls
//!   (a 2025 client's hang-up does not cancel a call; it runs detached to its deadline).
//! - MCP_STREAMS_BRIDGE=path        bridge binary (default: this package's `mcp-bridge`)
//! - MCP_STREAMS_LABEL=name         label of the candidate in the table (default: `default`)
//! - MCP_STREAMS_ENV=K=V;K=V        extra environment for the bridge (allocator tunables such
//!   as `MALLOC_ARENA_MAX=2` or `_RJEM_MALLOC_CONF=...`)
//!
//! Bounds: opening waits at most 60 s + 20 ms per stream; every process started is stopped.

// Bench code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// Concurrent connection attempts while opening (below the listen backlog).
const OPENING: usize = 128;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Modern,
    Legacy,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Modern => "2026",
            Mode::Legacy => "2025",
        }
    }
}

struct Config {
    bridge_bin: String,
    label: String,
    ns: Vec<usize>,
    modes: Vec<Mode>,
    after: Vec<u64>,
    per_session: usize,
    delete_sessions: bool,
    env: Vec<(String, String)>,
}

fn env_list<T: std::str::FromStr>(key: &str, default: &str) -> Vec<T> {
    std::env::var(key)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{key}: bad item {s:?}"))
        })
        .collect()
}

impl Config {
    fn from_env(bench: bool) -> Config {
        let (ns, after) = if bench {
            ("1000,2000,5000", "1,5,20")
        } else {
            ("20", "1")
        };
        let modes = env_list::<String>("MCP_STREAMS_MODES", "modern,legacy")
            .iter()
            .map(|m| match m.as_str() {
                "modern" => Mode::Modern,
                "legacy" => Mode::Legacy,
                other => panic!("MCP_STREAMS_MODES: unknown mode {other:?}"),
            })
            .collect();
        let env = std::env::var("MCP_STREAMS_ENV")
            .unwrap_or_default()
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Config {
            bridge_bin: std::env::var("MCP_STREAMS_BRIDGE")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-bridge").to_owned()),
            label: std::env::var("MCP_STREAMS_LABEL").unwrap_or_else(|_| "default".into()),
            ns: env_list("MCP_STREAMS_N", ns),
            modes,
            after: env_list("MCP_STREAMS_AFTER", after),
            per_session: env_list::<usize>("MCP_STREAMS_PER_SESSION", "10")[0].max(1),
            delete_sessions: env_list::<u8>("MCP_STREAMS_DELETE", "1")[0] != 0,
            env,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The bridge process and its memory
// ---------------------------------------------------------------------------------------------

struct Bridge {
    proc: Child,
    addr: SocketAddr,
}

impl Bridge {
    fn start(cfg: &Config, max_sessions: usize, streams: usize) -> Bridge {
        let mut cmd = Command::new(&cfg.bridge_bin);
        cmd.args(["serve", "--demo", "--host", "127.0.0.1", "--port", "0"])
            .args(["--max-sessions", &max_sessions.to_string()])
            // Above the default cap (4096) when N is: every stream must open.
            .args(["--max-streams", &(streams + 100).max(4096).to_string()])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &cfg.env {
            cmd.env(k, v);
        }
        let mut proc = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", cfg.bridge_bin));
        let stderr = proc.stderr.take().expect("piped stderr");
        let addr = support::address_from_log(stderr, Duration::from_secs(20));
        let b = Bridge { proc, addr };
        b.wait_ready();
        b
    }

    fn wait_ready(&self) {
        support::wait_ready(self.addr, Duration::from_secs(20));
    }

    fn mem(&self) -> Mem {
        Mem::of(self.proc.id())
    }

    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.proc.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.proc.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("  bridge did not stop within 15 s of SIGTERM; killing it");
        let _ = self.proc.kill();
        let _ = self.proc.wait();
    }
}

/// One reading of `/proc/PID/smaps_rollup`, in KB.
#[derive(Clone, Copy, Default, Debug)]
struct Mem {
    rss: u64,
    /// Private_Clean + Private_Dirty: what this process alone holds.
    private: u64,
    anon: u64,
}

impl Mem {
    fn of(pid: u32) -> Mem {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .unwrap_or_else(|e| panic!("smaps_rollup of {pid}: {e}"));
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Mem {
            rss: field("Rss:"),
            private: field("Private_Clean:") + field("Private_Dirty:"),
            anon: field("Anonymous:"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client: raw HTTP/1.1, one connection per stream
// ---------------------------------------------------------------------------------------------

fn post(addr: SocketAddr, headers: &str, body: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A `tools/call slow` that streams progress for longer than the bench holds it open.
fn slow_call(addr: SocketAddr, mode: Mode, i: usize, session: Option<&str>) -> String {
    let args = r#"{"seconds":240,"steps":24}"#;
    match mode {
        Mode::Modern => post(
            addr,
            &format!(
                "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: slow\r\n"
            ),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"slow","arguments":{args},"_meta":{{"progressToken":{i},"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
            ),
        ),
        Mode::Legacy => post(
            addr,
            &format!(
                "MCP-Protocol-Version: {LEGACY}\r\nMcp-Session-Id: {}\r\n",
                session.unwrap_or("")
            ),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"slow","arguments":{args},"_meta":{{"progressToken":{i}}}}}}}"#
            ),
        ),
    }
}

/// Read an answer's head (up to the blank line); what follows stays in the reader.
async fn read_head(s: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut head = String::with_capacity(512);
    loop {
        let before = head.len();
        if s.read_line(&mut head).await? == 0 || head.len() > 16 * 1024 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if head[before..].trim_end().is_empty() {
            return Ok(head);
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One POST on a connection of its own, answered with `Connection: close`; its head.
async fn one_shot(addr: SocketAddr, req: String) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(req.as_bytes()).await.expect("write");
    read_head(&mut BufReader::new(s)).await.expect("head")
}

/// `initialize` + `notifications/initialized`: a 2025 session id.
async fn open_session(addr: SocketAddr) -> String {
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{LEGACY}","capabilities":{{}},"clientInfo":{{"name":"streams-bench","version":"0"}}}}}}"#
    );
    let head = one_shot(addr, post(addr, "Connection: close\r\n", &init)).await;
    let id = header(&head, "mcp-session-id")
        .unwrap_or_else(|| panic!("no Mcp-Session-Id: {head}"))
        .to_owned();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let h =
        format!("Connection: close\r\nMCP-Protocol-Version: {LEGACY}\r\nMcp-Session-Id: {id}\r\n");
    let head = one_shot(addr, post(addr, &h, note)).await;
    assert!(head.starts_with("HTTP/1.1 202"), "initialized: {head}");
    id
}

/// DELETE a 2025 session (which ends the calls it still runs detached).
async fn delete_session(addr: SocketAddr, id: &str) {
    let req = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nMCP-Protocol-Version: {LEGACY}\r\n\
         Mcp-Session-Id: {id}\r\nConnection: close\r\n\r\n"
    );
    let head = one_shot(addr, req).await;
    assert!(head.starts_with("HTTP/1.1 200"), "DELETE: {head}");
}

/// Open one streaming call, count it as open once its SSE head arrived, then drain its body
/// until the bench aborts the task (which closes the connection).
async fn stream(addr: SocketAddr, req: String, gate: Arc<Semaphore>, open: Arc<AtomicUsize>) {
    let permit = gate.acquire_owned().await.expect("gate");
    let Ok(mut s) = TcpStream::connect(addr).await else {
        eprintln!("  connect failed");
        return;
    };
    if s.write_all(req.as_bytes()).await.is_err() {
        return;
    }
    let mut s = BufReader::with_capacity(512, s);
    let Ok(head) = read_head(&mut s).await else {
        return;
    };
    drop(permit);
    if head.starts_with("HTTP/1.1 200")
        && header(&head, "content-type").is_some_and(|c| c.starts_with("text/event-stream"))
    {
        open.fetch_add(1, Ordering::SeqCst);
    } else {
        eprintln!("  not a stream: {}", head.lines().next().unwrap_or(""));
        return;
    }
    let mut buf = [0u8; 512];
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

// ---------------------------------------------------------------------------------------------
// One run: a fresh bridge, N streams of one era
// ---------------------------------------------------------------------------------------------

struct Run {
    mode: Mode,
    n: usize,
    opened: usize,
    idle: Mem,
    open: Mem,
    after: Vec<(u64, Mem)>,
}

fn run(cfg: &Config, mode: Mode, n: usize) -> Run {
    let sessions = n.div_ceil(cfg.per_session);
    let bridge = Bridge::start(cfg, sessions.max(1000) + 10, n);
    std::thread::sleep(Duration::from_millis(300));
    let idle = bridge.mem();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let addr = bridge.addr;
    let (opened, open, after) = rt.block_on(async {
        let ids = match mode {
            Mode::Modern => Vec::new(),
            Mode::Legacy => {
                let mut v = Vec::with_capacity(sessions);
                for _ in 0..sessions {
                    v.push(open_session(addr).await);
                }
                v
            }
        };
        let gate = Arc::new(Semaphore::new(OPENING));
        let count = Arc::new(AtomicUsize::new(0));
        let mut set = JoinSet::new();
        for i in 0..n {
            let sid = ids.get(i % ids.len().max(1)).map(String::as_str);
            let req = slow_call(addr, mode, i + 1, sid);
            set.spawn(stream(addr, req, gate.clone(), count.clone()));
        }
        let until = Instant::now() + Duration::from_secs(60) + Duration::from_millis(20) * n as u32;
        // A stream that ended early is reported by the count; when none is left, stop waiting.
        while count.load(Ordering::SeqCst) < n && Instant::now() < until {
            let next = tokio::time::timeout(Duration::from_millis(100), set.join_next()).await;
            if let Ok(None) = next {
                break;
            }
        }
        // Let the bridge settle (the first progress lines, the keepalive timers) before reading.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let opened = count.load(Ordering::SeqCst);
        let open = bridge.mem();
        set.abort_all();
        while set.join_next().await.is_some() {}
        if cfg.delete_sessions {
            for id in &ids {
                delete_session(addr, id).await;
            }
        }
        let closed = Instant::now();
        let mut after = Vec::new();
        for &s in &cfg.after {
            let at = closed + Duration::from_secs(s);
            tokio::time::sleep_until(at.into()).await;
            after.push((s, bridge.mem()));
        }
        (opened, open, after)
    });
    bridge.stop();
    Run {
        mode,
        n,
        opened,
        idle,
        open,
        after,
    }
}

fn mb(kb: u64) -> String {
    format!("{:.1}", kb as f64 / 1024.0)
}

fn print_row(cfg: &Config, r: &Run) {
    let per = |f: fn(&Mem) -> u64| (f(&r.open) as f64 - f(&r.idle) as f64) / r.n as f64;
    let mut line = format!(
        "| {} | {} | {} | {}/{} | {} / {} | {} / {} | {:.1} | {:.1} |",
        cfg.label,
        r.mode.label(),
        r.n,
        r.opened,
        r.n,
        mb(r.idle.rss),
        mb(r.idle.private),
        mb(r.open.rss),
        mb(r.open.private),
        per(|m| m.private),
        per(|m| m.anon),
    );
    for (_, m) in &r.after {
        line.push_str(&format!(
            " {} ({:.2}×) |",
            mb(m.rss),
            m.rss as f64 / r.idle.rss.max(1) as f64
        ));
    }
    println!("{line}");
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let cfg = Config::from_env(bench);
    if !bench {
        println!("streams: smoke run (use `cargo bench --bench streams` for the measurement)");
    }
    println!(
        "bridge: {}  env: {:?}  2025 sessions deleted after the close: {}  (memory of the bridge process only; the demo child is not counted)",
        cfg.bridge_bin, cfg.env, cfg.delete_sessions
    );
    let mut head = String::from(
        "| candidate | era | N | open | idle RSS / private MB | open RSS / private MB | private KB/stream | anon KB/stream |",
    );
    for s in &cfg.after {
        head.push_str(&format!(" RSS MB +{s} s (×idle) |"));
    }
    println!("{head}");
    let mut failed = false;
    for &mode in &cfg.modes {
        for &n in &cfg.ns {
            let r = run(&cfg, mode, n);
            failed |= r.opened < r.n;
            print_row(&cfg, &r);
        }
    }
    if failed {
        eprintln!("streams: some streams did not open (see the `open` column)");
        if !bench {
            std::process::exit(1);
        }
    }
}
