//! MCP over HTTP from the client side, for both eras: the 2026 request shape (`_meta`,
//! `Mcp-Method`/`Mcp-Name` headers), 2025 sessions (`initialize`, `Mcp-Session-Id`), whole
//! replies parsed into JSON-RPC messages (JSON or SSE) and SSE streams read event by event.
//! Also a tiny canned HTTP server, for remotes and key servers the tests play themselves.
//!
//! Every wait is bounded: the client has a timeout, stream reads take one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";
pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

pub const META_PV: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

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
        "tasks/get" | "tasks/update" | "tasks/cancel" => body["params"]["taskId"].as_str(),
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

    /// The responses among the messages (an id and no method).
    pub fn answers(&self) -> Vec<&Value> {
        answers(&self.messages)
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

/// The responses among `messages` (an id and no method).
pub fn answers(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m.get("id").is_some() && m.get("method").is_none())
        .collect()
}

/// The one message with an id among `messages`, which must be `id`'s; panics otherwise (a
/// request from the server counts too: it is not what the caller waits for).
pub fn single_answer(messages: &[Value], id: &Value) -> Value {
    let with_id: Vec<&Value> = messages.iter().filter(|m| m.get("id").is_some()).collect();
    assert_eq!(with_id.len(), 1, "answers for {id}: {messages:?}");
    assert_eq!(with_id[0]["id"], *id, "{messages:?}");
    with_id[0].clone()
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

    /// POST `body` on the session and read the answer as an SSE stream (asserts 200).
    pub async fn stream(&self, body: &Value) -> SseReader {
        let resp = self
            .c
            .post(&self.url)
            .headers(self.headers())
            .body(body.to_string())
            .send()
            .await
            .expect("POST on the session");
        assert_eq!(resp.status(), 200);
        SseReader::new(resp)
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

    /// Start a 30 s `slow` call (id 1) and hang up once `log` shows `started`: the line.
    pub async fn hang_up_slow_call(&self, log: &super::log::Log, started: &str) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 30, "steps": 0}}});
        let send = self
            .c
            .post(&self.url)
            .headers(self.headers())
            .body(body.to_string())
            .send();
        tokio::select! {
            r = send => panic!("answered early: {r:?}"),
            l = log.expect(started, Duration::from_secs(10)) => l,
        }
    }

    /// POST a notification; returns the HTTP status.
    pub async fn notify(&self, method: &str, params: Value) -> u16 {
        self.post(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await
            .status
    }
}

// ---------------------------------------------------------------------------------------------
// A canned HTTP server
// ---------------------------------------------------------------------------------------------

/// A tiny HTTP server: every request gets (status, content type, body) from `answer`, which
/// sees the request's headers and body. Returns its address; it runs until the test ends.
pub async fn tiny_server<F>(answer: F) -> SocketAddr
where
    F: Fn(&::http::HeaderMap, &[u8]) -> (u16, &'static str, String) + Send + Sync + 'static,
{
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local address");
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
                        *r.status_mut() = hyper::StatusCode::from_u16(status)
                            .unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
                        r.headers_mut()
                            .insert("content-type", ::http::HeaderValue::from_static(ct));
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
