//! Fake remote MCP servers for connect and `serve --upstream`, one builder for every test
//! that needs a remote it controls: `fake_remote(era)` speaks the happy path of one protocol
//! era (the 2025 handshake or the 2026 `server/discover`, an `echo` tool, -32601 for the
//! rest) and records every JSON-RPC message posted to it (with its headers), so a test can say what reached the
//! remote and what did not; `fake_remote_with(era, answer)` lets the test answer some
//! requests itself and falls back to the era's defaults for the others.
//!
//! The HTTP side is `tiny_server` (one canned answer per request); what a fake remote adds is
//! only the MCP defaults and the record, so a test reads as the one behaviour it changes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http::tiny_server;

/// The protocol era a fake remote speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteEra {
    /// 2025-11-25: `initialize`, notifications answered 202, the GET stream not offered (405).
    Legacy,
    /// 2026-07-28: `server/discover`, every result with `resultType`.
    Modern,
}

/// One HTTP answer: status, content type, body (what `tiny_server` sends).
pub type RemoteReply = (u16, &'static str, String);

/// A JSON-RPC result for request `id`, as a 200 JSON answer.
pub fn rpc_result(id: &Value, result: Value) -> RemoteReply {
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    (200, "application/json", body.to_string())
}

/// A JSON-RPC error for request `id`, as a 200 JSON answer.
pub fn rpc_error(id: &Value, code: i64, message: &str) -> RemoteReply {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (200, "application/json", body.to_string())
}

/// What was posted to a fake remote: each message with the request's headers.
type Record = Arc<Mutex<Vec<(Value, ::http::HeaderMap)>>>;

/// A running fake remote: its URL and what was posted to it.
pub struct FakeRemote {
    pub url: String,
    seen: Record,
}

impl FakeRemote {
    /// Every JSON-RPC message posted so far, in order (GETs are not recorded).
    pub fn seen(&self) -> Vec<Value> {
        let g = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().map(|(m, _)| m.clone()).collect()
    }

    /// The headers of every POST so far, in order.
    pub fn headers(&self) -> Vec<::http::HeaderMap> {
        let g = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        g.iter().map(|(_, h)| h.clone()).collect()
    }

    /// The `method` of every posted message so far (requests and notifications), in order.
    pub fn methods(&self) -> Vec<String> {
        self.seen()
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    }

    /// Wait (bounded) for a posted message that `pred` accepts, after the first `skip`
    /// messages; `None` if none came within `timeout`.
    pub async fn wait_for(
        &self,
        skip: usize,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Option<Value> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(m) = self.seen().iter().skip(skip).find(|m| pred(m)) {
                return Some(m.clone());
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A fake remote of `era` with only the defaults (see the module comment).
pub async fn fake_remote(era: RemoteEra) -> FakeRemote {
    fake_remote_with(era, |_, _| None).await
}

/// A fake remote of `era` where `answer` sees each posted message (and the request's
/// headers) first: `Some` is sent as is, `None` falls back to the era's default.
pub async fn fake_remote_with<F>(era: RemoteEra, answer: F) -> FakeRemote
where
    F: Fn(&Value, &::http::HeaderMap) -> Option<RemoteReply> + Send + Sync + 'static,
{
    let seen: Record = Arc::default();
    let record = seen.clone();
    let addr = tiny_server(move |headers, body| {
        if body.is_empty() {
            // A GET: the 2025 session stream, not offered here.
            return (405, "text/plain", String::new());
        }
        let msg: Value = serde_json::from_slice(body).unwrap_or_default();
        record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((msg.clone(), headers.clone()));
        answer(&msg, headers).unwrap_or_else(|| default_answer(era, &msg))
    })
    .await;
    FakeRemote {
        url: format!("http://{addr}/mcp"),
        seen,
    }
}

/// What a remote of `era` answers when the test does not.
fn default_answer(era: RemoteEra, msg: &Value) -> RemoteReply {
    let id = &msg["id"];
    let Some(method) = msg["method"].as_str().filter(|_| !id.is_null()) else {
        // A notification, or the answer to a request of ours.
        return (202, "application/json", String::new());
    };
    let modern = era == RemoteEra::Modern;
    let complete = |mut v: Value| {
        if modern {
            v["resultType"] = json!("complete");
        }
        v
    };
    match (era, method) {
        (RemoteEra::Legacy, "initialize") => rpc_result(
            id,
            json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake-remote", "version": "0"}}),
        ),
        (RemoteEra::Legacy, "ping") => rpc_result(id, json!({})),
        (RemoteEra::Modern, "server/discover") => rpc_result(
            id,
            json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private",
                "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake-remote", "version": "0"}}),
        ),
        (_, "tools/list") => {
            let mut r = complete(json!({"tools": [{"name": "echo",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}));
            if modern {
                r["ttlMs"] = json!(0);
                r["cacheScope"] = json!("private");
            }
            rpc_result(id, r)
        }
        (_, "tools/call") if msg["params"]["name"] == "echo" => {
            let text = msg["params"]["arguments"]["text"].clone();
            rpc_result(
                id,
                complete(json!({"content": [{"type": "text", "text": text}]})),
            )
        }
        _ => rpc_error(id, -32601, &format!("fake remote: no {method}")),
    }
}
