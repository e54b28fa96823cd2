//! JSON-RPC 2.0 frames as bytes: a borrowed envelope parse, and builders that splice ids,
//! progress tokens and payloads into new frames without re-encoding what the bridge does not touch.
//!
//! Pure functions only: no I/O, no protocol policy. Callers decide what an envelope means.

use std::borrow::Cow;
use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Standard and spec-defined JSON-RPC error codes the bridge emits.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Implementation-defined (legacy range): the upstream could not answer (exited, timed
    /// out, overloaded). `error.data.reason` says which.
    pub const UPSTREAM_UNAVAILABLE: i64 = -32000;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// What kind of message an envelope holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// A borrowed view of one JSON-RPC message. `id` keeps `"id": null` (Some("null")) apart from
/// a missing id (None).
#[derive(Debug, Deserialize)]
pub struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    // Through `Option`, serde would always copy the string: borrow via `Key` instead.
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub method: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub error: Option<&'a RawValue>,
}

fn borrowed_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    Key::deserialize(d).map(|k| Some(k.0))
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Why a frame is not a usable JSON-RPC message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("a JSON-RPC message must be an object")]
    NotObject,
    #[error("a JSON-RPC batch (array) is not supported here")]
    Batch,
    #[error("message is neither a request, a notification nor a response")]
    Shape,
}

impl<'a> Envelope<'a> {
    /// Parse one frame. Leading/trailing whitespace is allowed.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FrameError> {
        match first_non_ws(bytes) {
            Some(b'{') => {}
            Some(b'[') => return Err(FrameError::Batch),
            _ => {
                // Distinguish junk from a well-formed non-object.
                return match serde_json::from_slice::<&RawValue>(bytes) {
                    Ok(_) => Err(FrameError::NotObject),
                    Err(e) => Err(FrameError::Json(e.to_string())),
                };
            }
        }
        serde_json::from_slice(bytes).map_err(|e| FrameError::Json(e.to_string()))
    }

    pub fn kind(&self) -> Result<Kind, FrameError> {
        match (
            &self.method,
            self.id,
            self.result.is_some() || self.error.is_some(),
        ) {
            (Some(_), Some(id), false) if id.get() != "null" => Ok(Kind::Request),
            (Some(_), None, false) => Ok(Kind::Notification),
            (None, Some(_), true) => Ok(Kind::Response),
            _ => Err(FrameError::Shape),
        }
    }

    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }
}

pub fn first_non_ws(bytes: &[u8]) -> Option<u8> {
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Top-level keys of a JSON object, borrowed where possible. Used to look into `params`,
/// `_meta` and results without building a `serde_json::Value` tree.
#[derive(Debug, Default)]
pub struct Fields<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Fields<'a> {
    pub fn parse(raw: &'a RawValue) -> Option<Self> {
        serde_json::from_str(raw.get()).ok()
    }
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
    pub fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
                let mut out = Vec::new();
                while let Some(Key(k)) = m.next_key::<Key<'de>>()? {
                    let v: &'de RawValue = m.next_value()?;
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A request's `params` and their `_meta`, parsed once and looked up many times (the face
/// checks the era, the headers, the log level, the progress token and the capabilities).
#[derive(Debug, Default)]
pub struct ParamsView<'a> {
    pub fields: Option<Fields<'a>>,
    pub meta: Option<Fields<'a>>,
}

impl<'a> ParamsView<'a> {
    pub fn parse(params: Option<&'a RawValue>) -> Self {
        let fields = params.and_then(Fields::parse);
        let meta = fields
            .as_ref()
            .and_then(|f| f.get("_meta"))
            .and_then(Fields::parse);
        ParamsView { fields, meta }
    }
    /// A top-level field of `params`.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields.as_ref().and_then(|f| f.get(key))
    }
    /// A field of `params._meta`.
    pub fn meta(&self, key: &str) -> Option<&'a RawValue> {
        self.meta.as_ref().and_then(|m| m.get(key))
    }
}

