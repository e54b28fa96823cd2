//! Routing what a child writes on stdout: a response completes its pending call (with the
//! result translated into the caller's era and the tool-result metric counted), a
//! request-scoped notification goes to its call (progress by token, listen traffic by
//! subscription id), a log message to the one caller that asked for logs or else to the
//! session streams, other notifications to every subscriber, and the child's own requests to
//! the one caller that can answer them (or its session, or an honest error: `-32021` when
//! only 2026 callers that declared no such capability are in flight).
//!
//! An over-long line that starts like a response fails that call at once. Routing only
//! reads the multiplexer's pending map (`mux`); a tool-list change starts a refresh (`probe`).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use super::mux::{lock, Pending, Proc};
use super::ChildUpstream;
use crate::call::{CallEvent, EventSender, Outcome, UpstreamEvent};
use crate::framing::{Line, LineDecoder};
use crate::jsonrpc::{self, Envelope, Fields, Kind};
use crate::protocol;

impl ChildUpstream {
    pub(super) async fn read_stdout(&self, proc: Arc<Proc>, stdout: tokio::process::ChildStdout) {
        let name = self.inner.cfg.name.clone();
        let mut lines =
            FramedRead::with_capacity(stdout, LineDecoder::new(self.inner.cfg.max_line), 64 * 1024);
        while let Some(item) = lines.next().await {
            match item {
                Ok(Line::Frame(f)) => self.on_frame(&proc, f),
                Ok(Line::Oversize(n, head)) => {
                    self.inner.metrics.dropped("oversize");
                    warn!(server = %name, bytes = n, "child wrote a line over the limit; skipped");
                    self.fail_oversize_response(&proc, &head, n);
                }
                Err(e) => {
                    warn!(server = %name, "reading child stdout failed: {e}");
                    break;
                }
            }
        }
        debug!(server = %name, "child stdout closed");
    }

    /// An over-long line that starts like a response to one of our calls fails that call now
    /// instead of leaving it to its timeout.
    fn fail_oversize_response(&self, proc: &Arc<Proc>, head: &[u8], len: usize) {
        let Some(id) = response_id_in_head(head) else {
            return;
        };
        let Some(p) = lock(&proc.pending).remove(&id) else {
            return;
        };
        if let Some(s) = p.sinks {
            let msg = format!(
                "the upstream's response ({len} bytes) exceeds the bridge's line limit ({} bytes; see --max-line)",
                self.inner.cfg.max_line
            );
            let e = jsonrpc::error_object(
                jsonrpc::code::INTERNAL_ERROR,
                &msg,
                Some(&serde_json::json!({"reason": "response_too_large"})),
            );
            self.inner.metrics.rpc_error(
                &self.inner.cfg.name,
                &p.method,
                jsonrpc::code::INTERNAL_ERROR,
                "bridge",
            );
            let _ = s.outcome.send(Outcome::Error(jsonrpc::raw(&e)));
        }
    }

    fn on_frame(&self, proc: &Arc<Proc>, f: Bytes) {
        if jsonrpc::first_non_ws(&f).is_none() {
            return; // blank line
        }
        let env = match Envelope::parse(&f) {
            Ok(e) => e,
            Err(e) => {
                self.inner.metrics.dropped("malformed");
                warn!(server = %self.inner.cfg.name, "child wrote a line that is not a JSON-RPC message ({e}); skipped");
                return;
            }
        };
        match env.kind() {
            Ok(Kind::Response) => self.on_response(proc, &env),
            Ok(Kind::Notification) => self.on_notification(proc, &env, &f),
            Ok(Kind::Request) => self.on_request(proc, &env, &f),
            Err(_) => {
                self.inner.metrics.dropped("malformed");
                warn!(server = %self.inner.cfg.name, "child wrote a JSON object that is not a JSON-RPC message; skipped");
            }
        }
    }

