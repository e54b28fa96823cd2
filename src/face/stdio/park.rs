//! Calls of the stdio face and their multi-round trips: running and driving a call, parking it
//! when the host must answer first (the rules are `crate::era::park`), resuming it (the rules are `crate::era::park` too), and the
//! host's side of a 2025 host's input rounds (the driver is `crate::era::rounds`).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info};

use super::{
    client_caps, lock, refused, url_required_for_modern, Face, ParkCtx, Stop, Who, PRINCIPAL,
};
use crate::call::{cancel_cause, Call, CallEvent, CallHandle, Outcome};
use crate::core::RetryState;
use crate::era::mrtr;
use crate::era::park;
use crate::error::BridgeError;

/// How long a host's retry waits for its call to be resumable (a remote resumes at once).
const RESUME_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Room for a 2025 remote's GET-stream requests on their way to the one call they are for.
const ASKS: usize = 8;

/// Cancel at the remote the parked calls whose host never came back.
pub(super) async fn sweep_parked(face: Arc<Face>) {
    // Often enough for a short --park-timeout too.
    let every = (face.park_ttl / 4).clamp(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(5),
    );
    loop {
        tokio::time::sleep(every).await;
        for mut p in face.parked.take_expired() {
            info!(
                "a {} waiting for the host's input expired: cancelled",
                p.method
            );
            // Counted by the handle as it drops.
            p.handle.set_cancel_reason("timeout");
        }
    }
}

/// A parkable call's entry in `Face::askable`, removed when its `follow` ends.
struct Askable<'a> {
    face: &'a Face,
    id: String,
}

impl Drop for Askable<'_> {
    fn drop(&mut self) {
        lock(&self.face.askable).remove(&self.id);
    }
}
use crate::core::meter::Tracked;
use crate::era::rounds::{self, RoundsFace, Waited};
use crate::jsonrpc::{self, code, Fields};
use crate::protocol::Era;

impl Face {
    /// Run one call: forward its events while it runs, then its answer (or nothing, if the
    /// host cancelled it).
    pub(super) async fn run_call(self: Arc<Self>, t: Tracked, id: String, call: Call, stop: Stop) {
        let outcome = self.drive(&id, call, &stop).await;
        self.inflight.remove(&id);
        // `crate::core`, rule 7: stopped by the bridge's own shutdown, the host still gets
        // its one answer; a call the host cancelled gets none.
        let outcome = outcome.or_else(|| crate::core::stopped_answer(stop.why() == "shutdown").0);
        if let Some(o) = outcome {
            self.reply(t, &id, o).await;
        }
    }

    pub(super) async fn drive(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        stop: &Stop,
    ) -> Option<Outcome> {
        let who = Who::of(&call.ctx);
        if who.modern {
            if call.method == "subscriptions/listen" {
                return self.listen(id, call, stop).await;
            }
            if call.method == "server/discover" {
                // A 2025 upstream's discover is the core's to answer, as on serve.
                let info = self.up.info(super::UPSTREAM_WAIT).await;
                if let Some(d) = info.ok().as_ref().and_then(crate::core::discover_for) {
                    return Some(Outcome::Result(jsonrpc::raw(&d)));
                }
            }
        } else if let Some(o) = self.legacy_host_local(&call).await {
            return Some(o);
        }
        if !mrtr::is_mrtr_method(&call.method) {
            let h = match self.start(call).await {
                Ok(h) => h,
                Err(o) => return Some(o),
            };
            return self.follow(id, h, stop, &who, None).await;
        }
        if !who.modern {
            return self.rounds(id, call, stop).await;
        }
        let era = self.era().await;
        let legacy_remote = era == Some(Era::Legacy);
        let modern_remote = era == Some(Era::Modern);
        match crate::core::retry_state(call.params.as_deref(), &self.signer) {
            RetryState::Ours(state) => return self.resume(id, call, &state, stop).await,
            // Toward a 2025 remote only the bridge can have minted it (`crate::core`, rule 3);
            // toward a 2026 remote it is the remote's own, or another bridge's: untouched.
            RetryState::Refused(msg) if legacy_remote => {
                return Some(Outcome::Failed(BridgeError::Refused {
                    code: code::INVALID_PARAMS,
                    message: msg.into(),
                }));
            }
            _ => {}
        }
        let mut call = call;
        if legacy_remote {
            // A retry after a translated -32042 is the original call again (see crate::era::mrtr):
            // the 2025 remote never asked for these inputResponses.
            if let Some(p) = mrtr::strip_input_responses(call.params.as_deref()) {
                call.params = Some(p);
            }
        }
        let caps = client_caps(call.params.as_deref());
        // Only a 2025 remote asks on a call's stream: a 2026 one answers input_required
        // itself, so its calls never park and need no digest (a parse, a re-serialisation
        // and a hash of the whole params: a sixth of connect's CPU on a 64 KB call).
        let park = (!modern_remote).then(|| ParkCtx {
            method: call.method.clone(),
            digest: mrtr::params_digest(call.params.as_deref()),
            caps: caps.clone(),
            round: 0,
            park_id: None,
        });
        let h = match self.start(call).await {
            Ok(h) => h,
            Err(o) => return Some(o),
        };
        let o = self.follow(id, h, stop, &who, park).await;
        o.map(|o| url_required_for_modern(o, caps.as_deref()))
    }