/// A map key that borrows when the JSON string has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Write a JSON object from (key, raw value) pairs.
pub fn write_object(out: &mut BytesMut, fields: &[(Cow<'_, str>, &RawValue)]) {
    out.put_u8(b'{');
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        write_json_str(out, k);
        out.put_u8(b':');
        out.put_slice(v.get().as_bytes());
    }
    out.put_u8(b'}');
}

/// Append `s` as a JSON string literal.
pub fn write_json_str(out: &mut BytesMut, s: &str) {
    // Method names and the like rarely need escaping: copy those as they are.
    if s.bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b < 0x7f)
    {
        out.reserve(s.len() + 2);
        out.put_u8(b'"');
        out.put_slice(s.as_bytes());
        out.put_u8(b'"');
        return;
    }
    // serde_json's escaping is correct; it cannot fail for a &str.
    match serde_json::to_string(s) {
        Ok(q) => out.put_slice(q.as_bytes()),
        Err(_) => out.put_slice(b"\"\""),
    }
}

/// The value of `params._meta[key]`, if any.
pub fn meta_field<'a>(params: Option<&'a RawValue>, key: &str) -> Option<&'a RawValue> {
    let p = Fields::parse(params?)?;
    let m = Fields::parse(p.get("_meta")?)?;
    m.get(key)
}

/// A new request frame: `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}`.
pub fn request(id: &str, method: &str, params: Option<&str>) -> Bytes {
    let mut out = BytesMut::with_capacity(48 + method.len() + params.map_or(0, str::len));
    out.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.put_slice(id.as_bytes());
    out.put_slice(b",\"method\":");
    write_json_str(&mut out, method);
    if let Some(p) = params {
        out.put_slice(b",\"params\":");
        out.put_slice(p.as_bytes());
    }
    out.put_u8(b'}');
    out.freeze()
}

/// A notification frame.
pub fn notification(method: &str, params: Option<&str>) -> Bytes {
    let mut out = BytesMut::with_capacity(40 + method.len() + params.map_or(0, str::len));
    out.put_slice(b"{\"jsonrpc\":\"2.0\",\"method\":");
    write_json_str(&mut out, method);
    if let Some(p) = params {
        out.put_slice(b",\"params\":");
        out.put_slice(p.as_bytes());
    }
    out.put_u8(b'}');
    out.freeze()
}

/// A result response frame with the given raw id and raw result.
pub fn result(id: &str, result: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(36 + id.len() + result.len());
    out.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.put_slice(id.as_bytes());
    out.put_slice(b",\"result\":");
    out.put_slice(result.as_bytes());
    out.put_u8(b'}');
    out.freeze()
}

/// An error response frame with a raw error object.
pub fn error_raw(id: Option<&str>, error: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(36 + error.len());
    out.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.put_slice(id.unwrap_or("null").as_bytes());
    out.put_slice(b",\"error\":");
    out.put_slice(error.as_bytes());
    out.put_u8(b'}');
    out.freeze()
}

/// An error object `{"code":..,"message":..,"data":..}` as a JSON string.
pub fn error_object(code: i64, message: &str, data: Option<&serde_json::Value>) -> String {
    let mut s = String::with_capacity(48 + message.len());
    let _ = write!(s, "{{\"code\":{code},\"message\":");
    s.push_str(&serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into()));
    if let Some(d) = data {
        s.push_str(",\"data\":");
        s.push_str(&d.to_string());
    }
    s.push('}');
    s
}

/// An error response frame built from parts.
pub fn error(
    id: Option<&str>,
    code: i64,
    message: &str,
    data: Option<&serde_json::Value>,
) -> Bytes {
    error_raw(id, &error_object(code, message, data))
}

