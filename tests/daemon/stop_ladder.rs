//! The child stop ladder (README: `--stdin-grace` / `--term-grace`): at shutdown the child's
//! stdin is closed; a child still running after `--stdin-grace` gets SIGTERM (its whole
//! process group); one still running `--term-grace` later gets SIGKILL. Each child here is a
//! shell that runs the demo server (which exits when its stdin closes) and then keeps its
//! process group alive in a loop, ignoring SIGTERM or not.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use support::*;

const T: Duration = Duration::from_secs(20);
const TERM_LINE: &str = "child still running after stdin closed: SIGTERM";
const KILL_LINE: &str = "child ignored SIGTERM: SIGKILL";

/// `serve` over `sh -c SCRIPT BIN` (the demo server as `$0`) with `flags`, ready; with the
/// child's process group.
async fn ladder_bridge(script: &str, flags: &[&str]) -> (Bridge, u32) {
    let b = Bridge::builder()
        .serve()
        .args(["--port", "0"])
        .args(flags)
        .args(["--", "/bin/sh", "-c", script, bin()])
        .spawn()
        .await;
    b.wait_ready(T).await;
    let kids = children_of(b.pid());
    assert_eq!(kids.len(), 1, "bridge children {kids:?}");
    let group = pgid(kids[0]).expect("the child's process group");
    (b, group)
}

/// SIGTERM to the bridge; how long until it exited 0.
async fn stop(b: &mut Bridge) -> Duration {
    let t0 = Instant::now();
    b.signal(Signal::SIGTERM);
    let st = b.wait_exit(T).await.expect("the bridge exits");
    assert!(st.success(), "exit {st}; log:\n{}", b.log.dump());
    t0.elapsed()
}

/// A child that ignores both stdin's end and SIGTERM: SIGTERM after the stdin grace, SIGKILL
/// after the term grace, so the bridge takes at least both graces (0.5 s + 0.7 s here; the
/// defaults, 2 s + 3 s, would take over 5 s) and the whole group is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_ignores_sigterm_is_killed_after_both_graces() {
    let script = r#"trap '' TERM; "$0" demo-server; while :; do sleep 0.1; done"#;
    let flags = ["--stdin-grace", "500ms", "--term-grace", "700ms"];
    let (mut b, group) = ladder_bridge(script, &flags).await;
    let took = stop(&mut b).await;
    assert!(
        took >= Duration::from_millis(1200),
        "stopped in {took:?}, before both graces ran out"
    );
    // Either default grace in its place (2 s, 3 s) would take 2.7 s or more.
    assert!(
        took < Duration::from_millis(2500),
        "stopped in {took:?}: a grace was not the flag's"
    );
    // The log is read apart from the exit: wait for the last line.
    b.log.expect(KILL_LINE, Duration::from_secs(5)).await;
    let log = b.log.lines();
    let at = |needle: &str| log.iter().position(|l| l.contains(needle));
    let (term, kill) = (at(TERM_LINE), at(KILL_LINE));
    assert!(
        term.is_some() && kill.is_some() && term < kill,
        "SIGTERM then SIGKILL; log:\n{}",
        b.log.dump()
    );
    assert!(
        group_members(group).is_empty(),
        "the child's group survived"
    );
}

/// A child that ignores stdin's end but exits on SIGTERM: SIGTERM after the stdin grace, no
/// SIGKILL, stopped well before its term grace (3 s) ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_exits_on_sigterm_gets_no_sigkill() {
    let script = r#"trap 'exit 0' TERM; "$0" demo-server; while :; do sleep 0.1; done"#;
    let flags = ["--stdin-grace", "500ms", "--term-grace", "3s"];
    let (mut b, group) = ladder_bridge(script, &flags).await;
    let took = stop(&mut b).await;
    assert!(took >= Duration::from_millis(500), "stopped in {took:?}");
    assert!(took < Duration::from_millis(2500), "stopped in {took:?}");
    b.log.expect(TERM_LINE, Duration::from_secs(5)).await;
    b.log
        .expect("shutdown complete", Duration::from_secs(5))
        .await;
    assert!(b.log.find(KILL_LINE).is_none(), "log:\n{}", b.log.dump());
    assert!(
        group_members(group).is_empty(),
        "the child's group survived"
    );
}

/// A child that exits when its stdin closes gets no signal at all, however long the graces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_exits_on_stdin_eof_gets_no_signal() {
    let flags = ["--stdin-grace", "5s", "--term-grace", "5s"];
    let (mut b, group) = ladder_bridge(r#"exec "$0" demo-server"#, &flags).await;
    let took = stop(&mut b).await;
    assert!(took < Duration::from_secs(4), "stopped in {took:?}");
    b.log
        .expect("shutdown complete", Duration::from_secs(5))
        .await;
    assert!(b.log.find(TERM_LINE).is_none(), "log:\n{}", b.log.dump());
    assert!(b.log.find(KILL_LINE).is_none(), "log:\n{}", b.log.dump());
    assert!(
        group_members(group).is_empty(),
        "the child's group survived"
    );
}
