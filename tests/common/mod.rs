//! Shared harness for the integration tests: start the real `mcp-bridge` binary, learn its
//! address from its log, capture its stderr (which includes the child's stderr, target
//! "child"), and speak both protocol eras to it over HTTP.
//!
//! Every wait here is bounded; a test that would otherwise hang panics with the log attached.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

pub const META_PV: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-bridge")
}

// ---------------------------------------------------------------------------------------------
// Log capture
// ---------------------------------------------------------------------------------------------

/// Lines the bridge wrote to stderr so far (shared with the reader thread).
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, line: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// All lines, for panic messages.
    pub fn dump(&self) -> String {
        self.lines().join("\n")
    }

    pub fn find(&self, needle: &str) -> Option<String> {
        self.lines().into_iter().find(|l| l.contains(needle))
    }

    pub fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }

    /// Wait (bounded) for a line containing `needle`.
    pub async fn wait_for(&self, needle: &str, timeout: Duration) -> Option<String> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find(needle) {
                return Some(l);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Like `wait_for`, but panics with the whole log when the line does not come.
    pub async fn expect(&self, needle: &str, timeout: Duration) -> String {
        match self.wait_for(needle, timeout).await {
            Some(l) => l,
            None => panic!(
                "no log line containing {needle:?} within {timeout:?}; log:\n{}",
                self.dump()
            ),
        }
    }

    /// Ids from every `demo: <what> id=<id>` line, in order (`what` e.g. "slow started").
    pub fn demo_ids(&self, what: &str) -> Vec<String> {
        let needle = format!("demo: {what} id=");
        self.lines()
            .iter()
            .filter_map(|l| word_after(l, &needle))
            .collect()
    }
}

/// The whitespace-delimited word that follows `needle` in `line`.
pub fn word_after(line: &str, needle: &str) -> Option<String> {
    let i = line.find(needle)? + needle.len();
    let w: String = line[i..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    (!w.is_empty()).then_some(w)
}

// ---------------------------------------------------------------------------------------------
// The bridge process
// ---------------------------------------------------------------------------------------------

/// A running `mcp-bridge serve`. Dropping it stops it (SIGTERM, then SIGKILL).
pub struct Bridge {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// The MCP endpoint, e.g. `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    pub log: Log,
}

impl Bridge {
    /// `mcp-bridge serve --demo --port 0 <extra>`.
    pub async fn demo(extra: &[&str]) -> Bridge {
        let mut args = vec!["--demo", "--port", "0"];
        args.extend_from_slice(extra);
        Bridge::serve(&args).await
    }

    /// `mcp-bridge serve <args>`; waits for the `listening on` line.
    pub async fn serve(args: &[&str]) -> Bridge {
        let mut cmd = Command::new(bin());
        cmd.arg("--log-level")
            .arg("info")
            .arg("serve")
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("MCP_BRIDGE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        Bridge::spawn(cmd).await
    }

    /// Start a prepared `mcp-bridge` command (stderr is captured here); waits for the
    /// `listening on` line.
    pub async fn spawn(mut cmd: Command) -> Bridge {
        cmd.stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mcp-bridge");
        let log = Log::default();
        let stderr = child.stderr.take().expect("stderr piped");
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    match line {
                        Ok(l) => log.push(l),
                        Err(_) => break,
                    }
                }
            });
        }
        let mut b = Bridge {
            child: Some(child),
            addr: "127.0.0.1:0".parse().unwrap(),
            url: String::new(),
            log,
        };
        let until = Instant::now() + Duration::from_secs(20);
        let needle = "listening on http://";
        loop {
            if let Some(l) = b.log.find(needle) {
                let rest = word_after(&l, needle).expect("address after 'listening on'");
                let (addr, path) = rest.split_once('/').expect("address/path");
                b.addr = addr.parse().expect("socket address in log");
                b.url = format!("http://{addr}/{path}");
                break;
            }
            if let Some(st) = b.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("mcp-bridge exited early ({st}); log:\n{}", b.log.dump());
            }
            if Instant::now() >= until {
                panic!(
                    "mcp-bridge did not report its address; log:\n{}",
                    b.log.dump()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        b
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `http://ADDR` + `path`.
    pub fn endpoint(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, sig).expect("signal the bridge");
    }

    /// Wait (bounded, blocking poll) for the bridge to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.as_mut()?.try_wait().ok().flatten() {
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Wait (bounded) until `/readyz` says the child is up.
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

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop();
        if std::env::var_os("MCP_TEST_LOG").is_some() {
            std::thread::sleep(Duration::from_millis(50));
            eprintln!("---- bridge log ({}) ----\n{}", self.url, self.log.dump());
        }
    }
}

impl Bridge {
    /// SIGTERM, wait up to 5 s, then SIGKILL.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}

pub fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("header value")
}

pub fn hn(s: &str) -> HeaderName {
    HeaderName::from_bytes(s.as_bytes()).expect("header name")
}

/// Headers every POST carries.
pub fn base_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("accept", hv(ACCEPT_BOTH));
    h.insert("content-type", hv("application/json"));
    h
}

