//! The tools that need the client's input — `sample` (sampling), `elicit` and `elicit_url`
//! (elicitation, form and URL mode), `roots` — in both eras' shapes.
//!
//! For a 2025 caller the demo sends a real server->client request (id `demo-N`) from the
//! call's own task and waits for the client's response, which [`Shared::handle_response`]
//! routes back through the pending map; cancelling the call withdraws the request
//! (`notifications/cancelled`). A 2026 caller gets `input_required` with the request inline
//! and an opaque `requestState`, and retries with `inputResponses`: nothing waits in the
//! server between rounds. [`InputKind`] holds what differs per tool (capability, method,
//! key, how an answer becomes the tool's text), so both flows are written once.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::server::{lock, Modern, Reply, Request, Shared};
use super::tools::Args;
use super::wire::{
    notification_line, parse_obj, raw_str, result_line, RpcError, ToolResult, EX_META, EX_NONE,
    INVALID_REQUEST, MISSING_CLIENT_CAPABILITY,
};

/// How long a legacy server->client request may stay unanswered.
const CLIENT_REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// The client's answer to one of our server->client requests.
pub(super) enum ClientReply {
    Result(Value),
    Error { code: i64, message: String },
}

/// A server->client request line (2025 era).
#[derive(Serialize)]
struct ServerRequest<'a> {
    jsonrpc: &'static str,
    id: &'a str,
    method: &'a str,
    params: &'a Value,
}

impl Shared {
    /// A response from the client: the answer to one of our (2025) server->client requests.
    pub(super) fn handle_response(
        &self,
        id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) {
        let sender = raw_str(id).and_then(|sid| lock(&self.pending).remove(sid.as_ref()));
        let Some(sender) = sender else {
            eprintln!("demo: ignoring response for unknown id {}", id.get());
            return;
        };
        let reply = match (result, error) {
            (_, Some(err)) => {
                #[derive(Deserialize, Default)]
                #[serde(default)]
                struct ErrObj {
                    code: i64,
                    message: String,
                }
                let e: ErrObj = parse_obj(err.get()).unwrap_or_default();
                ClientReply::Error {
                    code: e.code,
                    message: e.message,
                }
            }
            (Some(res), None) => match serde_json::from_str::<Value>(res.get()) {
                Ok(v) => ClientReply::Result(v),
                Err(_) => ClientReply::Error {
                    code: INVALID_REQUEST,
                    message: "unreadable result".to_owned(),
                },
            },
            (None, None) => return,
        };
        let _ = sender.send(reply);
    }

