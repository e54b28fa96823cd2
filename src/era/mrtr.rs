//! Multi-round-trip (2026 `input_required`) bookkeeping for translating between eras:
//! the bridge's own `requestState` (signed and checked in `super::request_state`, re-exported
//! here), the capability gate for input requests, the parked-call store, and the
//! era mapping of input-request payloads shared by `serve` and `connect`.
//!
//! URL-mode elicitation across eras (digest §8, "URL elicitation completion"):
//! - capability gate: URL mode needs `elicitation.url`; form mode needs `elicitation: {}` or
//!   `elicitation.form` (a client that names only `url` gets no form);
//! - 2025 → 2026 (`to_modern_input`): `elicitationId` has no 2026 counterpart and is dropped
//!   from the `inputRequests` entry (the bridge still answers the 2025 upstream under the
//!   upstream's own request id, so nothing is lost);
//! - 2026 → 2025 (`to_legacy_input`): a URL-mode request gets a bridge-minted `elicitationId`
//!   (`mcpb-el-N`, required by 2025-11-25), unique within the bridge process;
//! - a 2025 upstream's `-32042` URLElicitationRequired error (retired in 2026) becomes, for a
//!   2026 client that declared `elicitation.url`, an `input_required` result with those URL
//!   elicitations and no `requestState` (`url_required_for_modern`); the client's retry runs
//!   the call again without its `inputResponses` (`strip_input_responses`), which is what a
//!   2025 client does after the out-of-band step. A client without `elicitation.url` gets
//!   `-32021` naming it instead;
//! - `notifications/elicitation/complete` (2025-only, optional) is dropped toward 2026 clients
//!   and hosts (`is_legacy_only_notification`), logged at debug and counted; the bridge does
//!   not synthesise it toward 2025 clients of a 2026 upstream: the notification is optional,
//!   and the call's final result already tells the client the interaction is over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::Value;

use crate::jsonrpc::Fields;

pub use super::request_state::{params_digest, StateClaims, StateError, StateSigner};

/// A request id the bridge mints for a request it sends to a client (a 2025 server request
/// relayed or an `inputRequests` entry unpacked), as JSON: `"mcpb-N"`, unique within the
/// process and on both faces, so it cannot collide with a client's own ids.
pub fn mint_request_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("\"mcpb-{n}\"")
}

/// How long a parked call waits for its client's retry.
pub const INPUT_TTL: Duration = Duration::from_secs(300);