    fn on_response(&self, proc: &Arc<Proc>, env: &Envelope<'_>) {
        let Some(id) = env.id.and_then(jsonrpc::minted_u64) else {
            self.inner.metrics.dropped("unknown_id");
            warn!(server = %self.inner.cfg.name, id = env.id.map(|i| i.get()).unwrap_or(""), "response with an id the bridge never sent; dropped");
            return;
        };
        let Some(p) = lock(&proc.pending).remove(&id) else {
            self.inner.metrics.dropped("unknown_id");
            debug!(server = %self.inner.cfg.name, id, "response for no pending call (late or cancelled); dropped");
            return;
        };
        let Some(sinks) = p.sinks else { return };
        let outcome = match (env.result, env.error) {
            (Some(r), _) => {
                if &*p.method == "tools/call" {
                    self.inner.metrics.tool_result(
                        &self.inner.cfg.name,
                        p.tool.as_deref().unwrap_or("other"),
                        protocol::is_tool_error(r),
                    );
                }
                // As the child said it: the core translates it for the caller's era.
                Outcome::Result(r.to_owned())
            }
            (None, Some(e)) => {
                self.inner.metrics.rpc_error(
                    &self.inner.cfg.name,
                    &p.method,
                    protocol::error_code(e).unwrap_or(0),
                    "upstream",
                );
                Outcome::Error(e.to_owned())
            }
            (None, None) => return,
        };
        let _ = sinks.outcome.send(outcome);
    }

    fn on_notification(&self, proc: &Arc<Proc>, env: &Envelope<'_>, frame: &Bytes) {
        let method = env.method();
        if method == "notifications/tools/list_changed" {
            self.tools_changed(proc);
        }
        // Request-scoped: progress (token = our id) and listen-stream traffic (subscription id).
        let target = if method == "notifications/progress" {
            env.params
                .and_then(Fields::parse)
                .and_then(|f| f.get("progressToken").and_then(jsonrpc::minted_u64))
        } else if env
            .params
            .map(|p| memchr::memmem::find(p.get().as_bytes(), b"subscriptionId").is_some())
            .unwrap_or(false)
        {
            jsonrpc::meta_field(env.params, protocol::META_SUBSCRIPTION_ID)
                .and_then(jsonrpc::minted_u64)
        } else {
            None
        };
        if let Some(id) = target {
            let guard = lock(&proc.pending);
            if let Some(Some(s)) = guard.get(&id).map(|p| p.sinks.as_ref()) {
                let ev = CallEvent::Notification {
                    method: method.to_owned(),
                    params: env.params.map(|p| p.to_owned()),
                };
                if s.events.try_send(ev).is_err() {
                    self.inner.metrics.dropped("slow_consumer");
                }
            } else {
                self.inner.metrics.dropped("unknown_id");
            }
            return;
        }
        if method == "notifications/progress" {
            self.inner.metrics.dropped("unknown_id");
            return;
        }
        // A log message names no request; when exactly one caller in flight asked for logs it
        // is that caller's (filtered by its level), otherwise it goes to the session streams.
        if method == "notifications/message" {
            let g = lock(&proc.pending);
            let mut wanting = g
                .values()
                .filter(|p| p.sinks.is_some() && p.log_rank.is_some());
            if let (Some(p), None) = (wanting.next(), wanting.next()) {
                if let Some(s) = &p.sinks {
                    // Its level is the call's own floor (`crate::core`), applied on its queue.
                    let ev = CallEvent::Notification {
                        method: method.to_owned(),
                        params: env.params.map(|p| p.to_owned()),
                    };
                    if s.events.try_send(ev).is_err() {
                        self.inner.metrics.dropped("slow_consumer");
                    }
                    return;
                }
            }
        }
        let _ = self
            .inner
            .events
            .send(UpstreamEvent::Notification(frame.clone()));
    }