/// The required 2026 request `_meta`.
pub fn modern_meta() -> Value {
    json!({ META_PV: MODERN, META_CAPS: {} })
}

/// A 2026 request: `params._meta` gets the required fields (existing `_meta` keys are kept).
pub fn modern_request(id: Value, method: &str, params: Value) -> Value {
    let mut params = match params {
        Value::Null => json!({}),
        p => p,
    };
    let obj = params.as_object_mut().expect("params is an object");
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    let m = meta.as_object_mut().expect("_meta is an object");
    m.entry(META_PV).or_insert(json!(MODERN));
    m.entry(META_CAPS).or_insert(json!({}));
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// A 2026 `tools/call`.
pub fn modern_tool_call(id: Value, name: &str, args: Value) -> Value {
    modern_request(id, "tools/call", json!({ "name": name, "arguments": args }))
}

/// A 2026 `tools/call` with a progress token.
pub fn modern_tool_call_progress(id: Value, name: &str, args: Value, token: Value) -> Value {
    modern_request(
        id,
        "tools/call",
        json!({ "name": name, "arguments": args, "_meta": { "progressToken": token } }),
    )
}

/// The 2026 headers a correct client sends for `body` (no `Mcp-Param-*`).
pub fn modern_headers(body: &Value) -> HeaderMap {
    let mut h = base_headers();
    h.insert("mcp-protocol-version", hv(MODERN));
    let method = body["method"].as_str().unwrap_or("");
    h.insert("mcp-method", hv(method));
    let name = match method {
        "tools/call" | "prompts/get" => body["params"]["name"].as_str(),
        "resources/read" => body["params"]["uri"].as_str(),
        _ => None,
    };
    if let Some(n) = name {
        h.insert("mcp-name", hv(n));
    }
    h
}

/// One HTTP reply, with its JSON-RPC messages (one for JSON, every event for SSE).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub content_type: String,
    pub raw: String,
    pub messages: Vec<Value>,
}

impl Reply {
    pub fn is_sse(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }

    /// The final message (the response).
    pub fn last(&self) -> &Value {
        self.messages
            .last()
            .unwrap_or_else(|| panic!("no JSON-RPC message in reply: {self:?}"))
    }

    pub fn result(&self) -> &Value {
        let m = self.last();
        assert!(m.get("result").is_some(), "expected a result, got {m}");
        &m["result"]
    }

    pub fn error(&self) -> &Value {
        let m = self.last();
        assert!(m.get("error").is_some(), "expected an error, got {m}");
        &m["error"]
    }

    pub fn error_code(&self) -> i64 {
        self.error()["code"].as_i64().expect("error.code")
    }

    /// First text block of a tool result.
    pub fn text(&self) -> String {
        let r = self.result();
        r["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text content in {r}"))
            .to_owned()
    }

    pub fn notifications(&self, method: &str) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|m| m["method"] == method && m.get("id").is_none())
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

/// Read a whole response into a `Reply`.
pub async fn read_reply(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let raw = resp.text().await.expect("read body");
    let messages = if content_type.starts_with("text/event-stream") {
        parse_sse(&raw)
    } else if raw.trim().is_empty() {
        Vec::new()
    } else {
        match serde_json::from_str::<Value>(&raw) {
            Ok(v) => vec![v],
            Err(_) => Vec::new(),
        }
    };
    Reply {
        status,
        headers,
        content_type,
        raw,
        messages,
    }
}

/// The JSON `data` of every event in an SSE body (comments and empty events skipped).
pub fn parse_sse(body: &str) -> Vec<Value> {
    let body = body.replace('\r', "");
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        if let Some(v) = sse_block_data(block) {
            out.push(v);
        }
    }
    out
}

fn sse_block_data(block: &str) -> Option<Value> {
    let mut data = String::new();
    for line in block.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if data.is_empty() {
        return None;
    }
    Some(serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad SSE data {data:?}: {e}")))
}

/// POST a 2026 request whose answer is a stream; 200 asserted, events read one at a time.
pub async fn open_modern_stream(c: &reqwest::Client, url: &str, body: &Value) -> SseReader {
    let resp = c
        .post(url)
        .headers(modern_headers(body))
        .body(body.to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 200);
    SseReader::new(resp)
}

/// Reads SSE events from a response one at a time.
pub struct SseReader {
    resp: reqwest::Response,
    buf: String,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: String::new(),
        }
    }

    /// The next event's data; None at the end of the stream. Bounded by `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        let until = Instant::now() + timeout;
        loop {
            while let Some(i) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..i + 2).collect();
                if let Some(v) = sse_block_data(&block) {
                    return Some(v);
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            let chunk = tokio::time::timeout(left, self.resp.chunk())
                .await
                .unwrap_or_else(|_| panic!("no SSE event within {timeout:?}"));
            match chunk {
                Ok(Some(c)) => self
                    .buf
                    .push_str(&String::from_utf8_lossy(&c).replace('\r', "")),
                _ => return None,
            }
        }
    }

    /// Wait (bounded) for the end of the stream; true if it ended.
    pub async fn ends_within(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            loop {
                match self.resp.chunk().await {
                    Ok(Some(_)) => continue,
                    _ => return,
                }
            }
        })
        .await
        .is_ok()
    }
}

