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
    /// The remote upstream could not be reached or answered badly (transport, HTTP status,
    /// malformed or oversize answer). `object` is the whole JSON-RPC error object.
    #[error("{message}")]
    Remote {
        reason: &'static str,
        message: String,
        object: String,
    },
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
            BridgeError::Remote { reason, .. } => reason,
        }
    }

    /// The JSON-RPC error object for this failure.
    pub fn error_object(&self) -> String {
        if let BridgeError::Remote { object, .. } = self {
            return object.clone();
        }
        crate::jsonrpc::error_object(
            code::UPSTREAM_UNAVAILABLE,
            &self.to_string(),
            Some(&json!({ "reason": self.reason() })),
        )
    }
}
