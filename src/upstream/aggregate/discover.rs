//! What an endpoint says about itself: one `InitializeResult` (the core turns it into a
//! `server/discover` result for a 2026 caller, as for any 2025 upstream) made from what its
//! members said. A feature is offered when a member offers it (its calls route there) —
//! tools, prompts, resources, always with `listChanged`, since the endpoint announces member
//! changes itself; what only works when every member can do it is the intersection:
//! resource subscriptions, logging, completions. Tasks and experimental capabilities are not
//! offered: the endpoint does not merge them.

use serde_json::{json, Map, Value};

use super::names::Naming;
use crate::call::UpstreamInfo;
use crate::config::endpoint::Prefix;
use crate::protocol;

/// The longest piece of one member's `instructions` an endpoint's carry.
const MAX_MEMBER_INSTRUCTIONS: usize = 8 * 1024;

/// A member's own instructions, from its initialize or discover result.
fn instructions_of(info: &UpstreamInfo) -> Option<String> {
    let raw = info.initialize.as_ref().or(info.discover.as_ref())?;
    let v: Value = serde_json::from_str(raw.get()).ok()?;
    let s = v.get("instructions")?.as_str()?.trim();
    if s.is_empty() {
        return None;
    }
    let mut end = s.len().min(MAX_MEMBER_INSTRUCTIONS);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].to_owned())
}

/// The merged capabilities of `members`.
fn capabilities(members: &[(&str, &UpstreamInfo)]) -> Value {
    let caps: Vec<Value> = members.iter().map(|(_, i)| i.capabilities()).collect();
    let any = |k: &str| caps.iter().any(|c| c.get(k).is_some());
    let all = |f: &dyn Fn(&Value) -> bool| !caps.is_empty() && caps.iter().all(f);
    let mut out = Map::new();
    for k in ["tools", "prompts"] {
        if any(k) {
            out.insert(k.into(), json!({ "listChanged": true }));
        }
    }
    if any("resources") {
        let mut r = json!({ "listChanged": true });
        // Only a member that has resources is asked to subscribe.
        let with: Vec<&Value> = caps
            .iter()
            .filter(|c| c.get("resources").is_some())
            .collect();
        if with
            .iter()
            .all(|c| c["resources"]["subscribe"] == json!(true))
        {
            r["subscribe"] = json!(true);
        }
        out.insert("resources".into(), r);
    }
    if all(&|c| c.get("logging").is_some()) {
        out.insert("logging".into(), json!({}));
    }
    if all(&|c| c.get("completions").is_some()) {
        out.insert("completions".into(), json!({}));
    }
    Value::Object(out)
}

/// The `InitializeResult` of endpoint `name` over the members that answered.
pub fn initialize(
    name: &str,
    title: Option<&str>,
    naming: &Naming,
    members: &[(&str, &UpstreamInfo)],
) -> String {
    let list: Vec<&str> = members.iter().map(|(n, _)| *n).collect();
    let mut text = format!(
        "This endpoint ({name}) joins the MCP servers {}.",
        list.join(", ")
    );
    match naming.prefix {
        Prefix::Always => text.push_str(&format!(
            " Each tool and prompt is named <server>{}<name> (e.g. {}); resource URIs are the \
             servers' own.",
            naming.separator,
            naming.publish(list.first().copied().unwrap_or("server"), "search")
        )),
        Prefix::Never => {
            text.push_str(" Tools, prompts and resources keep the names their servers give them.")
        }
    }
    for (n, info) in members {
        if let Some(i) = instructions_of(info) {
            text.push_str(&format!("\n\n## {n}\n{i}"));
        }
    }
    let mut info = json!({ "name": name, "version": env!("CARGO_PKG_VERSION") });
    if let Some(t) = title {
        info["title"] = json!(t);
    }
    json!({
        "protocolVersion": protocol::LEGACY_LATEST,
        "capabilities": capabilities(members),
        "serverInfo": info,
        "instructions": text,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;
    use crate::protocol::Era;
    use std::sync::Arc;

    fn info(init: &str) -> UpstreamInfo {
        UpstreamInfo {
            era: Era::Legacy,
            discover: None,
            initialize: Some(Arc::from(raw(init))),
        }
    }

    #[test]
    fn capabilities_are_offered_by_any_and_shared_by_all() {
        let a = info(
            r#"{"capabilities":{"tools":{},"logging":{},"resources":{"subscribe":true}},
                "instructions":"use a"}"#,
        );
        let b = info(r#"{"capabilities":{"prompts":{"listChanged":false},"tasks":{}}}"#);
        let naming = Naming {
            separator: "__".into(),
            prefix: Prefix::Always,
        };
        let v: Value = serde_json::from_str(&initialize(
            "team",
            Some("Team"),
            &naming,
            &[("a", &a), ("b", &b)],
        ))
        .unwrap();
        let c = &v["capabilities"];
        assert_eq!(c["tools"]["listChanged"], true);
        assert_eq!(c["prompts"]["listChanged"], true);
        assert_eq!(c["resources"]["subscribe"], true, "only a has resources");
        assert!(c.get("logging").is_none(), "b does not log");
        assert!(c.get("tasks").is_none());
        assert_eq!(v["serverInfo"]["name"], "team");
        assert_eq!(v["serverInfo"]["title"], "Team");
        let text = v["instructions"].as_str().unwrap();
        assert!(
            text.contains("a, b") && text.contains("a__search"),
            "{text}"
        );
        assert!(text.contains("## a\nuse a"), "{text}");
    }
}
