//! Harness for the `connect` integration tests: run `mcp-bridge connect URL …` with piped
//! stdio, play the host by writing JSON-RPC lines to its stdin, and collect its stdout — every
//! stdout line must be a JSON-RPC 2.0 message (checked on arrival) — and its stderr log.
//! Also: a tiny hyper server with a canned answer, for remotes that misbehave.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "../common/mod.rs"]
pub mod common;

#[allow(unused_imports)]
pub use common::Bridge;

/// Lines connect wrote to stderr.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push_line(&self, l: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(l);
    }
    pub fn dump(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
    }
    /// `find`, waiting up to 2 s: stderr is read apart from stdout, so a log line written
    /// before an answer may be seen after it under load.
    pub fn wait_find(&self, needle: &str) -> Option<String> {
        for _ in 0..50 {
            if let Some(l) = self.find(needle) {
                return Some(l);
            }
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        self.find(needle)
    }
    pub fn find(&self, needle: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|l| l.contains(needle))
            .cloned()
    }
}

/// A running `mcp-bridge connect`. Dropping it kills it.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Value>,
    /// Messages read but not yet taken by `response`/`next`.
    backlog: Vec<Value>,
    pub log: Log,
    /// Lines on stdout that were not JSON-RPC (must stay empty).
    pub junk: Arc<Mutex<Vec<String>>>,
}

pub fn meta() -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {} })
}

impl Host {
    pub fn start(url: &str, extra: &[&str]) -> Host {
        Host::start_env(url, extra, &[])
    }

    pub fn start_env(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Host {
        let mut cmd = Command::new(common::bin());
        cmd.args(["--log-level", "debug", "connect", url])
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("MCP_BRIDGE_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn mcp-bridge connect");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = Log::default();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    match line {
                        Ok(l) => log.push_line(l),
                        Err(_) => break,
                    }
                }
            });
        }
        let junk = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let junk = junk.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(l) = line else { break };
                    match serde_json::from_str::<Value>(&l) {
                        Ok(v) if v["jsonrpc"] == "2.0" => {
                            let _ = tx.send(v);
                        }
                        _ => junk.lock().unwrap().push(l),
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        Host {
            child,
            stdin,
            rx,
            backlog: Vec::new(),
            log,
            junk,
        }
    }

    pub fn send(&mut self, msg: &Value) {
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{msg}").expect("write to connect's stdin");
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

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn assert_clean_stdout(&self) {
        let j = self.junk.lock().unwrap();
        assert!(j.is_empty(), "non-JSON-RPC lines on stdout: {j:?}");
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("MCP_TEST_LOG").is_some() {
            eprintln!("---- connect log ----\n{}", self.log.dump());
        }
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
    json!({"name": name, "arguments": args, "_meta": meta()})
}

/// A tiny HTTP server: every request gets (status, content type, body) from `answer`, which
/// sees the request's headers and body. Returns its address; it runs until the test ends.
pub async fn tiny_server<F>(answer: F) -> SocketAddr
where
    F: Fn(&http::HeaderMap, &[u8]) -> (u16, &'static str, String) + Send + Sync + 'static,
{
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let headers = req.headers().clone();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let (status, ct, text) = answer(&headers, &body);
                        let mut r = hyper::Response::new(Full::new(bytes::Bytes::from(text)));
                        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        r.headers_mut()
                            .insert("content-type", http::HeaderValue::from_static(ct));
                        Ok::<_, std::convert::Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    addr
}
