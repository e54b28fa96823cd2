//! The approval step of a `[[policy]]` rule's `confirm = [...]`: before such a call is
//! forwarded, the endpoint asks the caller itself whether to run it — an elicitation (form
//! mode, no fields) naming the tool, prompt or resource and its arguments — and forwards it
//! only on `accept`; `decline`, `cancel`, an error or no answer within [`ANSWER_WAIT`] end
//! the call with an answer saying it was not approved.
//!
//! The endpoint asks in the era of the member the call goes to, so that the faces' existing
//! era translation carries the question to a caller of either era, and no face learns a
//! confirm rule:
//!
//! - **a 2025 member**: the endpoint makes a 2025 request of the caller on the call's
//!   stream (`elicitation/create`, id `agg-confirm-N`), waits for the answer
//!   ([`Approvals::answer`], from the endpoint's `send_response`), then starts the member's
//!   call and relays it on the same handle. A 2026 caller gets the question as an
//!   `input_required` round: its face parks the call, as for a 2025 member's own questions.
//! - **a 2026 member**: the endpoint answers `input_required` itself, the question under
//!   [`KEY`] and a `requestState` of its own (`mcpbk1.`: HMAC-SHA256, expiring, bound to the
//!   caller, the method and the params digest, like the bridge's own states). An accepted
//!   retry goes to the member without our key and state. When the member then asks its own
//!   questions, its `requestState` travels wrapped in one of ours that says "approved", so
//!   that its retries are not asked again. A 2025 caller gets these rounds as
//!   `elicitation/create` (the session face's rounds).
//!
//! A caller that declared no elicitation (form) capability is refused with `-32021`
//! naming the capability, before anything is asked. Each answer is counted
//! (`mcp_bridge_confirm_answers_total`) and the audit line says `declined` for a refusal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::oneshot;

use super::{audited, caller_key, Aggregate, Routed};
use crate::call::{Call, CallEvent, CallHandle, EventSender, Outcome};
use crate::era::mrtr::{capability_declared, required_capability};
use crate::error::BridgeError;
use crate::jsonrpc::{self, code, Envelope};
use crate::protocol::{self, Era};

/// The key of the endpoint's question among a 2026 round's `inputRequests`.
pub const KEY: &str = "mcp-bridge/confirm";
/// How long a question waits for its answer, and how long a 2026 round's state is good.
pub const ANSWER_WAIT: Duration = crate::era::mrtr::INPUT_TTL;
/// Questions waiting for an answer (2025 members), at most: past it a call is refused.
pub const MAX_OPEN: usize = 1024;
/// The longest arguments shown in a question (the rest is cut, marked).
const MAX_SHOWN: usize = 2000;
const ID_PREFIX: &str = "agg-confirm-";
const STATE_PREFIX: &str = "mcpbk1.";