/// POST `body` with `headers`.
pub async fn post_with(
    c: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: impl Into<reqwest::Body>,
) -> Reply {
    let resp = c
        .post(url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .expect("POST");
    read_reply(resp).await
}

/// POST a 2026 request with the headers a correct client sends.
pub async fn post_modern(c: &reqwest::Client, url: &str, body: &Value) -> Reply {
    post_with(c, url, modern_headers(body), body.to_string()).await
}

/// A 2026 `tools/call` of `name`, answered in full.
pub async fn call_modern(
    c: &reqwest::Client,
    url: &str,
    id: Value,
    name: &str,
    args: Value,
) -> Reply {
    post_modern(c, url, &modern_tool_call(id, name, args)).await
}

/// Retry a 2026 echo (bounded) until it answers with `text`.
pub async fn echo_until_ok(c: &reqwest::Client, url: &str, text: &str, timeout: Duration) -> Reply {
    let until = Instant::now() + timeout;
    loop {
        let r = call_modern(c, url, json!(text), "echo", json!({ "text": text })).await;
        let ok = r.status == 200
            && r.messages
                .last()
                .is_some_and(|m| m["result"]["content"][0]["text"] == text);
        if ok || Instant::now() >= until {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 2025 sessions
// ---------------------------------------------------------------------------------------------

/// A 2025-era session with the bridge.
pub struct Session {
    pub c: reqwest::Client,
    pub url: String,
    pub id: String,
    pub version: String,
    /// The `InitializeResult`.
    pub init: Value,
}

pub fn initialize_body(id: Value, version: &str) -> Value {
    initialize_body_caps(id, version, json!({}))
}

pub fn initialize_body_caps(id: Value, version: &str, caps: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": caps,
            "clientInfo": { "name": "mcp-bridge-tests", "version": "0" },
        }
    })
}

impl Session {
    /// `initialize` + `notifications/initialized`.
    pub async fn open(c: &reqwest::Client, url: &str) -> Session {
        Session::open_with_caps(c, url, json!({})).await
    }

    /// Like `open`, declaring `caps` as the client's capabilities.
    pub async fn open_with_caps(c: &reqwest::Client, url: &str, caps: Value) -> Session {
        let r = post_with(
            c,
            url,
            base_headers(),
            initialize_body_caps(json!(0), LEGACY, caps).to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "initialize: {r:?}");
        let id = r
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("no Mcp-Session-Id on initialize: {r:?}"));
        let init = r.result().clone();
        let version = init["protocolVersion"]
            .as_str()
            .unwrap_or(LEGACY)
            .to_owned();
        let s = Session {
            c: c.clone(),
            url: url.to_owned(),
            id,
            version,
            init,
        };
        let st = s.notify("notifications/initialized", json!({})).await;
        assert_eq!(st, 202, "notifications/initialized");
        s
    }

    pub fn headers(&self) -> HeaderMap {
        let mut h = base_headers();
        h.insert("mcp-session-id", hv(&self.id));
        h.insert("mcp-protocol-version", hv(&self.version));
        h
    }

    pub async fn post(&self, body: &Value) -> Reply {
        post_with(&self.c, &self.url, self.headers(), body.to_string()).await
    }

    pub async fn request(&self, id: Value, method: &str, params: Value) -> Reply {
        self.post(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await
    }

    pub async fn call(&self, id: Value, name: &str, args: Value) -> Reply {
        self.request(id, "tools/call", json!({ "name": name, "arguments": args }))
            .await
    }

    /// POST a notification; returns the HTTP status.
    pub async fn notify(&self, method: &str, params: Value) -> u16 {
        self.post(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await
            .status
    }
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// Is `pid` a live (non-zombie) process?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => stat_fields(&s).is_some_and(|(state, _)| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// (state, ppid) from a /proc/PID/stat line.
fn stat_fields(s: &str) -> Option<(char, u32)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Live processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            if let Some((state, ppid)) = stat_fields(&s) {
                if ppid == pid && state != 'Z' {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The process's command name (`/proc/PID/comm`).
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Wait (bounded) until `pid` is gone; true if it is.
pub async fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if !alive(pid) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/// The `/metrics` URL the bridge logged for its metrics listener (`metrics on http://…`).
pub async fn metrics_url(b: &Bridge) -> String {
    let l = b
        .log
        .expect("metrics on http://", Duration::from_secs(10))
        .await;
    let rest = word_after(&l, "metrics on http://").expect("address after 'metrics on'");
    format!("http://{rest}")
}

/// One scrape: 200 in the Prometheus text format.
pub async fn scrape(c: &reqwest::Client, url: &str) -> String {
    let r = c.get(url).send().await.expect("GET /metrics");
    assert_eq!(r.status(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    r.text().await.expect("metrics body")
}

/// The value of the sample `series` (exact name and labels as exposed), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}
