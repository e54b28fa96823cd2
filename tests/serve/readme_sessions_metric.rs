//! README "Metrics": `mcp_bridge_sessions_active{era="2025"}` is the number of live 2025
//! sessions: up at each `initialize`, down when the client DELETEs its session.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use support::*;

const ACTIVE: &str = "mcp_bridge_sessions_active{era=\"2025\"}";

#[tokio::test(flavor = "multi_thread")]
async fn sessions_active_follows_initialize_and_delete() {
    let b = Bridge::demo(&["--metrics-listen", "127.0.0.1:0"]).await;
    let m = Scraper::of(&b).await;
    let c = client();
    assert_eq!(sample(&m.scrape().await, ACTIVE), Some(0.0));
    let one = Session::open(&c, &b.url).await;
    let two = Session::open(&c, &b.url).await;
    assert_eq!(sample(&m.scrape().await, ACTIVE), Some(2.0));
    let r = c
        .delete(&b.url)
        .headers(one.headers())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(sample(&m.scrape().await, ACTIVE), Some(1.0));
    // The other session still works.
    let r = two
        .call(
            serde_json::json!(1),
            "echo",
            serde_json::json!({"text": "x"}),
        )
        .await;
    assert_eq!(r.text(), "x");
    // A second DELETE of the same session is a 404 and changes nothing.
    let r = c
        .delete(&b.url)
        .headers(one.headers())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(sample(&m.scrape().await, ACTIVE), Some(1.0));
}
