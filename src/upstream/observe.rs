//! What upstreams need for observability without touching payloads: the bounded `tool` label
//! of a `tools/call` (from the upstream's own `tools/list`).

use std::sync::{Arc, RwLock};

use crate::call::Call;
use crate::jsonrpc::Fields;
use crate::metrics::ToolNames;

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
}
