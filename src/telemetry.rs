//! Logging and tracing: the stderr subscriber (`--log-format text|json`, `--log-level` /
//! `RUST_LOG`), the per-call span, and W3C trace context (`traceparent` / `tracestate`) carried
//! from the HTTP request into the `_meta` sent upstream. Payloads are never logged here.

use http::HeaderMap;
use serde_json::value::RawValue;

use crate::jsonrpc;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (fields, span fields, timestamp, level, target).
    Json,
}

/// Install the global subscriber. `RUST_LOG` wins over `level`.
pub fn init_logging(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
}

/// Longest caller-supplied text (ids, methods) recorded in a span field.
const MAX_FIELD: usize = 64;

fn clip(s: &str) -> &str {
    if s.len() <= MAX_FIELD {
        return s;
    }
    let mut end = MAX_FIELD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The span of one call: server, method, the caller's id, and (once sent) the bridge's id.
pub fn call_span(server: &str, method: &str, caller_id: &str) -> tracing::Span {
    tracing::info_span!(
        "call",
        server,
        method = clip(method),
        id = clip(caller_id),
        upstream_id = tracing::field::Empty,
    )
}

/// Record the id the upstream sees on a span made by [`call_span`].
pub fn record_upstream_id(span: &tracing::Span, id: u64) {
    span.record("upstream_id", id);
}

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// `version-traceid-parentid-flags`, lowercase hex, as W3C Trace Context defines it.
fn valid_traceparent(v: &str) -> bool {
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && hex(parts[1], 32)
        && parts[1].bytes().any(|b| b != b'0')
        && hex(parts[2], 16)
        && parts[2].bytes().any(|b| b != b'0')
        && hex(parts[3], 2)
        && (parts[0] != "00" || parts.len() == 4)
}

/// `tracestate`: at most 512 visible ASCII characters (W3C caps it at 32 members).
fn valid_tracestate(v: &str) -> bool {
    !v.is_empty() && v.len() <= 512 && v.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// The request's W3C trace context headers, when well-formed.
fn trace_headers(h: &HeaderMap) -> Vec<(&'static str, String)> {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
    let mut out = Vec::new();
    if let Some(tp) = get(TRACEPARENT).filter(|v| valid_traceparent(v)) {
        out.push((TRACEPARENT, tp.to_owned()));
        // tracestate means nothing without a traceparent.
        if let Some(ts) = get(TRACESTATE).filter(|v| valid_tracestate(v)) {
            out.push((TRACESTATE, ts.to_owned()));
        }
    }
    out
}

/// Carry the HTTP request's `traceparent` / `tracestate` into `params._meta`, unless the
/// request's `_meta` already has a trace context of its own (that one is kept as it is).
/// Params that are not an object are left alone.
pub fn with_trace_context(
    headers: &HeaderMap,
    params: Option<Box<RawValue>>,
) -> Option<Box<RawValue>> {
    let found = trace_headers(headers);
    if found.is_empty() || jsonrpc::meta_field(params.as_deref(), TRACEPARENT).is_some() {
        return params;
    }
    let values: Vec<(&str, Box<RawValue>)> = found
        .iter()
        .filter_map(|(k, v)| {
            let s = serde_json::to_string(v).ok()?;
            RawValue::from_string(s).ok().map(|r| (*k, r))
        })
        .collect();
    let add: Vec<(&str, &RawValue)> = values.iter().map(|(k, v)| (*k, &**v)).collect();
    match jsonrpc::rewrite_request_params(params.as_deref(), None, &add) {
        Some(s) => RawValue::from_string(s).ok().or(params),
        None => params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn hm(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn meta(p: &Option<Box<RawValue>>) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(p.as_ref().unwrap().get()).unwrap();
        v["_meta"].clone()
    }

    #[test]
    fn carries_headers_into_meta() {
        let h = hm(&[("traceparent", TP), ("tracestate", "vendor=1")]);
        let p = with_trace_context(&h, Some(jsonrpc::raw(r#"{"name":"echo","_meta":{"a":1}}"#)));
        let m = meta(&p);
        assert_eq!(m["traceparent"], TP);
        assert_eq!(m["tracestate"], "vendor=1");
        assert_eq!(m["a"], 1);
        // No params at all: a _meta is made.
        let p = with_trace_context(&h, None);
        assert_eq!(meta(&p)["traceparent"], TP);
    }

    #[test]
    fn keeps_the_requests_own_context_and_ignores_junk() {
        let own = r#"{"_meta":{"traceparent":"00-11111111111111111111111111111111-2222222222222222-00"}}"#;
        let h = hm(&[("traceparent", TP)]);
        let p = with_trace_context(&h, Some(jsonrpc::raw(own)));
        assert_eq!(p.unwrap().get(), own);
        for bad in [
            "junk",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let h = hm(&[("traceparent", bad), ("tracestate", "a=b")]);
            let p = with_trace_context(&h, Some(jsonrpc::raw("{}")));
            assert_eq!(p.unwrap().get(), "{}", "{bad}");
        }
        assert_eq!(clip(&"é".repeat(100)).len(), 64);
    }
}
