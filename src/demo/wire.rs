//! JSON-RPC as the demo server reads and writes it: the wire constants, the error type,
//! incoming message shapes borrowed from the input line, and byte-level builders for outgoing
//! lines.
//!
//! Incoming messages are decoded lazily (`&RawValue` members, each parsed only by the method
//! that needs it) so that a surprising type in an unrelated member never matters and a big
//! argument is not copied. Outgoing lines are built straight into byte buffers, with the
//! era-specific result members (`resultType`, cache hints, `_meta` server info) spliced in as
//! raw JSON ([`result_line`]'s `extras`), so one result type serves both eras.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

pub(super) const MODERN_VERSION: &str = "2026-07-28";
pub(super) const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
pub(super) const LATEST_LEGACY: &str = "2025-11-25";

pub(super) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const METHOD_NOT_FOUND: i64 = -32601;
pub(super) const INVALID_PARAMS: i64 = -32602;
pub(super) const INTERNAL_ERROR: i64 = -32603;
pub(super) const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
pub(super) const MISSING_CLIENT_CAPABILITY: i64 = -32021;
pub(super) const UNSUPPORTED_VERSION: i64 = -32022;

macro_rules! server_info_meta {
    () => {
        concat!(
            "\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"mcp-bridge-demo\",\"version\":\"",
            env!("CARGO_PKG_VERSION"),
            "\"}}"
        )
    };
}

/// Members appended to results, spliced in as raw JSON.
/// Legacy results get nothing.
pub(super) const EX_NONE: &str = "";
/// Modern interim results (already carry their own `resultType`).
pub(super) const EX_META: &str = server_info_meta!();
/// Modern final results.
pub(super) const EX_COMPLETE: &str = concat!("\"resultType\":\"complete\",", server_info_meta!());
/// Modern final results that must carry cache hints.
pub(super) const EX_CACHED: &str = concat!(
    "\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"public\",",
    server_info_meta!()
);

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[derive(Debug)]
pub(super) struct RpcError {
    code: i64,
    message: Cow<'static, str>,
    pub(super) data: Option<Value>,
}

impl RpcError {
    pub(super) fn new(code: i64, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(super) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(super) fn invalid_params(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub(super) fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, "Method not found").with_data(json!({ "method": method }))
    }

    pub(super) fn unsupported_version(requested: &str) -> Self {
        Self::new(
            UNSUPPORTED_VERSION,
            format!(
                "Unsupported protocol version {requested:?}; this server supports {MODERN_VERSION}"
            ),
        )
        .with_data(json!({ "supported": [MODERN_VERSION], "requested": requested }))
    }
}

// ---------------------------------------------------------------------------
// Incoming message shapes (borrowed from the input line)
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "raw_present")]
    pub(super) id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) error: Option<&'a RawValue>,
}

/// Keeps an explicit `null` as `Some("null")` so it can be told from absence.
fn raw_present<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: Deserializer<'de>,
{
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Union of the params members any method here looks at; each is decoded
/// lazily so that a surprising type in an unrelated member does not matter.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct Params<'a> {
    #[serde(rename = "_meta", borrow)]
    pub(super) meta: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) name: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) uri: Option<&'a RawValue>,
    #[serde(rename = "protocolVersion", borrow)]
    pub(super) protocol_version: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) capabilities: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) level: Option<&'a RawValue>,
    #[serde(rename = "requestId", borrow)]
    pub(super) request_id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) reason: Option<&'a RawValue>,
    #[serde(rename = "inputResponses", borrow)]
    pub(super) input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow)]
    pub(super) request_state: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) cursor: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) notifications: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct Meta<'a> {
    #[serde(rename = "progressToken", borrow)]
    pub(super) progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    pub(super) protocol_version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
    pub(super) client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow)]
    pub(super) log_level: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Str<'a>(#[serde(borrow)] Cow<'a, str>);

/// Decode a raw JSON string without copying when it has no escapes.
pub(super) fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Str>(raw.get()).ok().map(|s| s.0)
}

/// Parse a JSON object into `T`. Refuses non-objects up front (derived
/// structs would otherwise also accept arrays positionally).
pub(super) fn parse_obj<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, String> {
    if !raw.trim_start().starts_with('{') {
        return Err("expected a JSON object".to_owned());
    }
    serde_json::from_str(raw).map_err(|e| e.to_string())
}

pub(super) fn is_object(raw: &RawValue) -> bool {
    raw.get().trim_start().starts_with('{')
}

/// Ids must be strings or numbers.
pub(super) fn id_is_valid(raw: &RawValue) -> bool {
    matches!(
        raw.get().as_bytes().first(),
        Some(b'"' | b'-' | b'0'..=b'9')
    )
}

/// Normalised request id, for the in-flight table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum IdKey {
    Num(String),
    Str(String),
}

