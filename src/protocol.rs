//! MCP protocol facts the bridge acts on: revisions and eras, HTTP header names, the
//! `=?base64?…?=` header value encoding, `x-mcp-header` annotations and result translation
//! between eras. Pure functions only.

use base64::Engine as _;
use serde_json::value::RawValue;

use crate::jsonrpc::{self, Fields};

pub const MODERN: &str = "2026-07-28";
pub const LEGACY_LATEST: &str = "2025-11-25";
/// 2025-era revisions the bridge speaks, newest first.
pub const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Every revision the bridge speaks, newest first.
pub const ALL_VERSIONS: [&str; 4] = [MODERN, "2025-11-25", "2025-06-18", "2025-03-26"];
/// What a 2025 client that sends no `MCP-Protocol-Version` header is assumed to speak.
pub const LEGACY_DEFAULT: &str = "2025-03-26";

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub const H_PROTOCOL_VERSION: &str = "mcp-protocol-version";
pub const H_METHOD: &str = "mcp-method";
pub const H_NAME: &str = "mcp-name";
pub const H_PARAM_PREFIX: &str = "mcp-param-";
pub const H_SESSION_ID: &str = "mcp-session-id";
pub const H_LAST_EVENT_ID: &str = "last-event-id";

/// Which generation of the protocol a peer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2025-03-26 / 2025-06-18 / 2025-11-25: `initialize`, sessions, server requests.
    Legacy,
    /// 2026-07-28: stateless, per-request `_meta`.
    Modern,
}

impl Era {
    pub fn label(self) -> &'static str {
        match self {
            Era::Legacy => "2025",
            Era::Modern => "2026",
        }
    }
}

/// Logging levels, least severe first.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A known log level as `&'static str` with its rank.
pub fn log_level(s: &str) -> Option<(&'static str, usize)> {
    LOG_LEVELS
        .iter()
        .position(|l| *l == s)
        .map(|i| (LOG_LEVELS[i], i))
}

/// The rank of a `notifications/message`'s level (0, the lowest, when absent or unknown).
pub fn message_rank(params: Option<&RawValue>) -> usize {
    params
        .and_then(Fields::parse)
        .and_then(|f| {
            f.get("level")
                .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
        })
        .and_then(|l| log_level(&l))
        .map_or(0, |(_, r)| r)
}

/// A `_meta` logLevel that names no logging level.
#[derive(Debug, PartialEq)]
pub struct BadLogLevel;

/// A 2026 request's `_meta` logLevel: `Ok(None)` without one, `Err` when it is not a level.
pub fn request_log_level(params: Option<&RawValue>) -> Result<Option<&'static str>, BadLogLevel> {
    log_level_value(jsonrpc::meta_field(params, META_LOG_LEVEL))
}

/// The level named by a `_meta` logLevel value (absent: none).
pub fn log_level_value(v: Option<&RawValue>) -> Result<Option<&'static str>, BadLogLevel> {
    match v {
        None => Ok(None),
        Some(l) => serde_json::from_str::<String>(l.get())
            .ok()
            .and_then(|l| log_level(&l))
            .map(|(l, _)| Some(l))
            .ok_or(BadLogLevel),
    }
}

/// `_meta` to stamp on a 2025 client's requests to a 2026 server, with the level its
/// `logging/setLevel` chose (2026 has no session-wide level: it travels on every request).
pub fn stamp_with_log_level(
    stamp: &std::sync::Arc<Vec<(String, Box<RawValue>)>>,
    level: Option<&'static str>,
) -> std::sync::Arc<Vec<(String, Box<RawValue>)>> {
    match level {
        None => stamp.clone(),
        Some(l) => {
            let mut v: Vec<_> = stamp
                .iter()
                .filter(|(k, _)| k != META_LOG_LEVEL)
                .cloned()
                .collect();
            v.push((META_LOG_LEVEL.to_owned(), jsonrpc::raw(&format!("\"{l}\""))));
            std::sync::Arc::new(v)
        }
    }
}

pub fn is_legacy_version(v: &str) -> bool {
    LEGACY_VERSIONS.contains(&v)
}

/// Does a 2025 session of version `v` get resumable SSE streams (event ids, a priming event,
/// `Last-Event-ID` replay)? From 2025-11-25 on: earlier clients may choke on a priming event's
/// empty `data` and were never told they may be asked to reconnect.
pub fn resumable_sse(v: &str) -> bool {
    is_legacy_version(v) && v >= "2025-11-25"
}

