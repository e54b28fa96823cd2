//! A 2025 caller's call to a 2026 upstream, written once for both faces: an `input_required`
//! result becomes real requests to the caller (ids the bridge mints, `mcpb-N`, from
//! [`mint_request_id`]); with every answer in, the upstream is retried with `inputResponses`
//! and the exact `requestState` under a new id, at most [`MAX_ROUNDS`] times.
//!
//! The rules live here: the capability gate (every input request is checked against what the
//! caller declared at `initialize` with [`may_ask`] before any is sent, so that a caller is
//! never asked half of a round), the bound on rounds, the id scheme, the `inputResponses`
//! keys, URL elicitation's `elicitationId` (`InputRequest::legacy_params`) and the errors a
//! caller gets. What differs by transport is behind [`RoundsFace`]: how a round's call is
//! started and followed (the HTTP face restores progress tokens and keeps a call deadline; the
//! stdio face routes to its host), how a request reaches the caller, and how long an answer may
//! take.

use std::future::Future;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::call::{Call, CallCtx, CallHandle, Outcome};
use crate::era::mrtr::{input_requests, may_ask, mint_request_id};
use crate::error::BridgeError;
use crate::jsonrpc::{self, code, Fields};

/// Most `input_required` rounds one call may go through.
pub const MAX_ROUNDS: u32 = 10;

/// Most input requests the caller is asked in one round: a server that asks for more is
/// answered with an error instead of growing the face's table of expected answers.
pub const MAX_INPUTS: usize = 64;

/// A caller's answer to one of the bridge's requests: its result, or its error object.
pub type Answer = Result<Box<RawValue>, Box<RawValue>>;

/// How the wait for one answer ended.
pub enum Waited {
    Answer(Answer),
    /// The caller cancelled the call (or went away): the call gets no answer.
    Cancelled,
    /// The face's bound on the call ran out first.
    TimedOut,
}

/// What a face supplies to the rounds driver for one call.
pub trait RoundsFace: Send + Sync {
    /// The capabilities the caller declared (its `initialize`), the gate before asking.
    fn caller_caps(&self) -> Option<Box<RawValue>>;
    /// Why this call cannot carry requests to its caller at all, if it cannot.
    fn cannot_ask(&self) -> Option<&'static str> {
        None
    }
    /// Start one round's call at the upstream (Err: the outcome to answer with).
    fn start(&self, call: Call) -> BoxFuture<'_, Result<CallHandle, Outcome>>;
    /// Follow a started call to its outcome, forwarding its events to the caller (None: stop
    /// without an answer; the caller cancelled or is gone). Not boxed: this is the future an
    /// open call waits in, so it lives inside the call's own future instead of a second
    /// allocation (benches/RESULTS.md, "2026-12-01 (e)").
    fn follow(&self, h: CallHandle) -> impl Future<Output = Option<Outcome>> + Send;
    /// Register interest in the answer to the bridge's request `id` (None: the caller owes
    /// as many answers as it may, `core::caller::MAX_ANSWERS`).
    fn expect_answer(&self, id: &str) -> Option<oneshot::Receiver<Answer>>;
    /// Drop the interest in `id` (answered, abandoned).
    fn forget_answer(&self, id: &str);
    /// Send a request frame to the caller; false when the caller cannot be reached.
    fn send_request(&self, frame: Bytes) -> BoxFuture<'_, bool>;
    /// Wait for one answer, within the face's bound and its caller's cancellation.
    fn wait_answer(&self, rx: oneshot::Receiver<Answer>) -> BoxFuture<'_, Waited>;
}

/// The bridge's own error for the call (counted as the bridge's).
fn failed(c: i64, msg: String) -> Outcome {
    Outcome::Failed(BridgeError::Refused {
        code: c,
        message: msg,
    })
}

/// Run `method` with `params` for a 2025 caller through every `input_required` round (None:
/// no answer is owed, the caller cancelled or went away).
///
/// Round one is all most calls have, and it is what an open call waits in: it is inline
/// here, and the later rounds are a boxed future, allocated only for a call that gets an
/// `input_required` result.
pub async fn drive<F: RoundsFace>(
    face: &F,
    method: &str,
    params: Option<&RawValue>,
    ctx: &CallCtx,
) -> Option<Outcome> {
    let call = Call {
        method: method.to_owned(),
        params: Some(params.map_or_else(|| jsonrpc::raw("{}"), ToOwned::to_owned)),
        ctx: ctx.clone(),
    };
    match one_round(face, call).await? {
        Outcome::Result(res) if is_input_required(&res) => {
            Box::pin(more_rounds(face, method, params, ctx, res)).await
        }
        o => Some(o),
    }
}

/// Start one round's call and follow it to its outcome.
async fn one_round<F: RoundsFace>(face: &F, call: Call) -> Option<Outcome> {
    match face.start(call).await {
        Ok(h) => face.follow(h).await,
        Err(o) => Some(o),
    }
}

