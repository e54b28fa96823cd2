//! The soak's report: its figures as text, and the client's counts held against the bridge's
//! metrics (kept apart from the workload in soak.rs so each file says one thing).

use super::metrics::metric_sum;
use super::soak::SoakCounts;

/// One soak run's figures; `check_*` fail the test on them.
pub struct SoakReport<'a> {
    pub requests: u64,
    pub secs: f64,
    pub counts: &'a SoakCounts,
    pub fds: (usize, usize),
    /// RSS at start, after the warm-up (a tenth of the requests), at the end (KiB).
    pub rss: (u64, u64, u64),
    pub idle: bool,
    pub metrics: &'a str,
}

impl SoakReport<'_> {
    /// (what, the client's count, the bridge's metric) for every count held against a metric
    /// (`None`: the series is missing, which fails the check).
    fn pairs(&self) -> Vec<(&'static str, u64, Option<f64>)> {
        let k = self.counts;
        let m = self.metrics;
        let g = SoakCounts::get;
        let http = |s: &str| metric_sum(m, "mcp_bridge_http_responses_total", &[("status", s)]);
        vec![
            (
                "tools/call requests",
                g(&k.tools_calls),
                metric_sum(
                    m,
                    "mcp_bridge_jsonrpc_requests_total",
                    &[("method", "tools/call")],
                ),
            ),
            (
                "echo results",
                g(&k.echo_ok),
                metric_sum(
                    m,
                    "mcp_bridge_tool_results_total",
                    &[("tool", "echo"), ("is_error", "false")],
                ),
            ),
            (
                "bridge -32000 answers",
                g(&k.bridge_errors),
                metric_sum(
                    m,
                    "mcp_bridge_jsonrpc_errors_total",
                    &[("code", "-32000"), ("source", "bridge")],
                ),
            ),
            (
                "hang-ups",
                g(&k.hangups),
                metric_sum(
                    m,
                    "mcp_bridge_cancellations_total",
                    &[("cause", "client_disconnect")],
                ),
            ),
            (
                "cancel notifications",
                g(&k.cancels),
                metric_sum(
                    m,
                    "mcp_bridge_cancellations_total",
                    &[("cause", "client_notification")],
                ),
            ),
            (
                "removed (ping) requests",
                g(&k.removed),
                metric_sum(
                    m,
                    "mcp_bridge_jsonrpc_requests_total",
                    &[("method", "ping")],
                ),
            ),
            (
                "removed -32601 answers",
                g(&k.removed),
                metric_sum(
                    m,
                    "mcp_bridge_jsonrpc_errors_total",
                    &[("code", "-32601"), ("method", "ping")],
                ),
            ),
            ("HTTP 400 (malformed)", g(&k.malformed), http("400")),
            ("HTTP 403 (Origin)", g(&k.wrong_origin), http("403")),
            ("HTTP 413 (oversize)", g(&k.oversize), http("413")),
            ("HTTP 404 (removed)", g(&k.removed), http("404")),
            (
                "child restarts",
                g(&k.faults),
                metric_sum(m, "mcp_bridge_child_restarts_total", &[]),
            ),
        ]
    }

    pub fn text(&self) -> String {
        let k = self.counts;
        let g = SoakCounts::get;
        let mut s = format!(
            "soak: {} requests in {:.1} s = {:.0} req/s; answered once with their own id: {}; \
             hung up (no answer due): {}; cancelled (no answer due): {}; wrong: {}\n",
            self.requests,
            self.secs,
            self.requests as f64 / self.secs,
            g(&k.single),
            g(&k.hangups),
            g(&k.cancels),
            g(&k.wrong),
        );
        s += &format!(
            "faults (child crash / SIGKILL mid-call): {}; fds {} -> {}; RSS KiB start {} / after warm-up {} / end {}; settled: {}\n",
            g(&k.faults), self.fds.0, self.fds.1, self.rss.0, self.rss.1, self.rss.2, self.idle
        );
        s += "| count | client | bridge metric |\n|---|---|---|\n";
        for (what, c, m) in self.pairs() {
            let m = m.map_or("missing".to_owned(), |m| m.to_string());
            s += &format!("| {what} | {c} | {m} |\n");
        }
        s
    }

    pub fn check_client(&self) {
        let k = self.counts;
        let g = SoakCounts::get;
        assert_eq!(g(&k.wrong), 0, "first: {:?}", k.first_wrong());
        // Every request is answered once, except the ones hung up on or cancelled (and the
        // fault calls, checked where they are made).
        assert_eq!(g(&k.single) + g(&k.hangups) + g(&k.cancels), self.requests);
        assert!(self.idle, "calls still in flight after the load");
    }

    pub fn check_metrics(&self) {
        for (what, c, m) in self.pairs() {
            assert_eq!(Some(c as f64), m, "{what}: client {c}, bridge {m:?}");
        }
    }
}
