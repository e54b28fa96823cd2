//! Parking a 2026 caller's call on a 2025 upstream, written once for both faces: when the
//! upstream sends server requests on the call's stream, the ones the request declared a
//! capability for become the caller's `inputRequests` (keys `input1`, `input2`, …) and the
//! call is parked under a signed `requestState` (bound to the caller, method and params
//! digest, for one round, until its TTL); the others are refused to the upstream with
//! -32021 naming the capability (`mrtr::missing_capability_refusal`), and when the store is full every request is refused (-32603) and the call goes on
//! without input. Resuming is here too (`resume`): the caller's retry is verified against the
//! same binding, its `inputResponses` become responses to the upstream under the upstream's
//! own ids, a partial answer asks again for what is missing (the next round, same parked call),
//! and a complete one gives the call back to the face to follow to its answer. Faces only
//! deliver what these return: the body to answer, and the frames to hand the upstream
//! (`Upstream::send_response`).
//!
//! While parked, a call is flagged so (`Hold::set_parked`, the handle's `CallHandle::set_parked`):
//! its upstream must not take it for the addressee of its peer's next request, since its
//! caller may never come back. Parking sets the flag, giving the call back or resuming it
//! clears it; here, once, rather than in each face. For the same reason the requests an
//! upstream sends at once are gathered into one round before the call parks ([`gather`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::era::mrtr::{
    capability_declared, missing_capability_refusal, required_capability, to_modern_input,
    InputWait, ParkStore, Parked, StateSigner,
};
use crate::jsonrpc::{self, code};

/// A call that can be told it is parked for its caller's input.
pub trait Hold {
    fn set_parked(&mut self, parked: bool);
    /// Where the caller's answers go when not to the upstream the call was made on (a pool's
    /// child; see [`crate::call::CallHandle::replies_to`]).
    fn answered_via(&self) -> Option<crate::call::SharedUpstream> {
        None
    }
}

impl Hold for crate::call::CallHandle {
    fn set_parked(&mut self, parked: bool) {
        crate::call::CallHandle::set_parked(self, parked);
    }
    fn answered_via(&self) -> Option<crate::call::SharedUpstream> {
        crate::call::CallHandle::via(self).cloned()
    }
}

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
    /// The parked call's id in the store, when it was parked.
    pub parked_as: Option<u64>,
}

/// Park `handle` for the requests in `asked` (see the module comment).
pub fn park<H: Hold>(
    store: &ParkStore<H>,
    site: &Site<'_>,
    mut handle: H,
    asked: Vec<Asked>,
) -> Parking<H> {
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
            refusals.push(missing_capability_refusal(
                id.get(),
                &method,
                params.as_deref(),
                &msg,
            ));
        }
    }
    let undeclared = refusals.len();
    if waiting.is_empty() {
        return Parking {
            answer: Err(handle),
            refusals,
            undeclared,
            parked_as: None,
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
    handle.set_parked(true);
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
            let mut handle = back.handle;
            handle.set_parked(false);
            Err(handle)
        }
    };
    let parked_as = answer.is_ok().then_some(park_id);
    Parking {
        answer,
        refusals,
        undeclared,
        parked_as,
    }
}

/// A caller's retry of a parked call: who asks, for what, and what it answered.
pub struct Retry<'a> {
    pub signer: &'a StateSigner,
    /// The `requestState` the caller sent back (already known to be ours).
    pub state: &'a str,
    pub principal: &'a str,
    pub method: &'a str,
    pub digest: &'a str,
    /// The retry's `inputResponses` object, if any.
    pub answers: Option<&'a RawValue>,
    pub ttl: Duration,
}

/// What resuming did: the caller's answers, as frames for the face to hand the upstream
/// (`Upstream::send_response`) before anything else, and what comes next.
pub struct Resumed<H> {
    pub to_upstream: Vec<Bytes>,
    /// Where `to_upstream` goes when not to the upstream the call was made on.
    pub via: Option<crate::call::SharedUpstream>,
    /// The parked call the retry named, when it resumed one (still parked after `Again`).
    pub park_id: Option<u64>,
    pub next: Next<H>,
}

