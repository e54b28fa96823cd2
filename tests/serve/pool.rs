//! Issue 13, child pools, against the real binary and real demo children (`--pool-min/-max`,
//! `--pool-idle`). The demo's `whoami` tool names the process that answered, so each test
//! sees which child took which call:
//!
//! - a call goes to the least-loaded child, and one more child starts while every child is
//!   busy; an idle child above `--pool-min` is stopped (its process gone);
//! - a 2025 session stays on one child for its life, a new session gets a child of its own
//!   while the pool has room;
//! - two callers that may be asked run at once on two 2025 children instead of one waiting for
//!   the other, and each answer reaches the child that asked (child ids collide across
//!   children);
//! - `/readyz` waits for `--pool-min` children; bad pool settings are refused (64, 78).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

/// The pid in a `whoami` answer.
fn pid_of(r: &Reply) -> u32 {
    let text = r.text();
    text.strip_prefix("pid ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not a whoami answer: {r:?}"))
}

async fn whoami_2026(c: &reqwest::Client, url: &str, id: u64) -> u32 {
    pid_of(&call_modern(c, url, json!(id), "whoami", json!({})).await)
}

/// `serve --demo <args> --metrics-listen 127.0.0.1:0`, ready, with its scraper.
async fn pool_bridge(args: &[&str]) -> (Bridge, Scraper) {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--metrics-listen", "127.0.0.1:0"]);
    let b = Bridge::demo(&all).await;
    b.wait_ready(T).await;
    let m = Scraper::of(&b).await;
    (b, m)
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// One child while idle; a busy child makes the pool grow, and the next call goes to the new,
/// less loaded child; once idle for `--pool-idle` the pool is back at `--pool-min` and the
/// extra child's process is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_pool_grows_and_an_idle_one_shrinks() {
    let (b, m) = pool_bridge(&["--pool-max", "3", "--pool-idle", "1s"]).await;
    let c = client();
    m.until_sum("mcp_bridge_pool_children", 1.0).await;
    let first = whoami_2026(&c, &b.url, 1).await;
    assert_eq!(
        whoami_2026(&c, &b.url, 2).await,
        first,
        "an idle pool of one"
    );

    // A slow call keeps the first child busy: the pool starts a second.
    let slow = {
        let (c, url) = (c.clone(), b.url.clone());
        tokio::spawn(async move {
            call_modern(&c, &url, json!("slow"), "slow", json!({"seconds": 3})).await
        })
    };
    let until = Instant::now() + T;
    let other = loop {
        let pid = whoami_2026(&c, &b.url, 3).await;
        if pid != first {
            break pid;
        }
        assert!(
            Instant::now() < until,
            "no second child took a call; log:\n{}",
            b.log.dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(alive(other));
    // Two at least (a third may start while both are busy: the pool's max is 3).
    let grown = metric_sum(&m.scrape().await, "mcp_bridge_pool_children", &[]);
    assert!(grown.is_some_and(|g| (2.0..=3.0).contains(&g)), "{grown:?}");
    let r = slow.await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");

    // Idle for a second: back to one child, every other process stopped.
    m.until_sum("mcp_bridge_pool_children", 1.0).await;
    let left = whoami_2026(&c, &b.url, 4).await;
    assert!(alive(left));
    let until = Instant::now() + T;
    let gone = |p: u32| p == left || !alive(p);
    while !(gone(first) && gone(other)) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        gone(first) && gone(other),
        "a stopped child's process is still there"
    );
}

/// Each 2025 session stays on one child; a second session gets a child of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_stays_on_one_child() {
    let b = Bridge::demo(&["--pool-max", "2"]).await;
    b.wait_ready(T).await;
    let c = client();
    let (s1, s2) = (
        Session::open(&c, &b.url).await,
        Session::open(&c, &b.url).await,
    );
    let mut seen = Vec::new();
    for s in [&s1, &s2] {
        let pids: Vec<u32> = {
            let mut v = Vec::new();
            for i in 0..4 {
                v.push(pid_of(&s.call(json!(i), "whoami", json!({})).await));
            }
            v
        };
        assert!(pids.iter().all(|p| *p == pids[0]), "moved: {pids:?}");
        seen.push(pids[0]);
    }
    assert_ne!(
        seen[0], seen[1],
        "two sessions on one child while the pool had room"
    );
    // A third session shares (the pool is full) and stays put too.
    let s3 = Session::open(&c, &b.url).await;
    let p = pid_of(&s3.call(json!(1), "whoami", json!({})).await);
    assert!(seen.contains(&p));
    assert_eq!(pid_of(&s3.call(json!(2), "whoami", json!({})).await), p);
}

