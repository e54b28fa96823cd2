//! Server notifications across eras, shared by both faces (`serve`'s HTTP face and
//! `connect`'s stdio face): what a `subscriptions/listen` filter honours against a 2025
//! server's capabilities (`Honoured`), reference counts of the 2025 server's
//! `resources/subscribe` held for several listeners (`ResourceSubs`), the listen request's id
//! as `_meta` subscriptionId (`tagged`, `retagged`, `untagged`), the listen acknowledgement and
//! completion bodies, the filter a 2025 client's notifications need from a 2026 server
//! (`legacy_filter`), and the session-wide log level a 2025 server is set to for 2026 callers
//! (`LogFloor`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::jsonrpc::{self, Fields};
use crate::protocol;

/// Most resource URIs one listen request may subscribe to.
const MAX_URIS: usize = 100;

/// Reference counts of a 2025 server's resource subscriptions held for listeners.
#[derive(Default)]
pub struct ResourceSubs(Mutex<HashMap<String, usize>>);

impl ResourceSubs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Count a listener in; true when the server must be subscribed.
    pub fn acquire(&self, uri: &str) -> bool {
        let mut g = self.lock();
        let n = g.entry(uri.to_owned()).or_insert(0);
        *n += 1;
        *n == 1
    }
    /// Count a listener out; true when the server must be unsubscribed.
    pub fn release(&self, uri: &str) -> bool {
        let mut g = self.lock();
        match g.get_mut(uri) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                g.remove(uri);
                true
            }
            None => false,
        }
    }
}

/// What the listener asked for and what the 2025 server can give.
#[derive(Debug, Default, PartialEq)]
pub struct Honoured {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    pub uris: Vec<String>,
}

impl Honoured {
    /// Intersect a `SubscriptionFilter` with a 2025 server's capabilities.
    pub fn from(filter: Option<&RawValue>, caps: &Value) -> Self {
        let f: Value = filter
            .and_then(|f| serde_json::from_str(f.get()).ok())
            .unwrap_or(Value::Null);
        let want = |k: &str| f.get(k).and_then(Value::as_bool).unwrap_or(false);
        let cap = |a: &str, b: &str| {
            caps.get(a)
                .and_then(|c| c.get(b))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let uris = if cap("resources", "subscribe") {
            f.get("resourceSubscriptions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .take(MAX_URIS)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Self {
            tools: want("toolsListChanged") && cap("tools", "listChanged"),
            prompts: want("promptsListChanged") && cap("prompts", "listChanged"),
            resources: want("resourcesListChanged") && cap("resources", "listChanged"),
            uris,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        if self.tools {
            o.insert("toolsListChanged".into(), json!(true));
        }
        if self.prompts {
            o.insert("promptsListChanged".into(), json!(true));
        }
        if self.resources {
            o.insert("resourcesListChanged".into(), json!(true));
        }
        if !self.uris.is_empty() {
            o.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(o)
    }

    /// Should this server notification reach the listener?
    pub fn wants(&self, method: &str, params: Option<&RawValue>) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            "notifications/resources/updated" => params
                .and_then(Fields::parse)
                .and_then(|f| {
                    f.get("uri")
                        .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
                })
                .is_some_and(|u| self.uris.contains(&u)),
            _ => false,
        }
    }
}

/// Tag a notification with the listen request's id as `_meta.subscriptionId`.
pub fn tagged(method: &str, params: Option<&RawValue>, id: &RawValue) -> Bytes {
    let p = jsonrpc::rewrite_request_params(params, None, &[(protocol::META_SUBSCRIPTION_ID, id)]);
    jsonrpc::notification(method, p.as_deref().or(params.map(RawValue::get)))
}

/// Put the listen request's own id in place of the one a 2026 server tagged (the bridge's).
pub fn retagged(method: &str, params: Option<&RawValue>, id: &RawValue) -> Bytes {
    let p = params
        .filter(|p| jsonrpc::meta_field(Some(p), protocol::META_SUBSCRIPTION_ID).is_some())
        .and_then(|p| jsonrpc::replace_meta_field(p, protocol::META_SUBSCRIPTION_ID, id));
    match p {
        Some(p) => jsonrpc::notification(method, Some(&p)),
        None => tagged(method, params, id),
    }
}

/// A listen-stream notification for a 2025 client: without `_meta` subscriptionId (and without
/// `_meta` when nothing else was in it).
pub fn untagged(method: &str, params: Option<&RawValue>) -> Bytes {
    let stripped = params.and_then(|p| {
        let f = Fields::parse(p)?;
        let meta = Fields::parse(f.get("_meta")?)?;
        meta.get(protocol::META_SUBSCRIPTION_ID)?;
        let kept: Vec<_> = meta
            .0
            .iter()
            .filter(|(k, _)| k != protocol::META_SUBSCRIPTION_ID)
            .cloned()
            .collect();
        let mut buf = bytes::BytesMut::new();
        let new_meta;
        let mut fields: Vec<_> = f.0.iter().filter(|(k, _)| k != "_meta").cloned().collect();
        if !kept.is_empty() {
            jsonrpc::write_object(&mut buf, &kept);
            new_meta = jsonrpc::raw(std::str::from_utf8(&buf).ok()?);
            fields.push((std::borrow::Cow::Borrowed("_meta"), &*new_meta));
        }
        let mut out = bytes::BytesMut::new();
        jsonrpc::write_object(&mut out, &fields);
        String::from_utf8(out.to_vec()).ok()
    });
    jsonrpc::notification(method, stripped.as_deref().or(params.map(RawValue::get)))
}

/// The subscription id a notification carries, if any.
pub fn subscription_id(params: Option<&RawValue>) -> Option<&RawValue> {
    params
        .filter(|p| memchr::memmem::find(p.get().as_bytes(), b"subscriptionId").is_some())
        .and_then(|p| jsonrpc::meta_field(Some(p), protocol::META_SUBSCRIPTION_ID))
}

/// Is this one of the notifications a listen stream carries?
pub fn is_listen_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
    )
}