    /// Forward a running call's events until its answer (None: the host cancelled it). With
    /// `park`, a server request parks the call and the answer is `input_required`.
    pub(super) async fn follow(
        self: &Arc<Self>,
        id: &str,
        mut r: CallHandle,
        stop: &Stop,
        who: &Who,
        park: Option<ParkCtx>,
    ) -> Option<Outcome> {
        enum Step {
            Cancelled,
            Event(CallEvent),
            Done(Outcome),
        }
        // A call that may park also takes the remote's requests that came on the GET stream
        // while it was the only such call (`Face::claim_server_request`).
        let (ask_tx, mut asks) = mpsc::channel(ASKS);
        let _askable = park.is_some().then(|| {
            lock(&self.askable).insert(id.to_owned(), ask_tx);
            Askable {
                face: self,
                id: id.to_owned(),
            }
        });
        let outcome = loop {
            let step = tokio::select! {
                biased;
                _ = stop.cancelled() => Step::Cancelled,
                Some(ev) = r.events.recv() => Step::Event(ev),
                Some(ev) = asks.recv() => Step::Event(ev),
                o = &mut r.outcome => Step::Done(o.unwrap_or_else(|_| {
                    refused(code::INTERNAL_ERROR, "internal: the call ended without an answer")
                })),
            };
            match step {
                Step::Cancelled => {
                    debug!("request {id} stopped ({})", stop.why());
                    // The handle counts the cancellation as it drops, if still pending.
                    r.set_cancel_reason(stop.why());
                    return None;
                }
                Step::Done(o) => break o,
                Step::Event(CallEvent::ServerRequest {
                    id: rid,
                    method,
                    params,
                }) if park.is_some() => {
                    let Some(p) = park.as_ref() else { continue };
                    match self.try_park(id, r, p, who, (rid, method, params)).await {
                        Ok(o) => return Some(o),
                        Err(back) => r = back,
                    }
                }
                Step::Event(ev) => self.forward_call_event(ev, who).await,
            }
        };
        // Events sent before the answer go out before it.
        while let Ok(ev) = r.events.try_recv() {
            self.forward_call_event(ev, who).await;
        }
        Some(outcome)
    }

    /// A 2025 remote asked a 2026 host's call (its request `id`) for input: park the call and
    /// answer the host `input_required` (Err gives the call back when nothing could be asked).
    pub(super) async fn try_park(
        self: &Arc<Self>,
        id: &str,
        mut r: CallHandle,
        p: &ParkCtx,
        who: &Who,
        first: (Box<RawValue>, String, Option<Box<RawValue>>),
    ) -> Result<Outcome, CallHandle> {
        // What the remote asks at once is one round (`era::park::gather`), as on serve.
        let mut evs = Vec::new();
        let until = tokio::time::Instant::now() + park::GATHER_MAX;
        park::gather(&mut r, &mut evs, until).await;
        let mut asked = vec![first];
        for ev in evs {
            match ev {
                CallEvent::ServerRequest { id, method, params } => asked.push((id, method, params)),
                ev @ CallEvent::Notification { .. } => self.forward_call_event(ev, who).await,
            }
        }
        let site = park::Site {
            signer: &self.signer,
            caps: p.caps.as_deref(),
            principal: PRINCIPAL,
            method: &p.method,
            digest: &p.digest,
            round: p.round,
            park_id: p.park_id,
            ttl: self.park_ttl,
        };
        let via = r.replies_to(&self.up).clone();
        let parking = park::park(&self.parked, &site, r, asked);
        for _ in 0..parking.undeclared {
            self.obs.dropped("undeclared_capability");
        }
        if parking.undeclared > 0 {
            info!(
                "the 2025 remote asked a 2026 request for {} input(s) it did not declare: refused",
                parking.undeclared
            );
        }
        for f in parking.refusals {
            if let Err(e) = via.send_response(f) {
                debug!("a refusal for the upstream was not delivered: {e}");
            }
        }
        let body = parking.answer?;
        debug!("{} parked (round {})", p.method, p.round + 1);
        if let Some(park_id) = parking.parked_as {
            self.remember_park(id, park_id);
        }
        Ok(Outcome::Result(jsonrpc::raw(&body)))
    }

    /// A 2025 remote's request from its GET stream, for a 2026 host: to the one call of the
    /// host that may park, if exactly one is running (Err: none or several, or it is full).
    pub(super) fn claim_server_request(&self, ev: CallEvent) -> Result<(), CallEvent> {
        let g = lock(&self.askable);
        let mut calls = g.values();
        match (calls.next(), calls.next()) {
            (Some(tx), None) => tx.try_send(ev).map_err(|e| e.into_inner()),
            _ => Err(ev),
        }
    }

