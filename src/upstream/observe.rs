//! What upstreams need for observability without touching payloads: the bounded `tool` label
//! of a `tools/call` (from the upstream's own `tools/list`), and [`RemoteObserver`], where a
//! remote upstream counts what it alone sees.

use std::sync::{Arc, RwLock};

use crate::call::{Call, Outcome};
use crate::jsonrpc::Fields;
use crate::metrics::{Metrics, ToolNames, ROUTE_UPSTREAM};
use crate::protocol;

/// The `tool` label of a call: `None` for other methods; the tool's name when the upstream
/// listed it; `other` for anything else (unlisted, unreadable, or beyond the label cap).
pub fn tool_label(names: &RwLock<ToolNames>, call: &Call) -> Option<Arc<str>> {
    if call.method != "tools/call" {
        return None;
    }
    let parsed;
    let name = match &call.ctx.tool {
        Some(t) => Some(&**t),
        None => {
            parsed = call
                .params
                .as_deref()
                .and_then(Fields::parse)
                .and_then(|f| f.get("name"))
                .and_then(|v| serde_json::from_str::<String>(v.get()).ok());
            parsed.as_deref()
        }
    };
    let label = match (name, names.read()) {
        (Some(n), Ok(g)) => g.label(n),
        _ => Arc::from("other"),
    };
    Some(label)
}

/// The accounting of a remote Streamable HTTP upstream, for whichever face is in front of it:
/// every HTTP answer the remote sent (`http_responses_total{route="upstream"}` by method and
/// status, and its time to response headers), every exchange that got none
/// (`upstream_transport_failures_total` by reason), and for each call the remote's own
/// answer: its JSON-RPC errors (`source="upstream"`) and `tools/call` results by `isError`.
/// Errors the bridge makes instead (`Outcome::Failed`) are the face's to count.
pub struct RemoteObserver {
    metrics: Arc<Metrics>,
    server: Arc<str>,
    /// The tool names the remote listed: the only ones allowed as `tool` labels.
    tools: RwLock<ToolNames>,
}

impl RemoteObserver {
    /// Export the server's series at 0 from the start.
    pub fn new(metrics: Arc<Metrics>, server: &str) -> Self {
        metrics.register_remote(server);
        Self {
            metrics,
            server: Arc::from(server),
            tools: RwLock::new(ToolNames::default()),
        }
    }

    /// The remote answered an HTTP request (`method`) with `status` after `secs`.
    pub fn http_answer(&self, method: &str, status: u16, secs: f64) {
        self.metrics.http_response(ROUTE_UPSTREAM, method, status);
        self.metrics.http_duration(ROUTE_UPSTREAM, method, secs);
    }

    /// An exchange got no usable answer; `reason` is one of
    /// [`crate::metrics::TRANSPORT_FAILURE_REASONS`].
    pub fn transport_failure(&self, reason: &'static str) {
        self.metrics.transport_failure(&self.server, reason);
    }

    /// Tool names from a `tools/list` page the remote sent.
    pub fn tools_listed<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        if let Ok(mut g) = self.tools.write() {
            g.extend(names);
        }
    }

    /// A call ended with `o` from the remote: count its JSON-RPC error or its tool result (an
    /// `input_required` round is neither).
    pub fn answered(&self, call: &Call, o: &Outcome) {
        match o {
            Outcome::Result(r) => {
                let Some(tool) = tool_label(&self.tools, call) else {
                    return;
                };
                if !crate::protocol::is_input_required(r) {
                    self.metrics
                        .tool_result(&self.server, &tool, protocol::is_tool_error(r));
                }
            }
            Outcome::Error(e) => self.metrics.rpc_error(
                &self.server,
                &call.method,
                protocol::error_code(e).unwrap_or(0),
                "upstream",
            ),
            Outcome::Failed(_) => {}
        }
    }

    /// A call was cancelled at the remote (`cause` as in [`Metrics::cancelled`]).
    pub fn cancelled(&self, cause: &'static str) {
        self.metrics.cancelled(cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, params: &str) -> Call {
        Call {
            method: method.to_owned(),
            params: Some(crate::jsonrpc::raw(params)),
            ctx: crate::call::CallCtx::modern(),
        }
    }

    #[test]
    fn labels() {
        let names = RwLock::new(ToolNames::new(["echo", "fail"]));
        let l = |m: &str, p: &str| tool_label(&names, &call(m, p)).map(|s| s.to_string());
        assert_eq!(
            l("tools/call", r#"{"name":"echo"}"#).as_deref(),
            Some("echo")
        );
        assert_eq!(
            l("tools/call", r#"{"name":"x9"}"#).as_deref(),
            Some("other")
        );
        assert_eq!(l("tools/call", r#"{"name":7}"#).as_deref(), Some("other"));
        assert_eq!(l("tools/list", "{}"), None);
        // A name the face read already wins (no parse).
        let mut c = call("tools/call", "{}");
        c.ctx.tool = Some("fail".into());
        assert_eq!(tool_label(&names, &c).as_deref(), Some("fail"));
    }

    #[test]
    fn remote_answers_are_counted_by_who_made_them() {
        let m = Arc::new(Metrics::new());
        let o = RemoteObserver::new(m.clone(), "r");
        o.tools_listed(["echo", "fail"]);
        let raw = crate::jsonrpc::raw;
        let tc = |name: &str| call("tools/call", &format!(r#"{{"name":"{name}"}}"#));
        o.answered(&tc("echo"), &Outcome::Result(raw(r#"{"content":[]}"#)));
        o.answered(&tc("fail"), &Outcome::Result(raw(r#"{"isError":true}"#)));
        o.answered(&tc("nope"), &Outcome::Result(raw(r#"{"content":[]}"#)));
        o.answered(
            &tc("echo"),
            &Outcome::Result(raw(r#"{"resultType":"input_required","inputRequests":{}}"#)),
        );
        o.answered(
            &call("prompts/get", "{}"),
            &Outcome::Error(raw(r#"{"code":-32602,"message":"x"}"#)),
        );
        o.answered(
            &tc("echo"),
            &Outcome::Failed(crate::error::BridgeError::Cancelled),
        );
        o.http_answer("POST", 401, 0.01);
        o.transport_failure("dns");
        let t = String::from_utf8(m.render()).unwrap();
        for line in [
            r#"mcp_bridge_tool_results_total{is_error="false",server="r",tool="echo"} 1"#,
            r#"mcp_bridge_tool_results_total{is_error="true",server="r",tool="fail"} 1"#,
            r#"mcp_bridge_tool_results_total{is_error="false",server="r",tool="other"} 1"#,
            r#"mcp_bridge_jsonrpc_errors_total{code="-32602",method="prompts/get",server="r",source="upstream"} 1"#,
            r#"mcp_bridge_http_responses_total{method="POST",route="upstream",status="401"} 1"#,
            r#"mcp_bridge_upstream_transport_failures_total{reason="dns",server="r"} 1"#,
            r#"mcp_bridge_upstream_transport_failures_total{reason="unreachable",server="r"} 0"#,
        ] {
            assert!(t.contains(line), "{line} missing from\n{t}");
        }
        assert!(!t.contains("source=\"bridge\""), "{t}");
    }
}
