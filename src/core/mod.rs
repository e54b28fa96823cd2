//! The core: the rules that map one protocol era onto the other for one call, written once
//! for both faces (`serve`'s HTTP face and `connect`'s stdio face) and every upstream (a
//! child, a pool, a remote). A face decodes its transport's frames into a [`Call`] and starts
//! it with [`start`]; the rules below are applied here, between the face and the
//! [`Upstream`](crate::call::Upstream) seam, so that no face and no upstream keeps a copy.
//! On the way in, [`start`] also stamps a 2025 caller's envelope on its calls to a 2026
//! upstream; on the way back, it has the call's outcome translated into the caller's era
//! ([`result_for`], through the handle's `OutcomeRx`). An upstream hands over what its peer
//! said and never reads the caller's era.
//!
//! Each rule was once written in more than one place, and the copies disagreed; the matrix
//! test (`tests/eras/core_matrix.rs`) runs each through {serve, connect} × {2025 child, 2026
//! child, pool, 2025 remote, 2026 remote} × {2025 caller, 2026 caller}. The rule kept, and
//! why:
//!
//! 1. **The log floor of a 2026 caller on a 2025 upstream** ([`start`]). A 2025 server logs
//!    per session; a 2026 request names its own level in `_meta` (`logLevel`), and a request
//!    without one must get no `notifications/message` at all. So the upstream is lowered to
//!    the request's level (only ever lowered: it serves other callers too) and the call's
//!    event queue drops messages below the request's level (all of them without a level).
//!    The filter sits on the call's queue ([`crate::call::EventReceiver`]), so it holds for
//!    whatever carries the message: a child's stdout, a remote's POST stream.
//! 2. **2026-only `_meta` keys never reach a 2025 upstream** ([`strip_modern_meta`], in
//!    [`start`]): the protocol version, client capabilities and info and the log level are the
//!    2026 envelope, which a 2025 server may refuse (the Python SDK does). The bridge has read
//!    what it needs from them before the call starts.
//! 3. **A `requestState` toward a 2025 upstream** ([`retry_state`]): only the bridge can have
//!    minted it, so a string of ours resumes the parked call, and anything else — a string
//!    the bridge never signed, or not a string at all — is `-32602`: the caller is told its
//!    retry is wrong rather than have it run as a new call.
//! 4. **A listen the bridge answers for a 2025 upstream** waits (bounded) for the upstream's
//!    event stream before it is acknowledged ([`listen_ready`]): what the upstream sends first
//!    must not be lost. A child's stdout is always ready; a remote's GET stream opens later.
//! 5. **A 2025 upstream's request with nobody to ask** ([`unroutable_answer`]): `roots/list`
//!    is answered with no roots (the honest answer: nobody shares any through this bridge, and
//!    a server asks it right after `initialize`), every other request with `-32603` naming
//!    why it could not be delivered. (A host that is there but reads too slowly is not
//!    "nobody": its requests are refused with `-32603`, `roots/list` included.)
//! 6. **A 2025 caller's `InitializeResult`** ([`initialize_result`]) is built by the bridge
//!    from what the upstream said (its `InitializeResult` or its `server/discover` result) at
//!    the version the bridge negotiated with the caller, whatever the upstream: the bridge
//!    owns the caller's session, and a caller of one bridge sees one shape.
//! 7. **A call the bridge stops for its own shutdown** ([`stopped_answer`]) gets one answer,
//!    `-32000` "the bridge is shutting down", whatever the caller's era and whatever the
//!    face: the caller did not cancel it, so the 2025 rule "a cancelled request gets no
//!    response" does not apply. A call its caller cancelled gets none. (Both faces once let a
//!    2025 call, and connect every call, end without a word at shutdown.)
//! 8. **A 2025 caller's session-wide requests on a 2026 upstream** ([`kept_by_bridge`]):
//!    a 2026 server has no session to set a level or subscriptions on, so the bridge keeps
//!    them — `logging/setLevel` (its level then travels as `_meta` logLevel on the caller's
//!    later requests) and `resources/subscribe`/`unsubscribe` (the URIs of the listen the
//!    bridge holds for the caller, answered once that listen has the change, within
//!    [`LISTEN_SETUP`]). Serve and connect each had a copy, with different bounds.
//! 9. **Tasks belong to their caller and their process** ([`tasks`], in [`start`]): a task an
//!    upstream creates is handed out under an id the bridge mints, with its owner and the
//!    process that runs it; `tasks/*` go to that process under its own id, another owner's
//!    task is unknown (`-32602`), and every task id on the way back is the bridge's. An
//!    upstream offers its book ([`crate::call::Upstream::task_book`]); the rule is applied
//!    here only. (Before it, a 2026 caller's face refuses what the tasks extension's server
//!    would: [`tasks::modern_refusal`].)