    /// The host's request `id` was answered `input_required` for parked call `park_id`.
    fn remember_park(&self, id: &str, park_id: u64) {
        let mut g = lock(&self.parked_requests);
        if g.len() >= super::MAX_PARKED {
            // Forget requests whose call is no longer parked (resumed or expired).
            g.retain(|_, p| self.parked.contains(*p));
        }
        if g.len() < super::MAX_PARKED {
            g.insert(id.to_owned(), park_id);
        }
    }

    /// The host cancelled request `id`: if it was answered `input_required` and its call is
    /// still parked, cancel that call at the remote (counted as the host's cancellation).
    pub(super) fn release_park(&self, id: &str) -> bool {
        let Some(park_id) = lock(&self.parked_requests).remove(id) else {
            return false;
        };
        match self.parked.take(park_id) {
            Some(mut p) => {
                p.handle.set_cancel_reason("client cancelled");
                true
            }
            None => false,
        }
    }

    /// A 2026 host retries a parked call: its answers go to the remote under the remote's
    /// ids, then the call carries on under the retry's id.
    pub(super) async fn resume(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        state: &str,
        stop: &Stop,
    ) -> Option<Outcome> {
        let params = call.params.as_deref();
        let digest = mrtr::params_digest(params);
        let answers = params
            .and_then(Fields::parse)
            .and_then(|f| f.get("inputResponses").map(ToOwned::to_owned));
        let retry = park::Retry {
            signer: &self.signer,
            state,
            principal: PRINCIPAL,
            method: &call.method,
            digest: &digest,
            answers: answers.as_deref(),
            ttl: self.park_ttl,
        };
        let resumed = park::resume(&self.parked, &retry);
        // connect's upstream is a remote, which attributes by stream: no wait.
        let (park_id, next) = park::hand_over(resumed, &self.up, RESUME_WAIT).await;
        match next {
            park::Next::Refused(msg) => Some(refused(code::INVALID_PARAMS, &msg)),
            park::Next::Again(body) => {
                // The retry was answered `input_required` too: the host may cancel it by its id.
                if let Some(park_id) = park_id {
                    self.remember_park(id, park_id);
                }
                Some(Outcome::Result(jsonrpc::raw(&body)))
            }
            park::Next::Go {
                handle,
                round,
                park_id,
            } => {
                let ctx = ParkCtx {
                    method: call.method.clone(),
                    digest,
                    caps: client_caps(params),
                    round,
                    park_id: Some(park_id),
                };
                let who = Who::of(&call.ctx);
                self.follow(id, handle, stop, &who, Some(ctx)).await
            }
        }
    }

    /// A 2025 host's call to a 2026 remote: its input rounds (`crate::era::rounds`), with the
    /// host asked on stdout.
    pub(super) async fn rounds(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        stop: &Stop,
    ) -> Option<Outcome> {
        let caps = self.caller.caps();
        let side = HostRounds {
            face: self,
            id,
            stop,
            caps,
        };
        rounds::drive(&side, &call.method, call.params.as_deref(), &call.ctx).await
    }
}

/// The stdio face's side of a 2025 host's input rounds: requests go to stdout, answers come
/// back as the host's responses (the core's `Caller` waits for them), and each may take `mrtr::INPUT_TTL`.
struct HostRounds<'a> {
    face: &'a Arc<Face>,
    id: &'a str,
    stop: &'a Stop,
    /// What the host declared at `initialize`.
    caps: Option<Box<RawValue>>,
}

impl RoundsFace for HostRounds<'_> {
    fn caller_caps(&self) -> Option<Box<RawValue>> {
        self.caps.clone()
    }
    fn start(&self, call: Call) -> BoxFuture<'_, Result<CallHandle, Outcome>> {
        Box::pin(self.face.start(call))
    }
    async fn follow(&self, h: CallHandle) -> Option<Outcome> {
        let who = Who::default();
        self.face.follow(self.id, h, self.stop, &who, None).await
    }
    fn expect_answer(&self, id: &str) -> Option<oneshot::Receiver<rounds::Answer>> {
        self.face.caller.expect_answer(id)
    }
    fn forget_answer(&self, id: &str) {
        self.face.caller.forget_answer(id);
    }
    fn send_request(&self, frame: Bytes) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.face.out.send(frame).await.is_ok() })
    }
    fn wait_answer(&self, rx: oneshot::Receiver<rounds::Answer>) -> BoxFuture<'_, Waited> {
        Box::pin(async move {
            tokio::select! {
                a = rx => a.map_or(Waited::Cancelled, Waited::Answer),
                _ = tokio::time::sleep(mrtr::INPUT_TTL) => Waited::TimedOut,
                _ = self.stop.cancelled() => {
                    // No call is pending while the host is asked: the face counts it.
                    if let Some(cause) = cancel_cause(self.stop.why()) {
                        self.face.obs.cancelled(cause);
                    }
                    Waited::Cancelled
                }
            }
        })
    }
}
