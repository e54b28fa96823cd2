//! `serve --workers N`: the daemon's runtime has N worker threads (as it logs, and at least as
//! many threads of the runtime's name in /proc: the blocking pool's share the name) and
//! answers on them; without the flag it has one per core less one (at least one), or
//! TOKIO_WORKER_THREADS when that is set; `--workers 0` is a usage error.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

/// The daemon's threads named `tokio-rt-worker` (its workers and its blocking pool's threads).
fn workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|c| c.trim() == "tokio-rt-worker")
        .count()
}

/// The daemon's count of its workers, checked against its threads.
async fn logged_workers(b: &Bridge) -> usize {
    let line = b
        .log
        .expect("worker thread(s) (--workers)", Duration::from_secs(20))
        .await;
    let n: usize = line
        .split("runtime: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no worker count in {line:?}"));
    assert!(workers(b.pid()) >= n, "{n} logged, fewer threads in /proc");
    n
}

async fn answers(b: &Bridge) {
    let c = client();
    let r = call_modern(&c, &b.url, json!(1), "echo", json!({"text": "w"})).await;
    assert_eq!(r.text(), "w", "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_flag_sets_the_runtime_and_the_default_leaves_a_core() {
    let b = Bridge::demo(&["--workers", "3"]).await;
    b.wait_ready(Duration::from_secs(20)).await;
    answers(&b).await;
    assert_eq!(logged_workers(&b).await, 3);

    let b = Bridge::builder()
        .serve()
        .env_remove("TOKIO_WORKER_THREADS")
        .args(["--demo", "--port", "0"])
        .spawn()
        .await;
    b.wait_ready(Duration::from_secs(20)).await;
    answers(&b).await;
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(logged_workers(&b).await, cores.saturating_sub(1).max(1));

    let b = Bridge::builder()
        .serve()
        .env("TOKIO_WORKER_THREADS", "2")
        .args(["--demo", "--port", "0"])
        .spawn()
        .await;
    b.wait_ready(Duration::from_secs(20)).await;
    answers(&b).await;
    assert_eq!(logged_workers(&b).await, 2);
}

#[test]
fn workers_zero_is_a_usage_error() {
    let st = Bridge::builder()
        .no_log_level()
        .args(["serve", "--demo", "--workers", "0"])
        .output();
    assert_eq!(st.status.code(), Some(64), "{st:?}");
}