/// Key plus compact-JSON display form of a request id.
pub(super) fn id_key(raw: &RawValue) -> Option<(IdKey, String)> {
    match serde_json::from_str::<Value>(raw.get()).ok()? {
        Value::Number(n) => {
            let s = n.to_string();
            Some((IdKey::Num(s.clone()), s))
        }
        Value::String(s) => {
            let display = serde_json::to_string(&s).ok()?;
            Some((IdKey::Str(s), display))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Logging levels
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl Level {
    pub(super) fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "debug" => Level::Debug,
            "info" => Level::Info,
            "notice" => Level::Notice,
            "warning" => Level::Warning,
            "error" => Level::Error,
            "critical" => Level::Critical,
            "alert" => Level::Alert,
            "emergency" => Level::Emergency,
            _ => return None,
        })
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Critical => "critical",
            Level::Alert => "alert",
            Level::Emergency => "emergency",
        }
    }

    pub(super) fn from_raw(raw: &RawValue) -> Result<Level, RpcError> {
        raw_str(raw)
            .and_then(|s| Level::parse(&s))
            .ok_or_else(|| RpcError::invalid_params(format!("invalid logging level {}", raw.get())))
    }
}

// ---------------------------------------------------------------------------
// Outgoing lines
// ---------------------------------------------------------------------------

pub(super) fn push_id(buf: &mut Vec<u8>, id: Option<&RawValue>) {
    buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    buf.extend_from_slice(id.map_or("null", |r| r.get()).as_bytes());
}

/// A complete response line. `extras` are raw JSON members spliced into the
/// (object) result.
pub(super) fn result_line<T: Serialize + ?Sized>(
    id: &RawValue,
    result: &T,
    extras: &str,
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    push_id(&mut buf, Some(id));
    buf.extend_from_slice(b",\"result\":");
    let start = buf.len();
    if serde_json::to_writer(&mut buf, result).is_err() {
        return error_line(Some(id), INTERNAL_ERROR, "failed to encode result", None);
    }
    splice_extras(&mut buf, start, extras);
    buf.extend_from_slice(b"}\n");
    buf
}

fn splice_extras(buf: &mut Vec<u8>, start: usize, extras: &str) {
    if extras.is_empty() || buf.last() != Some(&b'}') {
        return;
    }
    buf.pop();
    if buf.len() > start + 1 {
        buf.push(b',');
    }
    buf.extend_from_slice(extras.as_bytes());
    buf.push(b'}');
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i64,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

pub(super) fn error_line(
    id: Option<&RawValue>,
    code: i64,
    message: &str,
    data: Option<&Value>,
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(96);
    push_id(&mut buf, id);
    buf.extend_from_slice(b",\"error\":");
    let body = ErrorBody {
        code,
        message,
        data,
    };
    if serde_json::to_writer(&mut buf, &body).is_err() {
        buf.truncate(0);
        push_id(&mut buf, id);
        buf.extend_from_slice(b",\"error\":{\"code\":-32603,\"message\":\"Internal error\"}");
    }
    buf.extend_from_slice(b"}\n");
    buf
}

pub(super) fn rpc_error_line(id: Option<&RawValue>, e: &RpcError) -> Vec<u8> {
    error_line(id, e.code, &e.message, e.data.as_ref())
}

#[derive(Serialize)]
struct Notification<'a, P: Serialize> {
    jsonrpc: &'static str,
    method: &'a str,
    params: P,
}

pub(super) fn notification_line<P: Serialize>(method: &str, params: P) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128);
    let n = Notification {
        jsonrpc: "2.0",
        method,
        params,
    };
    if serde_json::to_writer(&mut buf, &n).is_err() {
        buf.clear();
        buf.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
        let _ = serde_json::to_writer(&mut buf, method);
        buf.push(b'}');
    }
    buf.push(b'\n');
    buf
}

#[derive(Serialize)]
pub(super) struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
pub(super) struct ToolResult<'a> {
    pub(super) content: [TextBlock<'a>; 1],
    #[serde(rename = "structuredContent", skip_serializing_if = "Option::is_none")]
    pub(super) structured: Option<Value>,
    #[serde(rename = "isError", skip_serializing_if = "std::ops::Not::not")]
    pub(super) is_error: bool,
}

impl<'a> ToolResult<'a> {
    pub(super) fn text(text: &'a str) -> Self {
        ToolResult {
            content: [TextBlock { kind: "text", text }],
            structured: None,
            is_error: false,
        }
    }

    pub(super) fn error(text: &'a str) -> Self {
        ToolResult {
            is_error: true,
            ..Self::text(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_splice_into_results() {
        let id = RawValue::from_string("1".to_owned()).expect("raw id");
        let empty = result_line(&id, &json!({}), EX_COMPLETE);
        let v: Value = serde_json::from_slice(&empty).expect("json");
        assert_eq!(v["result"]["resultType"], "complete");
        let full = result_line(&id, &json!({ "a": 1 }), EX_CACHED);
        let v: Value = serde_json::from_slice(&full).expect("json");
        assert_eq!(v["result"]["a"], 1);
        assert_eq!(v["result"]["ttlMs"], 0);
        assert_eq!(*full.last().expect("non-empty"), b'\n');
        assert_eq!(full.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
