//! The soak's pieces: a hyper HTTP/1.1 client speaking both eras, one request of each kind of
//! the mix with its checks, the client's own counts, the bridge under test (its process, log,
//! fds, RSS and children, read from /proc) and the report that holds the counts against the
//! bridge's metrics (`report`).

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

mod report;
pub use report::Report;

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// The bridge's `--max-body` in the soak, and the size of the oversize bodies sent.
pub const MAX_BODY: usize = 64 * 1024;
/// A bound on any one exchange: nothing in the mix takes this long unless something is wrong.
const EXCHANGE: Duration = Duration::from_secs(60);

/// One kind of request of the mix.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    ModernEcho,
    LegacyEcho,
    ModernHangUp,
    LegacyCancel,
    Malformed,
    Oversize,
    WrongOrigin,
    Removed,
}

/// What the client saw, counted as it happened.
#[derive(Default)]
pub struct Counts {
    /// `tools/call` requests that reached the bridge.
    pub tools_calls: AtomicU64,
    pub echo_ok: AtomicU64,
    /// Answers that were the bridge's own `-32000` (child exited or restarting).
    pub bridge_errors: AtomicU64,
    pub hangups: AtomicU64,
    pub cancels: AtomicU64,
    pub malformed: AtomicU64,
    pub oversize: AtomicU64,
    pub wrong_origin: AtomicU64,
    pub removed: AtomicU64,
    pub faults: AtomicU64,
    /// Hang-ups and cancellations hold it shared, a fault exclusively: the child never dies
    /// while a cancellation is on its way (which one came first would be a coin toss).
    pub quiet: tokio::sync::RwLock<()>,
    /// Requests of the mix made (faults aside).
    pub executed: AtomicU64,
    /// Requests answered exactly once with their own id.
    pub single: AtomicU64,
    /// Wrong: no answer, several, another request's id or text, an unexpected status.
    pub wrong: AtomicU64,
    pub first_wrong: Mutex<Option<String>>,
}

impl Counts {
    fn wrong(&self, what: String) {
        self.wrong.fetch_add(1, Ordering::Relaxed);
        let mut g = self.first_wrong.lock().unwrap();
        if g.is_none() {
            *g = Some(what);
        }
    }
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// An HTTP reply, read in full: its status and its JSON-RPC messages.
pub struct Reply {
    pub status: StatusCode,
    pub messages: Vec<Value>,
}

impl Reply {
    /// The one answer (a message with an id) this reply holds for `id`; panics otherwise.
    pub fn single_answer(&self, id: &Value) -> Value {
        let answers: Vec<&Value> = self
            .messages
            .iter()
            .filter(|m| m.get("id").is_some())
            .collect();
        assert_eq!(answers.len(), 1, "answers for {id}: {:?}", self.messages);
        assert_eq!(&answers[0]["id"], id, "{:?}", self.messages);
        answers[0].clone()
    }
    fn answers(&self) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|m| m.get("id").is_some() && m.get("method").is_none())
            .collect()
    }
}

/// SSE (or JSON) messages of a response body, read as they come.
pub struct Stream {
    body: Incoming,
    json: bool,
    buf: Vec<u8>,
    queued: VecDeque<Value>,
    pub status: StatusCode,
}

