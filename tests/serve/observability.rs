//! Observability through the real binary: the `/metrics` listener and its families (the three
//! kinds of failure stay separate series), readiness while the child is dead and after its
//! restart, and W3C trace context carried from HTTP headers into the `_meta` the child gets.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn families_separate_the_three_failures_and_readiness_follows_the_child() {
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0", "--metrics-on-main"]).await;
    let murl = metrics_url(&b).await;
    let c = client();
    b.wait_ready(Duration::from_secs(20)).await;

    for i in 0..2 {
        let r = call_modern(&c, &b.url, json!(i), "echo", json!({"text": "hi"})).await;
        assert_eq!(r.text(), "hi");
    }
    let r = call_modern(&c, &b.url, json!("f"), "fail", json!({})).await;
    assert_eq!(r.result()["isError"], true);
    let r = call_modern(&c, &b.url, json!("e"), "error", json!({"code": -32050})).await;
    assert_eq!(r.error_code(), -32050);
    // Header mismatch: Mcp-Name says one tool, the body another.
    let body = modern_tool_call(json!("m"), "echo", json!({"text": "x"}));
    let mut h = modern_headers(&body);
    h.insert(hn("mcp-name"), hv("add"));
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code(), -32020);

    let t = scrape(&c, &murl).await;
    let s = |series: &str| sample(&t, series);
    assert_eq!(
        s(r#"mcp_bridge_tool_results_total{is_error="false",server="default",tool="echo"}"#),
        Some(2.0),
        "{t}"
    );
    assert_eq!(
        s(r#"mcp_bridge_tool_results_total{is_error="true",server="default",tool="fail"}"#),
        Some(1.0)
    );
    assert_eq!(
        s(
            r#"mcp_bridge_jsonrpc_errors_total{code="-32050",method="tools/call",server="default",source="upstream"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        s(
            r#"mcp_bridge_jsonrpc_errors_total{code="-32020",method="tools/call",server="default",source="bridge"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        s(r#"mcp_bridge_jsonrpc_requests_total{method="tools/call",server="default"}"#),
        Some(5.0)
    );
    assert_eq!(
        s(r#"mcp_bridge_http_responses_total{method="POST",route="mcp",status="400"}"#),
        Some(1.0)
    );
    assert_eq!(s(r#"mcp_bridge_upstream_up{server="default"}"#), Some(1.0));
    assert!(t.contains(&format!(
        "mcp_bridge_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(t.contains("process_resident_memory_bytes "), "{t}");
    assert!(t.contains("process_open_fds "));
    assert!(t.contains("mcp_bridge_http_request_duration_seconds_bucket{"));
    assert!(t.contains(r#"mcp_bridge_cancellations_total{cause="client_disconnect"} 0"#));

    // The main listener serves the same text.
    let main = scrape(&c, &b.endpoint("/metrics")).await;
    assert!(main.contains("mcp_bridge_tool_results_total"));

    // The child dies: /readyz turns 503 (naming it), then 200 again after the restart.
    let r = call_modern(&c, &b.url, json!("c"), "crash", json!({})).await;
    assert_eq!(r.error()["data"]["reason"], "child_exited", "{r:?}");
    let (mut saw_down, mut back_up) = (false, false);
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let resp = c.get(b.endpoint("/readyz")).send().await.expect("readyz");
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        if status == 503 {
            assert!(body.contains("\"down\":[\"default\"]"), "{body}");
            saw_down = true;
        } else if status == 200 && saw_down {
            back_up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(saw_down, "/readyz never said 503; log:\n{}", b.log.dump());
    assert!(back_up, "/readyz did not come back; log:\n{}", b.log.dump());
    let t = scrape(&c, &murl).await;
    let s = |series: &str| sample(&t, series);
    assert_eq!(
        s(r#"mcp_bridge_upstream_up{server="default"}"#),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        s(r#"mcp_bridge_child_restarts_total{server="default"}"#),
        Some(1.0)
    );
    assert_eq!(
        s(r#"mcp_bridge_child_starts_total{server="default"}"#),
        Some(2.0)
    );
    assert_eq!(
        s(r#"mcp_bridge_child_exits_total{reason="exit_error",server="default"}"#),
        Some(1.0)
    );
    assert_eq!(
        s(
            r#"mcp_bridge_jsonrpc_errors_total{code="-32000",method="tools/call",server="default",source="bridge"}"#
        ),
        Some(1.0)
    );

    // The exposition format as Prometheus's own linter reads it. Without promtool the check
    // is skipped visibly, and under CI (CI=1/true, where .ci/cargo-test.sh installs it) a
    // missing promtool is a failure.
    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut p| {
            use std::io::Write;
            if let Some(mut i) = p.stdin.take() {
                i.write_all(t.as_bytes())?;
            }
            p.wait_with_output()
        });
    let ci = under_ci();
    match promtool {
        Err(e) if ci => panic!("promtool is required under CI (Debian package prometheus): {e}"),
        Err(e) => eprintln!("skipped: promtool check metrics ({e}; a failure under CI=1)"),
        Ok(out) => promtool_clean(&out),
    }
}

/// promtool's verdict: exit 0 and nothing said (no lint warning either).
fn promtool_clean(out: &std::process::Output) {
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_by_disconnect_is_counted() {
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0"]).await;
    let murl = metrics_url(&b).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let body = modern_tool_call(json!("s"), "slow", json!({"seconds": 30, "steps": 0}));
    let short = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let r = short
        .post(&b.url)
        .headers(modern_headers(&body))
        .body(body.to_string())
        .send()
        .await;
    assert!(r.is_err(), "the slow call should not answer within 300 ms");
    let series = r#"mcp_bridge_cancellations_total{cause="client_disconnect"}"#;
    // Both settle within a moment of each other (the gauge drops as the call unwinds).
    let what = "one client_disconnect cancellation and no call in flight";
    Scraper::at(&murl)
        .until(what, Duration::from_secs(10), |t| {
            sample(t, series) == Some(1.0) && sample(t, "mcp_bridge_calls_in_flight") == Some(0.0)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_reaches_the_child_in_both_eras() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for era in ["modern", "legacy"] {
        // The child's stdin is copied to its stderr, which the bridge logs.
        let script = format!("tee /dev/stderr | exec '{}' demo-server --era {era}", bin());
        let b = Bridge::serve(&["--port", "0", "--", "sh", "-c", &script]).await;
        let c = client();
        b.wait_ready(Duration::from_secs(20)).await;
        let body = modern_tool_call(json!(1), "echo", json!({"text": "traced"}));
        let mut h = modern_headers(&body);
        h.insert(hn("traceparent"), hv(TP));
        h.insert(hn("tracestate"), hv("vendor=abc"));
        let r = post_with(&c, &b.url, h, body.to_string()).await;
        assert_eq!(r.text(), "traced", "{era}: {r:?}");
        let line = b.log.expect("\"traced\"", Duration::from_secs(5)).await;
        assert!(
            line.contains(&format!("\"traceparent\":\"{TP}\""))
                && line.contains("\"tracestate\":\"vendor=abc\""),
            "{era}: {line}"
        );
    }
}
