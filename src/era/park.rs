//! Parking a 2026 caller's call on a 2025 upstream, written once for both faces: when the
//! upstream sends server requests on the call's stream, the ones the request declared a
//! capability for become the caller's `inputRequests` (keys `input1`, `input2`, …) and the
//! call is parked under a signed `requestState` (bound to the caller, method and params
//! digest, for one round, until its TTL); the others are refused to the upstream with
//! -32601, and when the store is full every request is refused (-32603) and the call goes on
//! without input. Faces only deliver what this returns: the body to answer, and the refusal
//! frames to hand the upstream (`Upstream::send_response`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::era::mrtr::{
    capability_declared, required_capability, to_modern_input, InputWait, ParkStore, Parked,
    StateSigner,
};
use crate::jsonrpc::{self, code};

/// A server request from the upstream: its id (raw JSON), method and params.
pub type Asked = (Box<RawValue>, String, Option<Box<RawValue>>);

/// Where and for whom a call is parked.
pub struct Site<'a> {
    pub signer: &'a StateSigner,
    /// The request's `clientCapabilities`.
    pub caps: Option<&'a RawValue>,
    pub principal: &'a str,
    pub method: &'a str,
    pub digest: &'a str,
    /// The round the caller's request answered (0 for a first request).
    pub round: u32,
    /// The parked-call id to reuse when resuming.
    pub park_id: Option<u64>,
    pub ttl: Duration,
}

/// What parking did.
pub struct Parking<H> {
    /// The `input_required` body for the caller, or the handle back when nothing was asked.
    pub answer: Result<String, H>,
    /// Error responses to hand the upstream, one per request that was not asked.
    pub refusals: Vec<Bytes>,
    /// How many of those were for a capability the request did not declare.
    pub undeclared: usize,
}

/// Park `handle` for the requests in `asked` (see the module comment).
pub fn park<H>(store: &ParkStore<H>, site: &Site<'_>, handle: H, asked: Vec<Asked>) -> Parking<H> {
    let mut refusals = Vec::new();
    let mut waiting: Vec<InputWait> = Vec::new();
    for (id, method, params) in asked {
        let declared = required_capability(&method, params.as_deref())
            .is_some_and(|need| capability_declared(site.caps, need));
        if declared {
            let key = format!("input{}", waiting.len() + 1);
            waiting.push((key, id, method, params));
        } else {
            let msg =
                format!("the client did not declare the capability {method} needs in this request");
            refusals.push(jsonrpc::error(
                Some(id.get()),
                code::METHOD_NOT_FOUND,
                &msg,
                None,
            ));
        }
    }
    let undeclared = refusals.len();
    if waiting.is_empty() {
        return Parking {
            answer: Err(handle),
            refusals,
            undeclared,
        };
    }
    let park_id = site.park_id.unwrap_or_else(|| store.next_id());
    let round = site.round + 1;
    let state = site.signer.sign(
        park_id,
        round,
        site.ttl,
        site.principal,
        site.method,
        site.digest,
    );
    let body = input_required_result(&waiting, &state);
    let parked = Parked {
        handle,
        waiting,
        round,
        principal: site.principal.to_owned(),
        method: site.method.to_owned(),
        digest: site.digest.to_owned(),
        expires: Instant::now() + site.ttl,
    };
    let answer = match store.put(park_id, parked) {
        Ok(()) => Ok(body),
        Err(back) => {
            for (_, id, method, _) in &back.waiting {
                let msg = format!("mcp-bridge cannot hold more calls waiting for input ({method})");
                refusals.push(jsonrpc::error(
                    Some(id.get()),
                    code::INTERNAL_ERROR,
                    &msg,
                    None,
                ));
            }
            Err(back.handle)
        }
    };
    Parking {
        answer,
        refusals,
        undeclared,
    }
}

/// `{"resultType":"input_required","inputRequests":{...},"requestState":"..."}`
pub fn input_required_result(waiting: &[InputWait], state: &str) -> String {
    let mut reqs = serde_json::Map::new();
    for (key, _, method, params) in waiting {
        // 2025-only fields (URL elicitation's `elicitationId`) have no 2026 counterpart.
        let modern = to_modern_input(method, params.as_deref());
        let p: serde_json::Value = modern
            .as_deref()
            .or(params.as_deref())
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| serde_json::json!({}));
        reqs.insert(
            key.clone(),
            serde_json::json!({"method": method, "params": p}),
        );
    }
    serde_json::json!({
        "resultType": "input_required",
        "inputRequests": reqs,
        "requestState": state,
    })
    .to_string()
}
