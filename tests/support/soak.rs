//! The soak's workload (tests/soak/main.rs): the bridge it runs against (`soak_bridge`), a client
//! that speaks both eras over one keep-alive pool and can also read a reply event by event
//! (`SoakClient`, `SoakStream`), one request of each kind of the mix with its checks
//! (`soak_request`), and what the client saw, counted as it happened (`SoakCounts`). The
//! report that holds the counts against the bridge's metrics is `soak_report.rs`.
//!
//! Everything underneath is the rest of the library: the bridge is started by
//! `Bridge::builder()`, requests are built and parsed by http.rs, 2025 sessions are its
//! `Session`. What is here is only what the soak alone needs. A request that goes wrong is
//! counted (with the first one described) rather than panicking in a worker, so the run
//! finishes and its report says how many went wrong; the test then fails on the count.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::bridge::{bin, Bridge};
use super::http::{
    answers, base_headers, client, hv, modern_headers, modern_request, modern_tool_call,
    modern_tool_call_progress, post_with, read_reply, Reply, Session, SseReader, MODERN,
};

/// The bridge's `--max-body` in the soak; the oversize bodies sent are larger.
pub const SOAK_MAX_BODY: usize = 64 * 1024;
/// A bound on any one wait for an event: nothing in the mix takes this long unless something
/// is wrong.
const EXCHANGE: Duration = Duration::from_secs(60);
/// How long the demo child may take to come up.
const READY_WAIT: Duration = Duration::from_secs(15);

/// The bridge the soak runs: `$MCP_BRIDGE_BIN` when set (`.ci/soak.sh` points it at the
/// release build), else the binary cargo built.
pub fn soak_binary() -> OsString {
    std::env::var_os("MCP_BRIDGE_BIN").unwrap_or_else(|| bin().into())
}

/// `serve --demo` on port 0 with a metrics listener and `--max-body SOAK_MAX_BODY`, its demo
/// child up.
pub async fn soak_bridge() -> Bridge {
    let b = Bridge::builder()
        .binary(soak_binary())
        .serve()
        .args(["--demo", "--port", "0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--max-body".to_owned(), SOAK_MAX_BODY.to_string()])
        .spawn()
        .await;
    b.wait_ready(READY_WAIT).await;
    b
}

/// One kind of request of the mix.
#[derive(Debug, Clone, Copy)]
pub enum SoakKind {
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
pub struct SoakCounts {
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

impl SoakCounts {
    fn wrong(&self, what: String) {
        self.wrong.fetch_add(1, Ordering::Relaxed);
        let mut g = self.first_wrong.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(what);
        }
    }

    /// The first wrong request, described.
    pub fn first_wrong(&self) -> Option<String> {
        self.first_wrong
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// A reply read as it comes: the events of an SSE body one at a time (a JSON body is read
/// whole and gives its one message). Dropping it before the end hangs up.
pub struct SoakStream {
    pub status: u16,
    sse: Option<SseReader>,
    queued: VecDeque<Value>,
}

impl SoakStream {
    async fn of(resp: reqwest::Response) -> SoakStream {
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if sse {
            return SoakStream {
                status,
                sse: Some(SseReader::new(resp)),
                queued: VecDeque::new(),
            };
        }
        SoakStream {
            status,
            sse: None,
            queued: read_reply(resp).await.messages.into(),
        }
    }

    /// The next message; None at the end of the body. Bounded by `EXCHANGE`.
    pub async fn next_message(&mut self) -> Option<Value> {
        if let Some(m) = self.queued.pop_front() {
            return Some(m);
        }
        self.sse.as_mut()?.next(EXCHANGE).await
    }

    /// Every message left.
    pub async fn rest(mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(m) = self.next_message().await {
            out.push(m);
        }
        out
    }
}

/// Both eras over one keep-alive connection pool (the library's `client()`).
pub struct SoakClient {
    http: reqwest::Client,
    url: String,
}

impl SoakClient {
    pub fn new(url: &str) -> SoakClient {
        SoakClient {
            http: client(),
            url: url.to_owned(),
        }
    }

    /// POST `body` with `headers`, answered in full.
    async fn post(&self, headers: HeaderMap, body: impl Into<reqwest::Body>) -> Reply {
        post_with(&self.http, &self.url, headers, body).await
    }

    /// POST `body` with `headers`, read as it comes.
    async fn stream(&self, headers: HeaderMap, body: &Value) -> SoakStream {
        let resp = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body.to_string())
            .send()
            .await
            .expect("an HTTP response");
        SoakStream::of(resp).await
    }

    /// A 2026 `tools/call` of `tool` with a progress token, read as it comes.
    pub async fn modern_stream(&self, id: &Value, tool: &str, args: Value) -> SoakStream {
        let body = modern_tool_call_progress(id.clone(), tool, args, json!(format!("t-{id}")));
        self.stream(modern_headers(&body), &body).await
    }

    /// A 2026 `tools/call` of `tool`, answered in full.
    pub async fn modern_call(&self, id: &Value, tool: &str, args: Value) -> Reply {
        let body = modern_tool_call(id.clone(), tool, args);
        self.post(modern_headers(&body), body.to_string()).await
    }

    /// `n` 2025 sessions (`initialize` + `notifications/initialized`, checked).
    pub async fn open_sessions(&self, n: usize) -> Vec<Session> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(Session::open(&self.http, &self.url).await);
        }
        out
    }

    /// End a 2025 session (DELETE); what the bridge says is not checked.
    pub async fn delete_session(&self, s: &Session) {
        let r = self
            .http
            .delete(&self.url)
            .header("mcp-session-id", hv(&s.id))
            .send()
            .await;
        if let Ok(r) = r {
            let _ = r.bytes().await;
        }
    }
}

