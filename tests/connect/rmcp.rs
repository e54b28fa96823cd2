//! `mcp-bridge connect` in front of the official Rust SDK's (`rmcp`) Streamable HTTP server,
//! run in-process in its stateless mode (2026-07-28 requests) and its stateful 2025 session
//! mode, with the host side driven over connect's stdio in both lifecycles: tools/list, a call,
//! progress, and a cancellation the server observes.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

#[derive(Clone)]
struct Demo {
    seen: Arc<Seen>,
}

/// What the rmcp server saw: `slow` calls started, and those ended by a cancellation.
#[derive(Default)]
struct Seen {
    started: AtomicUsize,
    cancelled: AtomicUsize,
}

/// Wait (up to `T`) until `counter` exceeds `above`; its last value.
async fn until_above(counter: &AtomicUsize, above: usize) -> usize {
    until(T, || counter.load(Ordering::SeqCst) > above).await;
    counter.load(Ordering::SeqCst)
}

fn schema(props: serde_json::Value) -> Arc<serde_json::Map<String, serde_json::Value>> {
    let v = json!({"type": "object", "properties": props});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "echo",
                "echo text",
                schema(json!({"text": {"type": "string"}})),
            ),
            Tool::new(
                "slow",
                "progress, then done",
                schema(json!({"seconds": {"type": "number"}})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "echo" => {
                let t = args
                    .get("text")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned();
                Ok(CallToolResult::success(vec![ContentBlock::text(t)]).into())
            }
            "slow" => {
                let secs = args.get("seconds").and_then(|v| v.as_f64()).unwrap_or(1.0);
                let steps = 4u32;
                let token = context.meta.get_progress_token();
                self.seen.started.fetch_add(1, Ordering::SeqCst);
                for i in 1..=steps {
                    tokio::select! {
                        _ = context.ct.cancelled() => {
                            self.seen.cancelled.fetch_add(1, Ordering::SeqCst);
                            return Err(McpError::internal_error("cancelled", None));
                        }
                        _ = tokio::time::sleep(Duration::from_secs_f64(secs / f64::from(steps))) => {}
                    }
                    if let Some(tok) = &token {
                        let p = ProgressNotificationParam::new(tok.clone(), f64::from(i))
                            .with_total(f64::from(steps));
                        let _ = context.peer.notify_progress(p).await;
                    }
                }
                Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into())
            }
            _ => Err(McpError::invalid_params("unknown tool", None)),
        }
    }
}

/// Start the rmcp server on 127.0.0.1:0; returns its URL and what it saw.
async fn rmcp_server(stateful: bool) -> (String, Arc<Seen>) {
    use tower_service::Service as _;
    let seen = Arc::new(Seen::default());
    let handler = Demo { seen: seen.clone() };
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_legacy_session_mode(stateful),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let service = service.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let mut s = service.clone();
                    async move { s.call(req).await }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(sock), svc)
                .await;
            });
        }
    });
    (url, seen)
}

