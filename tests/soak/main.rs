//! The soak: a bounded, mixed workload against one real `mcp-bridge serve --demo` (the dual-era
//! demo child, shared by every client), checked end to end. `#[ignore]`d: `.ci/soak.sh` runs
//! the 20k version; `SOAK_REQUESTS=1000000` is the full run (figures in `benches/RESULTS.md`).
//!
//! The mix, by request index (so every run of a size is the same workload): 2026 echo calls,
//! 2025 echo calls spread over several sessions of the one child, 2026 `slow` calls hung up on
//! after their first progress event, 2025 `slow` calls cancelled by `notifications/cancelled`,
//! malformed JSON, oversize bodies, a wrong `Origin`, a method 2026 removed. At fixed points
//! the child dies mid-call: by its `crash` tool, or SIGKILL from here while a `slow` call runs.
//!
//! Checked: every request that is not hung up on gets exactly one answer, with its own id and
//! (for echo) its own text; the bridge's metrics equal the client's counts; its fd count and
//! RSS are flat (after a warm-up) once the load is gone; no child process outlives the bridge;
//! the bridge never panics and exits 0 on SIGTERM.
//!
//! Knobs: `SOAK_REQUESTS` (default 20000), `SOAK_WORKERS` (16), `SOAK_SESSIONS` (4),
//! `SOAK_MAX_SECS` (wall-clock bound, 900), `MCP_BRIDGE_BIN` (default: this package's binary),
//! `SOAK_RSS_SLACK_KIB` (allowed RSS growth after warm-up, 16384).
//!
//! Built on the one support library like every test: the bridge, the workload and the report
//! are `support::{soak_bridge, soak_request, SoakReport}`; here are the plan, the run, the
//! faults and the end-of-run checks.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use support::*;

/// How long the bridge gets to exit on SIGTERM at the end.
const EXIT_WAIT: Duration = Duration::from_secs(15);
/// Lines of the bridge's log shown when an end-of-run check fails.
const LOG_TAIL: usize = 200;

/// What request `i` of the mix is (out of every 100).
fn kind_of(i: u64) -> SoakKind {
    match i % 100 {
        0..=43 => SoakKind::ModernEcho,
        44..=87 => SoakKind::LegacyEcho,
        88..=90 => SoakKind::ModernHangUp,
        91..=93 => SoakKind::LegacyCancel,
        94 | 95 => SoakKind::Malformed,
        96 => SoakKind::Oversize,
        97 | 98 => SoakKind::WrongOrigin,
        _ => SoakKind::Removed,
    }
}

struct Plan {
    requests: u64,
    workers: usize,
    sessions: usize,
    deadline: Instant,
    rss_slack_kib: u64,
}

fn plan() -> Plan {
    let n = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    Plan {
        requests: n("SOAK_REQUESTS", 20_000),
        workers: n("SOAK_WORKERS", 16) as usize,
        sessions: n("SOAK_SESSIONS", 4) as usize,
        deadline: Instant::now() + Duration::from_secs(n("SOAK_MAX_SECS", 900)),
        rss_slack_kib: n("SOAK_RSS_SLACK_KIB", 16 * 1024),
    }
}