/// Methods whose 2026 results may be `input_required`.
pub fn is_mrtr_method(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// The client capability an input request needs, as a path into `ClientCapabilities`.
pub fn required_capability(
    method: &str,
    params: Option<&RawValue>,
) -> Option<(&'static str, Option<&'static str>)> {
    match method {
        "sampling/createMessage" => Some(("sampling", None)),
        "roots/list" => Some(("roots", None)),
        "elicitation/create" => {
            let url_mode = params
                .and_then(Fields::parse)
                .and_then(|f| f.get("mode").map(|m| m.get() == "\"url\""))
                .unwrap_or(false);
            Some(("elicitation", if url_mode { Some("url") } else { None }))
        }
        _ => None,
    }
}

/// The one capability gate both faces apply before asking a client anything on an upstream's
/// behalf: may a client that declared `caps` be sent `method`? Requests that need no
/// capability (ping, unknown methods) pass; the others need their capability declared.
pub fn may_ask(caps: Option<&RawValue>, method: &str, params: Option<&RawValue>) -> bool {
    required_capability(method, params).is_none_or(|need| capability_declared(caps, need))
}

/// Did the request's `clientCapabilities` declare what this input request needs?
pub fn capability_declared(caps: Option<&RawValue>, need: (&str, Option<&str>)) -> bool {
    let Some(c) = caps.and_then(Fields::parse) else {
        return false;
    };
    let Some(top) = c.get(need.0).filter(|t| t.get() != "null") else {
        return false;
    };
    match need {
        // Form elicitation: `elicitation: {}` means form only; otherwise `form` must be named.
        ("elicitation", None) => Fields::parse(top).is_none_or(|f| f.0.is_empty() || f.has("form")),
        (_, None) => true,
        (_, Some(sub)) => Fields::parse(top).is_some_and(|f| f.has(sub)),
    }
}

/// A 2025 upstream's request for input its 2026 caller did not declare, refused to the
/// upstream the 2026 way: `-32021` MissingRequiredClientCapability with
/// `data.requiredCapabilities` naming what the request needs (`{"sampling":{}}`,
/// `{"elicitation":{"url":{}}}`, …). A 2025 server that fails its call with the error it got
/// thereby answers the 2026 caller as a 2026 server would (HTTP 400 on the modern face).
pub fn missing_capability_refusal(
    id: &str,
    method: &str,
    params: Option<&RawValue>,
    why: &str,
) -> bytes::Bytes {
    let data = required_capability(method, params).map(|(top, sub)| {
        let inner = match sub {
            Some(s) => serde_json::json!({ s: {} }),
            None => serde_json::json!({}),
        };
        serde_json::json!({"requiredCapabilities": { top: inner }})
    });
    crate::jsonrpc::error(
        Some(id),
        crate::jsonrpc::code::MISSING_CLIENT_CAPABILITY,
        why,
        data.as_ref(),
    )
}

/// Did a caller declare any capability a server request needs (sampling, elicitation,
/// roots)? One that declared none can be asked nothing: it is never an addressee of a 2025
/// child's requests, and never held back for one (`upstream::child`'s attribution).
pub fn declares_any_input(caps: Option<&RawValue>) -> bool {
    let Some(c) = caps.and_then(Fields::parse) else {
        return false;
    };
    ["sampling", "elicitation", "roots"]
        .iter()
        .any(|k| c.get(k).is_some_and(|v| v.get() != "null"))
}

/// Is this an `elicitation/create` in URL mode?
fn is_url_elicitation(method: &str, params: Option<&RawValue>) -> bool {
    method == "elicitation/create"
        && required_capability(method, params).is_some_and(|(_, sub)| sub == Some("url"))
}

/// A 2025 upstream's server request as a 2026 `inputRequests` entry's params: URL-mode
/// elicitation loses its `elicitationId` (no 2026 counterpart). None: use the params as-is.
pub fn to_modern_input(method: &str, params: Option<&RawValue>) -> Option<Box<RawValue>> {
    if !is_url_elicitation(method, params) {
        return None;
    }
    let mut v: Value = serde_json::from_str(params?.get()).ok()?;
    v.as_object_mut()?.remove("elicitationId")?;
    serde_json::value::to_raw_value(&v).ok()
}

static NEXT_ELICITATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One entry of a 2026 `inputRequests` object.
pub struct InputRequest<'a> {
    pub key: std::borrow::Cow<'a, str>,
    pub method: String,
    /// The params as the upstream sent them.
    pub params: Option<&'a RawValue>,
}

impl InputRequest<'_> {
    /// The params to send a 2025 peer (see [`to_legacy_input`]).
    pub fn legacy_params(&self) -> Option<std::borrow::Cow<'_, RawValue>> {
        match to_legacy_input(&self.method, self.params) {
            Some(p) => Some(std::borrow::Cow::Owned(p)),
            None => self.params.map(std::borrow::Cow::Borrowed),
        }
    }
}

/// The entries of an `inputRequests` object (None: it is not an object); entries that are not
/// objects with a string `method` are skipped.
pub fn input_requests(reqs: &RawValue) -> Option<Vec<InputRequest<'_>>> {
    let reqs = Fields::parse(reqs)?;
    Some(
        reqs.0
            .into_iter()
            .filter_map(|(key, req)| {
                let rf = Fields::parse(req)?;
                let method = rf
                    .get("method")
                    .and_then(|m| serde_json::from_str::<String>(m.get()).ok())?;
                Some(InputRequest {
                    key,
                    method,
                    params: rf.get("params"),
                })
            })
            .collect(),
    )
}

