//! Prometheus metrics behind typed methods. Labels come only from bounded sets: methods outside
//! the known list become `other`; tool names only from the upstream's own `tools/list` (capped
//! at [`MAX_TOOL_LABELS`]), else `other`; peers' free text never becomes a label.
//!
//! Three outcome families stay separate: HTTP responses by status, JSON-RPC error responses by
//! code and source (`upstream` answered with an error, or the `bridge` did), and `tools/call`
//! results by `is_error`. A remote upstream adds its side of HTTP: the remote's answers
//! (`http_responses_total{route="upstream"}`) and the exchanges that got none
//! (`upstream_transport_failures_total` by reason).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod endpoint;
pub use endpoint::ENDPOINT_OUTCOMES;
use endpoint::{
    AUDIT_DROPPED, CONFIRM_ANSWERS, ENDPOINT_CALLS, ENDPOINT_MEMBER_UP, POLICY_DECISIONS,
    RATE_LIMITED,
};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Most distinct tool names one upstream may contribute as label values.
pub const MAX_TOOL_LABELS: usize = 200;

/// Causes of a cancellation (the `cause` label), all exported from the start.
pub const CANCEL_CAUSES: &[&str] = &[
    "client_disconnect",
    "client_notification",
    "timeout",
    "shutdown",
    "slow_consumer",
];

/// Reasons a frame is dropped (the `reason` label), all exported from the start.
pub const DROP_REASONS: &[&str] = &[
    "unknown_id",
    "oversize",
    "malformed",
    "slow_consumer",
    "unroutable_request",
    "undeclared_capability",
    "legacy_only_notification",
];

/// Why an exchange with a remote upstream got no usable HTTP answer (the `reason` label), all
/// exported from the start. The same words are the `data.reason` of the call's `-32000` error.
/// The `reason` label values of `mcp_bridge_child_exits_total` (every value `child_exited` is
/// given), exported at 0 for each server.
pub const CHILD_EXIT_REASONS: &[&str] = &[
    "exit_ok",
    "exit_error",
    "startup",
    "probe_failed",
    "stopped",
    "wait_failed",
];

pub const TRANSPORT_FAILURE_REASONS: &[&str] = &[
    "unreachable",
    "dns",
    "tls",
    "connect_timeout",
    "connection_lost",
    "malformed_response",
    "response_too_large",
];

/// The `route` label of the HTTP answers a remote upstream sent the bridge.
pub const ROUTE_UPSTREAM: &str = "upstream";

/// Buckets from 100 µs to 60 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// The tool names an upstream listed: the only tool names allowed as label values.
#[derive(Debug, Default)]
pub struct ToolNames(HashSet<Arc<str>>);

impl ToolNames {
    /// The first [`MAX_TOOL_LABELS`] distinct names; the rest will be labelled `other`.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut s = Self::default();
        s.extend(names);
        s
    }

    /// Add names, as long as the set holds fewer than [`MAX_TOOL_LABELS`]; names already in it
    /// stay (a remote's tool list arrives page by page, whenever the host lists it).
    pub fn extend<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for n in names {
            if self.0.len() >= MAX_TOOL_LABELS {
                break;
            }
            if !n.is_empty() && n.len() <= 128 && !self.0.contains(n) {
                self.0.insert(Arc::from(n));
            }
        }
    }

    /// The label for a tool named `name` (its own name if listed, else `other`).
    pub fn label(&self, name: &str) -> Arc<str> {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from("other"))
    }
}

const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "notifications/cancelled",
    "notifications/initialized",
    "notifications/progress",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// A bounded label for a method name.
pub fn method_label(m: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .copied()
        .find(|k| *k == m)
        .unwrap_or("other")
}

