//! A child that does not start (README "Faults", the `child_exits_total` reasons, systemd's
//! READY after `start_wait`): a command that cannot be spawned, a child that exits during
//! start-up (`reason="startup"`), a child that never answers the probe (`probe_failed`, after
//! `--probe-timeout`); each is restarted with exponential backoff from 100 ms, `/readyz` says
//! 503 until a child is up, and READY (the `ready:` line) comes once `--start-wait` ran out,
//! naming the server as not ready. A child that fails once and then starts brings `/readyz`
//! to 200.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use support::*;

const T: Duration = Duration::from_secs(20);

/// `serve --metrics-listen … <extra> -- <child…>` (at debug, for the restart lines).
async fn serve_child(extra: &[&str], child: &[&str]) -> (Bridge, Scraper) {
    let b = Bridge::builder()
        .log_level("debug")
        .serve()
        .args(["--port", "0", "--metrics-listen", "127.0.0.1:0"])
        .args(extra)
        .arg("--")
        .args(child)
        .spawn()
        .await;
    let m = Scraper::of(&b).await;
    (b, m)
}

fn exits(t: &str, reason: &str) -> Option<f64> {
    let series = format!(r#"mcp_bridge_child_exits_total{{reason="{reason}",server="default"}}"#);
    sample(t, &series)
}

const STARTS: &str = r#"mcp_bridge_child_starts_total{server="default"}"#;
const RESTARTS: &str = r#"mcp_bridge_child_restarts_total{server="default"}"#;

async fn readyz(b: &Bridge) -> u16 {
    let r = client().get(b.endpoint("/readyz")).send().await.unwrap();
    r.status().as_u16()
}

/// The restart delays the log announced, in order (`restarting child in N ms`).
fn delays(b: &Bridge) -> Vec<u64> {
    b.log
        .lines()
        .iter()
        .filter_map(|l| {
            let rest = l.split("restarting child in ").nth(1)?;
            rest.split(" ms").next()?.parse().ok()
        })
        .collect()
}

/// A command that does not exist: never started (no start, no exit counted), retried with
/// a doubling delay from 100 ms, `/readyz` 503, READY after `--start-wait` naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_be_spawned_is_retried_with_backoff() {
    let started = Instant::now();
    let (b, m) = serve_child(&["--start-wait", "1s"], &["/nonexistent/mcp-child"]).await;
    let ready = b.log.expect("not ready: default", T).await;
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "READY before --start-wait ran out: {ready}"
    );
    assert!(ready.contains("serving 1 server on "), "{ready}");
    assert_eq!(readyz(&b).await, 503);
    b.log.expect_count("restarting child in", 4, T).await;
    assert_eq!(
        delays(&b)[..4],
        [100, 200, 400, 800],
        "log:\n{}",
        b.log.dump()
    );
    assert!(b.log.find("child failed to start").is_some());
    let t = m.until_at_least(RESTARTS, 4.0).await;
    assert_eq!(sample(&t, STARTS), Some(0.0), "a spawn error is no start");
    for reason in ["startup", "probe_failed", "exit_ok", "exit_error"] {
        assert_eq!(exits(&t, reason), Some(0.0), "{reason}");
    }
}

/// A child that exits before it answers the probe: `reason="startup"` once per start, each
/// start counted, restarted with backoff; `/readyz` 503 meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_exits_at_start_counts_startup_exits() {
    let (b, m) = serve_child(&[], &["/bin/sh", "-c", "exit 3"]).await;
    b.log.expect_count("restarting child in", 3, T).await;
    assert_eq!(delays(&b)[..3], [100, 200, 400], "log:\n{}", b.log.dump());
    assert_eq!(readyz(&b).await, 503);
    let t = m
        .until("three start-up exits", T, |t| {
            exits(t, "startup") >= Some(3.0)
        })
        .await;
    let (starts, startup) = (sample(&t, STARTS).unwrap(), exits(&t, "startup").unwrap());
    // Each start ended at start-up (the scrape may fall between a start and its exit).
    assert!(
        starts == startup || starts == startup + 1.0,
        "{starts} starts, {startup} exits"
    );
    for reason in ["probe_failed", "exit_ok", "exit_error"] {
        assert_eq!(exits(&t, reason), Some(0.0), "{reason}");
    }
}

/// A child that reads its stdin and never answers: given up after `--probe-timeout`
/// (`reason="probe_failed"`), stopped, started again; `/readyz` 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_never_answers_the_probe_is_probe_failed() {
    let started = Instant::now();
    let (b, m) = serve_child(
        &["--probe-timeout", "500ms"],
        &["/bin/sh", "-c", "exec cat > /dev/null"],
    )
    .await;
    let t = m
        .until("a probe_failed exit", T, |t| {
            exits(t, "probe_failed") >= Some(1.0)
        })
        .await;
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "given up before --probe-timeout"
    );
    assert_eq!(exits(&t, "startup"), Some(0.0));
    assert_eq!(readyz(&b).await, 503);
    b.log
        .expect("answered neither server/discover nor initialize", T)
        .await;
    b.log.expect("restarting child in 100 ms", T).await;
    // Started again, and given up again.
    m.until("a second probe_failed exit", T, |t| {
        exits(t, "probe_failed") >= Some(2.0) && sample(t, STARTS) >= Some(2.0)
    })
    .await;
}

/// A child that exits at its first start and serves at its second: `/readyz` 503, then 200
/// once the restarted child answered its probe; one start-up exit counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_fails_once_then_starts_makes_readyz_200() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("tried");
    // First run: leave the mark and exit; later runs: become the demo server.
    let script = r#"if [ -e "$0" ]; then exec "$1" demo-server; fi; : > "$0"; exit 1"#;
    let (b, m) = serve_child(
        &[],
        &["/bin/sh", "-c", script, mark.to_str().unwrap(), bin()],
    )
    .await;
    b.wait_ready(T).await;
    let t = m
        .until_sample(r#"mcp_bridge_upstream_up{server="default"}"#, 1.0)
        .await;
    assert_eq!(exits(&t, "startup"), Some(1.0), "one start-up exit");
    assert_eq!(sample(&t, STARTS), Some(2.0));
    assert_eq!(delays(&b), [100], "log:\n{}", b.log.dump());
    let r = call_modern(
        &client(),
        &b.url,
        serde_json::json!(1),
        "echo",
        serde_json::json!({"text": "up"}),
    )
    .await;
    assert_eq!(r.text(), "up");
}
