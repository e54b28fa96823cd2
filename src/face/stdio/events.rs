//! Forwarding from the remote to the stdio host: call events, traffic that belongs to no call
//! (fan-out, log routing) and 2025 server requests (relayed or refused).

use std::sync::Arc;

use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::{lock, Face, Listener, Who};
use crate::call::CallEvent;
use crate::era::mrtr;
use crate::era::notifications::{is_listen_notification, retagged, subscription_id, tagged};
use crate::jsonrpc::{self, code};
use crate::protocol::{self, Era};

impl Face {
    pub(super) async fn forward_call_event(self: &Arc<Self>, ev: CallEvent, who: &Who) {
        match ev {
            CallEvent::Notification { method, .. }
                if who.modern && mrtr::is_legacy_only_notification(&method) =>
            {
                debug!("not relaying {method} to a 2026 host");
                self.obs.dropped("legacy_only_notification");
            }
            CallEvent::Notification { method, params } => {
                let params = params.as_deref();
                // A log message below the request's level never gets here (`crate::core`).
                if who.modern {
                    if let Some(lid) = &who.listen {
                        if subscription_id(params).is_some() {
                            self.send(retagged(&method, params, lid)).await;
                            return;
                        }
                    } else if is_listen_notification(&method) && subscription_id(params).is_none() {
                        // A 2025 remote's change notification on a call's stream.
                        self.fan_out(&method, params).await;
                        return;
                    }
                }
                self.send(jsonrpc::notification(&method, params.map(RawValue::get)))
                    .await
            }
            CallEvent::ServerRequest { id, method, params } => {
                if who.modern {
                    self.refuse_server_request(id, &method).await;
                } else {
                    self.relay_server_request(id, &method, params).await;
                }
            }
        }
    }

    /// Traffic from the GET stream.
    pub(super) async fn forward_event(self: &Arc<Self>, ev: CallEvent) {
        let modern_host = lock(&self.host).era == Some(Era::Modern);
        match ev {
            CallEvent::Notification { method, params } => {
                let params = params.as_deref();
                if modern_host && method != "notifications/progress" {
                    if is_listen_notification(&method) {
                        self.fan_out(&method, params).await;
                    } else if method == "notifications/message" {
                        self.route_log(params).await;
                    } else {
                        debug!("not relaying {method} to a 2026 host");
                        if mrtr::is_legacy_only_notification(&method) {
                            self.obs.dropped("legacy_only_notification");
                        }
                    }
                    return;
                }
                self.send(jsonrpc::notification(&method, params.map(RawValue::get)))
                    .await
            }
            ev @ CallEvent::ServerRequest { .. } => {
                let ev = if modern_host {
                    match self.claim_server_request(ev) {
                        Ok(()) => return,
                        Err(ev) => ev,
                    }
                } else {
                    ev
                };
                let who = Who {
                    modern: modern_host,
                    ..Who::default()
                };
                self.forward_call_event(ev, &who).await
            }
        }
    }

    /// A 2025 remote's change notification to every listen of the 2026 host that asked for
    /// it, tagged with the listen's id.
    pub(super) async fn fan_out(self: &Arc<Self>, method: &str, params: Option<&RawValue>) {
        let to: Vec<Arc<Listener>> = lock(&self.listens)
            .values()
            .filter(|l| l.honoured.wants(method, params))
            .cloned()
            .collect();
        if to.is_empty() {
            debug!("no listen asked for {method}: dropped");
        }
        for l in to {
            self.send(tagged(method, params, &l.id)).await;
        }
    }

    /// A 2025 remote's log message that names no request (GET stream): a 2026 host gets it
    /// when exactly one request in flight asked for logs, filtered by that request's level.
    pub(super) async fn route_log(self: &Arc<Self>, params: Option<&RawValue>) {
        let rank = {
            self.inflight.with(|g| {
                let mut asking = g.values().filter_map(|c| c.log_rank);
                match (asking.next(), asking.next()) {
                    (Some(r), None) => Some(r),
                    _ => None,
                }
            })
        };
        if rank.is_some_and(|r| protocol::message_rank(params) >= r) {
            self.send(jsonrpc::notification(
                "notifications/message",
                params.map(RawValue::get),
            ))
            .await;
        } else {
            debug!("a log message for no single request dropped");
        }
    }

    pub(super) async fn relay_server_request(
        self: &Arc<Self>,
        remote_id: Box<RawValue>,
        method: &str,
        params: Option<Box<RawValue>>,
    ) {
        let caps = self.caller.caps();
        if !mrtr::may_ask(caps.as_deref(), method, params.as_deref()) {
            info!("the remote sent {method}, which the 2025 host did not declare: refused");
            self.obs.dropped("undeclared_capability");
            let err = jsonrpc::raw(&jsonrpc::error_object(
                code::METHOD_NOT_FOUND,
                &format!("the client did not declare the capability {method} needs"),
                None,
            ));
            self.respond_upstream(&remote_id, None, Some(&err));
            return;
        }
        let ours = mrtr::mint_request_id();
        if let Err(full) = self.server_requests.insert(ours.clone(), remote_id) {
            let remote_id = full.0;
            {
                // The host does not keep up with answering: counted as serve counts a client
                // that reads too slowly, and the remote is told at once instead of waiting.
                warn!("{method} from the remote refused: {} requests already wait for the host's answer", super::MAX_SERVER_REQUESTS);
                self.obs.dropped("slow_consumer");
                let err = jsonrpc::raw(&jsonrpc::error_object(
                    code::INTERNAL_ERROR,
                    "mcp-bridge could not deliver this request: too many requests already wait for the client's answer",
                    None,
                ));
                self.respond_upstream(&remote_id, None, Some(&err));
                return;
            }
        }
        debug!("relaying the remote's {method} to the host as {ours}");
        self.send(jsonrpc::request(
            &ours,
            method,
            params.as_deref().map(RawValue::get),
        ))
        .await;
    }

    pub(super) async fn refuse_server_request(
        self: &Arc<Self>,
        remote_id: Box<RawValue>,
        method: &str,
    ) {
        warn!(
            "the 2025 remote sent {method} to a 2026 host outside a call that could ask it \
             (none, or more than one, is running): refused"
        );
        let err = jsonrpc::raw(&jsonrpc::error_object(
            code::METHOD_NOT_FOUND,
            "the client (a 2026-era host behind mcp-bridge) can answer a server request only \
             within the one tools/call, prompts/get or resources/read it is for",
            None,
        ));
        self.respond_upstream(&remote_id, None, Some(&err));
    }
}