/// The headers of a 2026 request that is not a well-formed body of its own.
fn modern_only() -> HeaderMap {
    let mut h = base_headers();
    h.insert("mcp-protocol-version", hv(MODERN));
    h
}

/// One request of the mix, checked; its outcome is counted in `k`.
pub async fn soak_request(
    c: &SoakClient,
    sessions: &[Session],
    k: &SoakCounts,
    i: u64,
    kind: SoakKind,
) {
    let session = || &sessions[(i as usize) % sessions.len()];
    match kind {
        SoakKind::ModernEcho => {
            let (id, text) = (json!(i), format!("m{i}"));
            let r = c.modern_call(&id, "echo", json!({ "text": text })).await;
            echo_checked(k, &r, &id, &text);
        }
        SoakKind::LegacyEcho => {
            let s = session();
            let tag = s.id.get(..8).unwrap_or(&s.id);
            let (id, text) = (json!(format!("l{i}")), format!("l{i}-{tag}"));
            let r = s.call(id.clone(), "echo", json!({ "text": text })).await;
            echo_checked(k, &r, &id, &text);
        }
        SoakKind::ModernHangUp => {
            let _quiet = k.quiet.read().await;
            hang_up(c, k, i).await;
        }
        SoakKind::LegacyCancel => {
            let _quiet = k.quiet.read().await;
            cancel_by_notification(session(), k, i).await;
        }
        SoakKind::Malformed => {
            let r = c.post(modern_only(), "{not json").await;
            k.malformed.fetch_add(1, Ordering::Relaxed);
            status_checked(k, &r, 400, "malformed", Some(-32700));
        }
        SoakKind::Oversize => {
            let big = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/list","pad":"{}"}}"#,
                "x".repeat(SOAK_MAX_BODY + 1024)
            );
            let r = c.post(modern_only(), big).await;
            k.oversize.fetch_add(1, Ordering::Relaxed);
            status_checked(k, &r, 413, "oversize", None);
        }
        SoakKind::WrongOrigin => {
            let body = modern_tool_call(json!(i), "echo", json!({"text": "o"}));
            let mut h = modern_headers(&body);
            h.insert("origin", hv("http://evil.example"));
            let r = c.post(h, body.to_string()).await;
            k.wrong_origin.fetch_add(1, Ordering::Relaxed);
            status_checked(k, &r, 403, "wrong origin", None);
        }
        SoakKind::Removed => removed(c, k, i).await,
    }
}

/// A 2026 `ping` (a method 2026 removed): 404 with one -32601 answer of its own id.
async fn removed(c: &SoakClient, k: &SoakCounts, i: u64) {
    let id = json!(i);
    let body = modern_request(id.clone(), "ping", json!({}));
    let r = c.post(modern_headers(&body), body.to_string()).await;
    k.removed.fetch_add(1, Ordering::Relaxed);
    let a = r.answers();
    if r.status == 404 && a.len() == 1 && a[0]["id"] == id && a[0]["error"]["code"] == -32601 {
        k.single.fetch_add(1, Ordering::Relaxed);
    } else {
        k.wrong(format!("removed method {i}: {} {:?}", r.status, r.messages));
    }
}

/// An echo's reply: exactly one answer, its own id, and its own text (or the bridge's -32000
/// while the child is down).
fn echo_checked(k: &SoakCounts, r: &Reply, id: &Value, text: &str) {
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    let answers = r.answers();
    if r.status != 200 || answers.len() != 1 || answers[0]["id"] != *id {
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

/// The status `want`, at most one answer, and (if `code`) that answer's error code.
fn status_checked(k: &SoakCounts, r: &Reply, want: u16, what: &str, code: Option<i64>) {
    let a = r.answers();
    let code_ok = code.is_none_or(|c| a.first().is_some_and(|a| a["error"]["code"] == c));
    if r.status == want && a.len() <= 1 && code_ok {
        k.single.fetch_add(1, Ordering::Relaxed);
    } else {
        k.wrong(format!("{what}: {} {:?}", r.status, r.messages));
    }
}

/// A 2026 `slow` call hung up on after its first progress event (a cancellation by the
/// client's disconnect). If the child is down, the first message is the answer itself.
async fn hang_up(c: &SoakClient, k: &SoakCounts, i: u64) {
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
async fn cancel_by_notification(s: &Session, k: &SoakCounts, i: u64) {
    let id = json!(format!("c{i}"));
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"seconds": 30, "steps": 3000},
        "_meta": {"progressToken": format!("t{i}")}}});
    let resp =
        s.c.post(&s.url)
            .headers(s.headers())
            .body(body.to_string())
            .send()
            .await
            .expect("an HTTP response");
    let mut call = SoakStream::of(resp).await;
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    match call.next_message().await {
        Some(m) if m.get("method").is_some() => {}
        Some(m) if m["id"] == id && m["error"]["code"] == -32000 => {
            k.bridge_errors.fetch_add(1, Ordering::Relaxed);
            k.single.fetch_add(1, Ordering::Relaxed);
            return;
        }
        other => return k.wrong(format!("cancel {i}: first {other:?}")),
    }
    let st = s
        .notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "soak"}),
        )
        .await;
    let rest = call.rest().await;
    if st != 202 || !answers(&rest).is_empty() {
        return k.wrong(format!("cancel {i}: {st}, then {rest:?}"));
    }
    k.cancels.fetch_add(1, Ordering::Relaxed);
}