/// Two 2025 sessions that declared elicitation call `elicit` at once: with a pool of two
/// 2025 children each is asked at once (no call queued) and gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_eliciting_at_once_each_have_a_child() {
    let (b, m) = pool_bridge(&["--demo-era", "legacy", "--pool-max", "2"]).await;
    let c = client();
    let (a, bb) = (
        elicit_session(&c, &b.url).await,
        elicit_session(&c, &b.url).await,
    );
    // Both asked before either answers: neither waited for the other.
    let (sse_a, req_a) = ask_2025(&b, &a, "alice").await;
    let (sse_b, req_b) = ask_2025(&b, &bb, "bob").await;
    assert_eq!(
        metric_sum(&m.scrape().await, "mcp_bridge_calls_queued", &[]),
        Some(0.0)
    );
    let text_b = answer_2025(&b, &bb, sse_b, &req_b, "Bob").await;
    let text_a = answer_2025(&b, &a, sse_a, &req_a, "Alice").await;
    assert!(
        text_a.contains("Alice") && !text_a.contains("Bob"),
        "{text_a}"
    );
    assert!(
        text_b.contains("Bob") && !text_b.contains("Alice"),
        "{text_b}"
    );
}

/// Two 2026 `elicit` calls parked on two 2025 children (whose request ids are the same
/// numbers): the second park goes to the other child (the pool shows two busy children while
/// both are parked), and each retry's answer goes back to the child that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_on_two_children_resume_on_their_own() {
    let (b, m) = pool_bridge(&["--demo-era", "legacy", "--pool-min", "2"]).await;
    m.until_sum("mcp_bridge_pool_children", 2.0).await;
    let c = client();
    // The second goes to the less loaded child: the first holds a parked call.
    let p1 = park_2026(&c, &b.url, json!("p1"), "one").await;
    m.until_sum("mcp_bridge_pool_busy_children", 1.0).await;
    let p2 = park_2026(&c, &b.url, json!("p2"), "two").await;
    let t = m.until_sum("mcp_bridge_pool_busy_children", 2.0).await;
    assert_eq!(metric_sum(&t, "mcp_bridge_pool_children", &[]), Some(2.0));
    let t2 = retry_2026(&c, &b.url, json!("r2"), "two", p2, "Second").await;
    let t1 = retry_2026(&c, &b.url, json!("r1"), "one", p1, "First").await;
    assert!(t1.contains("First") && !t1.contains("Second"), "{t1}");
    assert!(t2.contains("Second") && !t2.contains("First"), "{t2}");
    m.until_sum("mcp_bridge_pool_busy_children", 0.0).await;
}

/// `/readyz` says ready only once `--pool-min` children are; a scrape shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_at_pool_min() {
    let (b, m) = pool_bridge(&["--pool-min", "3"]).await;
    let text = m.scrape().await;
    assert_eq!(
        metric_sum(&text, "mcp_bridge_pool_children", &[]),
        Some(3.0)
    );
    // The gauge follows the children within a tick of the pool's task.
    m.until_sum("mcp_bridge_upstream_up", 1.0).await;
    // Three calls at once land on three children (least loaded first), none shares.
    let c = client();
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let (c, url) = (c.clone(), b.url.clone());
            tokio::spawn(async move {
                call_modern(&c, &url, json!(i), "slow", json!({"seconds": 2})).await
            })
        })
        .collect();
    m.until_sum("mcp_bridge_pool_busy_children", 3.0).await;
    for h in calls {
        assert_eq!(h.await.unwrap().status, 200);
    }
}

#[test]
fn bad_pool_settings_are_refused() {
    for (args, want) in [
        (&["--demo", "--pool-min", "0"][..], "at least one child"),
        (
            &["--demo", "--pool-min", "3", "--pool-max", "2"][..],
            "below its min",
        ),
        (&["--demo", "--pool-max", "65"][..], "at most 64"),
        (
            &["--demo", "--pool-max", "2", "--isolation", "session"][..],
            "exclude each other",
        ),
        (
            &["--upstream", "http://127.0.0.1:9/mcp", "--pool-max", "2"][..],
            "stdio child",
        ),
    ] {
        let (code, err) = run_refused(args);
        assert_eq!(code, Some(64), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "bridge.toml",
        "[servers.a]\ncommand = \"x\"\npool = { min = 2, max = 1 }\n",
    );
    let out = Bridge::builder()
        .serve()
        .arg("--config")
        .arg(&cfg)
        .run(Duration::from_secs(15));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("below its min"), "{err}");
}