/// A 2026 upstream's input request as a 2025 server request's params: URL-mode elicitation
/// gets the `elicitationId` 2025-11-25 requires (minted here). None: use the params as-is.
pub fn to_legacy_input(method: &str, params: Option<&RawValue>) -> Option<Box<RawValue>> {
    if !is_url_elicitation(method, params) {
        return None;
    }
    let mut v: Value = serde_json::from_str(params?.get()).ok()?;
    let o = v.as_object_mut()?;
    if o.get("elicitationId").is_some_and(Value::is_string) {
        return None;
    }
    let n = NEXT_ELICITATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    o.insert(
        "elicitationId".into(),
        Value::String(format!("mcpb-el-{n}")),
    );
    serde_json::value::to_raw_value(&v).ok()
}

/// 2025-11-25's URLElicitationRequired error code (retired in 2026).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// A 2025 upstream's error for a 2026 client: `-32042` becomes `Ok(input_required result)` for
/// a client that declared `elicitation.url`, else `Err(-32021 error object)`. None: leave the
/// error as it is.
pub fn url_required_for_modern(
    error: &RawValue,
    caps: Option<&RawValue>,
) -> Option<Result<String, String>> {
    let v: Value = serde_json::from_str(error.get()).ok()?;
    if v.get("code")?.as_i64()? != URL_ELICITATION_REQUIRED {
        return None;
    }
    if !capability_declared(caps, ("elicitation", Some("url"))) {
        let data = serde_json::json!({"requiredCapabilities": {"elicitation": {"url": {}}}});
        return Some(Err(crate::jsonrpc::error_object(
            crate::jsonrpc::code::MISSING_CLIENT_CAPABILITY,
            "Missing required client capability: elicitation.url",
            Some(&data),
        )));
    }
    let list = v.get("data")?.get("elicitations")?.as_array()?;
    let mut reqs = serde_json::Map::new();
    for e in list {
        let mut p = e.as_object()?.clone();
        p.remove("elicitationId");
        p.insert("mode".into(), Value::String("url".into()));
        reqs.insert(
            format!("url{}", reqs.len() + 1),
            serde_json::json!({"method": "elicitation/create", "params": p}),
        );
    }
    if reqs.is_empty() {
        return None;
    }
    Some(Ok(serde_json::json!({
        "resultType": "input_required",
        "inputRequests": reqs,
    })
    .to_string()))
}

/// A 2026 client's params without `inputResponses` (a retry after a translated `-32042`
/// carries no state of ours: it is the original call again). None: nothing to strip.
pub fn strip_input_responses(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    let f = Fields::parse(params?)?;
    if !f.has("inputResponses") || f.has("requestState") {
        return None;
    }
    let mut v: Value = serde_json::from_str(params?.get()).ok()?;
    v.as_object_mut()?.remove("inputResponses");
    serde_json::value::to_raw_value(&v).ok()
}

/// Notifications that exist only in 2025 and have no 2026 counterpart on a request's stream:
/// not relayed to 2026 clients.
pub fn is_legacy_only_notification(method: &str) -> bool {
    matches!(method, "notifications/elicitation/complete")
}

/// One upstream request waiting for the client's input: (input key, the upstream's request
/// id, method, params).
pub type InputWait = (String, Box<RawValue>, String, Option<Box<RawValue>>);

/// A call of a 2025 upstream parked while its 2026 client gathers input.
pub struct Parked<H> {
    pub handle: H,
    /// input key → the upstream's request id (raw JSON) awaiting an answer.
    pub waiting: Vec<InputWait>,
    pub round: u32,
    pub principal: String,
    pub method: String,
    pub digest: String,
    pub expires: Instant,
}

/// Parked calls by id, bounded.
pub struct ParkStore<H> {
    map: Mutex<HashMap<u64, Parked<H>>>,
    next: std::sync::atomic::AtomicU64,
    pub max: usize,
}