/// The rounds after an `input_required` result `res`: ask, retry, at most [`MAX_ROUNDS`]
/// retries in all.
async fn more_rounds<F: RoundsFace>(
    face: &F,
    method: &str,
    params: Option<&RawValue>,
    ctx: &CallCtx,
    mut res: Box<RawValue>,
) -> Option<Outcome> {
    for _ in 0..MAX_ROUNDS {
        let next = match next_round(face, &res, params).await? {
            Ok(p) => p,
            Err(o) => return Some(o),
        };
        let call = Call {
            method: method.to_owned(),
            params: Some(next),
            ctx: ctx.clone(),
        };
        match one_round(face, call).await? {
            Outcome::Result(r) if is_input_required(&r) => res = r,
            o => return Some(o),
        }
    }
    Some(failed(
        code::INTERNAL_ERROR,
        format!("the server asked for input more than {MAX_ROUNDS} times; giving up"),
    ))
}

use crate::protocol::is_input_required;

/// One `input_required` round: ask the caller, then build the retry's params (the original
/// params + `inputResponses` + the exact `requestState`). None: no answer is owed;
/// Some(Err): answer the call with this outcome.
async fn next_round<F: RoundsFace>(
    face: &F,
    res: &RawValue,
    params: Option<&RawValue>,
) -> Option<Result<Box<RawValue>, Outcome>> {
    let Some(f) = Fields::parse(res) else {
        return Some(Err(Outcome::Result(res.to_owned())));
    };
    let answers = match f.get("inputRequests") {
        Some(reqs) => match ask(face, reqs).await? {
            Ok(a) => a,
            Err(o) => return Some(Err(o)),
        },
        None => Answers::new(),
    };
    // Parsed here, not kept parsed for the whole call: most calls never get here, and a
    // parsed tree costs ~2 KB per call for as long as it runs.
    let mut p: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(o) = p.as_object_mut() {
        if !answers.is_empty() {
            o.insert("inputResponses".into(), Value::Object(answers));
        }
        let state = f.get("requestState");
        if let Some(st) = state.and_then(|s| serde_json::from_str::<Value>(s.get()).ok()) {
            o.insert("requestState".into(), st);
        }
    }
    Some(Ok(jsonrpc::raw(&p.to_string())))
}

type Answers = serde_json::Map<String, Value>;

/// The ids of one round's requests to the caller: forgotten (`RoundsFace::forget_answer`)
/// when the round ends, however it ends — also when the call's future is dropped mid-round
/// (an HTTP client hung up), so that no expected answer outlives its call.
struct Expected<'f, F: RoundsFace> {
    face: &'f F,
    ids: Vec<String>,
}

impl<F: RoundsFace> Drop for Expected<'_, F> {
    fn drop(&mut self) {
        for id in &self.ids {
            self.face.forget_answer(id);
        }
    }
}

