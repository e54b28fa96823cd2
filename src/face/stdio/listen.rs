//! Listens of the stdio face across eras: `subscriptions/listen`, remote resource
//! subscriptions, host-local 2025 requests and the held listen on the 2025 GET stream.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::{lock, refused, Face, Listener, Stop, Who, LISTEN_SETUP, MAX_HOST_URIS};
use crate::call::{cancel_cause, Call, CallCtx, CallEvent, Outcome, RELEASED_BY_BRIDGE};
use crate::era::notifications::{
    acknowledgement, completion_result, legacy_filter, untagged, Honoured,
};
use crate::jsonrpc::{self, code, Fields};
use crate::protocol::{self, Era};

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
        if !self.up.events_ready(LISTEN_SETUP).await {
            debug!("the remote's GET stream is not open: listen {id} may stay silent");
        }
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
        let subscribe = match call.method.as_str() {
            "logging/setLevel" => None,
            "resources/subscribe" => Some(true),
            "resources/unsubscribe" => Some(false),
            _ => return None,
        };
        if self.era().await != Some(Era::Modern) {
            return None;
        }
        let empty = || Some(Outcome::Result(jsonrpc::raw("{}")));
        let Some(on) = subscribe else {
            // Kept in `handle_request`; it travels as `_meta` logLevel from now on.
            return empty();
        };
        let Some(uri) = call
            .params
            .as_deref()
            .and_then(Fields::parse)
            .and_then(|f| f.get("uri").map(ToOwned::to_owned))
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
        else {
            return Some(refused(code::INVALID_PARAMS, "params.uri is required"));
        };
        let changed = {
            let mut g = lock(&self.held.uris);
            if on {
                if g.len() >= MAX_HOST_URIS && !g.contains(&uri) {
                    return Some(refused(
                        code::INVALID_PARAMS,
                        "too many resource subscriptions",
                    ));
                }
                g.insert(uri)
            } else {
                g.remove(&uri)
            }
        };
        if changed {
            // Answered once the re-opened listen is acknowledged (bounded).
            let mut acks = self.held.acks.subscribe();
            let before = *acks.borrow_and_update();
            if self.ensure_held() {
                self.held.resubscribe.notify_one();
            }
            if !self.held.unsupported.load(Ordering::Acquire) {
                let _ = tokio::time::timeout(LISTEN_SETUP, acks.wait_for(|n| *n > before)).await;
            }
        }
        empty()
    }

    /// Start the listen held for a 2025 host on a 2026 remote, once. False when it was
    /// already running.
    pub(super) fn ensure_held(self: &Arc<Self>) -> bool {
        if self.held.started.swap(true, Ordering::AcqRel) {
            return true;
        }
        let me = Arc::clone(self);
        self.tracker.spawn(async move { me.held_listen().await });
        false
    }

    /// Hold a `subscriptions/listen` on the 2026 remote for the 2025 host: its notifications
    /// go to stdout without `subscriptionId`; re-opened on a subscription change, and with
    /// backoff when it ends; closed (dropped) at shutdown.
    pub(super) async fn held_listen(self: Arc<Self>) {
        const FIRST: Duration = Duration::from_millis(500);
        let caps = self.capabilities().await;
        let mut backoff = FIRST;
        loop {
            let uris: Vec<String> = lock(&self.held.uris).iter().cloned().collect();
            let params = serde_json::json!({ "notifications": legacy_filter(&caps, &uris) });
            let stamp = Arc::clone(&lock(&self.host).stamp);
            let call = Call {
                method: "subscriptions/listen".into(),
                params: Some(jsonrpc::raw(&params.to_string())),
                ctx: CallCtx {
                    client_era: Era::Legacy,
                    stamp_meta: stamp,
                    session: None,
                    accepts_server_requests: false,
                    log_level: None,
                    tool: None,
                },
            };
            debug!(
                "holding a listen on the remote for the 2025 host ({} resources)",
                uris.len()
            );
            let opened = std::time::Instant::now();
            let mut acked = false;
            let o = match self.start(call).await {
                Err(o) => Ok(o),
                Ok(mut r) => {
                    let ended = loop {
                        tokio::select! {
                            biased;
                            _ = self.stopping.cancelled() => {
                                debug!("closing the listen held on the remote");
                                r.set_cancel_reason(RELEASED_BY_BRIDGE);
                                return;
                            }
                            _ = self.held.resubscribe.notified() => break None,
                            Some(ev) = r.events.recv() => self.held_event(ev, &mut acked).await,
                            o = &mut r.outcome => break Some(o),
                        }
                    };
                    let Some(o) = ended else {
                        r.set_cancel_reason(RELEASED_BY_BRIDGE);
                        backoff = FIRST;
                        continue;
                    };
                    while let Ok(ev) = r.events.try_recv() {
                        self.held_event(ev, &mut acked).await;
                    }
                    o
                }
            };
            if let Ok(Outcome::Error(e)) = &o {
                if protocol::error_code(e) == Some(code::METHOD_NOT_FOUND) {
                    warn!("the remote does not support subscriptions/listen: no notifications for the host");
                    self.held.unsupported.store(true, Ordering::Release);
                    // Wake whoever waits for an acknowledgement: none will come.
                    self.held.acks.send_modify(|n| *n += 1);
                    return;
                }
            }
            let why = match o {
                Ok(Outcome::Result(_)) => "the remote ended it".to_owned(),
                Ok(Outcome::Error(e)) => format!("error {}", e.get()),
                Ok(Outcome::Failed(e)) => e.to_string(),
                Err(_) => "internal: the call ended without an answer".to_owned(),
            };
            if acked && opened.elapsed() > Duration::from_secs(30) {
                backoff = FIRST;
            }
            warn!(
                "the listen held on the remote ended ({why}); re-opening in {} ms",
                backoff.as_millis()
            );
            tokio::select! {
                _ = self.stopping.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    pub(super) async fn held_event(self: &Arc<Self>, ev: CallEvent, acked: &mut bool) {
        match ev {
            CallEvent::Notification { method, .. }
                if method == "notifications/subscriptions/acknowledged" =>
            {
                *acked = true;
                info!("the listen held on the remote for the 2025 host is acknowledged");
                self.held.acks.send_modify(|n| *n += 1);
            }
            CallEvent::Notification { method, params } => {
                self.send(untagged(&method, params.as_deref())).await
            }
            CallEvent::ServerRequest { id, method, .. } => {
                self.refuse_server_request(id, &method).await
            }
        }
    }
}