pub mod caller;
pub mod held;
pub mod inbox;
pub mod meter;
pub mod tasks;

use std::time::Duration;

use bytes::BytesMut;
use serde_json::value::RawValue;

use crate::call::{Call, CallHandle, SharedUpstream, UpstreamInfo};
use crate::era::mrtr::StateSigner;
use crate::error::BridgeError;
use crate::jsonrpc::{self, Fields};
use crate::protocol::{self, Era};

/// The one host's `initialize` params (client info, capabilities, requested version), held
/// for an upstream that opens a 2025 session of its own for that host (`connect` in front of
/// a 2025 remote). The face keeps it as the caller's state and sets it before it asks the
/// upstream what it is ([`crate::call::Upstream::info`]); the upstream is built holding it and
/// reads it when it opens its session, so the seam carries no host-only method.
#[derive(Default)]
pub struct Hello(std::sync::Mutex<Option<Box<RawValue>>>);

impl Hello {
    /// Keep the host's `initialize` params (a session that is open already stays).
    pub fn set(&self, params: Option<&RawValue>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = params.map(ToOwned::to_owned);
    }
    /// What the host said, if it said anything yet.
    pub fn get(&self) -> Option<Box<RawValue>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Start `call` on `up` (waiting up to `wait` for it to be ready), with the era rules applied.
pub async fn start(
    up: &SharedUpstream,
    mut call: Call,
    wait: Duration,
) -> Result<CallHandle, BridgeError> {
    // Rule 9: a tasks method goes to the process that runs its task, under its id there.
    let book = up.task_book();
    let mut target = up.clone();
    let mut routed = None;
    if let Some(b) = &book {
        if let Some(r) = b.route(&call.method, call.params.as_deref(), &call.ctx.owner)? {
            call.params = Some(r.params);
            target = r.on;
            routed = Some(r.ids);
        }
    }
    let up = &target;
    // The era of the peer that answers this call (an endpoint: its member's).
    let upstream_era = up
        .call_era(
            &call.method,
            call.params.as_deref(),
            call.ctx.client_era,
            wait,
        )
        .await;
    let modern_on_legacy = call.ctx.client_era == Era::Modern && upstream_era == Some(Era::Legacy);
    let mut floor = None;
    if modern_on_legacy {
        // Rule 1: the upstream logs at least at the request's level; the queue filters.
        floor = Some(
            call.ctx
                .log_level
                .and_then(protocol::log_level)
                .map_or(usize::MAX, |(_, r)| r),
        );
        if let Some(level) = call.ctx.log_level {
            up.ensure_log_level(level).await;
        }
        // Rule 2: the 2026 envelope stays on this side.
        if let Some(p) = call.params.as_deref().and_then(strip_modern_meta) {
            call.params = Some(jsonrpc::raw(&p));
        }
    }
    // A 2025 caller's envelope (what it said at `initialize`, as the 2026 `_meta` keys, and
    // its log level) on each of its calls to a 2026 upstream, stamped here, once for every
    // upstream (`core::caller::Caller::call_meta` builds it).
    if call.ctx.client_era == Era::Legacy
        && upstream_era == Some(Era::Modern)
        && !call.ctx.stamp_meta.is_empty()
    {
        let add: Vec<(&str, &RawValue)> = call
            .ctx
            .stamp_meta
            .iter()
            .map(|(k, v)| (k.as_str(), &**v))
            .collect();
        if let Some(p) = jsonrpc::rewrite_request_params(call.params.as_deref(), None, &add) {
            call.params = Some(jsonrpc::raw(&p));
        }
    }
    // The result as the caller's era reads it, translated here on its way back (the
    // upstream hands over what its peer said): when the eras differ, and 2026 to 2026 for a
    // result that does not name its `resultType`.
    let translate = upstream_era
        .filter(|e| *e != call.ctx.client_era || *e == Era::Modern)
        .map(|ue| (ue, call.ctx.client_era, call.method.clone()));
    let tasked = book.filter(|_| tasks::may_name_tasks(&call));
    let (method, owner) = (call.method.clone(), call.ctx.owner.clone());
    let mut h = up.call(call, wait).await?;
    if let Some(rank) = floor {
        h.events.drop_logs_below(rank);
    }
    if let Some(b) = tasked {
        // Rule 9: the upstream's task ids become the bridge's on the way back (before the
        // era translation below, which reads the result as the caller will).
        let on = h.via().cloned().unwrap_or_else(|| up.clone());
        let (b2, owner2, on2) = (b.clone(), owner.clone(), on.clone());
        h.events
            .map_with(Box::new(move |ev| b2.event(ev, &owner2, &on2)));
        h.outcome.translate_with(Box::new(move |o| {
            b.outcome(&method, &owner, &on, routed.as_ref(), o)
        }));
    }
    if let Some((ue, caller, method)) = translate {
        h.outcome.translate_with(Box::new(move |o| match o {
            crate::call::Outcome::Result(r) => result_for(&method, Some(ue), caller, &r),
            crate::call::Outcome::Error(e) if ue == Era::Legacy && caller == Era::Modern => {
                match protocol::legacy_error_to_modern(&e) {
                    Some(t) => crate::call::Outcome::Error(jsonrpc::raw(&t)),
                    None => crate::call::Outcome::Error(e),
                }
            }
            o => o,
        }));
    }
    Ok(h)
}

/// Params of a 2026 request without the 2026-only `_meta` keys (protocol version, client
/// capabilities/info, log level), for a 2025 upstream. None when there is nothing to remove.
pub fn strip_modern_meta(params: &RawValue) -> Option<String> {
    const KEYS: [&str; 4] = [
        protocol::META_PROTOCOL_VERSION,
        protocol::META_CLIENT_CAPABILITIES,
        protocol::META_CLIENT_INFO,
        protocol::META_LOG_LEVEL,
    ];
    // Most params carry no 2026 envelope: skip the parse.
    memchr::memmem::find(params.get().as_bytes(), b"io.modelcontextprotocol/")?;
    let p = Fields::parse(params)?;
    let meta = Fields::parse(p.get("_meta")?)?;
    if !meta.0.iter().any(|(k, _)| KEYS.contains(&k.as_ref())) {
        return None;
    }
    let kept: Vec<_> = meta
        .0
        .iter()
        .filter(|(k, _)| !KEYS.contains(&k.as_ref()))
        .cloned()
        .collect();
    let mut fields: Vec<_> = p.0.iter().filter(|(k, _)| k != "_meta").cloned().collect();
    let mut buf = BytesMut::new();
    let new_meta;
    if !kept.is_empty() {
        jsonrpc::write_object(&mut buf, &kept);
        new_meta = jsonrpc::raw(std::str::from_utf8(&buf).ok()?);
        fields.push((std::borrow::Cow::Borrowed("_meta"), &*new_meta));
    }
    let mut out = BytesMut::new();
    jsonrpc::write_object(&mut out, &fields);
    String::from_utf8(out.to_vec()).ok()
}

/// What a 2026 caller's `requestState` means toward a 2025 upstream (rule 3).
#[derive(Debug, PartialEq)]
pub enum RetryState {
    /// No `requestState`: a new call.
    Fresh,
    /// A state the bridge signed: resume the call it parked.
    Ours(String),
    /// Refused with `-32602` and this message.
    Refused(&'static str),
}

/// Classify the `requestState` of a request's params (rule 3).
pub fn retry_state(params: Option<&RawValue>, signer: &StateSigner) -> RetryState {
    let Some(raw) = params
        .and_then(Fields::parse)
        .and_then(|f| f.get("requestState").map(ToOwned::to_owned))
    else {
        return RetryState::Fresh;
    };
    match serde_json::from_str::<String>(raw.get()) {
        Err(_) => RetryState::Refused("requestState must be a string"),
        Ok(s) if signer.is_ours(&s) => RetryState::Ours(s),
        Ok(_) => RetryState::Refused("requestState is unknown to this server"),
    }
}

/// How long a listen the bridge answers waits for its upstream's event stream (rule 4).
pub const LISTEN_SETUP: Duration = Duration::from_secs(10);

/// Wait (bounded) until `up`'s traffic that belongs to no call can reach its subscribers,
/// before a listen is acknowledged (rule 4). False when it could not in time (the listen is
/// acknowledged anyway, and may stay silent until the stream opens).
pub async fn listen_ready(up: &SharedUpstream) -> bool {
    let ready = up.events_ready(LISTEN_SETUP).await;
    if !ready {
        tracing::debug!(
            server = up.name(),
            "the upstream's event stream is not open: a listen may stay silent"
        );
    }
    ready
}

/// The answer a 2025 upstream gets for its request `method` (id `id`) that nobody can be
/// asked (rule 5), with `why` it could not be delivered.
pub fn unroutable_answer(id: &str, method: &str, why: &str) -> bytes::Bytes {
    match unroutable_reply(method, why) {
        Ok(result) => jsonrpc::result(id, result.get()),
        Err(error) => jsonrpc::error_raw(Some(id), error.get()),
    }
}

/// [`unroutable_answer`]'s result (Ok) or error object (Err), for an upstream that sends
/// them apart (a remote's POSTed response).
pub fn unroutable_reply(method: &str, why: &str) -> Result<Box<RawValue>, Box<RawValue>> {
    if method == "roots/list" {
        return Ok(jsonrpc::raw("{\"roots\":[]}"));
    }
    Err(jsonrpc::raw(&jsonrpc::error_object(
        jsonrpc::code::INTERNAL_ERROR,
        &format!("mcp-bridge cannot deliver {method} to a client: {why}"),
        None,
    )))
}

/// Rule 7: what a call stopped early is answered with — by the bridge's shutdown: the one
/// answer it is owed; by its caller's cancellation: nothing. Also the cancel reason the
/// upstream is told.
pub fn stopped_answer(by_shutdown: bool) -> (Option<crate::call::Outcome>, &'static str) {
    if by_shutdown {
        let o = crate::call::Outcome::Failed(BridgeError::ShuttingDown);
        (Some(o), "shutdown")
    } else {
        (None, "client cancelled")
    }
}

/// Rule 8: the answer to a 2025 caller's `logging/setLevel`, `resources/subscribe` or
/// `resources/unsubscribe` on a 2026 upstream, kept by the bridge (the level is kept by the
/// face as it reads the request, `core::caller::Caller::set_log_level`; `subs` is the
/// caller's subscription set, the filter of the listen held for it). None for every other
/// request, and for a 2025 upstream (which answers them itself).
pub async fn kept_by_bridge(
    upstream_era: Option<Era>,
    method: &str,
    params: Option<&RawValue>,
    subs: &crate::core::held::Subscriptions,
) -> Option<crate::call::Outcome> {
    use crate::call::Outcome;
    let on = match method {
        "logging/setLevel" => None,
        "resources/subscribe" => Some(true),
        "resources/unsubscribe" => Some(false),
        _ => return None,
    };
    if upstream_era != Some(Era::Modern) {
        return None;
    }
    let done = Some(Outcome::Result(jsonrpc::raw("{}")));
    let Some(on) = on else { return done };
    let refused = |message: String| {
        Some(Outcome::Failed(BridgeError::Refused {
            code: jsonrpc::code::INVALID_PARAMS,
            message,
        }))
    };
    let uri = params
        .and_then(Fields::parse)
        .and_then(|f| f.get("uri").map(ToOwned::to_owned))
        .and_then(|u| serde_json::from_str::<String>(u.get()).ok());
    let Some(uri) = uri else {
        return refused("params.uri is required".into());
    };
    match subs.set(&uri, on, LISTEN_SETUP).await {
        Ok(_) => done,
        Err(e) => refused(e.to_string()),
    }
}

/// A result as the caller's era reads it, the one translation every upstream applies (a
/// child's route, a remote's exchange): a 2025 upstream's result gains `resultType` (and,
/// where the method needs them, `ttlMs`/`cacheScope`) for a 2026 caller; a 2026 upstream's
/// complete result loses them for a 2025 caller, and an `input_required` one is left as it
/// is (the face turns it into requests to the 2025 caller, `era::rounds`); a 2026 upstream's
/// result without `resultType` reaches a 2026 caller as `"complete"`.
pub fn result_for(
    method: &str,
    upstream_era: Option<Era>,
    caller_era: Era,
    r: &RawValue,
) -> crate::call::Outcome {
    let translated = match (upstream_era, caller_era) {
        (Some(Era::Legacy), Era::Modern) => protocol::legacy_result_to_modern(method, r),
        (Some(Era::Modern), Era::Legacy) if !protocol::is_input_required(r) => {
            protocol::modern_result_to_legacy(r)
        }
        (Some(Era::Modern), Era::Modern) => protocol::modern_result_complete(r),
        _ => None,
    };
    crate::call::Outcome::Result(match translated {
        Some(t) => jsonrpc::raw(&t),
        None => r.to_owned(),
    })
}

/// A 2026 caller's `server/discover` on a 2025 upstream, answered by the bridge from what the
/// upstream said at `initialize` (`era::lifecycle`); None for a 2026 upstream, which answers
/// it itself. Both faces answer it here, before any call starts.
pub fn discover_for(info: &UpstreamInfo) -> Option<String> {
    (info.era == Era::Legacy)
        .then(|| crate::era::lifecycle::discover_from_initialize(info.initialize.as_deref()))
}

/// The `InitializeResult` a 2025 caller gets at `version` (rule 6): built from the upstream's
/// own `InitializeResult` (2025) or its `server/discover` result (2026).
pub fn initialize_result(info: &UpstreamInfo, version: &str) -> String {
    let src = info.initialize.as_deref().or(info.discover.as_deref());
    crate::era::lifecycle::initialize_from(src, version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(o: crate::call::Outcome) -> serde_json::Value {
        match o {
            crate::call::Outcome::Result(r) => serde_json::from_str(r.get()).unwrap(),
            _ => panic!("a result"),
        }
    }

    #[test]
    fn results_are_translated_for_the_callers_era_once() {
        let legacy = jsonrpc::raw(r#"{"content":[]}"#);
        let up = text(result_for(
            "tools/call",
            Some(Era::Legacy),
            Era::Modern,
            &legacy,
        ));
        assert_eq!(up["resultType"], "complete");
        let same = text(result_for(
            "tools/call",
            Some(Era::Legacy),
            Era::Legacy,
            &legacy,
        ));
        assert!(same.get("resultType").is_none());
        let modern = jsonrpc::raw(r#"{"resultType":"complete","content":[]}"#);
        let down = text(result_for(
            "tools/call",
            Some(Era::Modern),
            Era::Legacy,
            &modern,
        ));
        assert!(down.get("resultType").is_none(), "{down}");
        let asking = jsonrpc::raw(r#"{"resultType":"input_required","inputRequests":{}}"#);
        let kept = text(result_for(
            "tools/call",
            Some(Era::Modern),
            Era::Legacy,
            &asking,
        ));
        assert_eq!(kept["resultType"], "input_required");
    }

    #[test]
    fn strips_only_the_2026_envelope() {
        let p = jsonrpc::raw(
            r#"{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":7}}"#,
        );
        assert_eq!(
            strip_modern_meta(&p).unwrap(),
            r#"{"name":"echo","_meta":{"progressToken":7}}"#
        );
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}"#);
        assert_eq!(strip_modern_meta(&p).unwrap(), "{}");
        let p = jsonrpc::raw(r#"{"_meta":{"io.modelcontextprotocol/logLevel":"debug"}}"#);
        assert_eq!(strip_modern_meta(&p).unwrap(), "{}");
        assert_eq!(strip_modern_meta(&jsonrpc::raw(r#"{"a":1}"#)), None);
    }

    #[test]
    fn a_state_is_ours_or_refused() {
        let s = StateSigner::new();
        assert_eq!(retry_state(None, &s), RetryState::Fresh);
        let p = jsonrpc::raw(r#"{"requestState":42}"#);
        assert_eq!(
            retry_state(Some(&p), &s),
            RetryState::Refused("requestState must be a string")
        );
        let p = jsonrpc::raw(r#"{"requestState":"abc"}"#);
        assert_eq!(
            retry_state(Some(&p), &s),
            RetryState::Refused("requestState is unknown to this server")
        );
    }

    #[test]
    fn nobody_to_ask() {
        assert_eq!(
            &unroutable_answer("7", "roots/list", "x")[..],
            br#"{"jsonrpc":"2.0","id":7,"result":{"roots":[]}}"#
        );
        let e = unroutable_answer("7", "sampling/createMessage", "no stream");
        assert!(std::str::from_utf8(&e).unwrap().contains("-32603"));
    }
}
