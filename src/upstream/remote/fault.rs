//! Transport faults of the remote upstream: `Fault` (one JSON-RPC error for the call it hit,
//! with its accounting reason), the classification of connection errors, and the `Remote`
//! helpers that answer or count a fault.

use serde_json::json;

use super::Remote;
use crate::call::Outcome;
use crate::error::BridgeError;

/// A transport-level failure, mapped to one JSON-RPC error for the call it hit.
#[derive(Debug, Clone)]
pub(super) enum Fault {
    /// No connection (refused, DNS, TLS, connect timeout): the request never left.
    Unreachable {
        reason: &'static str,
        detail: String,
    },
    /// The exchange broke after the request may have reached the server.
    Broken(String),
    Timeout(u64),
    Auth(u16),
    /// The OAuth login (or refresh) after a 401 failed; why (no secrets).
    Login(String),
    /// A 403 `insufficient_scope` that a new login did not cure; the scopes it wants.
    Scope(String),
    Status(u16, String),
    SessionGone,
    Malformed(String),
    Oversize(usize),
}

impl Fault {
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Fault::Unreachable { reason, .. } => reason,
            Fault::Broken(_) => "connection_lost",
            Fault::Timeout(_) => "timeout",
            Fault::Auth(401) => "unauthorized",
            Fault::Auth(_) => "forbidden",
            Fault::Login(_) => "login_failed",
            Fault::Scope(_) => "insufficient_scope",
            Fault::Status(..) => "http_status",
            Fault::SessionGone => "session_expired",
            Fault::Malformed(_) => "malformed_response",
            Fault::Oversize(_) => "response_too_large",
        }
    }

    /// The transport failure this is (no usable HTTP answer), by its metrics reason; None for
    /// an HTTP status (counted as one) or the bridge's own time limit.
    pub(super) fn transport_reason(&self) -> Option<&'static str> {
        match self {
            Fault::Unreachable { .. }
            | Fault::Broken(_)
            | Fault::Malformed(_)
            | Fault::Oversize(_) => Some(self.reason()),
            Fault::Timeout(_)
            | Fault::Auth(_)
            | Fault::Login(_)
            | Fault::Scope(_)
            | Fault::Status(..)
            | Fault::SessionGone => None,
        }
    }

    /// The bridge's answer for the call this fault hit: `-32000` with `data.reason` (and
    /// `data.httpStatus`).
    pub(super) fn bridge_error(&self, origin: &str, has_token: bool) -> BridgeError {
        let msg = match self {
            Fault::Unreachable { detail, .. } => {
                format!("cannot reach the remote MCP server at {origin}: {detail}")
            }
            Fault::Broken(d) => format!(
                "the connection to {origin} broke before the answer arrived ({d}); the request \
                 may have reached the server and was not re-sent"
            ),
            Fault::Timeout(ms) => format!(
                "no answer from {origin} within {ms} ms (--request-timeout); the request was cancelled"
            ),
            Fault::Auth(status) => {
                let what = if *status == 401 {
                    "401 Unauthorized"
                } else {
                    "403 Forbidden"
                };
                if has_token {
                    format!(
                        "the remote MCP server at {origin} answered {what}: the bearer token was \
                         rejected or lacks access; supply a valid one with --bearer-token-file FILE \
                         or --bearer-token-env VAR"
                    )
                } else {
                    format!(
                        "the remote MCP server at {origin} answered {what}: it needs credentials; \
                         supply a token with --bearer-token-file FILE or --bearer-token-env VAR \
                         (or a header with -H / --header-file)"
                    )
                }
            }
            Fault::Login(why) => format!(
                "the remote MCP server at {origin} needs an OAuth login, which failed: {why}"
            ),
            Fault::Scope(scope) if scope.trim().is_empty() => format!(
                "the remote MCP server at {origin} answered 403 insufficient_scope without \
                 naming the scope it needs, and a new login cannot ask for it"
            ),
            Fault::Scope(scope) => format!(
                "the remote MCP server at {origin} needs scope \"{scope}\", which the OAuth login \
                 did not obtain (asked for it; the authorization server did not grant it)"
            ),
            Fault::Status(s, body) => {
                format!("the remote MCP server at {origin} answered HTTP {s}: {body}")
            }
            Fault::SessionGone => format!(
                "the 2025 session with {origin} expired while this request was in flight; the \
                 bridge started a new session, retry the request"
            ),
            Fault::Malformed(d) => format!("malformed response from {origin}: {d}"),
            Fault::Oversize(n) => format!(
                "the response from {origin} exceeds the size limit ({n} bytes; --max-response)"
            ),
        };
        let mut data = json!({ "reason": self.reason() });
        if let Fault::Auth(s) | Fault::Status(s, _) = self {
            data["httpStatus"] = json!(s);
        }
        if let Fault::Login(_) = self {
            data["httpStatus"] = json!(401);
        }
        if let Fault::Scope(scope) = self {
            data["httpStatus"] = json!(403);
            data["scope"] = json!(scope);
        }
        BridgeError::Remote {
            reason: self.reason(),
            message: msg,
            data,
        }
    }

    /// Could the request have reached the server?
    pub(super) fn may_have_reached(&self) -> bool {
        !matches!(
            self,
            Fault::Unreachable { .. } | Fault::Auth(_) | Fault::Login(_) | Fault::Scope(_)
        )
    }
}

