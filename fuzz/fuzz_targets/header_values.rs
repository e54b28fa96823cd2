//! 2026 header values: the `=?base64?…?=` sentinel (`protocol::decode_header_value`,
//! `encode_header_value`), header-to-body comparison (`header_matches_json`) and the whole
//! header check of a 2026 request (`face::modern::validate_view`: `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).
//!
//! Input: byte 0 picks the method and mode, then `params` JSON, a `\0`, then header text
//! (`name: value` lines; in honest mode the names of the annotated arguments).
//!
//! Invariants: any string encodes to a valid visible-ASCII header value that decodes back to
//! it; the headers an honest client derives from a valid body always pass `validate_view`;
//! arbitrary headers never panic it.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mcp_bridge::face::modern::validate_view;
use mcp_bridge::jsonrpc::{Fields, ParamsView};
use mcp_bridge::protocol::{self, decode_header_value, encode_header_value, header_matches_json};
use serde_json::value::RawValue;
use serde_json::Value;

const METHODS: [&str; 5] = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "tools/list",
    "ping",
];

fn roundtrip(s: &str) {
    let enc = encode_header_value(s);
    let hv = HeaderValue::from_str(&enc).expect("an encoded value is a valid header value");
    assert!(hv.to_str().is_ok(), "an encoded value is visible ASCII");
    assert_eq!(
        decode_header_value(&enc).as_deref(),
        Some(s),
        "decode(encode(s)) != s"
    );
}

/// The header an honest client sends for a body value, if there is one.
fn honest(v: &RawValue) -> Option<String> {
    match serde_json::from_str::<Value>(v.get()).ok()? {
        Value::String(s) => Some(encode_header_value(&s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => {
            Some(v.get().trim().to_owned())
        }
        _ => None,
    }
}

fn honest_headers(
    method: &str,
    view: &ParamsView<'_>,
    annotated: &[(String, String)],
) -> Option<HeaderMap> {
    let meta = view.meta.as_ref()?;
    let pv: String = serde_json::from_str(meta.get(protocol::META_PROTOCOL_VERSION)?.get()).ok()?;
    if pv != protocol::MODERN || !meta.has(protocol::META_CLIENT_CAPABILITIES) {
        return None;
    }
    let mut h = HeaderMap::new();
    h.insert(
        protocol::H_PROTOCOL_VERSION,
        HeaderValue::from_static(protocol::MODERN),
    );
    h.insert(protocol::H_METHOD, HeaderValue::from_str(method).ok()?);
    if let Some(field) = protocol::name_field(method) {
        let name: String = serde_json::from_str(view.get(field)?.get()).ok()?;
        h.insert(
            protocol::H_NAME,
            HeaderValue::from_str(&encode_header_value(&name)).ok()?,
        );
    }
    if method == "tools/call" && !annotated.is_empty() {
        let args = view.get("arguments").and_then(Fields::parse);
        for (hname, prop) in annotated {
            let name =
                HeaderName::from_bytes(format!("{}{hname}", protocol::H_PARAM_PREFIX).as_bytes())
                    .ok()?;
            if h.contains_key(&name) {
                return None; // two annotations for one header: not something a tool can declare
            }
            let Some(v) = args
                .as_ref()
                .and_then(|a| a.get(prop))
                .filter(|v| v.get() != "null")
            else {
                continue;
            };
            h.insert(name, HeaderValue::from_str(&honest(v)?).ok()?);
        }
    }
    Some(h)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    roundtrip(&text);
    let _ = decode_header_value(&text);
    let method = METHODS[usize::from(sel) % METHODS.len()];
    let honest_mode = sel & 0x80 != 0;
    let (body, head) = text.split_once('\0').unwrap_or((&text, ""));
    if let Ok(raw) = serde_json::from_str::<&RawValue>(body) {
        let _ = header_matches_json(head, raw);
    }
    let params = serde_json::from_str::<&RawValue>(body).ok();
    let view = ParamsView::parse(params);
    if honest_mode {
        // Header text names the annotated arguments: `header=property` per line.
        let annotated: Vec<(String, String)> = head
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(a, b)| (a.to_ascii_lowercase(), b.to_owned()))
            .take(8)
            .collect();
        let th = |_: &str| annotated.clone();
        if let Some(h) = honest_headers(method, &view, &annotated) {
            if let Err(r) = validate_view(&h, method, &view, &th) {
                panic!("honest headers rejected: {r:?}");
            }
        }
    } else {
        let mut h = HeaderMap::new();
        for line in head.lines().take(16) {
            let Some((n, v)) = line.split_once(':') else {
                continue;
            };
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n.trim().as_bytes()),
                HeaderValue::from_bytes(v.trim().as_bytes()),
            ) {
                h.append(n, v);
            }
        }
        let th = |_: &str| {
            vec![
                ("x".to_owned(), "x".to_owned()),
                ("region".to_owned(), "region".to_owned()),
            ]
        };
        let _ = validate_view(&h, method, &view, &th);
    }
});