/// The request indices at which the child is made to die (crash tool, then SIGKILL, …).
fn fault_points(n: u64) -> Vec<u64> {
    (1..=4).map(|k| n * k / 5).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the soak: run by .ci/soak.sh (SOAK_REQUESTS=20000) or by hand"]
async fn soak() {
    let p = plan();
    let mut b = soak_bridge().await;
    let pid = b.pid();
    let watch = ChildrenSeen::watch(pid);
    let metrics = Scraper::of(&b).await;
    let (fd0, rss0) = (fds(pid), rss_kib(pid));
    let c = Arc::new(SoakClient::new(&b.url));
    let sessions = Arc::new(c.open_sessions(p.sessions).await);
    let counts = Arc::new(SoakCounts::default());

    let next = Arc::new(AtomicU64::new(0));
    let warm = Arc::new(std::sync::Mutex::new(None::<u64>));
    let faults = fault_points(p.requests);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..p.workers {
        let (c, s, k, next) = (c.clone(), sessions.clone(), counts.clone(), next.clone());
        let (faults, warm, m) = (faults.clone(), warm.clone(), metrics.clone());
        let (n, deadline) = (p.requests, p.deadline);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || Instant::now() >= deadline {
                    break;
                }
                if i == n / 10 {
                    *warm.lock().unwrap() = Some(rss_kib(pid));
                }
                if let Some(f) = faults.iter().position(|&f| f == i) {
                    fault(&c, &k, &m, pid, f % 2 == 1).await;
                }
                soak_request(&c, &s, &k, i, kind_of(i)).await;
                k.executed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let done = SoakCounts::get(&counts.executed);

    // The load is gone: end the sessions, let the cancelled calls settle, then measure.
    for s in sessions.iter() {
        c.delete_session(s).await;
    }
    let idle = settle(&metrics).await;
    // The client's pooled keep-alive connections go with it (the sessions share its pool);
    // then the bridge's fds are its own.
    drop((c, sessions));
    let fd1 = fds_settled(pid, fd0).await;
    let rss1 = rss_kib(pid);
    let text = metrics.scrape().await;
    let report = SoakReport {
        requests: done,
        secs,
        counts: &counts,
        fds: (fd0, fd1),
        rss: (rss0, warm.lock().unwrap().unwrap_or(rss0), rss1),
        idle,
        metrics: &text,
    };
    println!("{}", report.text());
    assert_eq!(done, p.requests, "the wall-clock bound ended the run early");
    report.check_client();
    report.check_metrics();
    let grown = rss1.saturating_sub(report.rss.1);
    assert!(
        grown <= p.rss_slack_kib,
        "RSS grew {grown} KiB after the warm-up (allowed {})",
        p.rss_slack_kib
    );
    assert!(fd1 <= fd0, "fds grew: {fd0} → {fd1}");

    let children = watch.all();
    drop(watch);
    b.signal(Signal::SIGTERM);
    let status = b.wait_exit(EXIT_WAIT).await.and_then(|st| st.code());
    let tail = b.log.tail(LOG_TAIL);
    assert_eq!(status, Some(0), "bridge exit status; log tail:\n{tail}");
    let panics = b.log.count("panicked");
    assert_eq!(panics, 0, "the bridge panicked; log tail:\n{tail}");
    // Checked before `b` is dropped: dropping it would SIGKILL its process group.
    let left: Vec<u32> = children.into_iter().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "child processes outlived the bridge: {left:?}"
    );
    println!("children seen: ok, none left; panics: 0; exit status 0");
}

/// Wait (bounded) until nothing is in flight in the bridge; returns whether it got there.
async fn settle(m: &Scraper) -> bool {
    for _ in 0..200 {
        let text = m.scrape().await;
        let in_flight = metric_sum(&text, "mcp_bridge_calls_in_flight", &[]);
        let sse = metric_sum(&text, "mcp_bridge_sse_streams_open", &[]);
        if in_flight == Some(0.0) && sse == Some(0.0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The bridge's fd count once it is back to `fd0` (bounded wait for closed connections).
async fn fds_settled(pid: u32, fd0: usize) -> usize {
    for _ in 0..100 {
        if fds(pid) <= fd0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fds(pid)
}

/// Kill the child mid-call: by its own `crash` tool, or (`kill`) by SIGKILL while a `slow`
/// call runs. Either way the call in flight must be answered `child_exited`.
async fn fault(c: &SoakClient, k: &SoakCounts, m: &Scraper, bridge: u32, kill: bool) {
    let _quiet = k.quiet.write().await;
    // Every hang-up and cancellation made so far has reached the bridge (bounded wait).
    let want = (SoakCounts::get(&k.hangups) + SoakCounts::get(&k.cancels)) as f64;
    for _ in 0..200 {
        let text = m.scrape().await;
        let cause = |c: &str| {
            metric_sum(&text, "mcp_bridge_cancellations_total", &[("cause", c)])
                .unwrap_or_else(|| panic!("no cancellations series for cause {c}:\n{text}"))
        };
        let got = cause("client_disconnect") + cause("client_notification");
        if got >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let id = json!(format!(
        "fault-{}",
        k.faults.fetch_add(1, Ordering::Relaxed)
    ));
    let messages = if kill {
        let mut sse = c
            .modern_stream(&id, "slow", json!({"seconds": 60, "steps": 600}))
            .await;
        let first = sse.next_message().await;
        assert!(first.is_some(), "slow call before a kill: no first event");
        for pid in children_of(bridge) {
            let _ = kill_child(pid);
        }
        sse.rest().await
    } else {
        c.modern_call(&id, "crash", json!({})).await.messages
    };
    k.tools_calls.fetch_add(1, Ordering::Relaxed);
    let a = single_answer(&messages, &id);
    assert_eq!(
        a["error"]["data"]["reason"], "child_exited",
        "a call in flight when the child died (kill={kill}): {a}"
    );
    k.bridge_errors.fetch_add(1, Ordering::Relaxed);
}

/// SIGKILL one of the bridge's children.
fn kill_child(pid: u32) -> nix::Result<()> {
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL)
}