/// Text of an error and its sources, for messages (never contains headers).
pub(super) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// The reason label of a failed connection: "tls" when rustls failed anywhere in the chain
/// (a bad certificate, or a peer that does not speak TLS at all, whose bytes rustls reads as a
/// "corrupt message"), "connect_timeout" when the connect's deadline passed, else from the
/// text (`classify_connect`).
pub(super) fn connect_reason(e: &(dyn std::error::Error + 'static)) -> &'static str {
    if tls_in(e) {
        "tls"
    } else if timed_out_in(e) {
        "connect_timeout"
    } else {
        classify_connect(&chain(e))
    }
}

/// Did the connect time out (`--connect-timeout`)? The connector reports its deadline as an
/// `io::Error` of kind `TimedOut` around tokio's `Elapsed` ("deadline has elapsed", which no
/// text rule would read as a timeout); the kernel's own connect timeout is `TimedOut` too.
fn timed_out_in(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<tokio::time::error::Elapsed>() {
        return true;
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        if io.kind() == std::io::ErrorKind::TimedOut {
            return true;
        }
        if io.get_ref().is_some_and(|p| timed_out_in(p)) {
            return true;
        }
    }
    e.source().is_some_and(timed_out_in)
}

/// Is a `rustls::Error` in the chain? `io::Error`s nest (reqwest's connector wraps
/// tokio-rustls's), and an `io::Error`'s `source()` skips its own payload, so each one's
/// payload is looked into as well.
fn tls_in(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<rustls::Error>() {
        return true;
    }
    let payload = e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref);
    if let Some(p) = payload {
        if tls_in(p) {
            return true;
        }
    }
    e.source().is_some_and(tls_in)
}

/// `connect_reason`'s second step: the reason from the error chain's text, for the errors
/// that no type check in `connect_reason` recognises.
fn classify_connect(detail: &str) -> &'static str {
    let d = detail.to_ascii_lowercase();
    if d.contains("dns") || d.contains("failed to lookup") || d.contains("name or service") {
        "dns"
    } else if d.contains("certificate") || d.contains("tls") || d.contains("handshake") {
        "tls"
    } else if d.contains("timed out") || d.contains("timeout") {
        "connect_timeout"
    } else {
        "unreachable"
    }
}

impl Remote {
    /// A fault is the bridge's answer (`Outcome::Failed`), never the remote's error.
    pub(super) fn fault_outcome(&self, f: &Fault) -> Outcome {
        Outcome::Failed(f.bridge_error(&self.origin, self.cfg.has_token))
    }

    /// The remote's answer to a call was no usable JSON-RPC response (after the exchange).
    pub(super) fn malformed(&self, what: &str) -> Outcome {
        let f = Fault::Malformed(what.into());
        self.count_fault(&f);
        self.fault_outcome(&f)
    }

    pub(super) fn count_fault(&self, f: &Fault) {
        if let Some(reason) = f.transport_reason() {
            self.obs.transport_failure(reason);
        }
    }
}
