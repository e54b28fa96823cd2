//! Calls to the remote upstream: `call` for either era (`call_modern`, `call_legacy`, retry
//! safety), the answer to a 2025 server request, notifications, and the guard that posts
//! `notifications/cancelled` when a 2025 call is dropped unanswered.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::fault::Fault;
use super::probe::discover_from_init;
use super::{Mode, Remote, Session};
use crate::call::{Call, EventSender, Outcome};
use crate::jsonrpc::{self, code, Envelope};
use crate::protocol;

impl Remote {
    /// Carry one call to the remote. Dropping the future cancels it there.
    pub async fn call(self: &Arc<Self>, call: Call, events: EventSender) -> Outcome {
        let fut = self.call_inner(&call, &events);
        // A listen stream stays open as long as its subscriber wants: no request timeout.
        let limit = self
            .cfg
            .request_timeout
            .filter(|_| call.method != "subscriptions/listen");
        let o = match limit {
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(o) => o,
                Err(_) => {
                    warn!("{} timed out after {} ms", call.method, t.as_millis());
                    self.obs.cancelled("timeout");
                    self.fault_outcome(&Fault::Timeout(t.as_millis() as u64))
                }
            },
            None => fut.await,
        };
        self.obs.answered(&call, &o);
        o
    }

    pub(super) async fn call_inner(self: &Arc<Self>, call: &Call, events: &EventSender) -> Outcome {
        let mode = match self.mode().await {
            Ok(m) => m,
            Err(f) => return self.fault_outcome(&f),
        };
        match mode {
            Mode::Modern => self.call_modern(call, events).await,
            Mode::Legacy { version } => self.call_legacy(call, events, &version).await,
        }
    }

    pub(super) fn retry_safe(&self, call: &Call) -> bool {
        if !self.cfg.retry_idempotent {
            return false;
        }
        if call.method != "tools/call" {
            // Reads and lists have no side effects.
            return matches!(
                call.method.as_str(),
                "tools/list"
                    | "prompts/list"
                    | "prompts/get"
                    | "resources/list"
                    | "resources/read"
                    | "resources/templates/list"
                    | "server/discover"
            );
        }
        self.called_tool(call).is_some_and(|t| t.retry_safe)
    }

    /// What is known of the tool a `tools/call` names (None: not listed yet, or not a call).
    fn called_tool(&self, call: &Call) -> Option<super::ToolInfo> {
        jsonrpc::Fields::parse(call.params.as_deref().unwrap_or(&jsonrpc::raw("{}")))
            .and_then(|f| f.get("name").map(|n| n.get().to_owned()))
            .and_then(|n| serde_json::from_str::<String>(&n).ok())
            .and_then(|n| self.tool(&n))
    }

    /// `retry_safe` for a 2026 call that has just failed in transport: a tool not listed yet
    /// is looked up first (the tool list fetched), so `--retry-idempotent` knows its
    /// annotations. Only on this failure path: a call never waits for a list of its own.
    async fn retry_safe_after_failure(&self, call: &Call) -> bool {
        if self.cfg.retry_idempotent
            && call.method == "tools/call"
            && self.called_tool(call).is_none()
        {
            Box::pin(self.refresh_tools()).await;
        }
        self.retry_safe(call)
    }

    pub(super) async fn call_modern(
        self: &Arc<Self>,
        call: &Call,
        events: &EventSender,
    ) -> Outcome {
        // A 2025 caller's envelope and level were stamped on by the core (`core::start`).
        let params = call.params.as_deref();
        // params and its `_meta` parsed once (borrowed) for the version, the name and the headers.
        let view = jsonrpc::ParamsView::parse(params);
        let version = view
            .meta(protocol::META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .unwrap_or_else(|| protocol::MODERN.to_owned());
        // A tool not listed yet (a client that calls from a cached list, without `tools/list`):
        // listed first only if `learn_tools_first` (its metrics label, headers and
        // annotations). Otherwise it is sent without `Mcp-Param-*` headers; a remote that
        // needs them answers -32020, and then the list is fetched and the call retried once
        // (below, the spec's recovery), so the first call costs one round trip, not two.
        if self.cfg.learn_tools_first && call.method == "tools/call" {
            let name = view
                .get("name")
                .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
            if name.is_some_and(|n| self.tool(&n).is_none()) {
                Box::pin(self.refresh_tools()).await;
            }
        }
        let mut header_retry_left = true;
        let mut transport_retry_left = self.cfg.retry_idempotent;
        loop {
            let mut h = self.modern_headers(&version, &call.method);
            self.name_headers(&mut h, &call.method, view.fields.as_ref());
            let id = self.mint();
            let frame = jsonrpc::request(&id.to_string(), &call.method, params.map(RawValue::get));
            let ans = match self.exchange(frame, &h, Some(id), Some(events), None).await {
                Ok(a) => a,
                Err(f) => {
                    let retry = transport_retry_left
                        && f.may_have_reached()
                        && !matches!(f, Fault::Timeout(_))
                        && self.retry_safe_after_failure(call).await;
                    if !retry {
                        return self.fault_outcome(&f);
                    }
                    warn!(
                        "{} failed ({}); retrying once (--retry-idempotent)",
                        call.method,
                        f.reason()
                    );
                    transport_retry_left = false;
                    continue;
                }
            };
            let Some(frame) = ans.frame else {
                return self.malformed("the remote accepted the request without answering");
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return self.malformed("unparsable response");
            };
            if let Some(e) = env.error {
                if protocol::error_code(e) == Some(code::HEADER_MISMATCH) && header_retry_left {
                    info!(
                        "{} rejected with -32020: refreshing the tool list and retrying once",
                        call.method
                    );
                    header_retry_left = false;
                    Box::pin(self.refresh_tools()).await;
                    continue;
                }
                return Outcome::Error(ToOwned::to_owned(e));
            }
            let Some(r) = env.result else {
                return self.malformed("response without result");
            };
            let filtered = if call.method == "tools/list" {
                self.learn_tools(r, true).map(|f| jsonrpc::raw(&f))
            } else {
                None
            };
            let r: &RawValue = filtered.as_deref().unwrap_or(r);
            // As the remote said it: the core translates it for the caller's era.
            return Outcome::Result(ToOwned::to_owned(r));
        }
    }

    pub(super) async fn call_legacy(
        self: &Arc<Self>,
        call: &Call,
        events: &EventSender,
        version: &str,
    ) -> Outcome {
        let mut session_retry_left = true;
        let mut transport_retry_left = self.retry_safe(call);
        loop {
            let s = match self.ensure_session(version).await {
                Ok(s) => s,
                Err(f) => return self.fault_outcome(&f),
            };
            if call.method == "server/discover" {
                return Outcome::Result(jsonrpc::raw(&discover_from_init(&s.init_result)));
            }
            let id = self.mint();
            // The 2026 envelope was taken off by the core (`crate::core`, rule 2).
            let params = call.params.as_deref().map(RawValue::get);
            let frame = jsonrpc::request(&id.to_string(), &call.method, params);
            // The exchange runs in its own task (on the remote's tracker) so that a cancelled
            // call can post `notifications/cancelled` *before* its response stream is closed
            // (a 2025 server may forget the request once its stream is gone): dropping this
            // call drops the guard, which tells the task.
            let dropped = CancellationToken::new();
            let task = {
                let (me, events, s) = (Arc::clone(self), events.clone(), s.clone());
                let dropped = dropped.clone();
                self.tracker.spawn(async move {
                    let h = me.session_headers(&s);
                    let exchange = me.exchange(frame, &h, Some(id), Some(&events), Some(&s));
                    tokio::pin!(exchange);
                    tokio::select! {
                        r = &mut exchange => Some(r),
                        _ = dropped.cancelled() => {
                            me.post_cancelled(&s, id).await;
                            None
                        }
                    }
                })
            };
            let guard = dropped.drop_guard();
            let res = match task.await {
                Ok(Some(r)) => r,
                Ok(None) => Err(Fault::Broken("cancelled".into())),
                Err(e) => Err(Fault::Broken(format!("internal: {e}"))),
            };
            guard.disarm();
            let ans = match res {
                Ok(a) => a,
                Err(Fault::SessionGone) => {
                    // A 404 means the request was not processed: safe to send again.
                    self.drop_session(s.generation).await;
                    if session_retry_left {
                        session_retry_left = false;
                        continue;
                    }
                    return self.fault_outcome(&Fault::SessionGone);
                }
                Err(f) if transport_retry_left && f.may_have_reached() => {
                    warn!(
                        "{} failed ({}); retrying once (--retry-idempotent)",
                        call.method,
                        f.reason()
                    );
                    transport_retry_left = false;
                    continue;
                }
                Err(f) => {
                    if let Fault::Broken(_) = f {
                        // The stream died: maybe the session went with it; check lazily.
                        debug!("{} lost its response stream", call.method);
                    }
                    return self.fault_outcome(&f);
                }
            };
            let Some(frame) = ans.frame else {
                return self.malformed("the remote accepted the request without answering");
            };
            let Ok(env) = Envelope::parse(&frame) else {
                return self.malformed("unparsable response");
            };
            if let Some(e) = env.error {
                return Outcome::Error(ToOwned::to_owned(e));
            }
            let Some(r) = env.result else {
                return self.malformed("response without result");
            };
            if call.method == "tools/list" {
                let _ = self.learn_tools(r, false);
            }
            // As the remote said it: the core translates it for the caller's era.
            return Outcome::Result(ToOwned::to_owned(r));
        }
    }

    /// Send the host's answer to a 2025 server request back under the remote's id.
    pub async fn respond(
        self: &Arc<Self>,
        remote_id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) {
        let Ok(Mode::Legacy { version }) = self.mode().await else {
            return;
        };
        let frame = match (result, error) {
            (Some(r), _) => jsonrpc::result(remote_id.get(), r.get()),
            (None, Some(e)) => jsonrpc::error_raw(Some(remote_id.get()), e.get()),
            (None, None) => return,
        };
        let Ok(s) = self.ensure_session(&version).await else {
            return;
        };
        if let Err(f) = self
            .exchange(frame, &self.session_headers(&s), None, None, Some(&s))
            .await
        {
            warn!("could not deliver an answer to the remote: {}", f.reason());
        }
    }

    /// Forward a host notification (2025 remote only; 2026 has no client notifications on HTTP).
    pub async fn notify(self: &Arc<Self>, method: &str, params: Option<&RawValue>) {
        let Ok(Mode::Legacy { version }) = self.mode().await else {
            debug!("dropping host notification {method}: a 2026 remote takes none");
            return;
        };
        let Ok(s) = self.ensure_session(&version).await else {
            return;
        };
        let frame = jsonrpc::notification(method, params.map(RawValue::get));
        if let Err(f) = self
            .exchange(frame, &self.session_headers(&s), None, None, Some(&s))
            .await
        {
            warn!("could not deliver {method} to the remote: {}", f.reason());
        }
    }
}

impl Remote {
    /// Tell a 2025 remote that request `id` of session `s` was dropped unanswered.
    async fn post_cancelled(&self, s: &Session, id: u64) {
        info!("cancelling request {id} on the remote");
        let params = format!("{{\"requestId\":{id},\"reason\":\"cancelled by the client\"}}");
        let frame = jsonrpc::notification("notifications/cancelled", Some(&params));
        let h = self.session_headers(s);
        if let Err(f) = self.exchange(frame, &h, None, None, Some(s)).await {
            debug!("notifications/cancelled not delivered: {}", f.reason());
        }
    }
}