impl Stream {
    /// The next message; None at the end of the body.
    pub async fn next_message(&mut self) -> Option<Value> {
        loop {
            if let Some(m) = self.queued.pop_front() {
                return Some(m);
            }
            let frame = tokio::time::timeout(EXCHANGE, self.body.frame())
                .await
                .ok()??;
            let Ok(data) = frame.ok()?.into_data() else {
                continue;
            };
            self.buf.extend_from_slice(&data);
            self.parse();
        }
    }
    fn parse(&mut self) {
        if self.json {
            if let Ok(v) = serde_json::from_slice::<Value>(&self.buf) {
                self.queued.push_back(v);
                self.buf.clear();
            }
            return;
        }
        while let Some(end) = find(&self.buf, b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            for line in String::from_utf8_lossy(&event).lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    if let Ok(v) = serde_json::from_str(d.trim_start()) {
                        self.queued.push_back(v);
                    }
                }
            }
        }
    }
    /// Everything left, as a reply.
    pub async fn rest(mut self) -> Reply {
        let mut messages = Vec::new();
        while let Some(m) = self.next_message().await {
            messages.push(m);
        }
        Reply {
            status: self.status,
            messages,
        }
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Both eras over one keep-alive HTTP/1.1 connection pool.
pub struct Client {
    http: HyperClient<HttpConnector, Full<Bytes>>,
    url: String,
}

fn modern_body(id: &Value, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn call_params(name: &str, args: Value, token: Option<&str>) -> Value {
    let mut p = json!({"name": name, "arguments": args});
    if let Some(t) = token {
        p["_meta"]["progressToken"] = json!(t);
    }
    p
}

impl Client {
    pub fn new(url: String) -> Self {
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .build_http();
        Self { http, url }
    }

    async fn send(&self, headers: &[(&str, &str)], body: Bytes) -> Stream {
        let mut b = Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b.body(Full::new(body)).unwrap();
        let resp = tokio::time::timeout(EXCHANGE, self.http.request(req))
            .await
            .expect("the bridge answered within the bound")
            .expect("an HTTP response");
        let json = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let status = resp.status();
        Stream {
            body: resp.into_body(),
            json,
            buf: Vec::new(),
            queued: VecDeque::new(),
            status,
        }
    }

    async fn modern(&self, body: &Value, extra: &[(&str, &str)]) -> Stream {
        let method = body["method"].as_str().unwrap_or("").to_owned();
        let name = body["params"]["name"].as_str().unwrap_or("").to_owned();
        let mut h = vec![("mcp-protocol-version", MODERN), ("mcp-method", &method)];
        if method == "tools/call" {
            h.push(("mcp-name", &name));
        }
        h.extend_from_slice(extra);
        self.send(&h, Bytes::from(body.to_string())).await
    }

    pub async fn modern_stream(&self, id: &Value, tool: &str, args: Value) -> Stream {
        let token = format!("t-{id}");
        let body = modern_body(id, "tools/call", call_params(tool, args, Some(&token)));
        self.modern(&body, &[]).await
    }

    pub async fn modern_call(&self, id: &Value, tool: &str, args: Value) -> Reply {
        let body = modern_body(id, "tools/call", call_params(tool, args, None));
        self.modern(&body, &[]).await.rest().await
    }

    async fn legacy(&self, session: &str, body: &Value) -> Stream {
        let h = [
            ("mcp-session-id", session),
            ("mcp-protocol-version", LEGACY),
        ];
        self.send(&h, Bytes::from(body.to_string())).await
    }

    pub async fn open_session(&self, n: usize) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": format!("soak-{n}"), "version": "1"}}});
        let req = Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let resp = self.http.request(req).await.expect("initialize");
        assert_eq!(resp.status(), 200, "initialize");
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = resp.into_body().collect().await;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let r = self.legacy(&sid, &note).await;
        assert_eq!(r.status, 202, "notifications/initialized");
        let _ = r.rest().await;
        sid
    }

    pub async fn delete_session(&self, sid: &str) {
        let req = Request::delete(&self.url)
            .header("mcp-session-id", sid)
            .body(Full::new(Bytes::new()))
            .unwrap();
        if let Ok(r) = self.http.request(req).await {
            let _ = r.into_body().collect().await;
        }
    }
}

/// One request of the mix, checked; its outcome is counted in `k`.
pub async fn one(c: &Client, sessions: &[String], k: &Counts, i: u64, kind: Kind) {
    match kind {
        Kind::ModernEcho => {
            let (id, text) = (json!(i), format!("m{i}"));
            let r = c.modern_call(&id, "echo", json!({ "text": text })).await;
            echo_checked(k, &r, &id, &text);
        }
        Kind::LegacyEcho => {
            let s = &sessions[(i as usize) % sessions.len()];
            let (id, text) = (json!(format!("l{i}")), format!("l{i}-{}", &s[..8]));
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text}}});
            let r = c.legacy(s, &body).await.rest().await;
            echo_checked(k, &r, &id, &text);
        }
        Kind::ModernHangUp => {
            let _quiet = k.quiet.read().await;
            hang_up(c, k, i).await;
        }
        Kind::LegacyCancel => {
            let _quiet = k.quiet.read().await;
            cancel_by_notification(c, &sessions[(i as usize) % sessions.len()], k, i).await;
        }
        Kind::Malformed => {
            let r = c
                .send(
                    &[("mcp-protocol-version", MODERN)],
                    Bytes::from_static(b"{not json"),
                )
                .await;
            k.malformed.fetch_add(1, Ordering::Relaxed);
            status_checked(k, r.rest().await, 400, "malformed", Some(-32700));
        }
        Kind::Oversize => {
            let big = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/list","pad":"{}"}}"#,
                "x".repeat(MAX_BODY + 1024)
            );
            let r = c
                .send(&[("mcp-protocol-version", MODERN)], Bytes::from(big))
                .await;
            k.oversize.fetch_add(1, Ordering::Relaxed);
            status_checked(k, r.rest().await, 413, "oversize", None);
        }
        Kind::WrongOrigin => {
            let body = modern_body(
                &json!(i),
                "tools/call",
                call_params("echo", json!({"text": "o"}), None),
            );
            let r = c.modern(&body, &[("origin", "http://evil.example")]).await;
            k.wrong_origin.fetch_add(1, Ordering::Relaxed);
            status_checked(k, r.rest().await, 403, "wrong origin", None);
        }
        Kind::Removed => {
            let id = json!(i);
            let r = c
                .modern(&modern_body(&id, "ping", json!({})), &[])
                .await
                .rest()
                .await;
            k.removed.fetch_add(1, Ordering::Relaxed);
            if r.status == 404
                && r.answers().len() == 1
                && r.answers()[0]["id"] == id
                && r.answers()[0]["error"]["code"] == -32601
            {
                k.single.fetch_add(1, Ordering::Relaxed);
            } else {
                k.wrong(format!("removed method {i}: {} {:?}", r.status, r.messages));
            }
        }
    }
}

