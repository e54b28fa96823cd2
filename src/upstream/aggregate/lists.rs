//! The endpoint's lists: `tools/list`, `prompts/list`, `resources/list` and
//! `resources/templates/list` answered from every member's pages.
//!
//! One merged page is one page of every member still to walk, asked concurrently and joined
//! in `servers` order; the endpoint's cursor ([`super::cursor`]) holds which members have
//! more and each one's own cursor. Each member's page is asked through `crate::core::start`
//! with the caller's context, so it comes back in the caller's era exactly as that member
//! alone would answer it; this module only renames (tools and prompts), learns who owns
//! what (URIs, templates, bare names) and joins. A member that is down, or does not answer
//! within [`LIST_TIMEOUT`], is left out of the page (warned): the others are not held back.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Map, Value};

use super::cursor::Pending;
use super::names::Kind;
use super::{Aggregate, Member};
use crate::call::{Call, CallCtx, Outcome};
use crate::error::BridgeError;
use crate::jsonrpc::{self, code};
use crate::protocol::{self, Era};

/// How long one member's page may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pages of one member walked when the endpoint learns its names itself (a call to a bare
/// name nobody listed yet).
const LEARN_PAGES: usize = 64;

/// The result key and the table of a list method.
pub fn kind_of(method: &str) -> Option<(&'static str, Kind)> {
    Some(match method {
        "tools/list" => ("tools", Kind::Tool),
        "prompts/list" => ("prompts", Kind::Prompt),
        "resources/list" => ("resources", Kind::Resource),
        "resources/templates/list" => ("resourceTemplates", Kind::Template),
        _ => return None,
    })
}

/// The field of an item that names it.
fn item_key(kind: Kind) -> &'static str {
    match kind {
        Kind::Tool | Kind::Prompt => "name",
        Kind::Resource => "uri",
        Kind::Template => "uriTemplate",
    }
}

/// One member's page as the endpoint reads it.
struct Page {
    items: Vec<Value>,
    next: Option<String>,
    ttl_ms: Option<u64>,
    private: bool,
}

/// `params` with `cursor` set to `cursor` (or removed), as a raw value.
fn with_cursor(params: Option<&serde_json::value::RawValue>, cursor: &str) -> Option<String> {
    let mut p: Map<String, Value> = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    if cursor.is_empty() {
        p.remove("cursor");
    } else {
        p.insert("cursor".into(), Value::String(cursor.to_owned()));
    }
    (!p.is_empty()).then(|| Value::Object(p).to_string())
}

/// Why a member's page is missing.
enum Failure {
    /// The member is not there (down, unreachable).
    Gone(String),
    /// It answered, but not with a page.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Gone(s) | Failure::Other(s) => f.write_str(s),
        }
    }
}

