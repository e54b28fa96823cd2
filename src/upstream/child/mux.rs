//! The multiplexer of one child process: the pending map keyed by bridge-minted ids (the
//! same number is the call's progress token, so one lookup routes both responses and
//! progress), starting a call under such an id, cancelling it (also after its handle is gone,
//! for a detached 2025 call), and failing every call in flight when the process ends.
//!
//! It is the bottom of `upstream::child`: `Proc` knows nothing of supervision or routing, so
//! the map dies with its process and failing all calls on a crash is a single `drain()`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::call::{
    sinks, Call, CallHandle, CallSinks, Cancel, CancelOnDrop, Outcome, UpstreamInfo,
};
use crate::error::BridgeError;
use crate::jsonrpc;
use crate::metrics::Metrics;
use crate::protocol::{self, Era};

/// One call in flight in the child, under its minted id.
pub(super) struct Pending {
    pub(super) sinks: Option<CallSinks>,
    pub(super) method: Arc<str>,
    pub(super) client_era: Era,
    pub(super) session: Option<Arc<str>>,
    pub(super) accepts_server_requests: bool,
    /// Rank of the lowest log level the caller wants, if it wants logs.
    pub(super) log_rank: Option<usize>,
    /// The `tool` label of a `tools/call` (a listed name or `other`).
    pub(super) tool: Option<Arc<str>>,
}

/// One running process.
pub(super) struct Proc {
    pub(super) stdin: mpsc::Sender<Bytes>,
    /// Cancelled to make the writer close the child's stdin.
    pub(super) close_stdin: CancellationToken,
    pub(super) pending: Mutex<HashMap<u64, Pending>>,
    pub(super) info: RwLock<Option<UpstreamInfo>>,
    /// The log level set on this (2025) child by the bridge.
    pub(super) log_floor: crate::era::notifications::LogFloor,
    /// tool name → (lowercase header name, property) for `Mcp-Param-*` checks.
    pub(super) tool_headers: RwLock<HashMap<String, Vec<(String, String)>>>,
    /// Tool names from the last `tools/list`: the only ones used as metric labels.
    pub(super) tool_names: RwLock<crate::metrics::ToolNames>,
    /// `tools/list_changed` seen and not yet re-read: 0 none, 1 a refresh runs, >1 one more.
    pub(super) tools_changed: std::sync::atomic::AtomicUsize,
}

/// Cancels one call in the child after its handle is gone (a detached 2025 call).
struct ChildCancel {
    proc: Arc<Proc>,
    id: u64,
}

impl Cancel for ChildCancel {
    fn pending(&self) -> bool {
        lock(&self.proc.pending).contains_key(&self.id)
    }
    fn cancel(&self, reason: &str) -> bool {
        self.proc.cancel(self.id, reason)
    }
}

impl Proc {
    /// A fresh process's state around the sender of its stdin queue.
    pub(super) fn new(stdin: mpsc::Sender<Bytes>) -> Self {
        Self {
            stdin,
            close_stdin: CancellationToken::new(),
            pending: Mutex::new(HashMap::new()),
            info: RwLock::new(None),
            log_floor: crate::era::notifications::LogFloor::default(),
            tool_headers: RwLock::new(HashMap::new()),
            tool_names: RwLock::new(crate::metrics::ToolNames::default()),
            tools_changed: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Start `call` on this `child_era` child under the minted `id`, which is also its
    /// progress token. A 2026 child gets the caller's session `_meta` stamped on, except on
    /// the bridge's own (`internal`) calls. Dropping the handle cancels the call, counted in
    /// `metrics` by its reason.
    pub(super) fn start(
        self: &Arc<Self>,
        id: u64,
        child_era: Era,
        call: Call,
        internal: bool,
        metrics: &Arc<Metrics>,
    ) -> Result<CallHandle, BridgeError> {
        let id_s = id.to_string();
        let stamp: Vec<(&str, &RawValue)> = if child_era == Era::Modern && !internal {
            call.ctx
                .stamp_meta
                .iter()
                .map(|(k, v)| (k.as_str(), &**v))
                .collect()
        } else {
            Vec::new()
        };
        let rewritten =
            jsonrpc::rewrite_request_params(call.params.as_deref(), Some(&id_s), &stamp);
        let params = rewritten
            .as_deref()
            .or(call.params.as_deref().map(RawValue::get));
        let frame = jsonrpc::request(&id_s, &call.method, params);
        let (s, events, outcome) = sinks();
        lock(&self.pending).insert(
            id,
            Pending {
                sinks: Some(s),
                method: Arc::from(call.method.as_str()),
                client_era: if internal {
                    child_era
                } else {
                    call.ctx.client_era
                },
                session: call.ctx.session.clone(),
                accepts_server_requests: call.ctx.accepts_server_requests,
                log_rank: call
                    .ctx
                    .log_level
                    .and_then(protocol::log_level)
                    .map(|(_, r)| r),
                tool: crate::upstream::observe::tool_label(&self.tool_names, &call),
            },
        );
        if self.stdin.try_send(frame).is_err() {
            lock(&self.pending).remove(&id);
            return Err(BridgeError::Overloaded);
        }
        Ok(CallHandle::new(
            events,
            outcome,
            Box::new(CancelOnDrop::new(
                Arc::new(ChildCancel {
                    proc: self.clone(),
                    id,
                }),
                id,
                metrics.clone(),
            )),
        ))
    }

    /// Fail every call in flight: the process is gone (`why`), or the bridge is shutting down.
    pub(super) fn fail_all(&self, why: &str) {
        let drained: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        for p in drained {
            if let Some(s) = p.sinks {
                let e = if why == "shutting down" {
                    BridgeError::ShuttingDown
                } else {
                    BridgeError::ChildExited(why.to_owned())
                };
                let _ = s.outcome.send(Outcome::Failed(e));
            }
        }
    }

    /// Remove a pending call and tell the child. Returns whether it was still pending.
    pub(super) fn cancel(&self, id: u64, reason: &str) -> bool {
        let removed = lock(&self.pending).remove(&id).is_some();
        if removed {
            let params = serde_json::json!({ "requestId": id, "reason": reason }).to_string();
            let frame = jsonrpc::notification("notifications/cancelled", Some(&params));
            let _ = self.stdin.try_send(frame);
        }
        removed
    }

    /// What the probe learned, once it has.
    pub(super) fn info(&self) -> Option<UpstreamInfo> {
        self.info.read().ok().and_then(|g| g.clone())
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
