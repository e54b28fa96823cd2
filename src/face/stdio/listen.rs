//! Listens of the stdio face across eras: `subscriptions/listen`, remote resource
//! subscriptions, host-local 2025 requests, and the task that writes out the listen held on a
//! 2026 remote for a 2025 host (its rules are `core::held`'s, shared with the HTTP face).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{debug, info, warn};

use super::{lock, Face, Listener, Stop, Who, LISTEN_SETUP};
use crate::call::{cancel_cause, Call, CallCtx, Outcome, RELEASED_BY_BRIDGE};
use crate::core::held::HeldListen;
use crate::era::notifications::{acknowledgement, completion_result, Honoured};
use crate::jsonrpc::{self, Fields};
use crate::protocol::Era;

impl Face {
    /// A 2026 host's `subscriptions/listen`. A 2026 remote serves it (carried as a call, tags
    /// replaced); for a 2025 remote the bridge serves it from the GET stream. Ends with no
    /// answer when the host cancels it, with the completion result at shutdown (which
    /// releases it: `RELEASED_BY_BRIDGE`, no cancellation counted).
    pub(super) async fn listen(
        self: &Arc<Self>,
        id: &str,
        call: Call,
        stop: &Stop,
    ) -> Option<Outcome> {
        let hid = jsonrpc::raw(id);
        let completion = || Some(Outcome::Result(jsonrpc::raw(&completion_result(&hid))));
        if self.era().await != Some(Era::Legacy) {
            let who = Who {
                modern: true,
                log_rank: None,
                listen: Some(hid.clone()),
            };
            let h = match self.start(call).await {
                Ok(h) => h,
                Err(o) => return Some(o),
            };
            let o = self.follow(id, h, stop, &who, None).await;
            if o.is_none() && stop.why() == RELEASED_BY_BRIDGE {
                return completion();
            }
            return o;
        }
        let caps = self.capabilities().await;
        let filter = call
            .params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("notifications").map(ToOwned::to_owned));
        let mut honoured = Honoured::from(filter.as_deref(), &caps);
        let mut kept = Vec::new();
        for uri in std::mem::take(&mut honoured.uris) {
            if self.resource_subs.acquire(&uri) && !self.remote_subscription(&uri, true).await {
                self.resource_subs.release(&uri);
                continue;
            }
            kept.push(uri);
        }
        honoured.uris = kept;
        // Acknowledge once notifications can flow.
        crate::core::listen_ready(&self.up).await;
        let uris = honoured.uris.clone();
        self.send(acknowledgement(&honoured, &hid)).await;
        lock(&self.listens).insert(
            id.to_owned(),
            Arc::new(Listener {
                id: hid.clone(),
                honoured,
            }),
        );
        info!("listen {id} open (served from the 2025 remote's notifications)");
        stop.cancelled().await;
        let graceful = stop.why() == RELEASED_BY_BRIDGE;
        if let Some(cause) = cancel_cause(stop.why()) {
            // No call is pending for a listen the bridge serves: the face counts it.
            self.obs.cancelled(cause);
        }
        lock(&self.listens).remove(id);
        for uri in uris {
            if self.resource_subs.release(&uri) {
                self.remote_subscription(&uri, false).await;
            }
        }
        info!("listen {id} ended");
        if graceful {
            completion()
        } else {
            None
        }
    }

    /// `resources/subscribe` (or unsubscribe) on the 2025 remote; true when it succeeded.
    pub(super) async fn remote_subscription(self: &Arc<Self>, uri: &str, on: bool) -> bool {
        let method = if on {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        let call = Call {
            method: method.into(),
            params: Some(jsonrpc::raw(&serde_json::json!({ "uri": uri }).to_string())),
            ctx: CallCtx {
                client_era: Era::Legacy,
                ..CallCtx::modern()
            },
        };
        let o = self.own_call(call, LISTEN_SETUP).await;
        let ok = matches!(o, Some(Outcome::Result(_)));
        if ok {
            info!("{method} {uri} on the remote");
        } else {
            warn!("{method} {uri} failed on the remote");
        }
        ok
    }

    /// A 2025 host's request the bridge answers itself for a 2026 remote (None: send it on).
    pub(super) async fn legacy_host_local(self: &Arc<Self>, call: &Call) -> Option<Outcome> {
        if call.method.starts_with("resources/") {
            // Running first, so that the change is answered once the listen has it.
            if self.era().await == Some(Era::Modern) {
                self.ensure_held();
            }
        } else if call.method != "logging/setLevel" {
            return None;
        }
        // `crate::core`, rule 8 (the level itself was kept in `handle_request`).
        let era = self.era().await;
        crate::core::kept_by_bridge(era, &call.method, call.params.as_deref(), &self.subs).await
    }

    /// Start the listen held for a 2025 host on a 2026 remote, once. False when it was
    /// not running yet.
    pub(super) fn ensure_held(self: &Arc<Self>) -> bool {
        if self.held_started.swap(true, Ordering::AcqRel) {
            return true;
        }
        let me = Arc::clone(self);
        let ctx = move || CallCtx {
            client_era: Era::Legacy,
            stamp_meta: me.caller.stamp(),
            session: None,
            accepts_server_requests: false,
            log_level: None,
            tool: None,
            owner: None,
            who: None,
        };
        // Made here, not in the task: it holds the set from now on (`resources/subscribe`
        // waits for its acknowledgement).
        let mut held = HeldListen::new(Arc::clone(&self.up), Arc::clone(&self.subs), Box::new(ctx));
        let me = Arc::clone(self);
        self.tracker.spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    // Dropping it releases the listen at the remote.
                    _ = me.stopping.cancelled() => return debug!("closing the listen held on the remote"),
                    f = held.next() => me.send(f).await,
                }
            }
        });
        false
    }
}