pub struct Metrics {
    pub registry: Registry,
    http_responses: IntCounterVec,
    rpc_requests: IntCounterVec,
    rpc_errors: IntCounterVec,
    tool_results: IntCounterVec,
    latency: HistogramVec,
    http_duration: HistogramVec,
    child_restarts: IntCounterVec,
    shutting_down: AtomicBool,
    cancellations: IntCounterVec,
    dropped_frames: IntCounterVec,
    child_starts: IntCounterVec,
    child_exits: IntCounterVec,
    upstream_up: IntGaugeVec,
    calls_in_flight: IntGauge,
    calls_queued: IntGaugeVec,
    pool_children: IntGaugeVec,
    pool_busy: IntGaugeVec,
    sse_streams: IntGauge,
    sessions: IntGaugeVec,
    auth_failures: IntCounterVec,
    auth_successes: IntCounterVec,
    transport_failures: IntCounterVec,
    cluster_forwards: IntCounterVec,
    sse_resumptions: IntCounterVec,
    endpoint_calls: IntCounterVec,
    endpoint_member_up: IntGaugeVec,
    policy_decisions: IntCounterVec,
    confirm_answers: IntCounterVec,
    audit_dropped: IntCounterVec,
    rate_limited: IntCounterVec,
}

/// One metric family: its name (under the `mcp_bridge` namespace), help text and label names.
/// Every family the bridge exports is one of the constants below.
struct Family {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
}

const LATENCY: Family = Family {
    name: "request_duration_seconds",
    help: "Time to the final response",
    labels: &["server", "method"],
};

const HTTP_DURATION: Family = Family {
    name: "http_request_duration_seconds",
    help: "Time from an HTTP request's arrival to its response headers, by route and method",
    labels: &["route", "method"],
};

const BUILD_INFO: Family = Family {
    name: "build_info",
    help: "Always 1; the version label says which build runs",
    labels: &["version"],
};

const HTTP_RESPONSES: Family = Family {
    name: "http_responses_total",
    help: "HTTP responses by route, method and status",
    labels: &["route", "method", "status"],
};

const RPC_REQUESTS: Family = Family {
    name: "jsonrpc_requests_total",
    help: "JSON-RPC requests by server and method",
    labels: &["server", "method"],
};

const RPC_ERRORS: Family = Family {
    name: "jsonrpc_errors_total",
    help: "JSON-RPC error responses by server, method, code and source (upstream|bridge)",
    labels: &["server", "method", "code", "source"],
};

const TOOL_RESULTS: Family = Family {
    name: "tool_results_total",
    help: "tools/call results by server, tool and isError",
    labels: &["server", "tool", "is_error"],
};

const CANCELLATIONS: Family = Family {
    name: "cancellations_total",
    help: "Calls cancelled, by cause",
    labels: &["cause"],
};

const DROPPED_FRAMES: Family = Family {
    name: "dropped_frames_total",
    help: "Frames dropped, by reason",
    labels: &["reason"],
};

const CHILD_STARTS: Family = Family {
    name: "child_starts_total",
    help: "Child processes started",
    labels: &["server"],
};

const CHILD_EXITS: Family = Family {
    name: "child_exits_total",
    help: "Child processes exited, by reason",
    labels: &["server", "reason"],
};

const CHILD_RESTARTS: Family = Family {
    name: "child_restarts_total",
    help: "Child processes restarted after an unplanned exit or a failed start",
    labels: &["server"],
};

const UPSTREAM_UP: Family = Family {
    name: "upstream_up",
    help: "1 while the upstream is ready",
    labels: &["server"],
};

const CALLS_IN_FLIGHT: Family = Family {
    name: "calls_in_flight",
    help: "Calls waiting for their final response",
    labels: &[],
};

const CALLS_QUEUED: Family = Family {
    name: "calls_queued",
    help: "Calls held back until their 2025 child can attribute its requests to them",
    labels: &["server"],
};

const POOL_CHILDREN: Family = Family {
    name: "pool_children",
    help: "Child processes a server's pool runs (starting or ready)",
    labels: &["server"],
};

const POOL_BUSY: Family = Family {
    name: "pool_busy_children",
    help: "Children of a server's pool with at least one call in flight",
    labels: &["server"],
};

const SSE_STREAMS: Family = Family {
    name: "sse_streams_open",
    help: "Open SSE response streams",
    labels: &[],
};

const SESSIONS: Family = Family {
    name: "sessions_active",
    help: "Active 2025-era sessions",
    labels: &["era"],
};