/// Rewrite request params on the way to an upstream: replace `_meta.progressToken` with
/// `token` (when the request has one) and add `_meta` keys from `add_meta` that are missing.
/// Returns None when nothing needs to change.
pub fn rewrite_request_params(
    params: Option<&RawValue>,
    token: Option<&str>,
    add_meta: &[(&str, &RawValue)],
) -> Option<String> {
    // A quick look spares the parse when no token is named. A key spelled with `\u` escapes
    // (`progress\u0054oken`) is the same key once parsed, so an escape means "look closer":
    // a token left unreplaced would route the child's progress by the client's own token,
    // which may be another client's minted id (found by fuzz/fuzz_targets/jsonrpc_envelope.rs).
    let has_token = params
        .map(|p| {
            let b = p.get().as_bytes();
            memchr::memmem::find(b, b"progressToken").is_some()
                || memchr::memmem::find(b, b"\\u").is_some()
        })
        .unwrap_or(false);
    if add_meta.is_empty() && !(has_token && token.is_some()) {
        return None;
    }
    let empty = RawValue::from_string("{}".into()).ok()?;
    let p = Fields::parse(params.unwrap_or(&empty))?;
    let meta = match p.get("_meta") {
        Some(m) => Fields::parse(m)?,
        None => Fields::default(),
    };
    let tok = match token {
        Some(t) => Some(RawValue::from_string(t.to_owned()).ok()?),
        None => None,
    };
    let mut meta_fields: Vec<(Cow<str>, &RawValue)> =
        Vec::with_capacity(meta.0.len() + add_meta.len());
    let mut changed = false;
    for (k, v) in meta.0.iter() {
        match (&**k, &tok) {
            ("progressToken", Some(t)) => {
                meta_fields.push((k.clone(), t));
                changed = true;
            }
            _ => meta_fields.push((k.clone(), *v)),
        }
    }
    for (k, v) in add_meta {
        if !meta.has(k) {
            meta_fields.push((Cow::Borrowed(*k), *v));
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    let mut meta_buf = BytesMut::new();
    write_object(&mut meta_buf, &meta_fields);
    let meta_new = RawValue::from_string(String::from_utf8(meta_buf.to_vec()).ok()?).ok()?;
    let mut fields: Vec<(Cow<str>, &RawValue)> = Vec::with_capacity(p.0.len() + 1);
    let mut placed = false;
    for (k, v) in p.0.iter() {
        if k == "_meta" {
            fields.push((k.clone(), &meta_new));
            placed = true;
        } else {
            fields.push((k.clone(), *v));
        }
    }
    if !placed {
        fields.push((Cow::Borrowed("_meta"), &meta_new));
    }
    let mut out = BytesMut::with_capacity(params.map_or(2, |p| p.get().len()) + 64);
    write_object(&mut out, &fields);
    String::from_utf8(out.to_vec()).ok()
}

/// Replace one key inside `params._meta` (which must exist and hold it).
pub fn replace_meta_field(params: &RawValue, key: &str, value: &RawValue) -> Option<String> {
    let p = Fields::parse(params)?;
    let meta = p.get("_meta")?;
    let new_meta = set_field(meta, key, value)?;
    let new_meta = RawValue::from_string(new_meta).ok()?;
    set_field(params, "_meta", &new_meta)
}

/// Replace (or add) one top-level field of a JSON object; the result keeps field order.
pub fn set_field(obj: &RawValue, key: &str, value: &RawValue) -> Option<String> {
    let f = Fields::parse(obj)?;
    let mut fields: Vec<(Cow<str>, &RawValue)> = Vec::with_capacity(f.0.len() + 1);
    let mut replaced = false;
    for (k, v) in f.0.iter() {
        if k == key {
            fields.push((k.clone(), value));
            replaced = true;
        } else {
            fields.push((k.clone(), *v));
        }
    }
    if !replaced {
        fields.push((Cow::Borrowed(key), value));
    }
    let mut out = BytesMut::with_capacity(obj.get().len() + key.len() + value.get().len() + 4);
    write_object(&mut out, &fields);
    String::from_utf8(out.to_vec()).ok()
}

/// Parse an integer-valued raw JSON (`17` or `"17"`) as u64: for ids and tokens the bridge minted.
pub fn minted_u64(v: &RawValue) -> Option<u64> {
    let s = v.get().trim();
    let s = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    s.parse().ok()
}

/// A raw JSON value from a string we know to be valid JSON.
pub fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped_when_needed() {
        for s in [
            "tools/call",
            "a\"b",
            "back\\slash",
            "tab\t",
            "é",
            "\u{7f}",
            "",
        ] {
            let mut out = BytesMut::new();
            write_json_str(&mut out, s);
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn method_borrows_unless_escaped() {
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#).unwrap();
        assert!(matches!(e.method, Some(Cow::Borrowed("tools/call"))));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#).unwrap();
        assert_eq!(e.method(), "tools/call");
        assert!(matches!(
            Envelope::parse(br#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            Err(FrameError::Json(_))
        ));
    }

    #[test]
    fn envelope_kinds() {
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{}}"#).unwrap();
        assert_eq!(e.kind(), Ok(Kind::Request));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","method":"x"}"#).unwrap();
        assert_eq!(e.kind(), Ok(Kind::Notification));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert_eq!(e.kind(), Ok(Kind::Response));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":1}}"#).unwrap();
        assert_eq!(e.id.map(|i| i.get()), Some("null"));
        assert_eq!(e.kind(), Ok(Kind::Response));
        let e = Envelope::parse(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).unwrap();
        assert_eq!(e.kind(), Err(FrameError::Shape));
        assert_eq!(Envelope::parse(b"[1]").unwrap_err(), FrameError::Batch);
        assert_eq!(Envelope::parse(b"17").unwrap_err(), FrameError::NotObject);
        assert!(matches!(Envelope::parse(b"nope"), Err(FrameError::Json(_))));
    }

    #[test]
    fn escaped_keys_survive() {
        let p = raw(r#"{"a\"b":1,"_meta":{"progressToken":1}}"#);
        let out = rewrite_request_params(Some(&p), Some("7"), &[]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["a\"b"], 1);
        assert_eq!(v["_meta"]["progressToken"], 7);
    }

    #[test]
    fn escaped_progress_token_key_is_replaced() {
        // fuzz/jsonrpc_envelope: `progress\u0054oken` is `progressToken`; left as the client
        // sent it, the child's progress would be routed by a token the bridge never minted.
        let p = raw(r#"{"a\"b":1,"_meta":{"progress\u0054oken":1}}"#);
        let out = rewrite_request_params(Some(&p), Some("22"), &[]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["_meta"]["progressToken"], 22);
        assert_eq!(v["a\"b"], 1);
    }

    #[test]
    fn rewrite_params_stamps_meta() {
        let v = raw(r#""2026-07-28""#);
        let out = rewrite_request_params(None, Some("9"), &[("pv", &v)]).unwrap();
        assert_eq!(out, r#"{"_meta":{"pv":"2026-07-28"}}"#);
        let p = raw(r#"{"name":"x","_meta":{"progressToken":"t"}}"#);
        let out = rewrite_request_params(Some(&p), Some("9"), &[("pv", &v)]).unwrap();
        assert_eq!(
            out,
            r#"{"name":"x","_meta":{"progressToken":9,"pv":"2026-07-28"}}"#
        );
        assert_eq!(rewrite_request_params(Some(&p), None, &[]), None);
        let p = raw(r#"{"_meta":{"pv":"x"}}"#);
        assert_eq!(
            rewrite_request_params(Some(&p), Some("1"), &[("pv", &v)]),
            None
        );
    }

    #[test]
    fn set_field_adds_and_replaces() {
        let o = raw(r#"{"content":[]}"#);
        let t = raw(r#""complete""#);
        assert_eq!(
            set_field(&o, "resultType", &t).unwrap(),
            r#"{"content":[],"resultType":"complete"}"#
        );
    }

    #[test]
    fn builders() {
        assert_eq!(
            &request("5", "ping", None)[..],
            br#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#
        );
        let e = error(Some("\"x\""), -32601, "no \"such\"", None);
        let v: serde_json::Value = serde_json::from_slice(&e).unwrap();
        assert_eq!(v["error"]["message"], "no \"such\"");
        assert_eq!(minted_u64(&raw("\"12\"")), Some(12));
        assert_eq!(minted_u64(&raw("12")), Some(12));
    }
}