/// An echo's reply: exactly one answer, its own id, and its own text (or the bridge's -32000
/// while the child is down).
fn echo_checked(k: &Counts, r: &Reply, id: &Value, text: &str) {
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    let answers = r.answers();
    if r.status != 200 || answers.len() != 1 || &answers[0]["id"] != id {
        return k.wrong(format!("echo {id}: {} {:?}", r.status, r.messages));
    }
    let a = answers[0];
    if a["result"]["content"][0]["text"] == text {
        k.echo_ok.fetch_add(1, Ordering::Relaxed);
    } else if a["error"]["code"] == -32000 {
        k.bridge_errors.fetch_add(1, Ordering::Relaxed);
    } else {
        return k.wrong(format!("echo {id} answered with another's: {a}"));
    }
    k.single.fetch_add(1, Ordering::Relaxed);
}

fn status_checked(k: &Counts, r: Reply, want: u16, what: &str, code: Option<i64>) {
    let code_ok = code.is_none_or(|c| r.answers().first().is_some_and(|a| a["error"]["code"] == c));
    if r.status == want && r.answers().len() <= 1 && code_ok {
        k.single.fetch_add(1, Ordering::Relaxed);
    } else {
        k.wrong(format!("{what}: {} {:?}", r.status, r.messages));
    }
}

/// A 2026 `slow` call hung up on after its first progress event (a cancellation by the
/// client's disconnect). If the child is down, the first message is the answer itself.
async fn hang_up(c: &Client, k: &Counts, i: u64) {
    let id = json!(i);
    let mut s = c
        .modern_stream(&id, "slow", json!({"seconds": 30, "steps": 3000}))
        .await;
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    match s.next_message().await {
        Some(m) if m.get("method").is_some() => {
            k.hangups.fetch_add(1, Ordering::Relaxed);
            drop(s);
        }
        Some(m) if m["id"] == id && m["error"]["code"] == -32000 => {
            k.bridge_errors.fetch_add(1, Ordering::Relaxed);
            k.single.fetch_add(1, Ordering::Relaxed);
        }
        other => k.wrong(format!("hang-up {i}: {other:?}")),
    }
}

/// A 2025 `slow` call cancelled with `notifications/cancelled` once it runs: no answer.
async fn cancel_by_notification(c: &Client, sid: &str, k: &Counts, i: u64) {
    let id = json!(format!("c{i}"));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params":
        call_params("slow", json!({"seconds": 30, "steps": 3000}), Some(&format!("t{i}")))});
    let mut s = c.legacy(sid, &body).await;
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    match s.next_message().await {
        Some(m) if m.get("method").is_some() => {}
        Some(m) if m["id"] == id && m["error"]["code"] == -32000 => {
            k.bridge_errors.fetch_add(1, Ordering::Relaxed);
            k.single.fetch_add(1, Ordering::Relaxed);
            return;
        }
        other => return k.wrong(format!("cancel {i}: first {other:?}")),
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "soak"}});
    let n = c.legacy(sid, &note).await;
    let st = n.status;
    let _ = n.rest().await;
    let rest = s.rest().await;
    if st != 202 || !rest.answers().is_empty() {
        return k.wrong(format!("cancel {i}: {st}, then {:?}", rest.messages));
    }
    k.cancels.fetch_add(1, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// The bridge under test
// ---------------------------------------------------------------------------------------------

pub fn bin() -> String {
    std::env::var("MCP_BRIDGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-bridge").into())
}

