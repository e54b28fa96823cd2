//! Interop with the official Rust MCP SDK (`rmcp`) as the HTTP client: a 2025 `initialize`
//! lifecycle with sessions, a 2026 `server/discover` lifecycle with per-request `_meta` and
//! standard headers (including `Mcp-Param-*` from `x-mcp-header`), and the SDK's auto mode.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientServiceExt, ServiceExt};
use serde_json::{json, Value};
use support::*;

fn args(v: Value) -> serde_json::Map<String, Value> {
    v.as_object().cloned().expect("object")
}

fn first_text(r: &CallToolResult) -> String {
    let v = serde_json::to_value(r).expect("serialize result");
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {v}"))
        .to_owned()
}

async fn exercise<S: ClientHandler>(client: &RunningService<RoleClient, S>, b: &Bridge) {
    let tools = client.list_tools(None).await.expect("tools/list");
    let names: Vec<String> = tools.tools.iter().map(|t| t.name.to_string()).collect();
    for want in ["echo", "slow", "lookup"] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }

    let r = client
        .call_tool(
            CallToolRequestParams::new("echo").with_arguments(args(json!({"text": "hi rmcp"}))),
        )
        .await
        .unwrap_or_else(|e| panic!("echo failed: {e}; log:\n{}", b.log.dump()));
    assert_eq!(first_text(&r), "hi rmcp");
    assert_ne!(r.is_error, Some(true));

    let r = client
        .call_tool(
            CallToolRequestParams::new("lookup")
                .with_arguments(args(json!({"region": "eu-west", "id": 7}))),
        )
        .await
        .unwrap_or_else(|e| panic!("lookup failed: {e}; log:\n{}", b.log.dump()));
    assert_eq!(first_text(&r), "region=eu-west id=7");

    let r = client
        .call_tool(
            CallToolRequestParams::new("fail").with_arguments(args(json!({"message": "nope"}))),
        )
        .await
        .expect("fail is a tool error, not a protocol error");
    assert_eq!(r.is_error, Some(true));

    // Several calls at once over one SDK client.
    let mut futs = Vec::new();
    for i in 0..10 {
        futs.push(
            client.call_tool(
                CallToolRequestParams::new("echo")
                    .with_arguments(args(json!({"text": format!("n{i}")}))),
            ),
        );
    }
    for (i, f) in futs.into_iter().enumerate() {
        let r = tokio::time::timeout(Duration::from_secs(20), f)
            .await
            .expect("concurrent echo timed out")
            .expect("concurrent echo");
        assert_eq!(first_text(&r), format!("n{i}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_legacy_initialize_lifecycle() {
    let b = Bridge::demo(&[]).await;
    let transport = StreamableHttpClientTransport::from_uri(b.url.clone());
    let client = tokio::time::timeout(Duration::from_secs(20), ().serve(transport))
        .await
        .expect("initialize timed out")
        .unwrap_or_else(|e| panic!("initialize failed: {e}; log:\n{}", b.log.dump()));
    let info = client.peer_info().expect("server info after initialize");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert!(b.log.find("2025 session started").is_some());
    exercise(&client, &b).await;
    client.cancel().await.expect("close");
    // The SDK ends its session with DELETE.
    b.log
        .expect("session deleted by the client", Duration::from_secs(5))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_modern_discover_lifecycle() {
    let b = Bridge::demo(&[]).await;
    let transport = StreamableHttpClientTransport::from_uri(b.url.clone());
    let client = tokio::time::timeout(
        Duration::from_secs(20),
        ().serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
    )
    .await
    .expect("discover timed out")
    .unwrap_or_else(|e| panic!("discover failed: {e}; log:\n{}", b.log.dump()));
    let info = client.peer_info().expect("server info after discover");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    exercise(&client, &b).await;
    // No 2025 session was made for this client.
    assert!(
        b.log.find("2025 session started").is_none(),
        "log:\n{}",
        b.log.dump()
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_auto_picks_modern() {
    let b = Bridge::demo(&[]).await;
    let transport = StreamableHttpClientTransport::from_uri(b.url.clone());
    let client = tokio::time::timeout(
        Duration::from_secs(30),
        ().serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        ),
    )
    .await
    .expect("auto start timed out")
    .unwrap_or_else(|e| panic!("auto start failed: {e}; log:\n{}", b.log.dump()));
    let info = client.peer_info().expect("server info after discover");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    let r = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args(json!({"text": "auto"}))))
        .await
        .expect("echo");
    assert_eq!(first_text(&r), "auto");
    client.cancel().await.expect("close");
}