/// Hand a resumed call's answers to the upstream (`via`, else `default_via`): when every
/// answer is in, the call is first taken off its park, waiting up to `wait` while the
/// upstream runs another caller's call that may be asked (a 2025 child's next request would
/// otherwise have two addressees; written once for both faces). A call that cannot be resumed
/// in time is refused (the handle dropped: cancelled upstream) and its answers are not sent.
/// Returns the parked call's id and what the face does next.
pub async fn hand_over(
    resumed: Resumed<crate::call::CallHandle>,
    default_via: &crate::call::SharedUpstream,
    wait: std::time::Duration,
) -> (Option<u64>, Next<crate::call::CallHandle>) {
    let Resumed {
        to_upstream,
        via,
        park_id,
        mut next,
    } = resumed;
    if let Next::Go { handle, .. } = &mut next {
        if !handle.unpark(wait).await {
            let msg = format!(
                "cannot resume: the server is asking another client something and did not \
                 finish within {} s; call again",
                wait.as_secs()
            );
            return (park_id, Next::Refused(msg));
        }
    }
    let via = via.as_ref().unwrap_or(default_via);
    for frame in to_upstream {
        if let Err(e) = via.send_response(frame) {
            tracing::debug!("an answer for the upstream was not delivered: {e}");
        }
    }
    (park_id, next)
}

/// What the face does after handing on the answers.
pub enum Next<H> {
    /// The retry does not resume anything: a message for a -32602 error to the caller.
    Refused(String),
    /// Some answers are still missing: the `input_required` body of the next round.
    Again(String),
    /// Every answer is in: follow `handle` to the call's answer.
    Go { handle: H, round: u32, park_id: u64 },
}

