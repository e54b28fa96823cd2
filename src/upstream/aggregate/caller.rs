//! What an endpoint decides per caller: what it may see and use (`[[policy]]`, with
//! [`super::confirm`] for what needs its approval), whose limits a call counts against, and a
//! 2025 caller's resource subscriptions on a 2026 member (kept by the endpoint: such a
//! member has no `resources/subscribe`). Apart from `mod.rs`, which owns merging and routing.

use serde_json::value::RawValue;
use serde_json::Value;

use super::{confirm, Aggregate};
use crate::call::{Call, Outcome};
use crate::error::BridgeError;
use crate::jsonrpc::{self, code};

impl Aggregate {
    /// May the caller of `ctx` see `name` (a published tool or prompt name, a URI)? Not
    /// counted: lists ask this for every item.
    pub(super) fn sees(&self, ctx: &crate::call::CallCtx, name: &str) -> bool {
        if self.policy.is_open() {
            return true;
        }
        let nobody = crate::config::policy::Identity::default();
        let who = ctx.who.as_deref().unwrap_or(&nobody);
        self.policy.decide(who, name).1.admits()
    }

    /// The policy's word on `call` (counted): Ok(None) go on, Ok(Some(subject)) go on once
    /// the caller approved ([`confirm`]); a denied call gets the answer an unknown name
    /// gets, so that a caller cannot tell what exists from what it may not use.
    pub(super) fn permit(&self, call: &Call) -> Result<Option<confirm::Subject>, BridgeError> {
        use crate::config::policy::Decision;
        if self.policy.is_open() {
            return Ok(None);
        }
        let Some((what, name)) = policy_subject(&call.method, call.params.as_deref()) else {
            return Ok(None);
        };
        let nobody = crate::config::policy::Identity::default();
        let who = call.ctx.who.as_deref().unwrap_or(&nobody);
        let (rule, d) = self.policy.decide(who, &name);
        self.metrics.policy_decision(&self.name, rule, d.as_str());
        match d {
            Decision::Allow => return Ok(None),
            Decision::Confirm => return Ok(Some((what, name))),
            Decision::Deny => {}
        }
        Err(BridgeError::Refused {
            code: code::INVALID_PARAMS,
            message: format!("unknown {what}: {name}"),
        })
    }

    /// `resources/subscribe`/`unsubscribe` of a 2025 caller on 2026 member `i` (which has no
    /// such methods): the URI joins or leaves the listen the endpoint holds on the member,
    /// counted per URI so that one caller's unsubscribe does not end another's; answered once
    /// the listen has the change (within `core::LISTEN_SETUP`). Its updates reach every
    /// caller of the endpoint, as a 2025 member's do.
    pub(super) async fn subscribe_modern(&self, i: usize, call: &Call) -> Outcome {
        let on = call.method == "resources/subscribe";
        let uri = policy_subject(&call.method, call.params.as_deref()).map(|(_, u)| u);
        let Some(uri) = uri else {
            return Outcome::Failed(BridgeError::Refused {
                code: code::INVALID_PARAMS,
                message: "params.uri is required".into(),
            });
        };
        let change = {
            let mut counts = self.sub_counts.lock().unwrap_or_else(|p| p.into_inner());
            let key = (i, uri.clone());
            let n = counts.get(&key).copied().unwrap_or(0);
            match (on, n) {
                (true, _) => {
                    counts.insert(key, n + 1);
                    n == 0
                }
                (false, 0) => false,
                (false, 1) => {
                    counts.remove(&key);
                    true
                }
                (false, _) => {
                    counts.insert(key, n - 1);
                    false
                }
            }
        };
        if change {
            if let Err(e) = self.subs[i].set(&uri, on, crate::core::LISTEN_SETUP).await {
                self.sub_counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&(i, uri));
                return Outcome::Failed(BridgeError::Refused {
                    code: code::INVALID_PARAMS,
                    message: e.to_string(),
                });
            }
        }
        Outcome::Result(jsonrpc::raw("{}"))
    }
}

/// Whose limits a call counts against (the identity), and the bounded label it is counted
/// under: a token's name, `jwt` for any JWT `sub`, `anonymous` without auth.
pub(super) fn caller_key(call: &Call) -> (String, &str) {
    match call.ctx.who.as_deref() {
        Some(w) => match (&w.token, &w.sub) {
            (Some(t), _) => (format!("token:{t}"), t.as_str()),
            (None, Some(s)) => (format!("sub:{s}"), "jwt"),
            (None, None) => ("anonymous".into(), "anonymous"),
        },
        None => ("anonymous".into(), "anonymous"),
    }
}

/// What a routed call is about for the policy: ("tool", published name), ("prompt", …),
/// ("resource", URI); None for what the policy does not look at.
pub(super) fn policy_subject(
    method: &str,
    params: Option<&RawValue>,
) -> Option<(&'static str, String)> {
    let v: Value = serde_json::from_str(params?.get()).ok()?;
    let s = |x: &Value| x.as_str().map(str::to_owned);
    match method {
        "tools/call" => Some(("tool", s(&v["name"])?)),
        "prompts/get" => Some(("prompt", s(&v["name"])?)),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            Some(("resource", s(&v["uri"])?))
        }
        "completion/complete" => match v["ref"]["type"].as_str()? {
            "ref/prompt" => Some(("prompt", s(&v["ref"]["name"])?)),
            "ref/resource" => Some(("resource", s(&v["ref"]["uri"])?)),
            _ => None,
        },
        _ => None,
    }
}