const AUTH_FAILURES: Family = Family {
    name: "auth_failures_total",
    help: "Requests refused by authentication, by reason",
    labels: &["reason"],
};

const AUTH_SUCCESSES: Family = Family {
    name: "auth_successes_total",
    help: "Authenticated requests, by caller (token name, or jwt)",
    labels: &["caller"],
};

const TRANSPORT_FAILURES: Family = Family {
    name: "upstream_transport_failures_total",
    help: "Exchanges with a remote upstream that got no usable HTTP answer, by server and reason",
    labels: &["server", "reason"],
};

const CLUSTER_FORWARDS: Family = Family {
    name: "cluster_forwards_total",
    help: "Requests handed to the replica that owns their session or parked call, by outcome (ok, unreachable; owner_lost_midway besides ok)",
    labels: &["server", "outcome"],
};

const SSE_RESUMPTIONS: Family = Family {
    name: "sse_resumptions_total",
    help: "GETs with Last-Event-ID on 2025-11-25 sessions, by outcome (replayed; refused: malformed, unknown, beyond_buffer)",
    labels: &["outcome"],
};

/// The `outcome` label values of `mcp_bridge_sse_resumptions_total`, all exported from the start.
pub const SSE_RESUME_OUTCOMES: &[&str] = &["replayed", "malformed", "unknown", "beyond_buffer"];

const RELOADS: Family = Family {
    name: "reloads_total",
    help: "Reloads on SIGHUP by part and outcome (failed: the previous state stays)",
    labels: &["part", "outcome"],
};

impl Family {
    fn opts(&self) -> Opts {
        Opts::new(self.name, self.help).namespace("mcp_bridge")
    }

    /// The family as a counter vector, registered in `r`.
    fn counter(&self, r: &Registry) -> IntCounterVec {
        let c = IntCounterVec::new(self.opts(), self.labels)
            .unwrap_or_else(|e| panic!("metric {} is malformed: {e}", self.name));
        let _ = r.register(Box::new(c.clone()));
        c
    }

    /// The family as one gauge without labels, registered in `r`.
    fn gauge(&self, r: &Registry) -> IntGauge {
        let g =
            IntGauge::with_opts(self.opts()).unwrap_or_else(|e| panic!("gauge {}: {e}", self.name));
        let _ = r.register(Box::new(g.clone()));
        g
    }

    /// The family as a gauge vector, registered in `r`.
    fn gauge_vec(&self, r: &Registry) -> IntGaugeVec {
        let g = IntGaugeVec::new(self.opts(), self.labels)
            .unwrap_or_else(|e| panic!("gauge {}: {e}", self.name));
        let _ = r.register(Box::new(g.clone()));
        g
    }

    /// The family as a histogram vector over [`LATENCY_BUCKETS`], registered in `r`.
    fn histogram(&self, r: &Registry) -> HistogramVec {
        let h = HistogramVec::new(
            HistogramOpts::from(self.opts()).buckets(LATENCY_BUCKETS.to_vec()),
            self.labels,
        )
        .unwrap_or_else(|e| panic!("histogram {}: {e}", self.name));
        let _ = r.register(Box::new(h.clone()));
        h
    }
}

/// `build_info{version}`, always 1.
fn register_build_info(r: &Registry) {
    BUILD_INFO
        .gauge_vec(r)
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
}

