//! A stdio host driving `mcp-bridge connect URL …`: the test writes JSON-RPC lines to its
//! stdin and takes what comes back on stdout, one message at a time, matched by id or by a
//! predicate. Every stdout line must be a JSON-RPC 2.0 message; anything else is kept as junk
//! for `assert_clean_stdout`. The process is started by `Bridge::builder()` like any other.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ExitStatus};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::bridge::{Bridge, Proc};
use super::log::Log;

/// A running `mcp-bridge connect`. Dropping it stops it.
pub struct Host {
    /// Declared first so it is dropped (closed) before the process is stopped.
    stdin: Option<ChildStdin>,
    proc: Proc,
    rx: mpsc::Receiver<Value>,
    /// Messages read but not yet taken by `response`/`wait_for`.
    backlog: Vec<Value>,
    pub log: Log,
    /// Lines on stdout that were not JSON-RPC (must stay empty).
    pub junk: Arc<Mutex<Vec<String>>>,
    /// True while the reader leaves stdout unread (a host that reads too slowly).
    paused: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

impl Host {
    /// `mcp-bridge --log-level debug connect URL <extra>`.
    pub fn start(url: &str, extra: &[&str]) -> Host {
        Host::start_env(url, extra, &[])
    }

    /// Like `start`, with extra environment.
    pub fn start_env(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Host {
        let proc = Bridge::builder()
            .log_level("debug")
            .connect(url)
            .args(extra)
            .envs(env)
            .piped_stdio()
            .spawn_proc();
        Host::over(proc)
    }

    /// Drive a process started with `piped_stdio()`.
    pub fn over(mut proc: Proc) -> Host {
        let (stdin, stdout) = proc.take_stdio();
        let stdout = stdout.expect("stdout piped");
        let junk = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let paused: Arc<(Mutex<bool>, std::sync::Condvar)> = Arc::default();
        {
            let junk = junk.clone();
            let paused = paused.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    {
                        let (m, cv) = &*paused;
                        let mut p = m.lock().unwrap_or_else(|p| p.into_inner());
                        while *p {
                            p = cv.wait(p).unwrap_or_else(|p| p.into_inner());
                        }
                    }
                    let Ok(l) = line else { break };
                    match serde_json::from_str::<Value>(&l) {
                        Ok(v) if v["jsonrpc"] == "2.0" => {
                            let _ = tx.send(v);
                        }
                        _ => junk.lock().unwrap_or_else(|p| p.into_inner()).push(l),
                    }
                }
            });
        }
        let log = proc.log.clone();
        Host {
            proc,
            stdin,
            rx,
            backlog: Vec::new(),
            log,
            junk,
            paused,
        }
    }

    /// Stop reading connect's stdout (after the line in hand): its pipe fills up, as with a
    /// host that reads too slowly.
    pub fn pause_reading(&self) {
        *self.paused.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    pub fn resume_reading(&self) {
        *self.paused.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.paused.1.notify_all();
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    pub fn send(&mut self, msg: &Value) {
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{msg}").expect("write to connect's stdin");
        s.flush().expect("flush");
    }

    /// Write `bytes` as they are (lines of the test's own making), in one write.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let s = self.stdin.as_mut().expect("stdin open");
        s.write_all(bytes).expect("write to connect's stdin");
        s.flush().expect("flush");
    }

    pub fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc":"2.0","method":method,"params":params}));
    }

    /// The next message matching `pred`, keeping the others in the backlog. Bounded.
    pub fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i);
        }
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(v) if pred(&v) => return v,
                Ok(v) => self.backlog.push(v),
                Err(_) => panic!(
                    "no {what} within {timeout:?}; seen {:?}; connect log:\n{}",
                    self.backlog,
                    self.log.dump()
                ),
            }
        }
    }

    /// The response with `id`.
    pub fn response(&mut self, id: &Value, timeout: Duration) -> Value {
        let id = id.clone();
        self.wait_for(&format!("response {id}"), timeout, move |v| {
            v.get("method").is_none() && v["id"] == id
        })
    }

    /// Everything received so far and within `wait`.
    pub fn drain(&mut self, wait: Duration) -> Vec<Value> {
        let until = Instant::now() + wait;
        while let Ok(v) = self
            .rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            self.backlog.push(v);
        }
        std::mem::take(&mut self.backlog)
    }

    /// 2025 lifecycle: `initialize` + `notifications/initialized`; returns the result.
    pub fn initialize(&mut self, version: &str, caps: Value) -> Value {
        self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": version, "capabilities": caps,
                   "clientInfo": {"name": "connect-tests", "version": "0"}}),
        );
        let r = self.response(&json!(0), Duration::from_secs(20));
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        self.notify("notifications/initialized", json!({}));
        r["result"].clone()
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Wait (bounded, blocking) for connect to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.proc.wait_exit_blocking(timeout)
    }

    pub fn alive(&mut self) -> bool {
        self.proc.try_status().is_none()
    }

    pub fn assert_clean_stdout(&self) {
        let j = self.junk.lock().unwrap_or_else(|p| p.into_inner());
        assert!(j.is_empty(), "non-JSON-RPC lines on stdout: {j:?}");
    }
}

impl AsRef<Log> for Host {
    fn as_ref(&self) -> &Log {
        &self.log
    }
}

/// First text block of a tool result message.
pub fn text(msg: &Value) -> String {
    msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {msg}"))
        .to_owned()
}

/// A tool call (2025 style: no `_meta`).
pub fn call_params(name: &str, args: Value) -> Value {
    json!({"name": name, "arguments": args})
}

/// A tool call with the 2026 `_meta`.
pub fn modern_call_params(name: &str, args: Value) -> Value {
    json!({"name": name, "arguments": args, "_meta": super::http::modern_meta()})
}
