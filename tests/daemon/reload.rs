//! SIGHUP reload against the real binary, under light load: an added server starts, a removed
//! one drains and its child stops, a changed one gets a new child, and the unchanged one keeps
//! its child and answers every call, including one in flight across the reload. An invalid
//! configuration is rejected and the running one keeps serving.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_removes_and_restarts_without_failing_unchanged_calls() {
    let dir = tempfile::tempdir().unwrap();
    let before = format!(
        "{}{}{}",
        demo_server("keep", &[]),
        demo_server("gone", &[]),
        demo_server("change", &[])
    );
    let cfg = write(dir.path(), "r.toml", &before);
    let b = daemon(&cfg).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let keep_pid = child_pids(&b, "keep");
    let gone_pid = child_pids(&b, "gone");
    let change_pid = child_pids(&b, "change");
    assert_eq!(
        (keep_pid.len(), gone_pid.len(), change_pid.len()),
        (1, 1, 1)
    );

    // Light load on the unchanged server: four callers in a loop, counting failures.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for w in 0..4 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let url = server_url(&b, "keep");
        load.push(tokio::spawn(async move {
            let c = client();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let text = format!("w{w}-{i}");
                let r = call_modern(&c, &url, json!(i), "echo", json!({ "text": text })).await;
                if echoed(&r, &text) {
                    ok.fetch_add(1, Ordering::SeqCst);
                } else {
                    failed.fetch_add(1, Ordering::SeqCst);
                    eprintln!("failed call: {r:?}");
                }
                i += 1;
            }
        }));
    }
    // And one slow call on the unchanged server spanning the reload.
    let slow = {
        let url = server_url(&b, "keep");
        tokio::spawn(async move {
            call_modern(
                &client(),
                &url,
                json!("s"),
                "slow",
                json!({"seconds": 2, "steps": 2}),
            )
            .await
        })
    };
    // The reload must find it running: wait until the child started it.
    b.log
        .expect("demo: slow started id=", Duration::from_secs(20))
        .await;

    let after = format!(
        "{}{}{}",
        demo_server("keep", &[]),
        demo_server("change", &["--era", "legacy"]),
        demo_server("added", &[])
    );
    std::fs::write(&cfg, after).unwrap();
    b.signal(Signal::SIGHUP);
    b.log
        .expect("configuration reloaded", Duration::from_secs(20))
        .await;
    let line = b.log.find("configuration reloaded").unwrap();
    assert!(line.contains("added=[\"added\"]"), "{line}");
    assert!(line.contains("removed=[\"gone\"]"), "{line}");
    assert!(line.contains("restarted=[\"change\"]"), "{line}");
    assert!(line.contains("unchanged=1"), "{line}");

    let c = client();
    let r = echo_until_ok(&c, &server_url(&b, "added"), "new", Duration::from_secs(20)).await;
    assert!(echoed(&r, "new"), "{r:?}");
    // The changed server now runs the legacy-only child (a 2025 session works, era 2025).
    let r = echo_until_ok(
        &c,
        &server_url(&b, "change"),
        "changed",
        Duration::from_secs(20),
    )
    .await;
    assert!(echoed(&r, "changed"), "{r:?}");
    let change_after = child_pids(&b, "change");
    assert_eq!(change_after.len(), 2, "log:\n{}", b.log.dump());
    assert!(
        wait_gone(change_pid[0], Duration::from_secs(15)).await,
        "old child of the changed server still running"
    );
    // The removed server: 404 and its child stopped.
    let r = call_modern(
        &c,
        &server_url(&b, "gone"),
        json!(1),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);
    assert!(
        wait_gone(gone_pid[0], Duration::from_secs(15)).await,
        "child of the removed server still running"
    );

    // The unchanged server kept its child and every call succeeded.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    for l in load {
        l.await.unwrap();
    }
    let s = slow.await.unwrap();
    assert_eq!(s.status, 200, "{s:?}");
    assert_eq!(s.text(), "done", "{s:?}");
    assert_eq!(
        child_pids(&b, "keep"),
        keep_pid,
        "the unchanged server restarted"
    );
    assert!(alive(keep_pid[0]));
    assert_eq!(failed.load(Ordering::SeqCst), 0, "log:\n{}", b.log.dump());
    assert!(
        ok.load(Ordering::SeqCst) > 20,
        "too little load to mean anything"
    );
}

/// A server removed by a reload drains: its call in flight when SIGHUP came gets its real
/// answer, new requests to it are 404 at once, and its child stops only after the call ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_drains_its_call_in_flight_then_stops_its_child() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "r.toml",
        &format!("{}{}", demo_server("keep", &[]), demo_server("gone", &[])),
    );
    let b = daemon(&cfg).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let gone_pid = child_pids(&b, "gone");
    assert_eq!(gone_pid.len(), 1);
    let slow = {
        let url = server_url(&b, "gone");
        tokio::spawn(async move {
            let args = json!({"seconds": 3, "steps": 3});
            call_modern(&client(), &url, json!("s"), "slow", args).await
        })
    };
    b.log
        .expect("demo: slow started id=", Duration::from_secs(20))
        .await;
    std::fs::write(&cfg, demo_server("keep", &[])).unwrap();
    b.signal(Signal::SIGHUP);
    let line = b
        .log
        .expect("configuration reloaded", Duration::from_secs(20))
        .await;
    assert!(line.contains("removed=[\"gone\"]"), "{line}");
    // Gone for new requests, while its child still serves the call it has.
    let c = client();
    let r = call_modern(
        &c,
        &server_url(&b, "gone"),
        json!(1),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(r.status, 404, "{r:?}");
    assert!(
        alive(gone_pid[0]),
        "the child stopped before its call ended"
    );
    let s = slow.await.unwrap();
    assert_eq!(s.status, 200, "{s:?}");
    assert_eq!(
        s.text(),
        "done",
        "the call in flight was not drained: {s:?}"
    );
    assert!(
        wait_gone(gone_pid[0], Duration::from_secs(15)).await,
        "child of the removed server still running"
    );
    let r = call_modern(
        &c,
        &server_url(&b, "keep"),
        json!(2),
        "echo",
        json!({"text": "k"}),
    )
    .await;
    assert!(echoed(&r, "k"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_reload_keeps_the_running_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "v.toml", &demo_server("a", &[]));
    let b = daemon(&cfg).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let pid = child_pids(&b, "a");
    std::fs::write(
        &cfg,
        format!(
            "{}  unknown_key = true\n",
            demo_server("a", &["--era", "legacy"])
        ),
    )
    .unwrap();
    b.signal(Signal::SIGHUP);
    let line = b
        .log
        .expect("configuration reload rejected", Duration::from_secs(10))
        .await;
    assert!(line.contains("v.toml:4:3"), "{line}");
    assert!(line.contains("unknown_key"), "{line}");
    let c = client();
    let r = echo_until_ok(&c, &server_url(&b, "a"), "still", Duration::from_secs(5)).await;
    assert!(echoed(&r, "still"), "{r:?}");
    assert_eq!(child_pids(&b, "a"), pid);
    // A later valid file is applied.
    std::fs::write(
        &cfg,
        format!("{}{}", demo_server("a", &[]), demo_server("b", &[])),
    )
    .unwrap();
    b.signal(Signal::SIGHUP);
    b.log
        .expect("configuration reloaded", Duration::from_secs(10))
        .await;
    let r = echo_until_ok(&c, &server_url(&b, "b"), "b", Duration::from_secs(20)).await;
    assert!(echoed(&r, "b"), "{r:?}");
    assert_eq!(child_pids(&b, "a"), pid);
}
