//! The accounting of callers' traffic, the same on every face: [`Meter`] counts under one
//! server label what a face's callers send and what the bridge answers them, and [`Tracked`]
//! follows one request from its arrival to its answer.
//!
//! Both faces feed it at the same points, so serve and connect show the same families and
//! labels for the same traffic:
//! - every request once, as it arrives, before anything can refuse or drop it
//!   ([`Meter::request`]; a listen too, once);
//! - a request the bridge answers itself before any call (a bad header, an unknown session,
//!   an unreadable line, a method it does not serve) as a JSON-RPC error with
//!   `source="bridge"` and no latency: there was no call ([`Meter::refused`],
//!   [`Tracked::refused`]);
//! - a call's answer: its latency and, when the bridge made the answer (`Outcome::Failed`:
//!   timeout, upstream gone, shutdown), its error with `source="bridge"`
//!   ([`Tracked::answered`]); `calls_in_flight` holds it up from arrival until then (a listen
//!   is an open-ended stream, not a call in flight);
//! - frames not passed on to a caller, by reason ([`Meter::dropped`], one of
//!   `metrics::DROP_REASONS`), and cancellations by cause.
//!
//! What only an upstream sees (its peer's HTTP statuses, transport failures, its JSON-RPC
//! errors and `isError` tool results) is counted by the upstream (`upstream::observe`, the
//! child's route), once, whoever asked.

use std::sync::Arc;
use std::time::Instant;

use crate::call::Outcome;
use crate::metrics::{method_label, GaugeGuard, Metrics};

/// Counts one face's callers under one `server` label. Cheap to clone.
#[derive(Clone)]
pub struct Meter {
    metrics: Arc<Metrics>,
    server: Arc<str>,
}

/// One request on its way to its answer.
pub struct Tracked {
    method: &'static str,
    started: Instant,
    /// `calls_in_flight` held up until the answer (None for a listen, or once settled).
    in_flight: Option<GaugeGuard>,
    answered: bool,
}

impl Meter {
    pub fn new(metrics: Arc<Metrics>, server: Arc<str>) -> Self {
        Self { metrics, server }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn server(&self) -> &Arc<str> {
        &self.server
    }

    /// A request arrived (counted before anything can refuse or drop it).
    pub fn request(&self, method: &str) {
        self.metrics.rpc_request(&self.server, method);
    }

    /// Follow a request that arrived at `started` to its answer.
    pub fn track(&self, method: &str, started: Instant) -> Tracked {
        let in_flight = (method != "subscriptions/listen")
            .then(|| GaugeGuard::new(self.metrics.calls_in_flight().clone()));
        Tracked {
            method: method_label(method),
            started,
            in_flight,
            answered: false,
        }
    }

    /// The bridge answered a request itself, before any call, with the error `code`.
    pub fn refused(&self, method: &str, code: i64) {
        self.metrics.rpc_error(&self.server, method, code, "bridge");
    }

    /// The bridge answered a line that was no request it could read (unparsable, too long,
    /// not JSON-RPC) with the error `code`.
    pub fn unreadable(&self, code: i64) {
        self.refused("other", code);
    }

    /// A frame not passed on to a caller, for `reason` (one of `metrics::DROP_REASONS`).
    pub fn dropped(&self, reason: &'static str) {
        self.metrics.dropped(reason);
    }

    /// `n` frames a caller had no room for.
    pub fn lost(&self, n: u64) {
        for _ in 0..n {
            self.dropped("slow_consumer");
        }
    }

    /// A request was cancelled before its answer (`cause` as in [`Metrics::cancelled`]).
    pub fn cancelled(&self, cause: &'static str) {
        self.metrics.cancelled(cause);
    }
}

impl Tracked {
    /// Its answer goes out: the latency, the bridge's own error, and no longer in flight.
    /// Counted once: a second answer is not counted again.
    pub fn answered(&mut self, meter: &Meter, o: &Outcome) {
        let code = match o {
            Outcome::Failed(e) => Some(e.code()),
            _ => None,
        };
        self.answered_with(meter, code);
    }

    /// As [`Tracked::answered`], for an answer that is no call's outcome: `bridge_error` is
    /// the code when the bridge made it an error.
    pub fn answered_with(&mut self, meter: &Meter, bridge_error: Option<i64>) {
        self.in_flight = None;
        if std::mem::replace(&mut self.answered, true) {
            return;
        }
        let secs = self.started.elapsed().as_secs_f64();
        meter.metrics.latency(&meter.server, self.method, secs);
        if let Some(code) = bridge_error {
            meter.refused(self.method, code);
        }
    }

    /// The bridge refused it before any call, with the error `code`: counted as the bridge's
    /// error, with no latency (there was no call).
    pub fn refused(&mut self, meter: &Meter, code: i64) {
        self.in_flight = None;
        if !std::mem::replace(&mut self.answered, true) {
            meter.refused(self.method, code);
        }
    }

    /// Answered by the bridge itself without a call and without an error (`ping`, a 2025
    /// caller's `initialize`), or the answer is on its way: no longer in flight, and no
    /// latency counted from now on.
    pub fn settled(&mut self) {
        self.in_flight = None;
        self.answered = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BridgeError;

    #[test]
    fn bridge_errors_and_latency() {
        let m = Arc::new(Metrics::new());
        let o = Meter::new(m.clone(), Arc::from("s"));
        o.request("tools/call");
        let mut t = o.track("tools/call", Instant::now());
        assert_eq!(m.calls_in_flight().get(), 1);
        let failed = Outcome::Failed(BridgeError::Refused {
            code: -32602,
            message: "no".into(),
        });
        t.answered(&o, &failed);
        assert_eq!(m.calls_in_flight().get(), 0);
        // Counted once.
        t.answered(&o, &failed);
        o.request("x/unknown");
        let mut t = o.track("x/unknown", Instant::now());
        t.answered(&o, &Outcome::Error(crate::jsonrpc::raw(r#"{"code":1}"#)));
        o.request("ping");
        drop(o.track("ping", Instant::now()));
        assert_eq!(m.calls_in_flight().get(), 0);
        let listen = o.track("subscriptions/listen", Instant::now());
        assert_eq!(
            m.calls_in_flight().get(),
            0,
            "a listen is no call in flight"
        );
        drop(listen);
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