/// The `notifications/subscriptions/acknowledged` for listen `id` with what it honours.
pub fn acknowledgement(honoured: &Honoured, id: &RawValue) -> Bytes {
    let params = json!({
        "notifications": honoured.to_json(),
        "_meta": { protocol::META_SUBSCRIPTION_ID: serde_json::from_str::<Value>(id.get()).unwrap_or(Value::Null) },
    })
    .to_string();
    jsonrpc::notification("notifications/subscriptions/acknowledged", Some(&params))
}

/// The result that ends listen `id` gracefully.
pub fn completion_result(id: &RawValue) -> String {
    json!({"resultType": "complete", "_meta": {
        protocol::META_SUBSCRIPTION_ID: serde_json::from_str::<Value>(id.get()).unwrap_or(Value::Null)}})
    .to_string()
}

/// The graceful end of listen `id`: its completion result.
pub fn completion(id: &RawValue) -> Bytes {
    jsonrpc::result(id.get(), &completion_result(id))
}

/// The `SubscriptionFilter` a 2025 client gets from a 2026 server (it receives every change
/// the server offers, plus its resource subscriptions): the list-changed types in `caps`.
pub fn legacy_filter(caps: &Value, uris: &[String]) -> Value {
    let cap = |a: &str, b: &str| {
        caps.get(a)
            .and_then(|c| c.get(b))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let mut f = serde_json::Map::new();
    for (key, a) in [
        ("toolsListChanged", "tools"),
        ("promptsListChanged", "prompts"),
        ("resourcesListChanged", "resources"),
    ] {
        if cap(a, "listChanged") {
            f.insert(key.into(), json!(true));
        }
    }
    if !uris.is_empty() {
        f.insert("resourceSubscriptions".into(), json!(uris));
    }
    Value::Object(f)
}

/// The level a 2025 server logs at on behalf of 2026 callers (it logs per session or process;
/// each 2026 request gets its own level, filtered by the bridge). Only ever lowered.
pub struct LogFloor(AtomicUsize);

impl Default for LogFloor {
    fn default() -> Self {
        Self(AtomicUsize::new(usize::MAX))
    }
}

impl LogFloor {
    /// Lower the floor to `level`; true when it changed (the server must be told).
    pub fn lower(&self, level: &str) -> bool {
        let Some((_, rank)) = protocol::log_level(level) else {
            return false;
        };
        self.0.fetch_min(rank, Ordering::AcqRel) > rank
    }

    /// Undo a `lower` whose `logging/setLevel` did not get through (so a later call retries).
    pub fn reset(&self) {
        self.0.store(usize::MAX, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn honours_only_what_both_sides_have() {
        let caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
        let f = jsonrpc::raw(
            r#"{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true,"resourceSubscriptions":["demo://a"]}"#,
        );
        let h = Honoured::from(Some(&f), &caps);
        assert_eq!(
            h,
            Honoured {
                tools: true,
                prompts: false,
                resources: false,
                uris: vec!["demo://a".into()]
            }
        );
        assert!(h.wants("notifications/tools/list_changed", None));
        assert!(!h.wants("notifications/prompts/list_changed", None));
        let u = jsonrpc::raw(r#"{"uri":"demo://a"}"#);
        let v = jsonrpc::raw(r#"{"uri":"demo://b"}"#);
        assert!(h.wants("notifications/resources/updated", Some(&u)));
        assert!(!h.wants("notifications/resources/updated", Some(&v)));
    }

    #[test]
    fn refcounts() {
        let s = ResourceSubs::default();
        assert!(s.acquire("a"));
        assert!(!s.acquire("a"));
        assert!(!s.release("a"));
        assert!(s.release("a"));
        assert!(!s.release("a"));
    }

    #[test]
    fn tags_notifications() {
        let id = jsonrpc::raw("\"L1\"");
        let f = tagged("notifications/tools/list_changed", None, &id);
        assert_eq!(
            &f[..],
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}"#
        );
    }

    #[test]
    fn retags_and_untags() {
        let id = jsonrpc::raw("\"L9\"");
        let p = jsonrpc::raw(r#"{"uri":"u","_meta":{"io.modelcontextprotocol/subscriptionId":7}}"#);
        let f = retagged("notifications/resources/updated", Some(&p), &id);
        assert_eq!(
            &f[..],
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"u","_meta":{"io.modelcontextprotocol/subscriptionId":"L9"}}}"#
        );
        let f = untagged("notifications/resources/updated", Some(&p));
        assert_eq!(
            &f[..],
            br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"u"}}"#
        );
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/subscriptionId":7,"k":1}}"#);
        let f = untagged("notifications/tools/list_changed", Some(&p));
        assert_eq!(
            &f[..],
            br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"k":1}}}"#
        );
        assert_eq!(subscription_id(Some(&p)).map(RawValue::get), Some("7"));
        assert!(subscription_id(None).is_none());
    }

    #[test]
    fn legacy_filter_follows_capabilities() {
        let caps = json!({"tools": {"listChanged": true}, "prompts": {}});
        assert_eq!(
            legacy_filter(&caps, &["demo://a".into()]),
            json!({"toolsListChanged": true, "resourceSubscriptions": ["demo://a"]})
        );
        assert_eq!(legacy_filter(&Value::Null, &[]), json!({}));
    }

    #[test]
    fn log_floor_only_lowers() {
        let f = LogFloor::default();
        assert!(f.lower("warning"));
        assert!(!f.lower("warning"));
        assert!(!f.lower("error"));
        assert!(f.lower("debug"));
        assert!(!f.lower("nonsense"));
        f.reset();
        assert!(f.lower("info"));
    }
}