impl<H> ParkStore<H> {
    pub fn new(max: usize) -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            next: std::sync::atomic::AtomicU64::new(1),
            max,
        }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Parked<H>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
    /// Park under `id`; Err gives the call back when the store is full.
    pub fn put(&self, id: u64, p: Parked<H>) -> Result<(), Parked<H>> {
        let mut g = self.lock();
        if g.len() >= self.max {
            return Err(p);
        }
        g.insert(id, p);
        Ok(())
    }
    pub fn take(&self, id: u64) -> Option<Parked<H>> {
        self.lock().remove(&id)
    }
    /// Is a call parked under `id`?
    pub fn contains(&self, id: u64) -> bool {
        self.lock().contains_key(&id)
    }
    /// Remove and return every parked call whose time is up.
    pub fn take_expired(&self) -> Vec<Parked<H>> {
        let now = Instant::now();
        let mut g = self.lock();
        let ids: Vec<u64> = g
            .iter()
            .filter(|(_, p)| p.expires <= now)
            .map(|(k, _)| *k)
            .collect();
        ids.into_iter().filter_map(|k| g.remove(&k)).collect()
    }
    /// Remove and return every parked call (shutdown).
    pub fn take_all(&self) -> Vec<Parked<H>> {
        self.lock().drain().map(|(_, p)| p).collect()
    }
    pub fn len(&self) -> usize {
        self.lock().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    #[test]
    fn declaring_any_input_capability() {
        assert!(!declares_any_input(None));
        assert!(!declares_any_input(Some(&raw("{}"))));
        assert!(!declares_any_input(Some(&raw(
            r#"{"experimental":{},"roots":null}"#
        ))));
        assert!(declares_any_input(Some(&raw(
            r#"{"roots":{"listChanged":true}}"#
        ))));
        assert!(declares_any_input(Some(&raw(r#"{"elicitation":{}}"#))));
        assert!(declares_any_input(Some(&raw(r#"{"sampling":{}}"#))));
    }

    #[test]
    fn capability_gate() {
        let caps = raw(r#"{"elicitation":{"form":{}},"sampling":{}}"#);
        let form = raw(r#"{"message":"m"}"#);
        let url = raw(r#"{"mode":"url","url":"https://x"}"#);
        let need = required_capability("elicitation/create", Some(&form)).unwrap();
        assert!(capability_declared(Some(&caps), need));
        let need = required_capability("elicitation/create", Some(&url)).unwrap();
        assert!(!capability_declared(Some(&caps), need));
        assert!(!capability_declared(
            Some(&caps),
            required_capability("roots/list", None).unwrap()
        ));
        assert!(capability_declared(
            Some(&caps),
            required_capability("sampling/createMessage", None).unwrap()
        ));
        // `{}` is form only; naming only `url` excludes form.
        let form_need = required_capability("elicitation/create", Some(&form)).unwrap();
        let url_need = required_capability("elicitation/create", Some(&url)).unwrap();
        let bare = raw(r#"{"elicitation":{}}"#);
        assert!(capability_declared(Some(&bare), form_need));
        assert!(!capability_declared(Some(&bare), url_need));
        let only_url = raw(r#"{"elicitation":{"url":{}}}"#);
        assert!(!capability_declared(Some(&only_url), form_need));
        assert!(capability_declared(Some(&only_url), url_need));
        let null = raw(r#"{"elicitation":null}"#);
        assert!(!capability_declared(Some(&null), form_need));
    }

    #[test]
    fn url_elicitation_maps_between_eras() {
        let legacy =
            raw(r#"{"mode":"url","message":"m","url":"https://x/a","elicitationId":"e-7"}"#);
        let modern = to_modern_input("elicitation/create", Some(&legacy)).unwrap();
        let v: Value = serde_json::from_str(modern.get()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"mode":"url","message":"m","url":"https://x/a"})
        );
        let back = to_legacy_input("elicitation/create", Some(&modern)).unwrap();
        let v: Value = serde_json::from_str(back.get()).unwrap();
        assert!(v["elicitationId"]
            .as_str()
            .is_some_and(|s| s.starts_with("mcpb-el-")));
        assert_eq!(v["url"], "https://x/a");
        // Another request gets another id.
        let again = to_legacy_input("elicitation/create", Some(&modern)).unwrap();
        assert_ne!(back.get(), again.get());
        // An id already present is kept; form mode and other methods are untouched.
        assert!(to_legacy_input("elicitation/create", Some(&legacy)).is_none());
        let form = raw(r#"{"mode":"form","message":"m","requestedSchema":{}}"#);
        assert!(to_modern_input("elicitation/create", Some(&form)).is_none());
        assert!(to_legacy_input("elicitation/create", Some(&form)).is_none());
        assert!(to_legacy_input("roots/list", None).is_none());
        // Junk does not panic.
        let junk = raw(r#"{"mode":"url","elicitationId":3}"#);
        assert!(to_legacy_input("elicitation/create", Some(&junk)).is_some());
        assert!(to_modern_input("elicitation/create", Some(&raw("[1]"))).is_none());
        assert!(is_legacy_only_notification(
            "notifications/elicitation/complete"
        ));
        assert!(!is_legacy_only_notification("notifications/progress"));
    }

    #[test]
    fn undeclared_requests_are_refused_naming_the_capability() {
        let v = |b: bytes::Bytes| serde_json::from_slice::<Value>(&b).unwrap();
        let url = raw(r#"{"mode":"url","message":"m","url":"https://x"}"#);
        let r = v(missing_capability_refusal(
            "\"s-1\"",
            "elicitation/create",
            Some(&url),
            "why",
        ));
        assert_eq!(r["id"], "s-1");
        assert_eq!(r["error"]["code"], -32021);
        assert_eq!(r["error"]["message"], "why");
        assert_eq!(
            r["error"]["data"]["requiredCapabilities"],
            serde_json::json!({"elicitation": {"url": {}}})
        );
        let r = v(missing_capability_refusal("7", "roots/list", None, "why"));
        assert_eq!(
            r["error"]["data"]["requiredCapabilities"],
            serde_json::json!({"roots": {}})
        );
        // A method that needs no capability names none.
        let r = v(missing_capability_refusal("7", "ping", None, "why"));
        assert!(r["error"].get("data").is_none(), "{r}");
    }

    #[test]
    fn url_required_error_becomes_input_required() {
        let err = raw(
            r#"{"code":-32042,"message":"auth","data":{"elicitations":[{"mode":"url","message":"m","url":"https://x/a","elicitationId":"e1"}]}}"#,
        );
        let caps = raw(r#"{"elicitation":{"url":{}}}"#);
        let r = url_required_for_modern(&err, Some(&caps)).unwrap().unwrap();
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"resultType":"input_required","inputRequests":{"url1":{
                "method":"elicitation/create",
                "params":{"mode":"url","message":"m","url":"https://x/a"}}}})
        );
        let form = raw(r#"{"elicitation":{}}"#);
        let e = url_required_for_modern(&err, Some(&form))
            .unwrap()
            .unwrap_err();
        let v: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["code"], -32021);
        assert_eq!(
            v["data"]["requiredCapabilities"]["elicitation"]["url"],
            serde_json::json!({})
        );
        assert!(
            url_required_for_modern(&raw(r#"{"code":-32603,"message":"x"}"#), Some(&caps))
                .is_none()
        );
        let empty = raw(r#"{"code":-32042,"message":"x","data":{"elicitations":[]}}"#);
        assert!(url_required_for_modern(&empty, Some(&caps)).is_none());
        assert!(url_required_for_modern(&raw("7"), Some(&caps)).is_none());

        let p = raw(r#"{"name":"t","inputResponses":{"url1":{"action":"accept"}}}"#);
        let s = strip_input_responses(Some(&p)).unwrap();
        assert_eq!(s.get(), r#"{"name":"t"}"#);
        let ours = raw(r#"{"name":"t","inputResponses":{},"requestState":"s"}"#);
        assert!(strip_input_responses(Some(&ours)).is_none());
        assert!(strip_input_responses(Some(&raw(r#"{"name":"t"}"#))).is_none());
    }
}