#[derive(Default)]
struct LogState {
    tail: VecDeque<String>,
    listening: Option<String>,
    metrics: Option<String>,
    panics: usize,
}

pub struct SoakBridge {
    child: Child,
    pub url: String,
    metrics_url: String,
    log: Arc<Mutex<LogState>>,
    seen: Arc<Mutex<HashSet<u32>>>,
    watcher: tokio::task::JoinHandle<()>,
}

fn word_after(l: &str, needle: &str) -> Option<String> {
    let rest = &l[l.find(needle)? + needle.len()..];
    Some(
        rest.split_whitespace()
            .next()?
            .trim_end_matches(['"', ',', ')'])
            .to_owned(),
    )
}

impl SoakBridge {
    pub async fn start() -> Self {
        let max_body = MAX_BODY.to_string();
        let mut child = Command::new(bin())
            .args(["--log-level", "info", "serve", "--demo", "--port", "0"])
            .args(["--metrics-listen", "127.0.0.1:0", "--max-body", &max_body])
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcp-bridge");
        let log = Arc::new(Mutex::new(LogState::default()));
        let stderr = child.stderr.take().unwrap();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut g = l.lock().unwrap();
                if line.contains("panicked") {
                    g.panics += 1;
                }
                if g.listening.is_none() {
                    g.listening = word_after(&line, "listening on http://");
                }
                if g.metrics.is_none() {
                    g.metrics = word_after(&line, "metrics on http://");
                }
                g.tail.push_back(line);
                if g.tail.len() > 200 {
                    g.tail.pop_front();
                }
            }
        });
        let until = Instant::now() + Duration::from_secs(30);
        let (url, metrics_url) = loop {
            {
                let g = log.lock().unwrap();
                if let (Some(a), Some(m)) = (&g.listening, &g.metrics) {
                    break (format!("http://{a}"), format!("http://{m}"));
                }
            }
            assert!(Instant::now() < until, "the bridge did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let (s, pid) = (seen.clone(), child.id());
        let watcher = tokio::spawn(async move {
            loop {
                s.lock().unwrap().extend(children_of(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        let b = Self {
            child,
            url,
            metrics_url,
            log,
            seen,
            watcher,
        };
        b.wait_ready().await;
        b
    }

    async fn wait_ready(&self) {
        for _ in 0..300 {
            let m = self.scrape().await;
            if sum(&m, "mcp_bridge_upstream_up", &[]) == 1.0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the demo child did not come up");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    pub async fn scrape(&self) -> String {
        self.metrics().scrape().await
    }
    /// A handle that scrapes the bridge's metrics.
    pub fn metrics(&self) -> Metrics {
        Metrics(self.metrics_url.clone())
    }

    pub fn children_seen(&self) -> HashSet<u32> {
        self.seen.lock().unwrap().extend(children_of(self.pid()));
        self.seen.lock().unwrap().clone()
    }
    pub fn panics(&self) -> usize {
        self.log.lock().unwrap().panics
    }
    pub fn log_tail(&self) -> String {
        let g = self.log.lock().unwrap();
        g.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// SIGTERM, then (bounded) wait; SIGKILL if it does not go. Its exit code.
    pub async fn stop(&mut self) -> Option<i32> {
        self.watcher.abort();
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..300 {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for SoakBridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the bridge's metrics are.
#[derive(Clone)]
pub struct Metrics(String);

impl Metrics {
    pub async fn scrape(&self) -> String {
        let c: HyperClient<HttpConnector, Full<Bytes>> =
            HyperClient::builder(TokioExecutor::new()).build_http();
        let req = Request::get(self.0.clone())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let r = c.request(req).await.expect("GET /metrics");
        let b = r
            .into_body()
            .collect()
            .await
            .expect("metrics body")
            .to_bytes();
        String::from_utf8_lossy(&b).into_owned()
    }
}

pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Direct children of `pid`, from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            after
                .split_whitespace()
                .nth(1)
                .and_then(|pp| pp.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

/// Is `pid` a live (not zombie) process?
pub fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    matches!(state, Some(s) if s != "Z" && s != "X")
}

/// The sum of a metric's samples whose labels include every `(label, value)` of `want`.
pub fn sum(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let (n, labels) = series.split_once('{').unwrap_or((series, ""));
            if n != name {
                return None;
            }
            let ok = want
                .iter()
                .all(|(k, val)| labels.contains(&format!("{k}=\"{val}\"")));
            ok.then(|| v.parse::<f64>().ok()).flatten()
        })
        .sum()
}
