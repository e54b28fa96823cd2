//! Issue 13, parts 1 and 2, against the real binary and its 2025-era demo child: a 2025
//! child's requests name no call, so the bridge must know whom each one is for.
//!
//! - An abandoned `input_required` (a 2026 client that never retries) blocks no one: another
//!   2026 client and a 2025 session still complete their elicitations, and at
//!   `--park-timeout` the parked call is cancelled in the child.
//! - Two callers that may be asked, at once on the one child: the second waits until the
//!   first no longer may be (counted in `mcp_bridge_calls_queued`), so each gets its own
//!   question and its own answer; a caller that declared nothing is never held back; the wait
//!   has a bound (`--attribution-wait`) with an error that says so.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

/// The issue's reproduction: one 2026 caller parks an `elicit` and never comes back; another
/// 2026 caller's and a 2025 session's elicitations through the same child still succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_park_blocks_no_one() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let _abandoned = park_2026(&c, &b.url, json!("gone"), "abandoned").await;

    for i in 0..3 {
        let msg = format!("other {i}");
        let parked = park_2026(&c, &b.url, json!(format!("p{i}")), &msg).await;
        let text = retry_2026(&c, &b.url, json!(format!("r{i}")), &msg, parked, "Ada").await;
        assert!(text.contains("Ada"), "{text}");
    }

    let s = elicit_session(&c, &b.url).await;
    let (sse, req) = ask_2025(&b, &s, "legacy-1").await;
    let text = answer_2025(&b, &s, sse, &req, "Grace").await;
    assert!(text.contains("Grace"), "{text}");
}

/// The abandoned park is cancelled in the child once `--park-timeout` is up (the demo child
/// logs what it was told), and its `requestState` resumes nothing after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_park_is_cancelled_in_the_child_at_its_timeout() {
    let b = Bridge::demo(&["--demo-era", "legacy", "--park-timeout", "1s"]).await;
    let c = client();
    let parked = park_2026(&c, &b.url, json!(1), "who?").await;
    let line = b.log.expect("demo: cancelled id=", T).await;
    assert!(line.contains("reason=timeout"), "{line}");
    let body = modern_request(
        json!(2),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "who?"},
               "inputResponses": {parked.0: {"action": "decline"}},
               "requestState": parked.1,
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let r = post_modern(&c, &b.url, &body).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");
}

/// Two 2025 sessions call `elicit` at once on the one child: the second is held (a queued
/// call) until the first is answered, then asked its own question; both complete with their
/// own answers. Meanwhile a session that declared nothing is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_eliciting_at_once_each_get_their_own_answer() {
    let b = Bridge::demo(&["--demo-era", "legacy", "--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = Scraper::of(&b).await;
    let c = client();
    let (a, bb) = (
        elicit_session(&c, &b.url).await,
        elicit_session(&c, &b.url).await,
    );
    let (sse_a, req_a) = ask_2025(&b, &a, "alice").await;
    let second = {
        let (b2, bb) = (b.log.clone(), bb);
        let url = b.url.clone();
        tokio::spawn(async move {
            // Held until alice is answered, then asked its own question.
            let body = json!({"jsonrpc": "2.0", "id": "bob", "method": "tools/call",
                "params": {"name": "elicit", "arguments": {"message": "bob"}}});
            let resp =
                bb.c.post(&url)
                    .headers(bb.headers())
                    .body(body.to_string())
                    .send();
            let mut sse = SseReader::new(resp.await.unwrap());
            let req = sse
                .next(T)
                .await
                .unwrap_or_else(|| panic!("bob: stream ended; log:\n{}", b2.dump()));
            (bb, sse, req)
        })
    };
    let t = metrics
        .until("a call queued", Duration::from_secs(10), |t| {
            metric_sum(t, "mcp_bridge_calls_queued", &[]) >= Some(1.0)
        })
        .await;
    let queued = metric_sum(&t, "mcp_bridge_calls_queued", &[]);
    assert_eq!(
        queued,
        Some(1.0),
        "bob's call was not queued; log:\n{}",
        b.log.dump()
    );

    // A caller that can be asked nothing is never held back.
    let plain = Session::open(&c, &b.url).await;
    let r = tokio::time::timeout(T, plain.call(json!(1), "echo", json!({"text": "hi"})))
        .await
        .expect("a caller that declared nothing was held back");
    assert_eq!(r.text(), "hi");

    let text = answer_2025(&b, &a, sse_a, &req_a, "Alice").await;
    assert!(text.contains("Alice"), "{text}");
    let (bb, sse_b, req_b) = second.await.unwrap();
    assert_eq!(req_b["params"]["message"], "bob", "{req_b}");
    let text = answer_2025(&b, &bb, sse_b, &req_b, "Bob").await;
    assert!(text.contains("Bob") && !text.contains("Alice"), "{text}");
    let after = metrics.scrape().await;
    assert_eq!(
        metric_sum(&after, "mcp_bridge_calls_queued", &[]),
        Some(0.0)
    );
    assert_eq!(
        metric_sum(
            &after,
            "mcp_bridge_dropped_frames_total",
            &[("reason", "unroutable_request")]
        ),
        Some(0.0)
    );
}

/// Two 2026 clients call `elicit` at once: each is parked with its own question and resumed
/// with its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_2026_clients_eliciting_at_once_each_get_their_own_answer() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let (pa, pb) = tokio::join!(
        park_2026(&c, &b.url, json!("a1"), "alice"),
        park_2026(&c, &b.url, json!("b1"), "bob"),
    );
    let (ta, tb) = tokio::join!(
        retry_2026(&c, &b.url, json!("a2"), "alice", pa, "Alice"),
        retry_2026(&c, &b.url, json!("b2"), "bob", pb, "Bob"),
    );
    assert!(ta.contains("Alice") && !ta.contains("Bob"), "{ta}");
    assert!(tb.contains("Bob") && !tb.contains("Alice"), "{tb}");
}

