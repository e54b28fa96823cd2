//! Shutdown leaves nothing behind: SIGTERM to the bridge stops the child and everything in
//! the child's process group, including a grandchild the child forked.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// Start a bridge whose child forks a long `sleep` and then becomes the demo server; return
/// it with the pids of the child (demo server) and the grandchild (sleep).
async fn bridge_with_grandchild(extra: &[&str]) -> (Bridge, u32, u32) {
    let script = format!("sleep 1000 & exec {} demo-server", bin());
    let mut args = vec!["--port", "0"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let b = Bridge::serve(&args).await;
    let c = client();
    let r = echo_until_ok(&c, &b.url, "ready", Duration::from_secs(20)).await;
    assert_eq!(r.text(), "ready", "log:\n{}", b.log.dump());

    let kids = children_of(b.pid());
    assert_eq!(kids.len(), 1, "bridge children {kids:?}");
    let demo = kids[0];
    // The forked `sh` becomes `sleep` a moment later under load: look (bounded) until it has.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let sleep = loop {
        let grandkids = children_of(demo);
        if let Some(p) = grandkids.iter().copied().find(|p| comm(*p) == "sleep") {
            break p;
        }
        assert!(
            std::time::Instant::now() < until,
            "no sleep among {grandkids:?} (children of {demo})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(alive(demo) && alive(sleep));
    (b, demo, sleep)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_no_process_behind() {
    let (mut b, demo, sleep) = bridge_with_grandchild(&[]).await;
    b.signal(nix::sys::signal::Signal::SIGTERM);
    let st = b
        .wait_exit(Duration::from_secs(20))
        .await
        .unwrap_or_else(|| {
            panic!(
                "bridge still running 20 s after SIGTERM; log:\n{}",
                b.log.dump()
            )
        });
    assert!(st.success(), "exit status {st}; log:\n{}", b.log.dump());
    assert!(
        wait_gone(demo, Duration::from_secs(5)).await,
        "child {demo} outlived the bridge"
    );
    assert!(
        wait_gone(sleep, Duration::from_secs(5)).await,
        "grandchild {sleep} outlived the bridge; log:\n{}",
        b.log.dump()
    );
}

/// Same with a call in flight: the drain period ends, the call gets an answer or the
/// connection closes, and still nothing survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_call_in_flight() {
    let (mut b, demo, sleep) = bridge_with_grandchild(&["--shutdown-grace", "1s"]).await;
    let c = client();
    let url = b.url.clone();
    let call = tokio::spawn(async move {
        let body = modern_tool_call(json!(1), "slow", json!({"seconds": 60, "steps": 0}));
        c.post(&url)
            .headers(modern_headers(&body))
            .body(body.to_string())
            .send()
            .await
    });
    b.log
        .expect("demo: slow started id=", Duration::from_secs(10))
        .await;
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        b.wait_exit(Duration::from_secs(20)).await.is_some(),
        "bridge still running; log:\n{}",
        b.log.dump()
    );
    // The caller is not left hanging.
    let _ = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("call still pending after the bridge exited");
    assert!(
        wait_gone(demo, Duration::from_secs(5)).await,
        "child survived"
    );
    assert!(
        wait_gone(sleep, Duration::from_secs(5)).await,
        "grandchild survived"
    );
}

/// A child that crashes leaves its forked helpers behind unless the bridge cleans up its
/// process group; after the restart only the new generation is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_kills_grandchild() {
    let (b, demo, sleep) = bridge_with_grandchild(&[]).await;
    let c = client();
    let r = call_modern(&c, &b.url, json!(1), "crash", json!({})).await;
    assert_eq!(r.error()["data"]["reason"], "child_exited", "{r:?}");
    assert!(
        wait_gone(demo, Duration::from_secs(5)).await,
        "crashed child still alive"
    );
    assert!(
        wait_gone(sleep, Duration::from_secs(5)).await,
        "grandchild of the crashed child survived"
    );
    let r = echo_until_ok(&c, &b.url, "again", Duration::from_secs(20)).await;
    assert_eq!(r.text(), "again");
}