/// The process collector (Linux): process_cpu_seconds_total, process_resident_memory_bytes,
/// process_open_fds, …
fn register_process_collector(r: &Registry) {
    #[cfg(target_os = "linux")]
    {
        let _ = r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = r;
}

impl Metrics {
    /// Builds every family. The definitions are constants, so a failure here is a programming
    /// error caught by the unit test below, never something input can reach.
    pub fn new() -> Self {
        let r = Registry::new();
        let latency = LATENCY.histogram(&r);
        let http_duration = HTTP_DURATION.histogram(&r);
        register_build_info(&r);
        register_process_collector(&r);
        Self {
            http_responses: HTTP_RESPONSES.counter(&r),
            rpc_requests: RPC_REQUESTS.counter(&r),
            rpc_errors: RPC_ERRORS.counter(&r),
            tool_results: TOOL_RESULTS.counter(&r),
            cancellations: CANCELLATIONS.counter(&r),
            dropped_frames: DROPPED_FRAMES.counter(&r),
            child_starts: CHILD_STARTS.counter(&r),
            child_exits: CHILD_EXITS.counter(&r),
            child_restarts: CHILD_RESTARTS.counter(&r),
            upstream_up: UPSTREAM_UP.gauge_vec(&r),
            calls_in_flight: CALLS_IN_FLIGHT.gauge(&r),
            calls_queued: CALLS_QUEUED.gauge_vec(&r),
            pool_children: POOL_CHILDREN.gauge_vec(&r),
            pool_busy: POOL_BUSY.gauge_vec(&r),
            sse_streams: SSE_STREAMS.gauge(&r),
            endpoint_calls: ENDPOINT_CALLS.counter(&r),
            endpoint_member_up: ENDPOINT_MEMBER_UP.gauge_vec(&r),
            policy_decisions: POLICY_DECISIONS.counter(&r),
            confirm_answers: CONFIRM_ANSWERS.counter(&r),
            rate_limited: RATE_LIMITED.counter(&r),
            audit_dropped: {
                // Exported at 0 from the start.
                let c = AUDIT_DROPPED.counter(&r);
                c.with_label_values(&[] as &[&str]);
                c
            },
            sessions: SESSIONS.gauge_vec(&r),
            auth_failures: AUTH_FAILURES.counter(&r),
            auth_successes: AUTH_SUCCESSES.counter(&r),
            transport_failures: TRANSPORT_FAILURES.counter(&r),
            cluster_forwards: CLUSTER_FORWARDS.counter(&r),
            sse_resumptions: SSE_RESUMPTIONS.counter(&r),
            latency,
            http_duration,
            shutting_down: AtomicBool::new(false),
            registry: r,
        }
        .with_zeroes()
    }

    /// Export every bounded label value of the cause/reason families at 0, so that rates and
    /// absent-vs-zero questions work from the first scrape.
    fn with_zeroes(self) -> Self {
        for c in CANCEL_CAUSES {
            self.cancellations.with_label_values(&[c]);
        }
        for d in DROP_REASONS {
            self.dropped_frames.with_label_values(&[d]);
        }
        for o in SSE_RESUME_OUTCOMES {
            self.sse_resumptions.with_label_values(&[o]);
        }
        self.sessions.with_label_values(&["2025"]);
        self
    }

    /// Export a server's per-server series at 0 before anything happens to it.
    pub fn register_server(&self, server: &str) {
        self.child_starts.with_label_values(&[server]);
        self.child_restarts.with_label_values(&[server]);
        self.upstream_up.with_label_values(&[server]);
        self.calls_queued.with_label_values(&[server]);
        for r in CHILD_EXIT_REASONS {
            self.child_exits.with_label_values(&[server, r]);
        }
    }

    /// Export a remote upstream's per-server series at 0 before anything happens to it.
    pub fn register_remote(&self, server: &str) {
        for r in TRANSPORT_FAILURE_REASONS {
            self.transport_failures.with_label_values(&[server, r]);
        }
    }

    /// An exchange with the remote upstream `server` that got no usable answer.
    pub fn transport_failure(&self, server: &str, reason: &'static str) {
        self.transport_failures
            .with_label_values(&[server, reason])
            .inc();
    }

    /// From now on, cancellations are attributed to the shutdown.
    pub fn set_shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Is the process shutting down (a cancellation now is the bridge's, not a client's)?
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    pub fn http_duration(&self, route: &'static str, method: &str, secs: f64) {
        self.http_duration
            .with_label_values(&[route, http_method_label(method)])
            .observe(secs);
    }

    pub fn child_restarted(&self, server: &str) {
        self.child_restarts.with_label_values(&[server]).inc();
    }

    pub fn http_response(&self, route: &'static str, method: &str, status: u16) {
        self.http_responses
            .with_label_values(&[route, http_method_label(method), itoa_status(status)])
            .inc();
    }
    /// An HTTP response the connection layer wrote itself, before any route saw a request (so
    /// route and method are `other`): hyper's answer to a request head it could not parse
    /// (see `face::metrics_http::hyper_answer`), or a refusal at a connection limit.
    pub fn http_connection_response(&self, status: u16) {
        self.http_response("other", "other", status);
    }
    pub fn rpc_request(&self, server: &str, method: &str) {
        self.rpc_requests
            .with_label_values(&[server, method_label(method)])
            .inc();
    }
    pub fn rpc_error(&self, server: &str, method: &str, code: i64, source: &'static str) {
        let c = code.to_string();
        self.rpc_errors
            .with_label_values(&[server, method_label(method), &c, source])
            .inc();
    }
    /// A `tools/call` result; `tool` must come from [`ToolNames::label`].
    pub fn tool_result(&self, server: &str, tool: &str, is_error: bool) {
        self.tool_results
            .with_label_values(&[server, tool, if is_error { "true" } else { "false" }])
            .inc();
    }
    pub fn latency(&self, server: &str, method: &str, secs: f64) {
        self.latency
            .with_label_values(&[server, method_label(method)])
            .observe(secs);
    }
    pub fn cancelled(&self, cause: &'static str) {
        let cause = if self.shutting_down.load(Ordering::Relaxed)
            && matches!(cause, "client_disconnect" | "client_notification")
        {
            "shutdown"
        } else {
            cause
        };
        self.cancellations.with_label_values(&[cause]).inc();
    }
    pub fn dropped(&self, reason: &'static str) {
        self.dropped_frames.with_label_values(&[reason]).inc();
    }
    pub fn dropped_count(&self, reason: &'static str) -> u64 {
        self.dropped_frames.with_label_values(&[reason]).get()
    }
    pub fn child_started(&self, server: &str) {
        self.child_starts.with_label_values(&[server]).inc();
    }
    pub fn child_exited(&self, server: &str, reason: &'static str) {
        debug_assert!(CHILD_EXIT_REASONS.contains(&reason), "{reason}");
        self.child_exits.with_label_values(&[server, reason]).inc();
    }
    pub fn set_up(&self, server: &str, up: bool) {
        self.upstream_up
            .with_label_values(&[server])
            .set(i64::from(up));
    }
    pub fn calls_in_flight(&self) -> &IntGauge {
        &self.calls_in_flight
    }
    /// Calls of `server` waiting for the child to have no other caller it may ask.
    pub fn calls_queued(&self, server: &str) -> IntGauge {
        self.calls_queued.with_label_values(&[server])
    }
    /// A request forwarded to its owning replica (`cluster`): `ok` (the owner's answer
    /// began) or `unreachable`; and `owner_lost_midway` besides `ok` when the owner was lost
    /// before the request's final answer went through (the hop answered with an error).
    pub fn cluster_forward(&self, server: &str, outcome: &'static str) {
        self.cluster_forwards
            .with_label_values(&[server, outcome])
            .inc();
    }
    /// A pool's size and its busy children (`upstream::pool`).
    pub fn set_pool(&self, server: &str, children: usize, busy: usize) {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.pool_children
            .with_label_values(&[server])
            .set(n(children));
        self.pool_busy.with_label_values(&[server]).set(n(busy));
    }
    /// A `Last-Event-ID` resumption: `replayed`, or why it was refused.
    pub fn sse_resumption(&self, outcome: &'static str) {
        debug_assert!(SSE_RESUME_OUTCOMES.contains(&outcome), "{outcome}");
        self.sse_resumptions.with_label_values(&[outcome]).inc();
    }
    pub fn sse_streams(&self) -> &IntGauge {
        &self.sse_streams
    }
    pub fn sessions(&self, era: &'static str) -> prometheus::IntGauge {
        self.sessions.with_label_values(&[era])
    }
    pub fn auth_failure(&self, reason: &'static str) {
        self.auth_failures.with_label_values(&[reason]).inc();
    }
    pub fn auth_failure_count(&self, reason: &'static str) -> u64 {
        self.auth_failures.with_label_values(&[reason]).get()
    }
    pub fn auth_success(&self, caller: &str) {
        self.auth_successes.with_label_values(&[caller]).inc();
    }

    /// The text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        buf
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn http_method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        "HEAD" => "HEAD",
        _ => "other",
    }
}