async fn exercise(h: &mut Host, modern: bool, seen: &Seen) {
    let p = |name: &str, args: serde_json::Value, token: Option<&str>| {
        let mut v = if modern {
            modern_call_params(name, args)
        } else {
            call_params(name, args)
        };
        if let Some(t) = token {
            v["_meta"]["progressToken"] = json!(t);
        }
        v
    };
    let list = if modern {
        json!({"_meta": modern_meta()})
    } else {
        json!({})
    };
    h.request(json!("l"), "tools/list", list);
    let r = h.response(&json!("l"), T);
    assert_eq!(
        r["result"]["tools"].as_array().map(Vec::len),
        Some(2),
        "{r}"
    );
    h.request(
        json!(1),
        "tools/call",
        p("echo", json!({"text": "from rmcp"}), None),
    );
    assert_eq!(text(&h.response(&json!(1), T)), "from rmcp");
    h.request(
        json!(2),
        "tools/call",
        p("slow", json!({"seconds": 0.4}), Some("pt")),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "done");
    let progress = h
        .drain(Duration::from_millis(100))
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress" && m["params"]["progressToken"] == "pt")
        .count();
    assert!(progress >= 1, "no progress with the host's token");
    // Cancelled once the rmcp server runs it (not on a timer): the cancel must reach it.
    let started = seen.started.load(Ordering::SeqCst);
    h.request(
        json!("c"),
        "tools/call",
        p("slow", json!({"seconds": 30}), None),
    );
    assert_eq!(
        until_above(&seen.started, started).await,
        started + 1,
        "the slow call never started at the rmcp server; log:\n{}",
        h.log.dump()
    );
    h.notify("notifications/cancelled", json!({"requestId": "c"}));
    assert_eq!(
        until_above(&seen.cancelled, 0).await,
        1,
        "the rmcp server did not see the cancellation; log:\n{}",
        h.log.dump()
    );
    h.request(
        json!(3),
        "tools/call",
        p("echo", json!({"text": "after"}), None),
    );
    assert_eq!(text(&h.response(&json!(3), T)), "after");
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_stateless_2026_modern_host() {
    let (url, seen) = rmcp_server(false).await;
    let mut h = Host::start(&url, &[]);
    exercise(&mut h, true, &seen).await;
    assert!(
        h.log.find("speaks 2026-07-28").is_some(),
        "{}",
        h.log.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_stateless_2026_legacy_host() {
    let (url, seen) = rmcp_server(false).await;
    let mut h = Host::start(&url, &[]);
    h.initialize("2025-11-25", json!({}));
    exercise(&mut h, false, &seen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_stateful_2025_session_legacy_host() {
    let (url, seen) = rmcp_server(true).await;
    let mut h = Host::start(&url, &["--protocol", "2025-11-25"]);
    h.initialize("2025-11-25", json!({}));
    exercise(&mut h, false, &seen).await;
    assert!(
        h.log.wait_find("session id kept").is_some(),
        "{}",
        h.log.dump()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_stateful_2025_session_modern_host() {
    let (url, seen) = rmcp_server(true).await;
    let mut h = Host::start(&url, &["--protocol", "2025-06-18"]);
    exercise(&mut h, true, &seen).await;
}

// ---------------------------------------------------------------------------------------------
// rmcp's stdio client as the host, spawning `mcp-bridge connect <serve --demo>`
// ---------------------------------------------------------------------------------------------

mod stdio_host {
    use super::*;
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, RoleClient, RunningService};
    use rmcp::transport::TokioChildProcess;
    use rmcp::{ClientServiceExt, ServiceExt};

    fn connect_cmd(url: &str) -> tokio::process::Command {
        // rmcp pipes stdin/stdout itself and lets stderr through.
        tokio::process::Command::from(Bridge::builder().log_level("warn").connect(url).command())
    }

    fn first_text(r: &CallToolResult) -> String {
        let v = serde_json::to_value(r).expect("serialize result");
        v["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    async fn exercise(client: &RunningService<RoleClient, ()>) {
        let tools = client.list_tools(None).await.expect("tools/list");
        assert!(tools.tools.iter().any(|t| t.name == "lookup"));
        let r = client
            .call_tool(
                CallToolRequestParams::new("echo")
                    .with_arguments(args(json!({"text": "via rmcp stdio"}))),
            )
            .await
            .expect("echo");
        assert_eq!(first_text(&r), "via rmcp stdio");
        let r = client
            .call_tool(
                CallToolRequestParams::new("lookup")
                    .with_arguments(args(json!({"region": "ap", "id": 3}))),
            )
            .await
            .expect("lookup");
        assert_eq!(first_text(&r), "region=ap id=3");
        let futs: Vec<_> = (0..8)
            .map(|i| {
                client.call_tool(
                    CallToolRequestParams::new("echo")
                        .with_arguments(args(json!({"text": format!("n{i}")}))),
                )
            })
            .collect();
        for (i, f) in futs.into_iter().enumerate() {
            let r = tokio::time::timeout(T, f)
                .await
                .expect("timed out")
                .expect("echo");
            assert_eq!(first_text(&r), format!("n{i}"));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rmcp_stdio_host_initialize_lifecycle() {
        let serve = Bridge::demo(&[]).await;
        let transport = TokioChildProcess::new(connect_cmd(&serve.url)).expect("spawn connect");
        let client = tokio::time::timeout(T, ().serve(transport))
            .await
            .expect("initialize timed out")
            .expect("initialize");
        let info = client.peer_info().expect("server info");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        exercise(&client).await;
        client.cancel().await.expect("close");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rmcp_stdio_host_discover_lifecycle() {
        let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
        let transport = TokioChildProcess::new(connect_cmd(&serve.url)).expect("spawn connect");
        let client = tokio::time::timeout(
            T,
            ().serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            ),
        )
        .await
        .expect("discover timed out")
        .expect("discover");
        let info = client.peer_info().expect("server info");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
        exercise(&client).await;
        client.cancel().await.expect("close");
    }
}
