//! `initialize` ⇄ `server/discover`: the answer one era's client expects, built from what the
//! other era's server said. Pure functions over JSON; both faces and the remote upstream use
//! these, so a 2025 client of a 2026 server sees the same `InitializeResult` whether it came
//! through `serve` or `connect`.

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::protocol;

/// Capabilities a 2026 `DiscoverResult` does not carry over from a 2025 `InitializeResult`.
const LEGACY_ONLY_CAPABILITIES: &[&str] = &["tasks"];

fn parse(raw: Option<&RawValue>) -> Value {
    raw.and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
        .unwrap_or_else(|| json!({}))
}

/// A 2026 `server/discover` result for a 2025 server's `InitializeResult`.
pub fn discover_from_initialize(init: Option<&RawValue>) -> String {
    let init = parse(init);
    let mut caps = init
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(o) = caps.as_object_mut() {
        for k in LEGACY_ONLY_CAPABILITIES {
            o.remove(*k);
        }
    }
    let mut out = json!({
        "resultType": "complete",
        "supportedVersions": [protocol::MODERN],
        "capabilities": caps,
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(i) = init.get("instructions") {
        out["instructions"] = i.clone();
    }
    if let Some(si) = init.get("serverInfo") {
        out["_meta"] = json!({ protocol::META_SERVER_INFO: si });
    }
    out.to_string()
}

/// A 2025 `InitializeResult` at `version` from what the server said: its own
/// `InitializeResult` (a 2025 server) or its `DiscoverResult` (a 2026 server, whose server
/// info travels in `_meta`).
pub fn initialize_from(src: Option<&RawValue>, version: &str) -> String {
    let src = parse(src);
    let mut out = serde_json::Map::new();
    out.insert("protocolVersion".into(), json!(version));
    out.insert(
        "capabilities".into(),
        src.get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    let server_info = src
        .get("serverInfo")
        .cloned()
        .or_else(|| {
            src.get("_meta")
                .and_then(|m| m.get(protocol::META_SERVER_INFO))
                .cloned()
        })
        .unwrap_or_else(|| json!({"name": "mcp-bridge", "version": env!("CARGO_PKG_VERSION")}));
    out.insert("serverInfo".into(), server_info);
    if let Some(i) = src.get("instructions") {
        out.insert("instructions".into(), i.clone());
    }
    Value::Object(out).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    #[test]
    fn discover_from_a_2025_initialize() {
        let init = raw(
            r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"tasks":{}},
            "serverInfo":{"name":"s","version":"1"},"instructions":"hi"}"#,
        );
        let d: Value = serde_json::from_str(&discover_from_initialize(Some(&init))).unwrap();
        assert_eq!(d["resultType"], "complete");
        assert_eq!(d["capabilities"], json!({"tools": {}}));
        assert_eq!(d["_meta"][protocol::META_SERVER_INFO]["name"], "s");
        assert_eq!(d["instructions"], "hi");
        assert_eq!(d["supportedVersions"], json!([protocol::MODERN]));
    }

    #[test]
    fn initialize_from_either_era() {
        let d = raw(r#"{"resultType":"complete","capabilities":{"tools":{}},
            "_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"2"}}}"#);
        let i: Value = serde_json::from_str(&initialize_from(Some(&d), "2025-06-18")).unwrap();
        assert_eq!(i["protocolVersion"], "2025-06-18");
        assert_eq!(i["serverInfo"]["name"], "m");
        assert_eq!(i["capabilities"], json!({"tools": {}}));
        let i: Value = serde_json::from_str(&initialize_from(None, "2025-11-25")).unwrap();
        assert_eq!(i["serverInfo"]["name"], "mcp-bridge");
    }
}