/// What a call is about: ("tool", its published name), ("prompt", …), ("resource", URI).
pub type Subject = (&'static str, String);

/// The caller's word.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Accept,
    /// decline, cancel, an error, no answer.
    No(&'static str),
    /// The caller could not be asked (`-32021` from its face's gate).
    Unable,
}

/// The endpoint's open questions and the key of its round states.
pub struct Approvals {
    key: [u8; 32],
    next: AtomicU64,
    open: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
}

impl Approvals {
    pub fn new() -> Self {
        Self {
            key: super::cursor::random_key("approval"),
            next: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new question's number and where its answer arrives; None when too many are open.
    fn ask(&self) -> Option<(u64, oneshot::Receiver<Answer>)> {
        let mut open = self.lock();
        open.retain(|_, tx| !tx.is_closed());
        if open.len() >= MAX_OPEN {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        open.insert(n, tx);
        Some((n, rx))
    }

    /// A caller's answer frame: true when it answers one of our questions (taken here).
    pub fn answer(&self, frame: &Bytes) -> bool {
        let Ok(env) = Envelope::parse(frame) else {
            return false;
        };
        let Some(n) = env
            .id
            .and_then(|id| serde_json::from_str::<String>(id.get()).ok())
            .and_then(|id| {
                id.strip_prefix(ID_PREFIX)
                    .and_then(|n| n.parse::<u64>().ok())
            })
        else {
            return false;
        };
        let answer = match (env.result, env.error) {
            (Some(r), _) => read_action(Some(r)),
            (None, Some(e)) => {
                let c = serde_json::from_str::<Value>(e.get()).ok();
                match c.and_then(|c| c["code"].as_i64()) {
                    Some(code::MISSING_CLIENT_CAPABILITY) => Answer::Unable,
                    _ => Answer::No("error"),
                }
            }
            (None, None) => Answer::No("error"),
        };
        if let Some(tx) = self.lock().remove(&n) {
            let _ = tx.send(answer);
        }
        true
    }

    fn forget(&self, n: u64) {
        self.lock().remove(&n);
    }

    fn mac(&self, payload: &str, bind: &Bind<'_>) -> String {
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return String::new();
        };
        m.update(
            format!(
                "{payload}\n{}\n{}\n{}",
                bind.principal, bind.method, bind.digest
            )
            .as_bytes(),
        );
        b64().encode(&m.finalize().into_bytes()[..16])
    }

    /// A round state: `asked` (the question is out) or approved, holding the member's own
    /// state if it has one.
    fn seal(&self, bind: &Bind<'_>, approved: Option<&str>) -> String {
        let exp = SystemTime::now()
            .checked_add(ANSWER_WAIT)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let payload = match approved {
            None => format!("{exp}.a."),
            Some(inner) => format!("{exp}.y.{}", b64().encode(inner)),
        };
        format!("{STATE_PREFIX}{payload}.{}", self.mac(&payload, bind))
    }

    /// What a state of ours says: Ok(None) asked, Ok(Some(inner)) approved (inner: the
    /// member's own state, empty for none); Err: why it is refused.
    fn open_state(&self, state: &str, bind: &Bind<'_>) -> Result<Option<String>, &'static str> {
        let bad = "requestState was not issued for this call by this endpoint";
        let rest = state.strip_prefix(STATE_PREFIX).ok_or(bad)?;
        let (payload, mac) = rest.rsplit_once('.').ok_or(bad)?;
        let want = self.mac(payload, bind);
        if want.is_empty() || !constant_eq(want.as_bytes(), mac.as_bytes()) {
            return Err(bad);
        }
        let mut parts = payload.splitn(3, '.');
        let exp: u64 = parts.next().and_then(|e| e.parse().ok()).ok_or(bad)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if now > exp {
            return Err("requestState expired: call again");
        }
        match (parts.next(), parts.next()) {
            (Some("a"), _) => Ok(None),
            (Some("y"), Some(inner)) => {
                let inner = b64().decode(inner).map_err(|_| bad)?;
                Ok(Some(String::from_utf8(inner).map_err(|_| bad)?))
            }
            _ => Err(bad),
        }
    }
}

impl Default for Approvals {
    fn default() -> Self {
        Self::new()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What a round state is bound to.
struct Bind<'a> {
    principal: &'a str,
    method: &'a str,
    digest: String,
}

/// `accept` / `decline` / `cancel` of an elicitation result.
fn read_action(r: Option<&RawValue>) -> Answer {
    let v: Value = r
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or(Value::Null);
    match v["action"].as_str() {
        Some("accept") => Answer::Accept,
        Some("decline") => Answer::No("decline"),
        Some("cancel") => Answer::No("cancel"),
        _ => Answer::No("error"),
    }
}

/// The question: an elicitation in form mode with no fields, naming what is called and
/// with which arguments (cut at [`MAX_SHOWN`] bytes).
fn question(subject: &Subject, params: Option<&RawValue>) -> Value {
    let (what, name) = subject;
    let args = params
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|v| v.get("arguments").cloned())
        .filter(|a| !a.is_null());
    let mut message = format!("Allow the call to {what} \"{name}\"");
    if let Some(a) = args {
        let mut shown = a.to_string();
        if shown.len() > MAX_SHOWN {
            let mut cut = MAX_SHOWN;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push('…');
        }
        message.push_str(&format!(" with arguments {shown}"));
    }
    message.push('?');
    json!({
        "message": message,
        "requestedSchema": {"type": "object", "properties": {}},
    })
}

/// Did the caller declare what the question needs? None: not known here (a 2026 caller's
/// envelope is kept on the face's side for a 2025 member; its face's gate decides then).
fn may_ask(call: &Call, q: &RawValue) -> Option<bool> {
    let need = required_capability("elicitation/create", Some(q))?;
    let from_params = call
        .params
        .as_deref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|v| v["_meta"].get(protocol::META_CLIENT_CAPABILITIES).cloned());
    let caps = match from_params {
        Some(c) => Some(jsonrpc::raw(&c.to_string())),
        None => call
            .ctx
            .stamp_meta
            .iter()
            .find(|(k, _)| k == protocol::META_CLIENT_CAPABILITIES)
            .map(|(_, v)| v.clone()),
    };
    match caps {
        Some(c) => Some(capability_declared(Some(&c), need)),
        None if call.ctx.client_era == Era::Modern && call.ctx.accepts_server_requests => None,
        None => Some(false),
    }
}

/// The refusal of a caller that cannot be asked.
fn unable(subject: &Subject) -> BridgeError {
    BridgeError::Refused {
        code: code::MISSING_CLIENT_CAPABILITY,
        message: format!(
            "the {} \"{}\" needs the caller's approval, and this client declared no \
             elicitation capability (form mode) to be asked with",
            subject.0, subject.1
        ),
    }
}

/// The answer to a call that was not approved: a tool's error result (the model reads
/// why), an error for anything else.
fn not_approved(method: &str, subject: &Subject, why: &str) -> Outcome {
    let msg = format!(
        "the call to {} \"{}\" was not approved by the caller ({why})",
        subject.0, subject.1
    );
    if method == "tools/call" {
        let r = json!({"content": [{"type": "text", "text": msg}], "isError": true});
        return Outcome::Result(jsonrpc::raw(&r.to_string()));
    }
    Outcome::Failed(BridgeError::Refused {
        code: code::INVALID_REQUEST,
        message: msg,
    })
}

impl Aggregate {
    /// Start `r`, a call the policy says to confirm, with the approval step of its
    /// member's era.
    pub(super) async fn confirmed(
        self: Arc<Self>,
        r: Routed,
        subject: Subject,
        wait: Duration,
        line: Option<audited::Guard>,
    ) -> Result<CallHandle, BridgeError> {
        let m = &self.members[r.member];
        let era = m.up.info(m.wait(wait)).await.map(|i| i.era);
        match era {
            Ok(Era::Legacy) => self.ask_legacy(r, subject, wait, line),
            Ok(Era::Modern) => self.ask_modern(r, subject, wait, line).await,
            // The member is not there: its call fails the way any call to it does.
            Err(_) => self.on_member(r, wait, line).await,
        }
    }

    fn refuse(
        &self,
        e: BridgeError,
        answer: &'static str,
        line: Option<audited::Guard>,
    ) -> Result<CallHandle, BridgeError> {
        self.metrics.confirm_answer(&self.name, answer);
        if let Some(l) = line {
            l.finish("declined", Some(e.code()));
        }
        Err(e)
    }

    /// A 2025 member: ask on the call's stream, then run the call.
    fn ask_legacy(
        self: Arc<Self>,
        r: Routed,
        subject: Subject,
        wait: Duration,
        line: Option<audited::Guard>,
    ) -> Result<CallHandle, BridgeError> {
        let q = jsonrpc::raw(&question(&subject, r.call.params.as_deref()).to_string());
        if may_ask(&r.call, &q) == Some(false) {
            return self.refuse(unable(&subject), "unable", line);
        }
        let Some((n, rx)) = self.approvals.ask() else {
            let e = BridgeError::Refused {
                code: code::INTERNAL_ERROR,
                message: format!("too many calls wait for their callers' approval ({MAX_OPEN})"),
            };
            return self.refuse(e, "unanswered", line);
        };
        let me = self.clone();
        Ok(self.local_with(move |events: EventSender| async move {
            let ask = CallEvent::ServerRequest {
                id: jsonrpc::raw(&format!("\"{ID_PREFIX}{n}\"")),
                method: "elicitation/create".into(),
                params: Some(q),
            };
            let answer = if events.send(ask).await.is_err() {
                Answer::No("unanswered")
            } else {
                match tokio::time::timeout(ANSWER_WAIT, rx).await {
                    Ok(Ok(a)) => a,
                    _ => Answer::No("unanswered"),
                }
            };
            me.approvals.forget(n);
            let method = r.call.method.clone();
            match answer {
                Answer::Accept => me.metrics.confirm_answer(&me.name, "accept"),
                Answer::Unable => {
                    me.metrics.confirm_answer(&me.name, "unable");
                    let e = unable(&subject);
                    if let Some(l) = line {
                        l.finish("declined", Some(e.code()));
                    }
                    return Outcome::Failed(e);
                }
                Answer::No(why) => {
                    me.metrics.confirm_answer(&me.name, why);
                    if let Some(l) = line {
                        l.finish("declined", None);
                    }
                    return not_approved(&method, &subject, why);
                }
            }
            match me.on_member(r, wait, line).await {
                Ok(h) => relay(h, &events).await,
                Err(e) => Outcome::Failed(e),
            }
        }))
    }

    /// A 2026 member: a round of the endpoint's own, or the retry that answers it.
    async fn ask_modern(
        self: Arc<Self>,
        mut r: Routed,
        subject: Subject,
        wait: Duration,
        line: Option<audited::Guard>,
    ) -> Result<CallHandle, BridgeError> {
        let principal = caller_key(&r.call).0;
        let method = r.call.method.clone();
        let bind = Bind {
            principal: &principal,
            method: &method,
            digest: crate::era::request_state::params_digest(r.call.params.as_deref()),
        };
        let mut params: Value = r
            .call
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let state = params["requestState"]
            .as_str()
            .filter(|s| s.starts_with(STATE_PREFIX))
            .map(str::to_owned);
        let approved = match state {
            None => None,
            Some(s) => match self.approvals.open_state(&s, &bind) {
                Ok(a) => Some(a),
                Err(msg) => {
                    let e = BridgeError::Refused {
                        code: code::INVALID_PARAMS,
                        message: msg.into(),
                    };
                    return self.refuse(e, "error", line);
                }
            },
        };
        let inner = match approved {
            // Approved earlier: the member's own round goes on.
            Some(Some(inner)) => inner,
            // Our question is out: the retry carries its answer, or it is asked again.
            Some(None) => {
                let resp = params["inputResponses"].get(KEY).cloned();
                let Some(resp) = resp else {
                    return Ok(self.ask_round(&r.call, &subject, &bind, line));
                };
                let answer = read_action(Some(&jsonrpc::raw(&resp.to_string())));
                if let Answer::No(why) = answer {
                    self.metrics.confirm_answer(&self.name, why);
                    if let Some(l) = line {
                        l.finish("declined", None);
                    }
                    let o = not_approved(&method, &subject, why);
                    return Ok(self.local(async move { o }));
                }
                self.metrics.confirm_answer(&self.name, "accept");
                if let Some(ir) = params["inputResponses"].as_object_mut() {
                    ir.remove(KEY);
                    if ir.is_empty() {
                        params.as_object_mut().map(|o| o.remove("inputResponses"));
                    }
                }
                String::new()
            }
            None => {
                let q = jsonrpc::raw(&question(&subject, r.call.params.as_deref()).to_string());
                if may_ask(&r.call, &q) != Some(true) {
                    return self.refuse(unable(&subject), "unable", line);
                }
                return Ok(self.ask_round(&r.call, &subject, &bind, line));
            }
        };
        match params.as_object_mut() {
            Some(o) if inner.is_empty() => {
                o.remove("requestState");
            }
            Some(o) => {
                o.insert("requestState".into(), Value::String(inner));
            }
            None => {}
        }
        r.call.params = Some(jsonrpc::raw(&params.to_string()));
        let mut h = self.on_member(r, wait, line).await?;
        let me = self.clone();
        let (principal, digest) = (principal.clone(), bind.digest.clone());
        h.outcome.translate_with(Box::new(move |o| {
            let bind = Bind {
                principal: &principal,
                method: &method,
                digest,
            };
            me.wrap_state(o, &bind)
        }));
        Ok(h)
    }

    /// The endpoint's own `input_required` round: the question and an `asked` state.
    fn ask_round(
        &self,
        call: &Call,
        subject: &Subject,
        bind: &Bind<'_>,
        line: Option<audited::Guard>,
    ) -> CallHandle {
        if let Some(l) = line {
            l.finish("asked", None);
        }
        let q = question(subject, call.params.as_deref());
        let r = json!({
            "resultType": "input_required",
            "inputRequests": {KEY: {"method": "elicitation/create", "params": q}},
            "requestState": self.approvals.seal(bind, None),
        });
        let o = Outcome::Result(jsonrpc::raw(&r.to_string()));
        self.local(async move { o })
    }

    /// A 2026 member's own `input_required` of an approved call: its state wrapped in an
    /// approved one of ours.
    fn wrap_state(&self, o: Outcome, bind: &Bind<'_>) -> Outcome {
        let Outcome::Result(r) = o else {
            return o;
        };
        let mut v: Value = match serde_json::from_str(r.get()) {
            Ok(v) => v,
            Err(_) => return Outcome::Result(r),
        };
        if v["resultType"] != "input_required" {
            return Outcome::Result(r);
        }
        let inner = v["requestState"].as_str().unwrap_or_default().to_owned();
        v["requestState"] = Value::String(self.approvals.seal(bind, Some(&inner)));
        Outcome::Result(jsonrpc::raw(&v.to_string()))
    }
}

/// The member's call `h`, relayed onto `to` (its events in order, then its outcome).
async fn relay(mut h: CallHandle, to: &EventSender) -> Outcome {
    loop {
        tokio::select! {
            biased;
            ev = h.events.recv(), if !h.events.ended() => {
                if let Some(ev) = ev {
                    if to.send(ev).await.is_err() {
                        return Outcome::Failed(BridgeError::ChildExited(
                            "the caller went away".into(),
                        ));
                    }
                }
            }
            o = &mut h.outcome => {
                while let Ok(ev) = h.events.try_recv() {
                    let _ = to.send(ev).await;
                }
                return o.unwrap_or_else(|_| {
                    Outcome::Failed(BridgeError::ChildExited("the call was dropped".into()))
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind<'a>(p: &'a str) -> Bind<'a> {
        Bind {
            principal: p,
            method: "tools/call",
            digest: "d1".into(),
        }
    }

    #[test]
    fn round_states_open_only_for_their_call_and_signer() {
        let a = Approvals::new();
        let asked = a.seal(&bind("alice"), None);
        assert_eq!(a.open_state(&asked, &bind("alice")), Ok(None));
        assert!(
            a.open_state(&asked, &bind("bob")).is_err(),
            "another caller"
        );
        let other = Bind {
            digest: "d2".into(),
            ..bind("alice")
        };
        assert!(a.open_state(&asked, &other).is_err(), "other arguments");
        assert!(Approvals::new().open_state(&asked, &bind("alice")).is_err());
        let approved = a.seal(&bind("alice"), Some("member.state.1"));
        assert_eq!(
            a.open_state(&approved, &bind("alice")),
            Ok(Some("member.state.1".into()))
        );
        // Turning "asked" into "approved" by hand does not open.
        let forged = asked.replacen(".a.", ".y.", 1);
        assert!(a.open_state(&forged, &bind("alice")).is_err());
    }

    #[test]
    fn answers_are_read_and_only_ours_taken() {
        let a = Approvals::new();
        let (n, mut rx) = a.ask().unwrap();
        assert!(!a.answer(&Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"id\":\"agg-1\",\"result\":{}}"
        )));
        let f = format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{ID_PREFIX}{n}\",\"result\":{{\"action\":\"decline\"}}}}");
        assert!(a.answer(&Bytes::from(f)));
        assert_eq!(rx.try_recv().unwrap(), Answer::No("decline"));
        let (n, mut rx) = a.ask().unwrap();
        let f = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"{ID_PREFIX}{n}\",\"error\":{{\"code\":-32021,\"message\":\"m\"}}}}"
        );
        assert!(a.answer(&Bytes::from(f)));
        assert_eq!(rx.try_recv().unwrap(), Answer::Unable);
    }

    #[test]
    fn a_question_names_the_call_and_cuts_long_arguments() {
        let p = jsonrpc::raw(r#"{"name":"delete","arguments":{"path":"/tmp/x"}}"#);
        let q = question(&("tool", "files__delete".into()), Some(&p));
        let m = q["message"].as_str().unwrap();
        assert!(m.contains("files__delete") && m.contains("/tmp/x"), "{m}");
        let long = jsonrpc::raw(&json!({"arguments": {"s": "é".repeat(5000)}}).to_string());
        let q = question(&("tool", "t".into()), Some(&long));
        assert!(q["message"].as_str().unwrap().len() < MAX_SHOWN + 100);
    }
}