fn itoa_status(s: u16) -> &'static str {
    match s {
        200 => "200",
        202 => "202",
        204 => "204",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        406 => "406",
        408 => "408",
        409 => "409",
        413 => "413",
        414 => "414",
        415 => "415",
        421 => "421",
        429 => "429",
        431 => "431",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        _ => "other",
    }
}

/// What a SIGHUP reloads (the `part` label of `reloads_total`), all exported from the start
/// with both outcomes. The same words as `reload::Part::as_str`.
pub const RELOAD_PARTS: &[&str] = &["config", "tls", "jwt", "bearer", "audit"];

/// `mcp_bridge_reloads_total{part,outcome}`: one count per part per SIGHUP, `ok` or `failed`
/// (the old state kept). Held by the one `reload::Reloader`.
#[derive(Clone)]
pub struct ReloadCounter(IntCounterVec);

impl Metrics {
    /// The reload counter in this registry, every part and outcome at 0. For the one reloader
    /// of the process: a second call gets a counter the registry does not export.
    pub fn reload_counter(&self) -> ReloadCounter {
        let c = RELOADS.counter(&self.registry);
        for p in RELOAD_PARTS {
            for o in ["ok", "failed"] {
                c.with_label_values(&[p, o]);
            }
        }
        ReloadCounter(c)
    }
}