    fn on_request(&self, proc: &Arc<Proc>, env: &Envelope<'_>, frame: &Bytes) {
        let Some(id) = env.id else { return };
        let method = env.method();
        if method == "ping" {
            let _ = proc.stdin.try_send(jsonrpc::result(id.get(), "{}"));
            return;
        }
        // Attribute the request to a caller that can answer it.
        enum Route {
            Call(EventSender),
            Session(Arc<str>),
            Nobody(&'static str),
            /// Only 2026 callers' calls are in flight and none declared what it needs.
            Undeclared,
        }
        let route = {
            let g = lock(&proc.pending);
            // Only calls whose caller can answer (a 2025 client on a stream, or a 2026 client
            // of a method that may return input_required) are candidates; a call parked for
            // its own caller's input is not (its caller may never come back).
            let callers: Vec<&Pending> = g.values().filter(|p| p.may_be_asked()).collect();
            let sessions: std::collections::HashSet<Option<&Arc<str>>> =
                callers.iter().map(|p| p.session.as_ref()).collect();
            if callers.len() == 1 {
                match &callers[0].sinks {
                    Some(s) => Route::Call(s.events.clone()),
                    None => Route::Nobody("the call ended"),
                }
            } else if callers.len() > 1 && sessions.len() == 1 {
                match sessions.into_iter().next().flatten() {
                    Some(s) => Route::Session(s.clone()),
                    None => {
                        Route::Nobody("several 2026 calls are running; cannot tell which one asks")
                    }
                }
            } else if callers.is_empty() {
                // A parked call is no addressee either, but its caller did declare what it
                // was asked: only calls still running tell an undeclared capability.
                let mut live = g
                    .values()
                    .filter(|p| p.sinks.is_some() && !p.parked)
                    .peekable();
                let only_2026 = live.peek().is_some() && live.all(|p| p.modern_caller);
                match &self.inner.owner_session {
                    Some(s) => Route::Session(s.clone()),
                    None if only_2026 => Route::Undeclared,
                    None => Route::Nobody("no request in flight whose client can answer it"),
                }
            } else {
                Route::Nobody("several clients share this child; cannot tell whom it asks (use --isolation session)")
            }
        };
        let delivered = match route {
            Route::Call(tx) => tx
                .try_send(CallEvent::ServerRequest {
                    id: id.to_owned(),
                    method: method.to_owned(),
                    params: env.params.map(|p| p.to_owned()),
                })
                .map_err(|_| "the client's stream is not keeping up"),
            Route::Session(s) => self
                .inner
                .events
                .send(UpstreamEvent::ServerRequest {
                    session: s,
                    frame: frame.clone(),
                })
                .map(|_| ())
                .map_err(|_| "the client session has no open stream"),
            Route::Nobody(why) => Err(why),
            Route::Undeclared => {
                // Every caller that could be asking is a 2026 one that did not declare the
                // capability: refused the 2026 way (`era::mrtr::missing_capability_refusal`).
                self.inner.metrics.dropped("undeclared_capability");
                let msg = format!(
                    "the client did not declare the capability {method} needs in this request"
                );
                let refusal = crate::era::mrtr::missing_capability_refusal(
                    id.get(),
                    method,
                    env.params,
                    &msg,
                );
                let _ = proc.stdin.try_send(refusal);
                return;
            }
        };
        if let Err(why) = delivered {
            if method != "roots/list" {
                self.inner.metrics.dropped("unroutable_request");
                warn!(server = %self.inner.cfg.name, method, "cannot deliver the child's request: {why}");
            }
            // `crate::core`, rule 5: no roots, or an error naming why.
            let _ = proc
                .stdin
                .try_send(crate::core::unroutable_answer(id.get(), method, why));
        }
    }
}

/// The bridge-minted id of a response whose line starts with `head`, if it looks like one:
/// `"id":<digits>` before any `"method"` key.
fn response_id_in_head(head: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(head, b"\"id\"")?;
    if memchr::memmem::find(&head[..at], b"\"method\"").is_some() {
        return None;
    }
    let rest = &head[at + 4..];
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    let rest = rest.strip_prefix(b":")?;
    let digits: Vec<u8> = rest
        .iter()
        .copied()
        .skip_while(|b| *b == b' ' || *b == b'"')
        .take_while(u8::is_ascii_digit)
        .collect();
    std::str::from_utf8(&digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_response_ids_in_heads() {
        use super::response_id_in_head as f;
        assert_eq!(
            f(br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"#),
            Some(42)
        );
        assert_eq!(f(br#"{"id": "7","result""#), Some(7));
        assert_eq!(f(br#"{"jsonrpc":"2.0","method":"x","id":3"#), None);
        assert_eq!(f(b"xxxxxxxx"), None);
    }
}
