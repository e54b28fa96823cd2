//! What reaches an endpoint's callers outside their calls' answers, and their answers back:
//!
//! - [`Asked`]: the ids of requests members make of a caller (sampling, elicitation, roots),
//!   renamed to ids of the endpoint's own (`"agg-N"`), since two members may use one id;
//!   the caller's answer is turned back into the member's id and sent to that member.
//!   Bounded: past [`MAX_ASKED`] unanswered the oldest is forgotten (its answer is dropped,
//!   warned).
//! - one task per member that relays the member's traffic to the endpoint's subscribers: a
//!   2025 member's own notifications, and for a 2026 member those of a listen the endpoint
//!   holds on it (`crate::core::held`, which goes dormant by itself for a 2025 member), in
//!   2025 form; a restart of the member forgets what it listed and tells every caller.
//! - a watcher of the members' readiness: a member that goes down or comes back changes the
//!   lists, and every caller hears it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use serde_json::value::RawValue;
use tokio::sync::broadcast::error::RecvError;

use super::Aggregate;
use crate::call::{CallCtx, CallEvent, SharedUpstream, UpstreamEvent};
use crate::core::held::HeldListen;
use crate::error::BridgeError;
use crate::jsonrpc::{self, Envelope};
use crate::protocol::{self, Era};

/// Requests of members a caller has not answered yet, at most.
pub const MAX_ASKED: usize = 4096;
/// How often the members' readiness is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Requests members made of callers, under the endpoint's ids.
#[derive(Default)]
pub struct Asked {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, (SharedUpstream, Box<RawValue>)>>,
}

impl Asked {
    /// Keep `id` of `target`'s request; the id the caller sees (a JSON string).
    fn keep(&self, target: &SharedUpstream, id: &RawValue) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while open.len() >= MAX_ASKED {
            let Some((old, _)) = open.pop_first() else {
                break;
            };
            tracing::warn!(
                limit = MAX_ASKED,
                "too many unanswered requests of the endpoint's members: agg-{old} is forgotten"
            );
        }
        open.insert(n, (target.clone(), id.to_owned()));
        format!("\"agg-{n}\"")
    }

    /// A call's event, a request's id renamed.
    pub fn rename(&self, ev: CallEvent, target: &SharedUpstream) -> CallEvent {
        match ev {
            CallEvent::ServerRequest { id, method, params } => CallEvent::ServerRequest {
                id: jsonrpc::raw(&self.keep(target, &id)),
                method,
                params,
            },
            ev => ev,
        }
    }

    /// A request frame of `target`'s (outside any call), its id renamed.
    fn rename_frame(&self, frame: &Bytes, target: &SharedUpstream) -> Option<Bytes> {
        let env = Envelope::parse(frame).ok()?;
        let id = self.keep(target, env.id?);
        Some(jsonrpc::request(
            &id,
            env.method(),
            env.params.map(RawValue::get),
        ))
    }

    /// A caller's answer under the endpoint's id: to the member that asked, under its id.
    pub fn answer(&self, frame: &Bytes) -> Result<(), BridgeError> {
        let bad = |m: &str| BridgeError::Refused {
            code: jsonrpc::code::INVALID_REQUEST,
            message: m.to_owned(),
        };
        let env = Envelope::parse(frame).map_err(|e| bad(&e.to_string()))?;
        let n = env
            .id
            .and_then(|id| serde_json::from_str::<String>(id.get()).ok())
            .and_then(|s| s.strip_prefix("agg-")?.parse::<u64>().ok())
            .ok_or_else(|| bad("an answer to no request of the endpoint"))?;
        let kept = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&n);
        let Some((target, id)) = kept else {
            return Err(bad("an answer to no open request of the endpoint"));
        };
        let out = match (env.result, env.error) {
            (Some(r), _) => jsonrpc::result(id.get(), r.get()),
            (None, Some(e)) => jsonrpc::error_raw(Some(id.get()), e.get()),
            (None, None) => return Err(bad("an answer with neither result nor error")),
        };
        target.send_response(out)
    }
}

/// The era of `up` if it is known now (no waiting).
pub fn era_now(up: &SharedUpstream) -> Option<Era> {
    up.info(Duration::ZERO).now_or_never()?.ok().map(|i| i.era)
}

/// The context of the listen the endpoint holds on a 2026 member.
fn listen_ctx() -> CallCtx {
    let stamp = vec![
        (
            protocol::META_PROTOCOL_VERSION.to_owned(),
            jsonrpc::raw(&format!("\"{}\"", protocol::MODERN)),
        ),
        (
            protocol::META_CLIENT_CAPABILITIES.to_owned(),
            jsonrpc::raw("{}"),
        ),
    ];
    let mut ctx = CallCtx::modern();
    ctx.client_era = Era::Legacy;
    ctx.stamp_meta = Arc::new(stamp);
    ctx
}

/// Start the endpoint's relays and its watcher.
pub fn start(agg: &Arc<Aggregate>) {
    for i in 0..agg.members.len() {
        agg.tracker.spawn(relay(agg.clone(), i));
    }
    agg.tracker.spawn(watch(agg.clone()));
}

/// Member `i`'s traffic to the endpoint's subscribers, until the endpoint stops.
async fn relay(agg: Arc<Aggregate>, i: usize) {
    let m = &agg.members[i];
    let mut rx = m.up.subscribe();
    let mut held = HeldListen::new(m.up.clone(), agg.subs[i].clone(), Box::new(listen_ctx));
    loop {
        tokio::select! {
            biased;
            _ = agg.stop.cancelled() => return,
            got = rx.recv() => match got {
                Ok(UpstreamEvent::Notification(f)) => {
                    let _ = agg.events.send(UpstreamEvent::Notification(f));
                }
                Ok(UpstreamEvent::ServerRequest { session, frame }) => {
                    if let Some(frame) = agg.asked.rename_frame(&frame, &m.up) {
                        let _ = agg.events.send(UpstreamEvent::ServerRequest { session, frame });
                    }
                }
                Ok(UpstreamEvent::Restarted) => {
                    tracing::info!(endpoint = %agg.name, member = %m.name, "a member restarted");
                    agg.member_changed(i);
                    held.reopen();
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(endpoint = %agg.name, member = %m.name, lost = n,
                        "the endpoint fell behind a member's notifications");
                }
                Err(RecvError::Closed) => return,
            },
            f = held.next() => {
                let _ = agg.events.send(UpstreamEvent::Notification(f));
            }
        }
    }
}

/// Every [`WATCH_EVERY`]: a member that went down or came back changes the lists.
async fn watch(agg: Arc<Aggregate>) {
    let mut was: Vec<bool> = vec![false; agg.members.len()];
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = agg.stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        for (i, m) in agg.members.iter().enumerate() {
            agg.gauge_up(i);
            let ready = m.up.is_ready();
            if ready {
                m.seen_ready.store(true, Ordering::Relaxed);
            }
            if ready == was[i] {
                continue;
            }
            was[i] = ready;
            if ready {
                tracing::info!(endpoint = %agg.name, member = %m.name, "member is up");
            } else {
                tracing::warn!(endpoint = %agg.name, member = %m.name,
                    "member is down: its tools leave the endpoint's lists until it is back");
            }
            agg.member_changed(i);
        }
    }
}
