//! Per-message accounting on the stdio face (`connect`): every host request is counted as it
//! arrives ([`HostObserver::request`]) and holds a [`Tracked`] until its answer goes out
//! ([`HostObserver::answered`]: latency, and the bridge's own errors, `Outcome::Failed`, with
//! `source="bridge"`); a request that gets no answer (the host cancelled it, shutdown) just
//! drops its `Tracked`. What only the remote sees (HTTP statuses, transport failures, its
//! JSON-RPC errors and tool results) is counted in `upstream::observe::RemoteObserver`.

use std::sync::Arc;
use std::time::Instant;

use crate::call::Outcome;
use crate::face::respond::GaugeGuard;
use crate::metrics::{method_label, Metrics};

/// Counts one host's traffic under one `server` label.
#[derive(Clone)]
pub struct HostObserver {
    metrics: Arc<Metrics>,
    server: Arc<str>,
}

/// A host request on its way to its answer: in `calls_in_flight` until dropped.
pub struct Tracked {
    method: &'static str,
    started: Instant,
    _in_flight: GaugeGuard,
}

impl HostObserver {
    pub fn new(metrics: Arc<Metrics>, server: &str) -> Self {
        Self {
            metrics,
            server: Arc::from(server),
        }
    }

    /// A request arrived from the host (counted before anything can refuse or drop it).
    pub fn request(&self, method: &str) -> Tracked {
        let method = method_label(method);
        self.metrics.rpc_request(&self.server, method);
        Tracked {
            method,
            started: Instant::now(),
            _in_flight: GaugeGuard::new(self.metrics.calls_in_flight().clone()),
        }
    }

    /// The answer to `t` goes out.
    pub fn answered(&self, t: Tracked, o: &Outcome) {
        self.metrics
            .latency(&self.server, t.method, t.started.elapsed().as_secs_f64());
        if let Outcome::Failed(e) = o {
            self.metrics
                .rpc_error(&self.server, t.method, e.code(), "bridge");
        }
    }

    /// The bridge answered a line that was no request it could read (unparsable, too long,
    /// not JSON-RPC) with the error `code`.
    pub fn unreadable(&self, code: i64) {
        self.metrics
            .rpc_error(&self.server, "other", code, "bridge");
    }

    /// Messages from the upstream the host had no room for.
    pub fn lost(&self, n: u64) {
        for _ in 0..n {
            self.metrics.dropped("slow_consumer");
        }
    }
    /// A frame the face did not pass on, for `reason` (the same words as serve's, one of
    /// `metrics::DROP_REASONS`).
    pub fn dropped(&self, reason: &'static str) {
        self.metrics.dropped(reason);
    }
    /// A host request was cancelled before its answer (`cause` as in [`Metrics::cancelled`]).
    pub fn cancelled(&self, cause: &'static str) {
        self.metrics.cancelled(cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BridgeError;

    #[test]
    fn bridge_errors_and_latency() {
        let m = Arc::new(Metrics::new());
        let o = HostObserver::new(m.clone(), "s");
        let t = o.request("tools/call");
        assert_eq!(m.calls_in_flight().get(), 1);
        o.answered(
            t,
            &Outcome::Failed(BridgeError::Refused {
                code: -32602,
                message: "no".into(),
            }),
        );
        assert_eq!(m.calls_in_flight().get(), 0);
        let t = o.request("x/unknown");
        o.answered(t, &Outcome::Error(crate::jsonrpc::raw(r#"{"code":1}"#)));
        drop(o.request("ping"));
        o.unreadable(-32700);
        let text = String::from_utf8(m.render()).unwrap();
        for line in [
            r#"mcp_bridge_jsonrpc_requests_total{method="tools/call",server="s"} 1"#,
            r#"mcp_bridge_jsonrpc_requests_total{method="other",server="s"} 1"#,
            r#"mcp_bridge_jsonrpc_requests_total{method="ping",server="s"} 1"#,
            r#"mcp_bridge_jsonrpc_errors_total{code="-32602",method="tools/call",server="s",source="bridge"} 1"#,
            r#"mcp_bridge_jsonrpc_errors_total{code="-32700",method="other",server="s",source="bridge"} 1"#,
            r#"mcp_bridge_request_duration_seconds_count{method="tools/call",server="s"} 1"#,
            r#"mcp_bridge_request_duration_seconds_count{method="other",server="s"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        // Only the bridge's errors are counted here; the remote's are the remote's to count.
        assert!(!text.contains(r#"code="1""#), "{text}");
        // A request that got no answer has no duration.
        assert!(!text.contains(r#"request_duration_seconds_count{method="ping""#));
    }
}