/// One page of member `m` for `call` at its own `cursor` ("" = the first).
async fn page(
    m: &Member,
    call: &Call,
    key: &str,
    cursor: &str,
    wait: Duration,
) -> Result<Page, Failure> {
    let gone = |e: BridgeError| {
        if super::member_gone(&e) {
            Failure::Gone(e.to_string())
        } else {
            Failure::Other(e.to_string())
        }
    };
    let other = Failure::Other;
    let params = with_cursor(call.params.as_deref(), cursor);
    let c = Call {
        method: call.method.clone(),
        params: params.map(|p| jsonrpc::raw(&p)),
        ctx: call.ctx.clone(),
    };
    let h = crate::core::start(&m.up, c, m.wait(wait))
        .await
        .map_err(gone)?;
    let o = tokio::time::timeout(LIST_TIMEOUT, h.outcome)
        .await
        .map_err(|_| Failure::Gone(format!("no answer within {LIST_TIMEOUT:?}")))?
        .map_err(|_| other("the call ended without an answer".to_owned()))?;
    let raw = match o {
        Outcome::Result(r) => r,
        Outcome::Error(e) => return Err(other(format!("error {}", e.get()))),
        Outcome::Failed(e) => return Err(gone(e)),
    };
    let mut v: Value = serde_json::from_str(raw.get()).map_err(|e| other(e.to_string()))?;
    let items = match v.get_mut(key).map(Value::take) {
        Some(Value::Array(a)) => a,
        Some(Value::Null) | None => Vec::new(),
        Some(_) => return Err(other(format!("`{key}` is not an array"))),
    };
    Ok(Page {
        items,
        next: v["nextCursor"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
        ttl_ms: v["ttlMs"].as_u64(),
        private: v["cacheScope"].as_str() != Some("public"),
    })
}

/// The caller's `cursor`, if it sent one.
fn cursor_of(call: &Call) -> Option<String> {
    let v: Value = serde_json::from_str(call.params.as_deref()?.get()).ok()?;
    v.get("cursor")?.as_str().map(str::to_owned)
}

/// An item of member `i` as the caller sees it; None when another member keeps its name.
fn publish(agg: &Aggregate, kind: Kind, i: usize, mut item: Value) -> Option<Value> {
    let field = item_key(kind);
    let key = item.get(field)?.as_str()?.to_owned();
    let published = match kind {
        Kind::Tool | Kind::Prompt => agg.naming.publish(&agg.names[i], &key),
        Kind::Resource | Kind::Template => key,
    };
    // Learned under the name callers use (for bare names, who owns it; under a policy,
    // which names exist, so that an unknown and a denied name get one answer).
    if !agg.routes_mut().learn(kind, &published, i, &agg.names) {
        return None;
    }
    item[field] = Value::String(published);
    Some(item)
}

/// A merged page of the list `call` asks for.
pub async fn merged(agg: Arc<Aggregate>, call: Call, wait: Duration) -> Outcome {
    let Some((key, kind)) = kind_of(&call.method) else {
        return Outcome::Failed(BridgeError::Refused {
            code: code::METHOD_NOT_FOUND,
            message: format!("method not found: {}", call.method),
        });
    };
    let pending: Pending = match cursor_of(&call) {
        None => (0..agg.members.len()).map(|i| (i, String::new())).collect(),
        Some(c) => match agg.signer.open(&c) {
            Some(p) if p.iter().all(|(i, _)| *i < agg.members.len()) => p,
            _ => {
                return Outcome::Failed(BridgeError::Refused {
                    code: code::INVALID_PARAMS,
                    message: "invalid cursor".into(),
                })
            }
        },
    };
    let asks = pending.iter().map(|(i, cur)| {
        let m = &agg.members[*i];
        let call = &call;
        async move {
            if m.is_down() && !m.up.is_ready() {
                return Err(Failure::Gone("it is down".to_owned()));
            }
            page(m, call, key, cur, wait).await
        }
    });
    let pages = join_all(asks).await;
    let mut items = Vec::new();
    let mut next: Pending = Vec::new();
    let (mut ttl, mut private) = (None::<u64>, false);
    for ((i, _), p) in pending.iter().zip(pages) {
        let p = match p {
            Ok(p) => {
                agg.note(*i, true);
                agg.count(*i, &call.method, "result");
                p
            }
            Err(Failure::Gone(e)) => {
                agg.note(*i, false);
                agg.count(*i, &call.method, "failed");
                tracing::warn!(
                    endpoint = %agg.name, member = %agg.names[*i], method = %call.method,
                    "a member's list is left out: {e}"
                );
                continue;
            }
            Err(Failure::Other(e)) => {
                agg.count(*i, &call.method, "error");
                tracing::warn!(
                    endpoint = %agg.name, member = %agg.names[*i], method = %call.method,
                    "a member's list is left out: {e}"
                );
                continue;
            }
        };
        let field = item_key(kind);
        items.extend(
            p.items
                .into_iter()
                .filter_map(|it| publish(&agg, kind, *i, it))
                // What the caller may not use, it does not see.
                .filter(|it| it[field].as_str().is_some_and(|n| agg.sees(&call.ctx, n))),
        );
        if let Some(n) = p.next {
            next.push((*i, n));
        }
        ttl = Some(ttl.map_or(p.ttl_ms.unwrap_or(0), |t| t.min(p.ttl_ms.unwrap_or(0))));
        private |= p.private;
    }
    let mut out = Map::new();
    out.insert(key.into(), Value::Array(items));
    if !next.is_empty() {
        match agg.signer.sign(&next) {
            Some(c) => {
                out.insert("nextCursor".into(), Value::String(c));
            }
            None => tracing::warn!(
                endpoint = %agg.name,
                "the members' cursors do not fit the endpoint's cursor: the list ends here"
            ),
        }
    }
    if call.ctx.client_era == Era::Modern {
        out.insert("resultType".into(), Value::String("complete".into()));
        out.insert("ttlMs".into(), Value::from(ttl.unwrap_or(0)));
        let scope = if private || ttl.is_none() {
            "private"
        } else {
            "public"
        };
        out.insert("cacheScope".into(), Value::String(scope.into()));
    }
    Outcome::Result(jsonrpc::raw(&Value::Object(out).to_string()))
}

/// Walk every member's pages of `kind`'s list (as `caller` would), so that the routes know
/// who owns what. Bounded by [`LEARN_PAGES`] per member.
pub async fn learn(agg: &Aggregate, kind: Kind, caller: &Call, wait: Duration) {
    let method = match kind {
        Kind::Tool => "tools/list",
        Kind::Prompt => "prompts/list",
        Kind::Resource => "resources/list",
        Kind::Template => "resources/templates/list",
    };
    let Some((key, _)) = kind_of(method) else {
        return;
    };
    // The caller's envelope (`_meta`: a 2026 member needs it) and nothing else of its call.
    let meta = caller
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|v| v.get("_meta").cloned());
    let call = Call {
        method: method.into(),
        params: meta.map(|m| jsonrpc::raw(&serde_json::json!({ "_meta": m }).to_string())),
        ctx: caller.ctx.clone(),
    };
    let walks = agg.members.iter().enumerate().map(|(i, m)| {
        let call = &call;
        async move {
            let mut got = Vec::new();
            let mut cur = String::new();
            for _ in 0..LEARN_PAGES {
                if m.is_down() {
                    break;
                }
                let Ok(p) = page(m, call, key, &cur, wait).await else {
                    break;
                };
                got.extend(p.items);
                match p.next {
                    Some(n) => cur = n,
                    None => break,
                }
            }
            (i, got)
        }
    });
    for (i, items) in join_all(walks).await {
        for it in items {
            let _ = publish(agg, kind, i, it);
        }
    }
}

