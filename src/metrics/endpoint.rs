//! The aggregation endpoints' families (`crate::upstream::aggregate`): calls per member,
//! members up, policy decisions, rate-limit refusals and audit drops. Their own file so that
//! the registry's module keeps to the families every server has.

use super::{method_label, Family, Metrics};

/// The `outcome` label of `mcp_bridge_endpoint_calls_total`: the member answered with a
/// result, with a JSON-RPC error, or not at all (down, unreachable, timed out).
pub const ENDPOINT_OUTCOMES: &[&str] = &["result", "error", "failed"];

pub(super) const ENDPOINT_CALLS: Family = Family {
    name: "endpoint_calls_total",
    help: "Calls an aggregation endpoint made of its members (lists, routed calls) by endpoint, \
           member server, method and outcome",
    labels: &["endpoint", "server", "method", "outcome"],
};

pub(super) const RATE_LIMITED: Family = Family {
    name: "rate_limited_total",
    help: "Calls an endpoint refused (HTTP 429) because their caller was over its rate or \
           concurrency limit, by endpoint and caller (token name, jwt, or anonymous)",
    labels: &["endpoint", "caller"],
};

pub(super) const AUDIT_DROPPED: Family = Family {
    name: "audit_dropped_total",
    help: "Audit log entries dropped because the writer's queue was full",
    labels: &[],
};

pub(super) const POLICY_DECISIONS: Family = Family {
    name: "policy_decisions_total",
    help: "An endpoint's [[policy]] decisions on calls, by endpoint, rule (its number in the \
           file, or default) and decision",
    labels: &["endpoint", "rule", "decision"],
};

pub(super) const CONFIRM_ANSWERS: Family = Family {
    name: "confirm_answers_total",
    help: "Callers' answers to an endpoint's approval step (confirm): accept, decline, cancel, \
           unanswered, unable (no elicitation capability)",
    labels: &["endpoint", "answer"],
};

pub(super) const ENDPOINT_MEMBER_UP: Family = Family {
    name: "endpoint_member_up",
    help: "1 while a member of an aggregation endpoint answers (0: left out of its lists)",
    labels: &["endpoint", "server"],
};

impl Metrics {
    /// A call endpoint `endpoint` made of its member `server`; `outcome` is one of
    /// [`ENDPOINT_OUTCOMES`].
    pub fn endpoint_call(&self, endpoint: &str, server: &str, method: &str, outcome: &'static str) {
        debug_assert!(ENDPOINT_OUTCOMES.contains(&outcome), "{outcome}");
        self.endpoint_calls
            .with_label_values(&[endpoint, server, method_label(method), outcome])
            .inc();
    }
    /// A call of `endpoint` refused for `caller`'s limits.
    pub fn rate_limited(&self, endpoint: &str, caller: &str) {
        self.rate_limited
            .with_label_values(&[endpoint, caller])
            .inc();
    }
    /// An audit entry dropped (the writer's queue was full).
    pub fn audit_dropped(&self) {
        self.audit_dropped.with_label_values(&[] as &[&str]).inc();
    }
    /// A `[[policy]]` decision on a call of `endpoint`: by rule `rule` (None: the default).
    pub fn policy_decision(&self, endpoint: &str, rule: Option<usize>, decision: &str) {
        let rule = rule.map_or_else(|| "default".to_owned(), |n| n.to_string());
        self.policy_decisions
            .with_label_values(&[endpoint, &rule, decision])
            .inc();
    }
    /// A caller's answer to an approval step (`confirm`): accept, decline, cancel,
    /// unanswered, unable (no elicitation capability).
    pub fn confirm_answer(&self, endpoint: &str, answer: &'static str) {
        self.confirm_answers
            .with_label_values(&[endpoint, answer])
            .inc();
    }
    /// Whether member `server` of `endpoint` answers.
    pub fn set_endpoint_member_up(&self, endpoint: &str, server: &str, up: bool) {
        self.endpoint_member_up
            .with_label_values(&[endpoint, server])
            .set(i64::from(up));
    }
}