impl ReloadCounter {
    /// One reload of `part` (from [`RELOAD_PARTS`]).
    pub fn reloaded(&self, part: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        self.0.with_label_values(&[part, outcome]).inc();
    }
}

/// Keeps a gauge incremented while alive.
pub struct GaugeGuard(IntGauge);

impl GaugeGuard {
    pub fn new(g: IntGauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn builds_and_renders() {
        let m = super::Metrics::new();
        m.dropped("oversize");
        m.rpc_error("default", "tools/call", -32602, "upstream");
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("mcp_bridge_dropped_frames_total{reason=\"oversize\"} 1"));
        assert_eq!(super::method_label("x/y"), "other");
        assert!(text.contains("mcp_bridge_build_info{version=\""));
        assert!(text.contains("mcp_bridge_cancellations_total{cause=\"slow_consumer\"} 0"));
        m.register_remote("r");
        m.transport_failure("r", "dns");
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains(
            "mcp_bridge_upstream_transport_failures_total{reason=\"dns\",server=\"r\"} 1"
        ));
        assert!(text.contains(
            "mcp_bridge_upstream_transport_failures_total{reason=\"tls\",server=\"r\"} 0"
        ));
    }

    #[test]
    fn tool_labels_are_bounded() {
        let many: Vec<String> = (0..500).map(|i| format!("t{i}")).collect();
        let names = super::ToolNames::new(many.iter().map(String::as_str));
        assert_eq!(&*names.label("t0"), "t0");
        assert_eq!(&*names.label("nope"), "other");
        let known = (0..500)
            .filter(|i| &*names.label(&format!("t{i}")) != "other")
            .count();
        assert_eq!(known, super::MAX_TOOL_LABELS);
        // Added page by page: the cap holds, names already in stay.
        let mut names = super::ToolNames::new(["a"]);
        names.extend(many.iter().map(String::as_str));
        assert_eq!(&*names.label("a"), "a");
        let known = (0..500)
            .filter(|i| &*names.label(&format!("t{i}")) != "other")
            .count();
        assert_eq!(known, super::MAX_TOOL_LABELS - 1);
    }

    #[test]
    fn shutdown_takes_over_client_causes() {
        let m = super::Metrics::new();
        m.set_shutting_down();
        m.cancelled("client_disconnect");
        m.cancelled("timeout");
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("mcp_bridge_cancellations_total{cause=\"shutdown\"} 1"));
        assert!(text.contains("mcp_bridge_cancellations_total{cause=\"timeout\"} 1"));
    }
}