/// The `_meta` a 2026 member needs on the endpoint's own calls.
fn own_params() -> String {
    format!(
        r#"{{"_meta":{{"{}":"{}","{}":{{}}}}}}"#,
        protocol::META_PROTOCOL_VERSION,
        protocol::MODERN,
        protocol::META_CLIENT_CAPABILITIES
    )
}

/// With bare names: a tool or prompt name two members list is an error naming both.
pub async fn collisions(agg: &Aggregate, wait: Duration) -> Result<(), String> {
    for (method, what) in [("tools/list", "tool"), ("prompts/list", "prompt")] {
        let Some((key, _)) = kind_of(method) else {
            continue;
        };
        let call = Call {
            method: method.into(),
            params: Some(jsonrpc::raw(&own_params())),
            ctx: CallCtx::modern(),
        };
        let mut owner: std::collections::HashMap<String, usize> = Default::default();
        for (i, m) in agg.members.iter().enumerate() {
            if !m.up.is_ready() && m.up.info(wait).await.is_err() {
                continue;
            }
            let caps =
                m.up.info(wait)
                    .await
                    .map(|i| i.capabilities())
                    .unwrap_or_default();
            if caps.get(key).is_none() {
                continue;
            }
            let mut cur = String::new();
            for _ in 0..LEARN_PAGES {
                let Ok(p) = page(m, &call, key, &cur, wait).await else {
                    break;
                };
                for it in &p.items {
                    let Some(n) = it.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    if let Some(&j) = owner.get(n) {
                        if j != i {
                            return Err(format!(
                                "endpoint {:?} has prefix = \"never\", but {what} {n:?} is \
                                 offered by both {:?} and {:?}",
                                agg.name, agg.names[j], agg.names[i]
                            ));
                        }
                    }
                    owner.insert(n.to_owned(), i);
                }
                match p.next {
                    Some(n) => cur = n,
                    None => break,
                }
            }
        }
    }
    Ok(())
}