    /// Send a server->client request (legacy era) and wait for the reply.
    async fn ask_client(&self, method: &str, params: Value) -> Result<Value, String> {
        let n = self.next_server_id.fetch_add(1, Ordering::Relaxed);
        let sid = format!("demo-{n}");
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(sid.clone(), tx);
        // Unregisters the request when the call ends in any way; if it is
        // still unanswered then (cancelled or timed out), tell the client.
        struct Unregister<'a> {
            shared: &'a Shared,
            sid: &'a str,
            sent: bool,
        }
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                let unanswered = lock(&self.shared.pending).remove(self.sid).is_some();
                if unanswered && self.sent {
                    let params = json!({ "requestId": self.sid, "reason": "demo tool call ended" });
                    let _ = self
                        .shared
                        .out
                        .try_send(notification_line("notifications/cancelled", params));
                }
            }
        }
        let mut guard = Unregister {
            shared: self,
            sid: &sid,
            sent: false,
        };
        let mut line = Vec::with_capacity(128);
        let request = ServerRequest {
            jsonrpc: "2.0",
            id: &sid,
            method,
            params: &params,
        };
        serde_json::to_writer(&mut line, &request).map_err(|e| e.to_string())?;
        line.push(b'\n');
        if !self.emit(line).await {
            return Err("output closed".to_owned());
        }
        guard.sent = true;
        match tokio::time::timeout(CLIENT_REPLY_TIMEOUT, rx).await {
            Err(_) => Err(format!(
                "no reply to {method} within {CLIENT_REPLY_TIMEOUT:?}"
            )),
            Ok(Err(_)) => Err("connection closed".to_owned()),
            Ok(Ok(ClientReply::Result(v))) => Ok(v),
            Ok(Ok(ClientReply::Error { code, message })) => {
                Err(format!("client returned error {code}: {message}"))
            }
        }
    }

    /// `sample`: ask the client's model to answer `prompt`.
    pub(super) fn sample(self: &Arc<Self>, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            prompt: Cow<'a, str>,
        }
        let a: A = args.parse()?;
        let params = json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": a.prompt } }],
            "maxTokens": 100,
        });
        self.input_tool(req, InputKind::Sampling, params)
    }

    /// `elicit`: ask the user for a name (form mode; `mode` is named from 2025-11-25 on).
    pub(super) fn elicit(self: &Arc<Self>, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            message: Cow<'a, str>,
        }
        let a: A = args.parse()?;
        let mut params = json!({
            "message": a.message,
            "requestedSchema": {
                "type": "object",
                "properties": { "name": { "type": "string" } },
                "required": ["name"],
            },
        });
        let with_mode = req.is_modern() || lock(&self.legacy).version.as_str() >= "2025-11-25";
        if let (true, Some(obj)) = (with_mode, params.as_object_mut()) {
            obj.insert("mode".to_owned(), json!("form"));
        }
        self.input_tool(req, InputKind::Elicitation, params)
    }

    /// `elicit_url`: ask the user to visit `url` (URL mode).
    pub(super) fn elicit_url(self: &Arc<Self>, req: &Request<'_>, args: Args<'_>) -> Reply {
        #[derive(Deserialize)]
        struct A<'a> {
            #[serde(borrow)]
            url: Cow<'a, str>,
            #[serde(borrow, default)]
            message: Option<Cow<'a, str>>,
        }
        let a: A = args.parse()?;
        let message = a
            .message
            .map(Cow::into_owned)
            .unwrap_or_else(|| "Please open the link to continue.".to_owned());
        let mut params = json!({ "mode": "url", "message": message, "url": a.url });
        // 2025-11-25 identifies the out-of-band interaction; 2026 has no such id.
        if let (false, Some(obj)) = (req.is_modern(), params.as_object_mut()) {
            let n = self.next_server_id.fetch_add(1, Ordering::Relaxed);
            obj.insert("elicitationId".to_owned(), json!(format!("demo-el-{n}")));
        }
        self.input_tool(req, InputKind::ElicitationUrl, params)
    }

    /// Ask the client for input in the caller's era: a server->client request in a task of
    /// its own for 2025 (see [`Self::ask_in_task`]), an `input_required` round for 2026.
    pub(super) fn input_tool(
        self: &Arc<Self>,
        req: &Request<'_>,
        kind: InputKind,
        params: Value,
    ) -> Reply {
        match &req.modern {
            None => self.ask_in_task(req, kind, params),
            Some(m) => input_round(req, m, kind, params),
        }
    }

    /// 2025: the real server->client request, from a cancellable task; an accepted URL
    /// elicitation is followed by `notifications/elicitation/complete`.
    fn ask_in_task(self: &Arc<Self>, req: &Request<'_>, kind: InputKind, params: Value) -> Reply {
        let granted = kind.granted(&lock(&self.legacy).client_caps);
        if !granted {
            let text = format!("client lacks {}", kind.capability_label());
            return req.reply(&ToolResult::error(&text), EX_NONE);
        }
        let shared = Arc::clone(self);
        let id = req.id.to_owned();
        let elicitation_id = params.get("elicitationId").cloned();
        self.spawn_tracked(req.id, async move {
            let answer = shared.ask_client(kind.method(), params).await;
            if let (Ok(v), Some(eid)) = (&answer, elicitation_id) {
                // The demo's out-of-band interaction is over as soon as it is accepted.
                if v.get("action").and_then(Value::as_str) == Some("accept") {
                    let params = json!({ "elicitationId": eid });
                    let _ = shared
                        .emit(notification_line(
                            "notifications/elicitation/complete",
                            params,
                        ))
                        .await;
                }
            }
            let (text, is_error) = match answer {
                Ok(v) => match kind.finish(&v) {
                    Ok(t) => (t, false),
                    Err(e) => (format!("{} failed: {e}", kind.capability()), true),
                },
                Err(e) => (format!("{} failed: {e}", kind.capability()), true),
            };
            let result = ToolResult {
                is_error,
                ..ToolResult::text(&text)
            };
            Some(result_line(&id, &result, EX_NONE))
        })?;
        Ok(None)
    }
}

