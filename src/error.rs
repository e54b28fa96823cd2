//! `BridgeError`: failures the bridge itself answers for, each knowing its HTTP status and
//! its JSON-RPC error.

use serde_json::json;

use crate::jsonrpc::code;

#[derive(Debug, Clone, thiserror::Error)]
pub enum BridgeError {
    #[error("the upstream server process exited before answering ({0})")]
    ChildExited(String),
    #[error("the upstream server is not available: {0}")]
    Unavailable(String),
    #[error("the request timed out after {0} ms")]
    Timeout(u64),
    #[error("the upstream is overloaded: its input queue is full")]
    Overloaded,
    #[error("the bridge is shutting down")]
    ShuttingDown,
    #[error("request cancelled")]
    Cancelled,
    /// A call whose caller may be asked for input (sampling, elicitation, roots) waited this
    /// many ms for its 2025 child to have no other such caller, so that the child's requests
    /// reach the right one, and the wait ran out (`--attribution-wait`).
    #[error("the upstream server is busy with another client that it may ask for input; waited {0} ms for it to finish (see --attribution-wait)")]
    AttributionBusy(u64),
    /// A remote upstream could not answer this call: unreachable, a broken or malformed
    /// exchange, an HTTP error status, `--request-timeout`. `reason` is one of a fixed set.
    #[error("{message}")]
    Remote {
        reason: &'static str,
        message: String,
        data: serde_json::Value,
    },
    /// A face refused the request itself with this JSON-RPC error (invalid params, an
    /// unusable `requestState`, …), without asking the upstream.
    #[error("{message}")]
    Refused { code: i64, message: String },
    /// The caller is over its limit on an endpoint (`rate`, `concurrency`): try again in this
    /// many seconds (HTTP 429 with `Retry-After`).
    #[error("rate limit exceeded: retry after {0} s")]
    RateLimited(u64),
}

impl BridgeError {
    /// Short, bounded label for metrics and `error.data.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            BridgeError::ChildExited(_) => "child_exited",
            BridgeError::Unavailable(_) => "unavailable",
            BridgeError::Timeout(_) => "timeout",
            BridgeError::Overloaded => "overloaded",
            BridgeError::ShuttingDown => "shutting_down",
            BridgeError::Cancelled => "cancelled",
            BridgeError::AttributionBusy(_) => "attribution_busy",
            BridgeError::Remote { reason, .. } => reason,
            BridgeError::Refused { .. } => "refused",
            BridgeError::RateLimited(_) => "rate_limited",
        }
    }

    /// The JSON-RPC error code the bridge answers with.
    pub fn code(&self) -> i64 {
        match self {
            BridgeError::Refused { code, .. } => *code,
            _ => code::UPSTREAM_UNAVAILABLE,
        }
    }

    /// The JSON-RPC error object for this failure.
    pub fn error_object(&self) -> String {
        use crate::jsonrpc::error_object;
        match self {
            BridgeError::Remote { message, data, .. } => {
                error_object(code::UPSTREAM_UNAVAILABLE, message, Some(data))
            }
            BridgeError::Refused { code, message } => error_object(*code, message, None),
            _ => error_object(
                code::UPSTREAM_UNAVAILABLE,
                &self.to_string(),
                Some(&json!({ "reason": self.reason() })),
            ),
        }
    }
}
