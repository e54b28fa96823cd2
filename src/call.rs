//! The core's vocabulary: a `Call` (one request from a face to an upstream, with its
//! context) and what comes back for it (`CallEvent`s, then exactly one `Outcome`).
//! Dropping a `CallHandle` before its outcome cancels the call upstream.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::protocol::Era;

/// Who asks, and how to speak to the upstream on their behalf.
#[derive(Debug, Clone)]
pub struct CallCtx {
    /// The era of the peer that asked.
    pub client_era: Era,
    /// `_meta` entries to add when the upstream is 2026-era and the request lacks them
    /// (a 2025 client's session: protocol version, capabilities, client info).
    pub stamp_meta: StampMeta,
    /// The 2025 session that owns the call, if any (attribution of server requests).
    pub session: Option<Arc<str>>,
    /// Can this caller receive requests from the upstream on the call's stream?
    pub accepts_server_requests: bool,
    /// The lowest log level the caller wants on its stream (`notifications/message`), if any.
    pub log_level: Option<&'static str>,
    /// A `tools/call`'s tool name when the face has read it already (saves the upstream a
    /// parse of the params for its metrics label).
    pub tool: Option<Box<str>>,
}

impl CallCtx {
    pub fn modern() -> Self {
        // One shared empty list: a 2026 call stamps nothing (no allocation per call).
        static NOTHING: std::sync::OnceLock<StampMeta> = std::sync::OnceLock::new();
        Self {
            client_era: Era::Modern,
            stamp_meta: NOTHING.get_or_init(|| Arc::new(Vec::new())).clone(),
            session: None,
            accepts_server_requests: false,
            log_level: None,
            tool: None,
        }
    }
}

/// One request on its way upstream.
#[derive(Debug)]
pub struct Call {
    pub method: String,
    pub params: Option<Box<RawValue>>,
    pub ctx: CallCtx,
}

/// Something the upstream sent for a call before its final answer.
#[derive(Debug)]
pub enum CallEvent {
    /// A request-scoped notification. Its params still hold the bridge's own progress token
    /// / subscription id; the face restores the caller's.
    Notification {
        method: String,
        params: Option<Box<RawValue>>,
    },
    /// A request the upstream asks of the client (2025 era), under the upstream's own id.
    ServerRequest {
        id: Box<RawValue>,
        method: String,
        params: Option<Box<RawValue>>,
    },
}

/// The final answer for a call.
#[derive(Debug)]
pub enum Outcome {
    /// A result object, already translated into the caller's era.
    Result(Box<RawValue>),
    /// An error object from the upstream.
    Error(Box<RawValue>),
    /// The bridge answers instead of the upstream: it could not get an answer (child exited,
    /// not ready, overloaded; a remote that cannot be reached or answered an HTTP error), or
    /// the face refused the request itself. Counted as `source="bridge"`.
    Failed(crate::error::BridgeError),
}

/// Senders kept in the upstream's pending map.
pub struct CallSinks {
    pub events: mpsc::Sender<CallEvent>,
    pub outcome: oneshot::Sender<Outcome>,
}

/// `_meta` entries stamped onto a call, shared by every call of a session.
pub type StampMeta = Arc<Vec<(String, Box<RawValue>)>>;

/// Capacity of a call's event queue. A consumer that falls this far behind loses
/// notifications (counted), never the final answer.
pub const EVENT_QUEUE: usize = 64;

pub fn sinks() -> (
    CallSinks,
    mpsc::Receiver<CallEvent>,
    oneshot::Receiver<Outcome>,
) {
    let (etx, erx) = mpsc::channel(EVENT_QUEUE);
    let (otx, orx) = oneshot::channel();
    (
        CallSinks {
            events: etx,
            outcome: otx,
        },
        erx,
        orx,
    )
}