/// Negotiate a 2025 version: echo the client's if we speak it, else offer our latest.
pub fn negotiate_legacy(requested: Option<&str>) -> &'static str {
    match requested {
        Some(v) => LEGACY_VERSIONS
            .iter()
            .copied()
            .find(|x| *x == v)
            .unwrap_or(LEGACY_LATEST),
        None => LEGACY_LATEST,
    }
}

/// Requests the 2026-07-28 revision removed: a 2026 request for one of them is a method the
/// server does not implement (404 / `-32601` on HTTP), whatever the upstream's era.
pub const REMOVED_IN_MODERN: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Is `method` a request the 2026-07-28 revision removed?
pub fn removed_in_modern(method: &str) -> bool {
    REMOVED_IN_MODERN.contains(&method)
}

/// The -32601 message for a 2026 request of a method the 2026 revision removed (both faces).
pub fn removed_message(method: &str) -> String {
    format!("Method not found: {method} was removed in {MODERN}")
}

/// Methods whose 2026 requests carry `Mcp-Name`, and the params field it mirrors (the tasks
/// extension's methods mirror their `taskId`).
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Methods whose complete 2026 results must carry `ttlMs` and `cacheScope`.
pub fn needs_cache_hints(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Decode a header value per the 2026 encoding: `=?base64?<b64>?=` or the plain value.
/// Returns None when the sentinel form does not decode to UTF-8.
pub fn decode_header_value(v: &str) -> Option<String> {
    if let Some(inner) = v
        .strip_prefix("=?base64?")
        .and_then(|x| x.strip_suffix("?="))
    {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    Some(v.to_owned())
}

/// Encode a header value per the 2026 rules (used when the bridge is an HTTP client).
pub fn encode_header_value(v: &str) -> String {
    let sentinel_like = v.starts_with("=?base64?") && v.ends_with("?=");
    let plain = v.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !v.starts_with(' ')
        && !v.ends_with(' ')
        && !sentinel_like;
    if plain {
        v.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(v.as_bytes())
        )
    }
}

/// Does a header value (already decoded) equal a JSON body value? Strings compare exactly,
/// integers numerically (`42.0 == 42`), booleans as `true`/`false`.
pub fn header_matches_json(header: &str, body: &RawValue) -> bool {
    match serde_json::from_str::<serde_json::Value>(body.get()) {
        Ok(serde_json::Value::String(s)) => s == header,
        Ok(serde_json::Value::Bool(b)) => header == if b { "true" } else { "false" },
        Ok(serde_json::Value::Number(n)) => {
            let (Some(bv), Ok(hv)) = (n.as_f64(), header.trim().parse::<f64>()) else {
                return false;
            };
            bv == hv
        }
        _ => false,
    }
}

/// `x-mcp-header` annotations of one tool: (header name lowercase without prefix, property).
/// Only top-level `properties` are eligible; invalid annotations make the whole tool invalid.
pub fn tool_param_headers(
    input_schema: &serde_json::Value,
) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let Some(props) = input_schema.get("properties").and_then(|p| p.as_object()) else {
        return Ok(out);
    };
    for (prop, schema) in props {
        let Some(h) = schema.get("x-mcp-header") else {
            continue;
        };
        let Some(h) = h.as_str() else {
            return Err(format!("x-mcp-header on {prop} is not a string"));
        };
        if h.is_empty() || !h.bytes().all(is_tchar) {
            return Err(format!(
                "x-mcp-header {h:?} on {prop} is not a valid header token"
            ));
        }
        let ty = schema.get("type").and_then(|t| t.as_str());
        if !matches!(ty, Some("string" | "integer" | "boolean")) {
            return Err(format!(
                "x-mcp-header on {prop} needs type string, integer or boolean"
            ));
        }
        let lower = h.to_ascii_lowercase();
        if out.iter().any(|(x, _)| *x == lower) {
            return Err(format!("x-mcp-header {h:?} is used twice"));
        }
        out.push((lower, prop.clone()));
    }
    Ok(out)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Turn a 2025 child's result into a 2026 result for `method`: add `resultType` and, where
/// required, `ttlMs`/`cacheScope` (safe defaults: stale, private). Unknown shapes pass through.
pub fn legacy_result_to_modern(method: &str, result: &RawValue) -> Option<String> {
    let f = Fields::parse(result)?;
    let mut extra: Vec<(&str, &str)> = Vec::new();
    if !f.has("resultType") {
        extra.push(("resultType", "\"complete\""));
    }
    if needs_cache_hints(method) {
        if !f.has("ttlMs") {
            extra.push(("ttlMs", "0"));
        }
        if !f.has("cacheScope") {
            extra.push(("cacheScope", "\"private\""));
        }
    }
    if extra.is_empty() {
        return None;
    }
    let raws: Vec<Box<RawValue>> = extra.iter().map(|(_, v)| jsonrpc::raw(v)).collect();
    let mut fields = f.0.clone();
    for ((k, _), v) in extra.iter().zip(raws.iter()) {
        fields.push((std::borrow::Cow::Borrowed(*k), &**v));
    }
    let mut out = bytes::BytesMut::with_capacity(result.get().len() + 64);
    jsonrpc::write_object(&mut out, &fields);
    String::from_utf8(out.to_vec()).ok()
}

/// The 2025 "resource not found" code, retired in 2026-07-28 (2026 implementations MUST NOT
/// emit it; it became `-32602` with `data.uri`).
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;

/// Turn a 2025 upstream's error object into what a 2026 caller may receive: its retired
/// `-32002` (resource not found) becomes `-32602`, message and `data` kept. None when the
/// error needs no change (the common case, found by a byte scan before any parse).
pub fn legacy_error_to_modern(error: &RawValue) -> Option<String> {
    memchr::memmem::find(error.get().as_bytes(), b"-32002")?;
    let mut v: serde_json::Value = serde_json::from_str(error.get()).ok()?;
    let code = v.get_mut("code")?;
    if code.as_i64() != Some(LEGACY_RESOURCE_NOT_FOUND) {
        return None;
    }
    *code = serde_json::Value::from(-32602);
    serde_json::to_string(&v).ok()
}

/// Is this result a 2026 `input_required` (a request for more input, not the final result)?
/// The one test every layer uses (the rounds, result translation, the tool-result metrics):
/// a byte scan first, so that the common result is never parsed for it.
pub fn is_input_required(r: &RawValue) -> bool {
    memchr::memmem::find(r.get().as_bytes(), b"input_required").is_some()
        && Fields::parse(r).and_then(|f| f.get("resultType").map(RawValue::get))
            == Some("\"input_required\"")
}

/// A 2026 result as a 2026 caller must see it: a result without `resultType` is `"complete"`
/// (2026-07-28: a receiver MUST read a missing `resultType` so), and the bridge says it
/// explicitly, so a caller stricter than the spec gets what it expects. None when the result
/// already names its type or is not an object (passed on as it is). The common case (the word
/// present) costs one scan; a missing word is an insert at the front without a parse.
pub fn modern_result_complete(result: &RawValue) -> Option<String> {
    let s = result.get();
    let body = s.trim_start().strip_prefix('{')?;
    if memchr::memmem::find(s.as_bytes(), b"\"resultType\"").is_some() {
        // Present somewhere: top level (nothing to do) or only nested (insert it).
        let f = Fields::parse(result)?;
        if f.has("resultType") {
            return None;
        }
    }
    let rest = body.trim_start();
    let sep = if rest.starts_with('}') { "" } else { "," };
    Some(format!("{{\"resultType\":\"complete\"{sep}{rest}"))
}

/// Turn a 2026 child's complete result into a 2025 one: drop `resultType: "complete"`,
/// `ttlMs` and `cacheScope`, which 2025 clients do not know. Other results (e.g.
/// `input_required`, handled by the bridge) pass through. None when nothing changes.
pub fn modern_result_to_legacy(result: &RawValue) -> Option<String> {
    let s = result.get();
    if memchr::memmem::find(s.as_bytes(), b"resultType").is_none()
        && memchr::memmem::find(s.as_bytes(), b"ttlMs").is_none()
    {
        return None;
    }
    let f = Fields::parse(result)?;
    match f.get("resultType").map(RawValue::get) {
        None | Some("\"complete\"") => {}
        Some(_) => return None,
    }
    let kept: Vec<_> =
        f.0.iter()
            .filter(|(k, _)| !matches!(&**k, "resultType" | "ttlMs" | "cacheScope"))
            .cloned()
            .collect();
    if kept.len() == f.0.len() {
        return None;
    }
    let mut out = bytes::BytesMut::with_capacity(s.len());
    jsonrpc::write_object(&mut out, &kept);
    String::from_utf8(out.to_vec()).ok()
}

/// Is a `tools/call` result an `isError: true` result?
pub fn is_tool_error(result: &RawValue) -> bool {
    if memchr::memmem::find(result.get().as_bytes(), b"isError").is_none() {
        return false;
    }
    Fields::parse(result)
        .and_then(|f| f.get("isError").map(|v| v.get() == "true"))
        .unwrap_or(false)
}

/// The `code` of a JSON-RPC error object.
pub fn error_code(error: &RawValue) -> Option<i64> {
    Fields::parse(error)?.get("code")?.get().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2026_result_without_result_type_is_complete() {
        let fill = |s: &str| modern_result_complete(&jsonrpc::raw(s));
        let v = |s: Option<String>| -> serde_json::Value {
            serde_json::from_str(&s.unwrap_or_default()).unwrap_or_default()
        };
        let filled = v(fill(r#"{"content":[{"type":"text","text":"hi"}]}"#));
        assert_eq!(filled["resultType"], "complete");
        assert_eq!(filled["content"][0]["text"], "hi");
        assert_eq!(v(fill(" { } "))["resultType"], "complete");
        // Only nested: still missing at the top.
        let nested = v(fill(r#"{"structuredContent":{"resultType":"x"}}"#));
        assert_eq!(nested["resultType"], "complete");
        assert_eq!(nested["structuredContent"]["resultType"], "x");
        // Named already, or not an object: unchanged.
        assert_eq!(
            fill(r#"{"resultType":"input_required","inputRequests":{}}"#),
            None
        );
        assert_eq!(fill(r#"{"content":[],"resultType":"complete"}"#), None);
        assert_eq!(fill("[1]"), None);
        assert_eq!(fill("7"), None);
    }

    #[test]
    fn base64_sentinel() {
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(decode_header_value("=?base64?***?="), None);
        assert_eq!(
            encode_header_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_header_value("abc"), "abc");
        assert_eq!(encode_header_value(" x"), "=?base64?IHg=?=");
    }

    #[test]
    fn header_compare() {
        assert!(header_matches_json("42", &jsonrpc::raw("42.0")));
        assert!(header_matches_json("42", &jsonrpc::raw("42")));
        assert!(!header_matches_json("43", &jsonrpc::raw("42")));
        assert!(header_matches_json("true", &jsonrpc::raw("true")));
        assert!(header_matches_json("a b", &jsonrpc::raw("\"a b\"")));
        assert!(!header_matches_json("x", &jsonrpc::raw("null")));
    }

    #[test]
    fn param_headers() {
        let s: serde_json::Value = serde_json::json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "n":{"type":"integer"}}});
        assert_eq!(
            tool_param_headers(&s).unwrap(),
            vec![("region".to_string(), "region".to_string())]
        );
        let bad = serde_json::json!({"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}});
        assert!(tool_param_headers(&bad).is_err());
        let bad = serde_json::json!({"type":"object","properties":{"x":{"type":"string","x-mcp-header":"a b"}}});
        assert!(tool_param_headers(&bad).is_err());
    }

    #[test]
    fn translate_results() {
        let r = jsonrpc::raw(r#"{"tools":[]}"#);
        assert_eq!(
            legacy_result_to_modern("tools/list", &r).unwrap(),
            r#"{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"private"}"#
        );
        let r = jsonrpc::raw(r#"{"content":[],"isError":true}"#);
        assert!(is_tool_error(&r));
        assert_eq!(
            legacy_result_to_modern("tools/call", &r).unwrap(),
            r#"{"content":[],"isError":true,"resultType":"complete"}"#
        );
        assert_eq!(
            error_code(&jsonrpc::raw(r#"{"code":-32601,"message":"x"}"#)),
            Some(-32601)
        );
    }

    #[test]
    fn log_levels() {
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/logLevel":"warning"}}"#);
        assert_eq!(request_log_level(Some(&p)), Ok(Some("warning")));
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/logLevel":"loud"}}"#);
        assert_eq!(request_log_level(Some(&p)), Err(BadLogLevel));
        assert_eq!(request_log_level(None), Ok(None));
        assert_eq!(message_rank(Some(&jsonrpc::raw(r#"{"level":"error"}"#))), 4);
        assert_eq!(message_rank(None), 0);
        let stamp =
            std::sync::Arc::new(vec![(META_LOG_LEVEL.to_owned(), jsonrpc::raw("\"debug\""))]);
        let s = stamp_with_log_level(&stamp, Some("error"));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1.get(), "\"error\"");
        assert!(std::sync::Arc::ptr_eq(
            &stamp_with_log_level(&stamp, None),
            &stamp
        ));
    }
}