/// The wait for attribution has a bound: past `--attribution-wait` the held call gets an
/// error saying why (`data.reason`), and the first caller's call is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_attribution_has_a_bound() {
    let b = Bridge::demo(&["--demo-era", "legacy", "--attribution-wait", "300ms"]).await;
    let c = client();
    let (a, bb) = (
        elicit_session(&c, &b.url).await,
        elicit_session(&c, &b.url).await,
    );
    let (sse_a, req_a) = ask_2025(&b, &a, "alice").await;
    let r = bb
        .call(json!("bob"), "elicit", json!({"message": "bob"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let e = r.error();
    assert_eq!(e["data"]["reason"], "attribution_busy", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("--attribution-wait"),
        "{e}"
    );
    let text = answer_2025(&b, &a, sse_a, &req_a, "Alice").await;
    assert!(text.contains("Alice"), "{text}");
}

/// connect's park has the same bound: a 2026 host's call parked for a 2025 remote's question
/// is cancelled at the remote once connect's `--park-timeout` is up, never before, counted
/// as `timeout` (here the remote is `serve` in front of the demo child, which logs the
/// cancellation it is told of).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_cancels_an_abandoned_park_at_the_remote_at_its_timeout() {
    const PARK: Duration = Duration::from_secs(1);
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(
        &serve.url,
        &[
            "--protocol",
            "2025-11-25",
            "--park-timeout",
            "1s",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let m = Scraper::of(&h).await;
    let params = json!({"name": "elicit", "arguments": {"message": "who?"},
        "_meta": {META_PV: MODERN, META_CAPS: {"elicitation": {}}}});
    let asked = std::time::Instant::now();
    h.request(json!(1), "tools/call", params);
    let r = h.response(&json!(1), T);
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // connect's sweep runs every quarter of the timeout (at least 200 ms): the park ends
    // at its timeout, not before (the wait's bound leaves room for a loaded machine).
    let expired = "waiting for the host's input expired: cancelled";
    if h.log.wait_for(expired, PARK * 5).await.is_none() {
        panic!("the park never expired; connect's log:\n{}", h.log.dump());
    }
    let after = asked.elapsed();
    assert!(
        after >= PARK,
        "cancelled {after:?} after the call, before its timeout"
    );
    let Some(line) = serve.log.wait_for("demo: cancelled id=", T).await else {
        panic!(
            "the remote's child was not told; serve's log:\n{}\nconnect's log:\n{}",
            serve.log.dump(),
            h.log.dump()
        );
    };
    assert_eq!(serve.log.count("demo: cancelled id="), 1, "{line}");
    let t = m.scrape().await;
    assert_eq!(
        sample(&t, r#"mcp_bridge_cancellations_total{cause="timeout"}"#),
        Some(1.0),
        "{t}"
    );
    assert_eq!(
        metric_sum(&t, "mcp_bridge_cancellations_total", &[]),
        Some(1.0),
        "counted once, as timeout:\n{t}"
    );
}

/// The host cancels a request that was answered `input_required`: connect releases the parked
/// call at once (long before `--park-timeout`) and the remote's child is told, with the
/// host's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_releases_a_park_the_host_cancels() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    let params = json!({"name": "elicit", "arguments": {"message": "who?"},
        "_meta": {META_PV: MODERN, META_CAPS: {"elicitation": {}}}});
    h.request(json!("e1"), "tools/call", params);
    let r = h.response(&json!("e1"), T);
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    assert_eq!(serve.log.count("demo: cancelled id="), 0);
    h.notify(
        "notifications/cancelled",
        json!({"requestId": "e1", "reason": "closed"}),
    );
    let Some(line) = serve.log.wait_for("demo: cancelled id=", T).await else {
        panic!(
            "the remote's child was not told; serve's log:\n{}\nconnect's log:\n{}",
            serve.log.dump(),
            h.log.dump()
        );
    };
    assert!(line.contains("reason=client cancelled"), "{line}");
    h.log.expect("parked for its input: released", T).await;
}
