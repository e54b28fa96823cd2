//! README "Metrics": `--metrics-on-main` serves `/metrics` on the main listener behind the
//! same `--auth` as the MCP endpoint: without a token 401, with one the Prometheus text; the
//! metrics listener of its own (`--metrics-listen`) stays open (it is meant for a scraper on a
//! private address).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use support::*;

const TOKEN: &str = "metrics-test-token-0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn metrics_on_main_are_behind_the_endpoints_auth() {
    let b = Bridge::builder()
        .serve()
        .args(["--demo", "--port", "0", "--auth", "bearer"])
        .args(["--token-env", "MCPB_METRICS_T", "--metrics-on-main"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .env("MCPB_METRICS_T", TOKEN)
        .spawn()
        .await;
    let c = client();
    let url = b.endpoint("/metrics");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401, "no token");
    let r = c.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), 401, "a wrong token");
    let r = c.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("mcp_bridge_build_info"), "{text}");

    // The metrics listener of its own answers without a token.
    let own = metrics_url(&b).await;
    let r = c.get(&own).send().await.unwrap();
    assert_eq!(r.status(), 200);
}