/// Ask the caller every input request of one round and collect the answers by key. None: no
/// answer is owed; Some(Err): answer the call with this outcome.
async fn ask<F: RoundsFace>(face: &F, reqs: &RawValue) -> Option<Result<Answers, Outcome>> {
    let bail = |c, msg: String| Some(Err(failed(c, msg)));
    let Some(reqs) = input_requests(reqs) else {
        return bail(
            code::INTERNAL_ERROR,
            "the server's inputRequests is not an object".into(),
        );
    };
    if let Some(why) = face.cannot_ask() {
        return bail(code::INTERNAL_ERROR, why.into());
    }
    if reqs.len() > MAX_INPUTS {
        return bail(
            code::INTERNAL_ERROR,
            format!(
                "the server asked for {} inputs in one round; mcp-bridge asks at most {MAX_INPUTS}",
                reqs.len()
            ),
        );
    }
    // The gate first, for the whole round: nothing is asked if anything may not be.
    let caps = face.caller_caps();
    let caps = caps.as_deref();
    if let Some(r) = reqs.iter().find(|r| !may_ask(caps, &r.method, r.params)) {
        return bail(
            code::INTERNAL_ERROR,
            format!(
                "the server asked for {}, which the client did not declare",
                r.method
            ),
        );
    }
    let mut expected = Expected {
        face,
        ids: Vec::with_capacity(reqs.len()),
    };
    let mut waits: Vec<(String, oneshot::Receiver<Answer>)> = Vec::with_capacity(reqs.len());
    for r in &reqs {
        let id = mint_request_id();
        let Some(rx) = face.expect_answer(&id) else {
            return bail(
                code::INTERNAL_ERROR,
                "the client already owes mcp-bridge too many answers; try again later".into(),
            );
        };
        expected.ids.push(id.clone());
        let params = r.legacy_params();
        let frame = jsonrpc::request(&id, &r.method, params.as_deref().map(RawValue::get));
        tracing::debug!("asking the client {} as {id}", r.method);
        if !face.send_request(frame).await {
            return None;
        }
        waits.push((r.key.to_string(), rx));
    }
    let mut answers = Answers::new();
    let mut end = None;
    for (key, rx) in waits {
        if end.is_some() {
            break;
        }
        let got = face.wait_answer(rx).await;
        match got {
            Waited::Answer(Ok(v)) => {
                answers.insert(key, serde_json::from_str(v.get()).unwrap_or(Value::Null));
            }
            Waited::Answer(Err(e)) => {
                end = Some(bail(
                    code::INTERNAL_ERROR,
                    format!(
                        "the client answered the server's request with an error: {}",
                        e.get()
                    ),
                ));
            }
            Waited::TimedOut => {
                end = Some(bail(
                    code::UPSTREAM_UNAVAILABLE,
                    "no answer from the client before the call timed out".into(),
                ));
            }
            Waited::Cancelled => end = Some(None),
        }
    }
    match end {
        Some(e) => e,
        None => Some(Ok(answers)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::call::{sinks, Cancel, CancelOnDrop};

    struct NoCancel;
    impl Cancel for NoCancel {
        fn pending(&self) -> bool {
            false
        }
        fn cancel(&self, _: &str) -> bool {
            false
        }
    }

    /// Answers each round with the next scripted result; answers every request it is sent
    /// with `{"ok": <its id>}`.
    #[derive(Default)]
    struct Scripted {
        caps: Option<Box<RawValue>>,
        results: Mutex<VecDeque<&'static str>>,
        /// The params each round was started with.
        started: Mutex<Vec<String>>,
        /// The request frames sent to the caller.
        sent: Mutex<Vec<Value>>,
        waiting: Mutex<Vec<(String, oneshot::Sender<Answer>)>>,
        /// Leave the requests unanswered (the caller never answers).
        silent: bool,
        /// The ids given to `forget_answer`.
        forgotten: Mutex<Vec<String>>,
    }

    impl RoundsFace for Scripted {
        fn caller_caps(&self) -> Option<Box<RawValue>> {
            self.caps.clone()
        }
        fn start(&self, call: Call) -> BoxFuture<'_, Result<CallHandle, Outcome>> {
            let p = call.params.map(|p| p.get().to_owned()).unwrap_or_default();
            self.started.lock().unwrap().push(p);
            let r = self.results.lock().unwrap().pop_front().unwrap_or("{}");
            let (s, events, outcome, answered) = sinks();
            let _ = s.outcome.send(Outcome::Result(jsonrpc::raw(r)));
            let metrics = Arc::new(crate::metrics::Metrics::new());
            let detached = crate::call::Detached::none(metrics.clone());
            let control = Box::new(CancelOnDrop::new(
                Arc::new(NoCancel),
                1,
                answered,
                metrics,
                &detached,
            ));
            Box::pin(async move { Ok(CallHandle::new(events, outcome, control)) })
        }
        async fn follow(&self, mut h: CallHandle) -> Option<Outcome> {
            (&mut h.outcome).await.ok()
        }
        fn expect_answer(&self, id: &str) -> Option<oneshot::Receiver<Answer>> {
            let (tx, rx) = oneshot::channel();
            self.waiting.lock().unwrap().push((id.to_owned(), tx));
            Some(rx)
        }
        fn forget_answer(&self, id: &str) {
            self.forgotten.lock().unwrap().push(id.to_owned());
        }
        fn send_request(&self, frame: Bytes) -> BoxFuture<'_, bool> {
            let v: Value = serde_json::from_slice(&frame).unwrap();
            let id = v["id"].to_string();
            self.sent.lock().unwrap().push(v);
            if self.silent {
                return Box::pin(async { true });
            }
            let mut w = self.waiting.lock().unwrap();
            if let Some(i) = w.iter().position(|(k, _)| *k == id) {
                let (_, tx) = w.remove(i);
                let _ = tx.send(Ok(jsonrpc::raw(&format!("{{\"ok\":{id}}}"))));
            }
            Box::pin(async { true })
        }
        fn wait_answer(&self, rx: oneshot::Receiver<Answer>) -> BoxFuture<'_, Waited> {
            Box::pin(async move { rx.await.map_or(Waited::Cancelled, Waited::Answer) })
        }
    }

    const TWO_INPUTS: &str = r#"{"resultType":"input_required","requestState":"st-1",
        "inputRequests":{"a":{"method":"elicitation/create","params":{"message":"m"}},
                         "b":{"method":"sampling/createMessage","params":{"messages":[]}}}}"#;

    fn legacy_ctx() -> CallCtx {
        CallCtx {
            client_era: crate::protocol::Era::Legacy,
            ..CallCtx::modern()
        }
    }

    #[tokio::test]
    async fn a_round_with_an_undeclared_capability_asks_nothing() {
        let face = Scripted {
            caps: Some(jsonrpc::raw(r#"{"elicitation":{}}"#)),
            results: Mutex::new(VecDeque::from([TWO_INPUTS])),
            ..Default::default()
        };
        let o = drive(
            &face,
            "tools/call",
            Some(&jsonrpc::raw("{}")),
            &legacy_ctx(),
        )
        .await;
        let Some(Outcome::Failed(e)) = o else {
            panic!("the call must fail, got {o:?}")
        };
        assert!(e.to_string().contains("sampling/createMessage"), "{e}");
        // Not even the declared elicitation went out: the gate holds for the whole round.
        assert!(face.sent.lock().unwrap().is_empty());
        assert_eq!(face.started.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn answers_go_back_by_key_with_the_exact_state_under_minted_ids() {
        let face = Scripted {
            caps: Some(jsonrpc::raw(r#"{"elicitation":{},"sampling":{}}"#)),
            results: Mutex::new(VecDeque::from([TWO_INPUTS, r#"{"content":[]}"#])),
            ..Default::default()
        };
        let params = jsonrpc::raw(r#"{"name":"t"}"#);
        let o = drive(&face, "tools/call", Some(&params), &legacy_ctx()).await;
        assert!(matches!(o, Some(Outcome::Result(_))), "{o:?}");
        let sent = face.sent.lock().unwrap();
        assert_eq!(sent.len(), 2);
        for m in sent.iter() {
            let id = m["id"].as_str().unwrap();
            assert!(id.starts_with("mcpb-"), "{m}");
        }
        let started = face.started.lock().unwrap();
        assert_eq!(started[0], r#"{"name":"t"}"#);
        let retry: Value = serde_json::from_str(&started[1]).unwrap();
        assert_eq!(retry["name"], "t");
        assert_eq!(retry["requestState"], "st-1");
        let ids: Vec<&str> = sent.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(retry["inputResponses"]["a"]["ok"], ids[0]);
        assert_eq!(retry["inputResponses"]["b"]["ok"], ids[1]);
    }

    #[tokio::test]
    async fn rounds_are_bounded() {
        let face = Scripted {
            caps: Some(jsonrpc::raw(r#"{"elicitation":{},"sampling":{}}"#)),
            results: Mutex::new(VecDeque::from([TWO_INPUTS; MAX_ROUNDS as usize + 2])),
            ..Default::default()
        };
        let o = drive(&face, "tools/call", None, &legacy_ctx()).await;
        let Some(Outcome::Failed(e)) = o else {
            panic!("the call must fail, got {o:?}")
        };
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(face.started.lock().unwrap().len(), MAX_ROUNDS as usize + 1);
    }

    #[tokio::test]
    async fn a_round_asking_too_much_asks_nothing() {
        let many: Vec<String> = (0..=MAX_INPUTS)
            .map(|i| {
                format!(r#""k{i}":{{"method":"elicitation/create","params":{{"message":"m"}}}}"#)
            })
            .collect();
        let res = format!(
            r#"{{"resultType":"input_required","requestState":"s","inputRequests":{{{}}}}}"#,
            many.join(",")
        );
        let face = Scripted {
            caps: Some(jsonrpc::raw(r#"{"elicitation":{}}"#)),
            results: Mutex::new(VecDeque::from([&*Box::leak(res.into_boxed_str())])),
            ..Default::default()
        };
        let o = drive(&face, "tools/call", None, &legacy_ctx()).await;
        let Some(Outcome::Failed(e)) = o else {
            panic!("the call must fail, got {o:?}")
        };
        assert!(e.to_string().contains("at most 64"), "{e}");
        assert!(face.sent.lock().unwrap().is_empty());
    }

    #[test]
    fn a_call_dropped_mid_round_forgets_the_answers_it_expected() {
        use futures_util::FutureExt;
        let face = Scripted {
            caps: Some(jsonrpc::raw(r#"{"elicitation":{},"sampling":{}}"#)),
            results: Mutex::new(VecDeque::from([TWO_INPUTS])),
            silent: true,
            ..Default::default()
        };
        let ctx = legacy_ctx();
        let mut call = Box::pin(drive(&face, "tools/call", None, &ctx));
        // Both requests go out, then the round waits for answers that never come.
        assert!((&mut call).now_or_never().is_none());
        let sent: Vec<String> = face
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|m| m["id"].to_string())
            .collect();
        assert_eq!(sent.len(), 2);
        assert!(face.forgotten.lock().unwrap().is_empty());
        // The caller went away: the call's future is dropped mid-round.
        drop(call);
        assert_eq!(*face.forgotten.lock().unwrap(), sent);
    }
}
