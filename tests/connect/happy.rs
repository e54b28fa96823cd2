//! `mcp-bridge connect` against `mcp-bridge serve --demo`: both host lifecycles (2025
//! `initialize`, 2026 `_meta`) × both remote eras (auto-detected 2026, pinned 2025), ids and
//! progress tokens restored exactly, 2025 server requests relayed under non-colliding ids,
//! stdout carrying only JSON-RPC, clean exit when the host closes stdin.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

/// Slow call with progress: progress (with the host's own token) arrives before the answer,
/// which carries the host's own id.
fn slow_with_progress(h: &mut Host, id: Value, token: Value, modern: bool) {
    let mut params = json!({"name": "slow", "arguments": {"seconds": 0.6, "steps": 3},
                            "_meta": {"progressToken": token}});
    if modern {
        params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    }
    h.request(id.clone(), "tools/call", params);
    let r = h.response(&id, T);
    assert_eq!(text(&r), "done", "{r}");
    let progress: Vec<Value> = h
        .drain(Duration::from_millis(100))
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    // Progress lines were written before the response, so they are in the backlog now.
    assert_eq!(progress.len(), 3, "progress: {progress:?}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], token);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_host_to_auto_detected_2026_remote() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &[]);
    let init = h.initialize("2025-06-18", json!({}));
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    h.request(json!("list-1"), "tools/list", json!({}));
    let r = h.response(&json!("list-1"), T);
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"lookup") && names.contains(&"echo"),
        "{names:?}"
    );
    assert!(
        r["result"].get("resultType").is_none() && r["result"].get("ttlMs").is_none(),
        "2026-only fields reached a 2025 host: {r}"
    );
    // Mcp-Param-* headers from x-mcp-header (serve rejects the call without them).
    h.request(
        json!(7),
        "tools/call",
        call_params("lookup", json!({"region": "eu-west", "id": 42})),
    );
    assert_eq!(text(&h.response(&json!(7), T)), "region=eu-west id=42");
    // Non-ASCII name → base64 sentinel header.
    h.request(
        json!(8),
        "tools/call",
        call_params("lookup", json!({"region": "Zürich", "id": 1})),
    );
    assert_eq!(text(&h.response(&json!(8), T)), "region=Zürich id=1");
    slow_with_progress(&mut h, json!("s-1"), json!("tok-a"), false);
    h.request(json!(9), "ping", json!({}));
    assert_eq!(h.response(&json!(9), T)["result"], json!({}));
    assert!(
        h.log.find("speaks 2026-07-28").is_some(),
        "{}",
        h.log.dump()
    );
    h.close_stdin();
    assert!(h
        .wait_exit(Duration::from_secs(10))
        .is_some_and(|s| s.success()));
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_to_2026_remote_with_legacy_child() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.request(json!(1), "server/discover", json!({"_meta": modern_meta()}));
    let d = h.response(&json!(1), T);
    assert!(d["result"]["supportedVersions"].as_array().is_some(), "{d}");
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("echo", json!({"text": "hi"})),
    );
    let r = h.response(&json!(2), T);
    assert_eq!(text(&r), "hi");
    assert_eq!(r["result"]["resultType"], "complete");
    h.request(
        json!(3),
        "tools/call",
        modern_call_params("lookup", json!({"region": "us", "id": 5})),
    );
    assert_eq!(text(&h.response(&json!(3), T)), "region=us id=5");
    slow_with_progress(&mut h, json!(4), json!(99), true);
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_host_to_2025_remote_relays_server_requests() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    let init = h.initialize("2025-11-25", json!({"roots": {"listChanged": true}}));
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert!(
        h.log.wait_find("session id kept").is_some(),
        "{}",
        h.log.dump()
    );
    h.request(
        json!(1),
        "tools/call",
        call_params("echo", json!({"text": "x"})),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "x");
    slow_with_progress(&mut h, json!(2), json!("p"), false);
    // The remote asks the host for its roots during the call.
    h.request(json!(3), "tools/call", call_params("roots", json!({})));
    let req = h.wait_for("roots/list request", T, |m| {
        m["method"] == "roots/list" && m.get("id").is_some()
    });
    let rid = req["id"].clone();
    assert!(
        rid.as_str().is_some_and(|s| s.starts_with("mcpb-")),
        "{req}"
    );
    h.send(&json!({"jsonrpc": "2.0", "id": rid, "result": {"roots": [{"uri": "file:///work", "name": "work"}]}}));
    let r = h.response(&json!(3), T);
    assert_ne!(r["result"]["isError"], json!(true), "{r}");
    assert!(r.to_string().contains("file:///work"), "{r}");
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    assert!(
        h.log.find("session ended (DELETE").is_some(),
        "{}",
        h.log.dump()
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_to_2025_remote() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-06-18"]);
    h.request(
        json!("d"),
        "server/discover",
        json!({"_meta": modern_meta()}),
    );
    let d = h.response(&json!("d"), T);
    assert_eq!(
        d["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{d}"
    );
    assert_eq!(d["result"]["cacheScope"], "private");
    h.request(json!(1), "tools/list", json!({"_meta": modern_meta()}));
    let r = h.response(&json!(1), T);
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("add", json!({"a": 2, "b": 3})),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "5");
    slow_with_progress(&mut h, json!(3), json!("t3"), true);
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}