/// 2026: answer from `inputResponses` when the retry carries them (its `requestState` must
/// name this tool), otherwise ask with `input_required` (or refuse with `-32021` when the
/// request's capabilities lack what the tool needs).
fn input_round(req: &Request<'_>, m: &Modern<'_>, kind: InputKind, params: Value) -> Reply {
    if let Some(state) = req.params.request_state {
        let ok = raw_str(state).is_some_and(|s| state_tool(&s).as_deref() == Some(kind.tool()));
        if !ok {
            return Err(RpcError::invalid_params("invalid requestState"));
        }
    }
    if let Some(responses) = req.params.input_responses.filter(|r| r.get() != "null") {
        let map: serde_json::Map<String, Value> = parse_obj(responses.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid inputResponses: {e}")))?;
        let answer = map.get(kind.key()).or_else(|| {
            if map.len() == 1 {
                map.values().next()
            } else {
                None
            }
        });
        if let Some(answer) = answer {
            let text = kind.finish(answer).map_err(|e| {
                RpcError::invalid_params(format!("invalid inputResponses.{}: {e}", kind.key()))
            })?;
            return req.text(&text);
        }
    }

    let caps: Value = serde_json::from_str(m.caps.get()).unwrap_or(Value::Null);
    let cap = caps.get(kind.capability()).filter(|v| !v.is_null());
    if !kind.granted(&caps) {
        let required = match kind {
            InputKind::Elicitation if cap.is_some() => json!({ "elicitation": { "form": {} } }),
            InputKind::ElicitationUrl => json!({ "elicitation": { "url": {} } }),
            _ => json!({ kind.capability(): {} }),
        };
        return Err(RpcError::new(
            MISSING_CLIENT_CAPABILITY,
            format!(
                "Missing required client capability: {}",
                kind.capability_label()
            ),
        )
        .with_data(json!({ "requiredCapabilities": required })));
    }
    let result = json!({
        "resultType": "input_required",
        "inputRequests": { kind.key(): { "method": kind.method(), "params": params } },
        "requestState": mint_state(kind.tool()),
    });
    req.reply(&result, EX_META)
}

#[derive(Debug, Clone, Copy)]
pub(super) enum InputKind {
    Sampling,
    /// Form-mode elicitation.
    Elicitation,
    /// URL-mode elicitation (needs `elicitation.url`).
    ElicitationUrl,
    Roots,
}

impl InputKind {
    fn tool(self) -> &'static str {
        match self {
            InputKind::Sampling => "sample",
            InputKind::Elicitation => "elicit",
            InputKind::ElicitationUrl => "elicit_url",
            InputKind::Roots => "roots",
        }
    }

    fn capability(self) -> &'static str {
        match self {
            InputKind::Sampling => "sampling",
            InputKind::Elicitation | InputKind::ElicitationUrl => "elicitation",
            InputKind::Roots => "roots",
        }
    }

    /// The capability as named in messages.
    fn capability_label(self) -> &'static str {
        match self {
            InputKind::ElicitationUrl => "elicitation.url",
            k => k.capability(),
        }
    }

    /// Did the client (its `ClientCapabilities`) declare what this needs?
    /// Elicitation `{}` means form mode only; otherwise the mode must be named.
    fn granted(self, caps: &Value) -> bool {
        let Some(cap) = caps.get(self.capability()).filter(|v| !v.is_null()) else {
            return false;
        };
        match self {
            InputKind::Elicitation => cap
                .as_object()
                .is_none_or(|o| o.is_empty() || o.contains_key("form")),
            InputKind::ElicitationUrl => cap.get("url").is_some_and(|v| !v.is_null()),
            InputKind::Sampling | InputKind::Roots => true,
        }
    }

    fn method(self) -> &'static str {
        match self {
            InputKind::Sampling => "sampling/createMessage",
            InputKind::Elicitation | InputKind::ElicitationUrl => "elicitation/create",
            InputKind::Roots => "roots/list",
        }
    }

    /// Key used in `inputRequests` / `inputResponses`.
    fn key(self) -> &'static str {
        match self {
            InputKind::Sampling => "s1",
            InputKind::Elicitation => "e1",
            InputKind::ElicitationUrl => "u1",
            InputKind::Roots => "r1",
        }
    }

    /// Turn the client's answer into the tool's final text.
    fn finish(self, answer: &Value) -> Result<String, String> {
        match self {
            InputKind::Sampling => {
                let content = answer
                    .get("content")
                    .ok_or("CreateMessageResult without content")?;
                Ok(format!("sampled: {}", content_text(content)))
            }
            InputKind::Elicitation => {
                let action = answer
                    .get("action")
                    .and_then(Value::as_str)
                    .ok_or("ElicitResult without action")?;
                let content = answer.get("content").unwrap_or(&Value::Null);
                Ok(format!("elicited: action={action} content={content}"))
            }
            InputKind::ElicitationUrl => {
                let action = answer
                    .get("action")
                    .and_then(Value::as_str)
                    .ok_or("ElicitResult without action")?;
                Ok(format!("elicited url: action={action}"))
            }
            InputKind::Roots => {
                let roots = answer
                    .get("roots")
                    .and_then(Value::as_array)
                    .ok_or("ListRootsResult without roots")?;
                let uris: Vec<&str> = roots
                    .iter()
                    .filter_map(|r| r.get("uri").and_then(Value::as_str))
                    .collect();
                Ok(format!("roots: {}", uris.join(",")))
            }
        }
    }
}

/// Text of a sampling content block (or array of blocks).
fn content_text(content: &Value) -> String {
    fn one(block: &Value) -> String {
        match block.get("text").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => format!(
                "[{}]",
                block.get("type").and_then(Value::as_str).unwrap_or("?")
            ),
        }
    }
    match content {
        Value::Array(blocks) => blocks.iter().map(one).collect::<Vec<_>>().join(""),
        block => one(block),
    }
}

/// Opaque `requestState`: names the tool plus a random nonce. Not integrity
/// protected (nothing rides on it in the demo); only the tool name is checked.
fn mint_state(tool: &str) -> String {
    let mut nonce = [0u8; 12];
    if getrandom::fill(&mut nonce).is_err() {
        static FALLBACK: AtomicU64 = AtomicU64::new(0);
        let n = FALLBACK.fetch_add(1, Ordering::Relaxed);
        nonce[..8].copy_from_slice(&n.to_le_bytes());
    }
    let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    let state = json!({ "tool": tool, "nonce": nonce }).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(state)
}

fn state_tool(state: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(state)
        .ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("tool")?.as_str().map(str::to_owned)
}