/// Resume the call a retry's `requestState` names (see the module comment).
pub fn resume<H: Hold>(store: &ParkStore<H>, r: &Retry<'_>) -> Resumed<H> {
    let refused = |msg: String| Resumed {
        to_upstream: Vec::new(),
        via: None,
        park_id: None,
        next: Next::Refused(msg),
    };
    let claims = match r.signer.verify(r.state, r.principal, r.method, r.digest) {
        Ok(c) => c,
        Err(e) => return refused(format!("cannot resume: {e}")),
    };
    let Some(mut parked) = store.take(claims.park) else {
        return refused(
            "cannot resume: the call is no longer waiting (answered already, expired, or the \
             bridge restarted)"
                .into(),
        );
    };
    if parked.round != claims.round {
        let _ = store.put(claims.park, parked);
        return refused("cannot resume: requestState is from an earlier round".into());
    }
    let answers = r.answers.and_then(crate::jsonrpc::Fields::parse);
    let via = parked.handle.answered_via();
    let mut to_upstream = Vec::new();
    let mut still = Vec::new();
    for (key, id, method, params) in parked.waiting.drain(..) {
        match answers.as_ref().and_then(|a| a.get(&key)) {
            Some(v) => to_upstream.push(jsonrpc::result(id.get(), v.get())),
            None => still.push((key, id, method, params)),
        }
    }
    if still.is_empty() {
        // Still parked: `hand_over` resumes it when the upstream can attribute its requests.
        let handle = parked.handle;
        let next = Next::Go {
            handle,
            round: parked.round,
            park_id: claims.park,
        };
        return Resumed {
            to_upstream,
            via,
            park_id: Some(claims.park),
            next,
        };
    }
    // Some answers are missing: ask again for those (a new round, same parked call).
    let round = parked.round + 1;
    let state = r
        .signer
        .sign(claims.park, round, r.ttl, r.principal, r.method, r.digest);
    let body = input_required_result(&still, &state);
    parked.waiting = still;
    parked.round = round;
    parked.expires = Instant::now() + r.ttl;
    let next = match store.put(claims.park, parked) {
        Ok(()) => Next::Again(body),
        Err(_) => Next::Refused("cannot resume: too many calls waiting for input".into()),
    };
    Resumed {
        to_upstream,
        via,
        park_id: Some(claims.park),
        next,
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

/// How long a 2025 upstream's call stays quiet before the server requests gathered so far
/// are one round: a server that asks several things at once writes its requests one after
/// another, and a request arriving once its call is parked has no addressee (the call's
/// caller may never come back), so it would be refused.
pub const GATHER_QUIET: Duration = Duration::from_millis(30);
/// The longest a round is gathered, however busy the upstream is with requests.
pub const GATHER_MAX: Duration = Duration::from_millis(250);

/// Collect into `asked` the call's further events until it has been quiet for
/// [`GATHER_QUIET`] (no later than `until`), or its event queue has ended. Cancel-safe: what
/// it took is in `asked`.
pub async fn gather(
    h: &mut crate::call::CallHandle,
    asked: &mut Vec<crate::call::CallEvent>,
    until: tokio::time::Instant,
) {
    loop {
        while let Ok(ev) = h.events.try_recv() {
            asked.push(ev);
        }
        if h.events.ended() {
            return;
        }
        let quiet = (tokio::time::Instant::now() + GATHER_QUIET).min(until);
        match tokio::time::timeout_at(quiet, h.events.recv()).await {
            Ok(Some(ev)) => asked.push(ev),
            Ok(None) | Err(_) => return,
        }
        if tokio::time::Instant::now() >= until {
            while let Ok(ev) = h.events.try_recv() {
                asked.push(ev);
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        jsonrpc::raw(s)
    }

    impl Hold for &str {
        fn set_parked(&mut self, _: bool) {}
    }
    impl Hold for u8 {
        fn set_parked(&mut self, _: bool) {}
    }

    /// A handle that remembers what it was told.
    #[derive(Debug, PartialEq)]
    struct Flag(bool);
    impl Hold for Flag {
        fn set_parked(&mut self, parked: bool) {
            self.0 = parked;
        }
    }

    #[test]
    fn a_parked_call_is_flagged_until_resumed_or_given_back() {
        let (signer, store) = (StateSigner::new(), ParkStore::new(1));
        let caps = raw(r#"{"elicitation":{}}"#);
        let body = park(&store, &site(&signer, &caps), Flag(false), vec![elicit(1)])
            .answer
            .ok()
            .unwrap();
        assert_eq!(
            store.take_all().first().map(|p| &p.handle),
            Some(&Flag(true))
        );
        // Parked again, then resumed: the call is no longer flagged.
        let body2 = park(&store, &site(&signer, &caps), Flag(false), vec![elicit(2)])
            .answer
            .ok()
            .unwrap();
        assert_ne!(body, body2);
        // The store is full now: the next call is given back unflagged.
        let full = park(&store, &site(&signer, &caps), Flag(false), vec![elicit(3)]);
        assert!(matches!(full.answer, Err(Flag(false))));
        let answer = raw(r#"{"input1":{"action":"decline"}}"#);
        let st = state_of(&body2);
        let Next::Go { handle, .. } = resume(&store, &retry(&signer, &st, Some(&answer))).next
        else {
            panic!("expected the call back")
        };
        assert_eq!(handle, Flag(true), "resumed by hand_over, not here");
    }

    fn elicit(id: u64) -> Asked {
        (
            raw(&id.to_string()),
            "elicitation/create".to_owned(),
            Some(raw(
                r#"{"message":"name?","requestedSchema":{"type":"object"}}"#,
            )),
        )
    }

    fn site<'a>(signer: &'a StateSigner, caps: &'a RawValue) -> Site<'a> {
        Site {
            signer,
            caps: Some(caps),
            principal: "alice",
            method: "tools/call",
            digest: "d1",
            round: 0,
            park_id: None,
            ttl: Duration::from_secs(60),
        }
    }

    fn retry<'a>(
        signer: &'a StateSigner,
        state: &'a str,
        answers: Option<&'a RawValue>,
    ) -> Retry<'a> {
        Retry {
            signer,
            state,
            principal: "alice",
            method: "tools/call",
            digest: "d1",
            answers,
            ttl: Duration::from_secs(60),
        }
    }

    fn state_of(body: &str) -> String {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["requestState"].as_str().unwrap().to_owned()
    }

    #[test]
    fn park_then_resume_in_two_rounds() {
        let (signer, store) = (StateSigner::new(), ParkStore::new(4));
        let caps = raw(r#"{"elicitation":{}}"#);
        let p = park(
            &store,
            &site(&signer, &caps),
            "handle",
            vec![elicit(7), elicit(8)],
        );
        assert!(p.refusals.is_empty());
        let body = p.answer.ok().unwrap();
        assert!(
            body.contains(r#""input1""#) && body.contains(r#""input2""#),
            "{body}"
        );
        let st = state_of(&body);

        // Another caller, or another method, resumes nothing, and the call stays parked.
        let mut other = retry(&signer, &st, None);
        other.principal = "mallory";
        assert!(matches!(resume(&store, &other).next, Next::Refused(_)));

        // One answer of two: handed to the upstream under its own id, the other asked again.
        let one = raw(r#"{"input1":{"action":"accept","content":{"name":"x"}}}"#);
        let r = resume(&store, &retry(&signer, &st, Some(&one)));
        assert_eq!(r.to_upstream.len(), 1);
        assert!(std::str::from_utf8(&r.to_upstream[0])
            .unwrap()
            .contains(r#""id":7"#));
        let Next::Again(again) = r.next else {
            panic!("expected another round")
        };
        assert!(
            again.contains(r#""input2""#) && !again.contains(r#""input1""#),
            "{again}"
        );

        // The first round's state is spent; the second's resumes the call.
        assert!(matches!(
            resume(&store, &retry(&signer, &st, Some(&one))).next,
            Next::Refused(_)
        ));
        let two = raw(r#"{"input2":{"action":"decline"}}"#);
        let st2 = state_of(&again);
        let r = resume(&store, &retry(&signer, &st2, Some(&two)));
        assert!(std::str::from_utf8(&r.to_upstream[0])
            .unwrap()
            .contains(r#""id":8"#));
        let Next::Go { handle, round, .. } = r.next else {
            panic!("expected the call back")
        };
        assert_eq!((handle, round), ("handle", 2));
        assert!(store.is_empty());
    }

    #[test]
    fn undeclared_capability_is_refused_to_the_upstream() {
        let (signer, store) = (StateSigner::new(), ParkStore::new(4));
        let caps = raw(r#"{"sampling":{}}"#);
        let p = park(&store, &site(&signer, &caps), 1u8, vec![elicit(3)]);
        assert_eq!((p.undeclared, p.refusals.len()), (1, 1));
        // Refused the 2026 way, naming what the request needs.
        let v: serde_json::Value = serde_json::from_slice(&p.refusals[0]).unwrap();
        assert_eq!(v["id"], 3, "{v}");
        assert_eq!(v["error"]["code"], code::MISSING_CLIENT_CAPABILITY, "{v}");
        assert_eq!(
            v["error"]["data"]["requiredCapabilities"],
            serde_json::json!({"elicitation": {}}),
            "{v}"
        );
        assert!(matches!(p.answer, Err(1)));
        assert!(store.is_empty());
    }

    #[test]
    fn a_full_store_refuses_every_request() {
        let (signer, store) = (StateSigner::new(), ParkStore::new(1));
        let caps = raw(r#"{"elicitation":{}}"#);
        assert!(park(&store, &site(&signer, &caps), 1u8, vec![elicit(1)])
            .answer
            .is_ok());
        let p = park(&store, &site(&signer, &caps), 2u8, vec![elicit(2)]);
        assert!(matches!(p.answer, Err(2)));
        assert_eq!((p.undeclared, p.refusals.len()), (0, 1));
    }
}
