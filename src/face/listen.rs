//! `subscriptions/listen` from a 2026 client in front of a 2025 child: acknowledge first with
//! the honoured subset, map `resourceSubscriptions` to `resources/subscribe` (reference-counted
//! across listeners sharing the child), forward only the requested notification types tagged
//! with the listen request's id, and unsubscribe when the stream closes. On shutdown the stream
//! ends with the listen request's completion result.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::call::{Call, CallCtx, Outcome};
use crate::face::http::{App, PostCtx};
use crate::face::respond::{Body, GaugeGuard};
use crate::framing;
use crate::jsonrpc::{self, Envelope, Fields};
use crate::protocol;
use crate::upstream::child::{ChildUpstream, UpstreamEvent, UpstreamInfo};

/// Most resource URIs one listen request may subscribe to.
const MAX_URIS: usize = 100;

/// Reference counts of the child's resource subscriptions held for listeners.
#[derive(Default)]
pub struct ResourceSubs(Mutex<HashMap<String, usize>>);

impl ResourceSubs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Count a listener in; true when the child must be subscribed.
    fn acquire(&self, uri: &str) -> bool {
        let mut g = self.lock();
        let n = g.entry(uri.to_owned()).or_insert(0);
        *n += 1;
        *n == 1
    }
    /// Count a listener out; true when the child must be unsubscribed.
    fn release(&self, uri: &str) -> bool {
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

/// What the listener asked for and what the child can give.
#[derive(Debug, Default, PartialEq)]
pub struct Honoured {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
    pub uris: Vec<String>,
}

impl Honoured {
    /// Intersect a `SubscriptionFilter` with a 2025 child's capabilities.
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

    fn to_json(&self) -> Value {
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

    /// Should this child notification reach the listener?
    fn wants(&self, method: &str, params: Option<&RawValue>) -> bool {
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

async fn child_request(up: &ChildUpstream, method: &str, uri: &str) -> bool {
    let call = Call {
        method: method.to_owned(),
        params: Some(jsonrpc::raw(&json!({ "uri": uri }).to_string())),
        ctx: CallCtx::modern(),
    };
    let Ok(mut h) = up.call(call, Duration::from_secs(5)).await else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(10), &mut h.outcome).await,
        Ok(Ok(Outcome::Result(_)))
    )
}

/// Unsubscribes the child when the listener goes away.
struct Release {
    subs: Arc<ResourceSubs>,
    upstream: ChildUpstream,
    uris: Vec<String>,
}

impl Drop for Release {
    fn drop(&mut self) {
        let gone: Vec<String> = self
            .uris
            .iter()
            .filter(|u| self.subs.release(u))
            .cloned()
            .collect();
        if gone.is_empty() {
            return;
        }
        let up = self.upstream.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for u in gone {
                    child_request(&up, "resources/unsubscribe", &u).await;
                }
            });
        }
    }
}

/// Tag a notification with the listen request's id as `_meta.subscriptionId`.
fn tagged(method: &str, params: Option<&RawValue>, id: &RawValue) -> Bytes {
    let p = jsonrpc::rewrite_request_params(params, None, &[(protocol::META_SUBSCRIPTION_ID, id)]);
    jsonrpc::notification(method, p.as_deref().or(params.map(RawValue::get)))
}

pub async fn listen(app: &App, pc: &PostCtx<'_>, info: &UpstreamInfo) -> Response<Body> {
    let id = jsonrpc::raw(pc.env.id.map(RawValue::get).unwrap_or("null"));
    let caps: Value = info
        .initialize
        .as_ref()
        .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
        .and_then(|v| v.get("capabilities").cloned())
        .unwrap_or(Value::Null);
    let filter = pc
        .env
        .params
        .and_then(Fields::parse)
        .and_then(|f| f.get("notifications"));
    let mut honoured = Honoured::from(filter, &caps);
    app.metrics.rpc_request(&app.server, "subscriptions/listen");
    // Subscribe the child to the resources asked for (once per URI across listeners).
    let mut kept = Vec::new();
    for uri in std::mem::take(&mut honoured.uris) {
        if app.resource_subs.acquire(&uri)
            && !child_request(&app.upstream, "resources/subscribe", &uri).await
        {
            app.resource_subs.release(&uri);
            continue;
        }
        kept.push(uri);
    }
    honoured.uris = kept;
    let release = Release {
        subs: app.resource_subs.clone(),
        upstream: app.upstream.clone(),
        uris: honoured.uris.clone(),
    };
    let ack_params = json!({
        "notifications": honoured.to_json(),
        "_meta": { protocol::META_SUBSCRIPTION_ID: serde_json::from_str::<Value>(id.get()).unwrap_or(Value::Null) },
    })
    .to_string();
    let ack = jsonrpc::notification(
        "notifications/subscriptions/acknowledged",
        Some(&ack_params),
    );
    struct St {
        ack: Option<Bytes>,
        id: Box<RawValue>,
        honoured: Honoured,
        rx: broadcast::Receiver<UpstreamEvent>,
        stopping: CancellationToken,
        keepalive: Duration,
        done: bool,
        _release: Release,
        _g: GaugeGuard,
    }
    let st = St {
        ack: Some(ack),
        id,
        honoured,
        rx: app.upstream.subscribe(),
        stopping: app.stopping.clone(),
        keepalive: app.cfg.keepalive,
        done: false,
        _release: release,
        _g: GaugeGuard::new(app.metrics.sse_streams().clone()),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        if let Some(a) = st.ack.take() {
            return Some((Ok::<_, Infallible>(Frame::data(framing::sse_event(&a))), st));
        }
        loop {
            let ev = tokio::select! {
                ev = st.rx.recv() => ev,
                _ = tokio::time::sleep(st.keepalive) => {
                    return Some((Ok(Frame::data(Bytes::from_static(framing::SSE_KEEPALIVE))), st));
                }
                _ = st.stopping.cancelled() => {
                    // Graceful end: the listen request's completion result, then close.
                    st.done = true;
                    let body = json!({"resultType": "complete", "_meta": {
                        protocol::META_SUBSCRIPTION_ID: serde_json::from_str::<Value>(st.id.get()).unwrap_or(Value::Null)}}).to_string();
                    let f = jsonrpc::result(st.id.get(), &body);
                    return Some((Ok(Frame::data(framing::sse_event(&f))), st));
                }
            };
            match ev {
                Ok(UpstreamEvent::Notification(frame)) => {
                    let Ok(env) = Envelope::parse(&frame) else {
                        continue;
                    };
                    if st.honoured.wants(env.method(), env.params) {
                        let f = tagged(env.method(), env.params, &st.id);
                        return Some((Ok(Frame::data(framing::sse_event(&f))), st));
                    }
                }
                Ok(UpstreamEvent::Restarted) => {
                    // The child's subscriptions died with it; a client MAY re-listen.
                    debug!("child restarted; ending listen stream");
                    return None;
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    crate::face::respond::sse_response(BodyExt::boxed_unsync(StreamBody::new(stream)))
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
}
