//! Issue 14, replicas: three `serve --demo` processes share one key file, each told its own
//! `--advertise-url`, and the test sends each request to whichever replica a round-robin
//! balancer would pick next, without affinity:
//!
//! - a 2025 session minted by one replica is served through the others (calls, GET stream,
//!   notifications, DELETE), and a cancellation posted to another replica reaches the call;
//! - a 2025 client's elicitation through a 2026 child: asked on one replica's stream,
//!   answered through another;
//! - a 2026 client's `input_required` retry reaches the call parked on another replica;
//! - a killed replica: its sessions are 404 elsewhere, its parked calls a clear error, the
//!   others' sessions untouched; forwards are counted by outcome;
//! - a forwarded call whose owner is killed while it runs: one JSON-RPC error naming the
//!   lost replica, never a stream that ends with nothing in it;
//! - a replica needs both flags, and a usable key file (64 for flags, 78 for a file).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);
const KEY: &str = "# shared by every replica\n6d63702d6272696467652074657374206b6579206e6f7420612073656372657421\n";

/// A free port on 127.0.0.1 (the advertise URL must name it before the replica starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Replicas {
    all: Vec<Bridge>,
    _dir: tempfile::TempDir,
}

impl Replicas {
    /// `n` replicas of `serve --demo --demo-era era`.
    async fn start(n: usize, era: &str) -> Replicas {
        let dir = tempfile::tempdir().unwrap();
        let key = write(dir.path(), "cluster.key", KEY);
        let mut all = Vec::new();
        for _ in 0..n {
            let port = free_port().to_string();
            let b = Bridge::builder()
                .serve()
                .args(["--demo", "--demo-era", era, "--port", &port])
                .arg("--cluster-key-file")
                .arg(key.as_os_str())
                .args(["--advertise-url", &format!("http://127.0.0.1:{port}")])
                .args(["--metrics-listen", "127.0.0.1:0"])
                .spawn()
                .await;
            b.wait_ready(T).await;
            all.push(b);
        }
        Replicas { all, _dir: dir }
    }

    fn url(&self, i: usize) -> &str {
        &self.all[i % self.all.len()].url
    }

    /// Forwards replica `i` counted with `outcome` (`None`: no such series).
    async fn forwards(&self, i: usize, outcome: &str) -> Option<f64> {
        let m = Scraper::of(&self.all[i]).await;
        metric_sum(
            &m.scrape().await,
            "mcp_bridge_cluster_forwards_total",
            &[("outcome", outcome)],
        )
    }
}

/// The same session, its requests sent to `url` (another replica).
fn via(s: &Session, url: &str) -> Session {
    Session {
        c: s.c.clone(),
        url: url.to_owned(),
        id: s.id.clone(),
        version: s.version.clone(),
        init: s.init.clone(),
    }
}

/// A session minted by one replica works through every other: calls, a GET stream whose
/// events come through another replica, DELETE (which ends that stream); a session of each
/// replica at once; the hops are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_is_served_through_every_replica() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    let r = Replicas::start(3, "dual").await;
    let c = client();
    let sessions = [
        Session::open(&c, r.url(0)).await,
        Session::open(&c, r.url(1)).await,
    ];
    for (n, s) in sessions.iter().enumerate() {
        for hop in 0..3 {
            let text = format!("session {n} via replica {hop}");
            let reply = via(s, r.url(hop))
                .call(json!(hop), "echo", json!({"text": text}))
                .await;
            assert_eq!(reply.status, 200, "{reply:?}");
            assert_eq!(reply.text(), text, "{reply:?}");
        }
    }
    // The GET stream of replica 0's session, opened on replica 2, carries the child's
    // notification caused by a call through replica 1.
    let s = via(&sessions[0], r.url(2));
    let get = c.get(&s.url).headers(s.headers()).send().await.unwrap();
    assert_eq!(get.status(), 200);
    assert_eq!(
        get.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut stream = SseReader::new(get);
    for (n, kind) in ["tools", "prompts"].into_iter().enumerate() {
        let poke = via(&sessions[0], r.url(1))
            .call(json!(format!("n{n}")), "notify", json!({"kind": kind}))
            .await;
        assert_eq!(poke.text(), "ok", "{poke:?}");
        let ev = stream.next(T).await.expect("an event on the forwarded GET");
        let want = format!("notifications/{kind}/list_changed");
        assert_eq!(ev["method"], want.as_str(), "{ev}");
    }
    // DELETE through replica 1 ends it everywhere.
    let del = c
        .delete(r.url(1))
        .headers(s.headers())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert!(
        stream.ends_within(T).await,
        "the forwarded GET stream outlived its session"
    );
    for hop in 0..3 {
        let gone = via(&sessions[0], r.url(hop))
            .call(json!(9), "echo", json!({"text": "x"}))
            .await;
        assert_eq!(gone.status, 404, "replica {hop}: {gone:?}");
    }
    assert!(r.forwards(1, "ok").await >= Some(3.0));
    assert!(r.forwards(2, "ok").await >= Some(3.0));
    // Replica 0 forwarded session 1's call to its owner, and nothing went unanswered: the
    // family is there (ok), the unreachable series never appeared (not exported at 0).
    assert!(r.forwards(0, "ok").await >= Some(1.0));
    assert_eq!(r.forwards(0, "unreachable").await, None);
}

/// A 2025 client's `notifications/cancelled`, posted to another replica, cancels the call in
/// the owner's child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_through_another_replica_reaches_the_call() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    let r = Replicas::start(2, "dual").await;
    let c = client();
    let s = Session::open(&c, r.url(0)).await;
    let body = json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": 30, "steps": 0}}});
    let mut stream = via(&s, r.url(1)).stream(&body).await;
    let started = r.all[0].log.expect("demo: slow started id=", T).await;
    let id = word_after(&started, "demo: slow started id=");
    let st = via(&s, r.url(1))
        .notify("notifications/cancelled", json!({"requestId": "long"}))
        .await;
    assert_eq!(st, 202);
    let line = r.all[0].log.expect("demo: cancelled id=", T).await;
    assert_eq!(word_after(&line, "demo: cancelled id="), id);
    // A cancelled 2025 request gets no answer: its stream just ends.
    assert!(stream.ends_within(T).await);
}

/// Elicitation across eras and replicas: a 2025 client asked by a 2026 child on one
/// replica's stream answers through another; a 2026 client's retry of a call parked by a
/// 2025 child reaches the replica that parked it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitations_cross_replicas_in_both_era_directions() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    // 2025 client, 2026 child: minted on 0, asked via 1, answered via 2.
    let modern = Replicas::start(3, "modern").await;
    let c = client();
    let s = elicit_session(&c, modern.url(0)).await;
    let (sse, req) = ask_2025(&modern.all[1], &via(&s, modern.url(1)), "who-2025").await;
    let text = answer_2025(&modern.all[1], &via(&s, modern.url(2)), sse, &req, "Ada").await;
    assert!(text.contains("Ada"), "{text}");

    // 2026 client, 2025 child: parked on 0, retried on 1 and on 2 (each with its own call).
    let legacy = Replicas::start(3, "legacy").await;
    for hop in [1, 2] {
        let msg = format!("who-2026-{hop}");
        let parked = park_2026(&c, legacy.url(0), json!(hop), &msg).await;
        let text = retry_2026(&c, legacy.url(hop), json!(hop), &msg, parked, "Grace").await;
        assert!(text.contains("Grace"), "{text}");
    }
    assert!(legacy.forwards(1, "ok").await >= Some(1.0));
    assert!(legacy.forwards(2, "ok").await >= Some(1.0));
}

/// A killed replica: its sessions are gone (404 on the others, so clients initialize again),
/// its parked calls cannot be resumed (a clear error), and the others carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_takes_only_its_own_state() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    let mut r = Replicas::start(3, "legacy").await;
    let c = client();
    let lost = Session::open(&c, r.url(0)).await;
    let kept = Session::open(&c, r.url(1)).await;
    let parked = park_2026(&c, r.url(0), json!(1), "who").await;
    r.all[0].signal(nix::sys::signal::Signal::SIGKILL);
    assert!(r.all[0].wait_exit(T).await.is_some());

    let gone = via(&lost, r.url(1))
        .call(json!(1), "echo", json!({"text": "x"}))
        .await;
    assert_eq!(gone.status, 404, "{gone:?}");
    let msg = gone.error()["message"].as_str().unwrap();
    assert!(msg.contains("initialize again"), "{msg}");
    // It names the lost replica and answers the request by its id.
    let lost_url = format!("http://127.0.0.1:{}", r.all[0].addr.port());
    assert!(msg.contains(&lost_url), "{msg}");
    assert_eq!(gone.last()["id"], 1, "{gone:?}");
    let retry = modern_request(
        json!(1),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "who"},
               "inputResponses": {parked.0: {"action": "accept", "content": {"name": "x"}}},
               "requestState": parked.1,
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let refused = post_modern(&c, r.url(2), &retry).await;
    assert_eq!(refused.status, 200, "{refused:?}");
    let msg = refused.error()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("replica holding this call is gone"), "{msg}");

    // The survivors: the other session through either, new sessions, 2026 calls.
    for hop in [1, 2] {
        let ok = via(&kept, r.url(hop))
            .call(json!(hop), "echo", json!({"text": "kept"}))
            .await;
        assert_eq!(ok.text(), "kept", "{ok:?}");
        let fresh = Session::open(&c, r.url(hop)).await;
        assert_eq!(
            fresh
                .call(json!(1), "echo", json!({"text": "y"}))
                .await
                .text(),
            "y"
        );
        assert_eq!(
            call_modern(&c, r.url(hop), json!(1), "echo", json!({"text": "z"}))
                .await
                .text(),
            "z"
        );
    }
    assert!(r.forwards(1, "unreachable").await >= Some(1.0));
    assert!(r.forwards(2, "unreachable").await >= Some(1.0));
}

/// The sample of `mcp_bridge_cluster_forwards_total` with `outcome` on replica `i`; None
/// when the series is not exported at all.
async fn forward_series(r: &Replicas, i: usize, outcome: &str) -> Option<f64> {
    let m = Scraper::of(&r.all[i]).await.scrape().await;
    let want = format!("outcome=\"{outcome}\"");
    m.lines()
        .filter(|l| l.starts_with("mcp_bridge_cluster_forwards_total{") && l.contains(&want))
        .map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .next()
        .flatten()
}

/// A call forwarded to the replica that owns its session, that replica SIGKILLed while the
/// call runs: the client (through the surviving replica) gets exactly one final answer, a
/// JSON-RPC error naming the lost replica, never a stream that just ends; counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_call_whose_owner_dies_gets_an_error_naming_it() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    let mut r = Replicas::start(3, "legacy").await;
    let owner = r.all[0].addr.port();
    let owner = format!("http://127.0.0.1:{owner}");
    let c = client();
    let s = Session::open(&c, r.url(0)).await;
    let before = forward_series(&r, 1, "owner_lost_midway").await;
    assert!(before.is_none_or(|v| v == 0.0), "{before:?}");
    let body = json!({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": 30, "steps": 0}}});
    // The head comes once the call has been silent for a while: the answer is a stream.
    let mut stream = via(&s, r.url(1)).stream(&body).await;
    r.all[0].log.expect("demo: slow started id=", T).await;
    r.all[0].signal(nix::sys::signal::Signal::SIGKILL);
    assert!(r.all[0].wait_exit(T).await.is_some());

    let mut events = Vec::new();
    while let Some(ev) = stream.next(T).await {
        events.push(ev);
        assert!(events.len() < 100, "{events:?}");
    }
    let finals: Vec<_> = events
        .iter()
        .filter(|m| m.get("method").is_none() && m["id"] == "long")
        .collect();
    assert_eq!(finals.len(), 1, "exactly one final answer: {events:?}");
    let e = &finals[0]["error"];
    assert_eq!(e["code"], -32000, "{e}");
    let msg = e["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&owner), "names {owner}: {msg}");
    assert_eq!(e["data"]["reason"], "owner_lost", "{e}");
    assert_eq!(
        forward_series(&r, 1, "owner_lost_midway").await,
        Some(1.0),
        "counted once"
    );
}

/// A rolling restart: a replica told to stop (SIGTERM) says so on `/readyz` and keeps serving
/// what the others forward to it while its calls finish, so a call waiting for its client's
/// answer (given through another replica) still completes; then it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_replica_finishes_what_the_others_forward() {
    // Replicas bind ports picked free beforehand, and three at once are a load: alone.
    let _serial = serial().await;
    let mut r = Replicas::start(2, "modern").await;
    let c = client();
    let s = elicit_session(&c, r.url(0)).await;
    let (sse, req) = ask_2025(&r.all[1], &via(&s, r.url(1)), "drain").await;
    r.all[0].signal(nix::sys::signal::Signal::SIGTERM);
    let ready = r.all[0].endpoint("/readyz");
    let until = std::time::Instant::now() + T;
    loop {
        let st = c.get(&ready).send().await.map(|x| x.status().as_u16());
        if st.as_ref().is_ok_and(|s| *s == 503) {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "/readyz while draining: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = answer_2025(&r.all[1], &via(&s, r.url(1)), sse, &req, "Ada").await;
    assert!(text.contains("Ada"), "{text}");
    assert!(
        r.all[0].wait_exit(T).await.is_some(),
        "the drained replica exits"
    );
    let gone = via(&s, r.url(1))
        .call(json!(2), "echo", json!({"text": "x"}))
        .await;
    assert_eq!(gone.status, 404, "{gone:?}");
}

/// A replica needs both settings and a usable key file: usage errors for flags (64), a
/// configuration error for a file (78).
#[test]
fn replica_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let key = write(dir.path(), "k", KEY);
    let short = write(dir.path(), "short", "too-short\n");
    let key = key.to_str().unwrap();
    let url = ["--advertise-url", "http://127.0.0.1:1"];
    for (args, want) in [
        (vec!["--demo", "--cluster-key-file", key], "both"),
        (vec!["--demo", url[0], url[1]], "both"),
        (
            vec![
                "--demo",
                "--cluster-key-file",
                short.to_str().unwrap(),
                url[0],
                url[1],
            ],
            "at least 32",
        ),
        (
            vec![
                "--demo",
                "--cluster-key-file",
                key,
                "--advertise-url",
                "http://h/mcp",
            ],
            "scheme://host:port",
        ),
        (
            vec!["--demo", "--cluster-ca-file", key],
            "goes with --cluster-key-file",
        ),
        (
            vec![
                "--demo",
                "--cluster-key-file",
                key,
                url[0],
                url[1],
                "--cluster-ca-file",
                key,
            ],
            "--cluster-ca-file",
        ),
    ] {
        let (code, err) = run_refused(&args);
        assert_eq!(code, Some(64), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let conf = write(
        dir.path(),
        "c.toml",
        &format!(
            "[cluster]\nkey_file = {:?}\nadvertise_url = \"http://127.0.0.1:1\"\n\n{}",
            short.to_str().unwrap(),
            demo_server("a", &[])
        ),
    );
    let (code, err) = run_refused(&["--config", conf.to_str().unwrap()]);
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("at least 32"), "{err}");
}

/// Forwards `b` counted with `outcome` (`None`: no such series).
async fn forwards(b: &Bridge, outcome: &str) -> Option<f64> {
    let m = Scraper::of(b).await;
    metric_sum(
        &m.scrape().await,
        "mcp_bridge_cluster_forwards_total",
        &[("outcome", outcome)],
    )
}

/// `serve --demo` as a replica on `port` that advertises `advertise`.
async fn replica(key: &std::path::Path, port: u16, advertise: &str) -> Bridge {
    let b = Bridge::builder()
        .serve()
        .args(["--demo", "--port", &port.to_string()])
        .arg("--cluster-key-file")
        .arg(key.as_os_str())
        .args(["--advertise-url", advertise])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .spawn()
        .await;
    b.wait_ready(T).await;
    b
}

/// The `Mcp-Bridge-Forwarded` header: a request that carries it is served by the replica
/// that got it, whoever owns its session. A client's own (spoofed) header cannot reach
/// another replica's session (404 where it landed, nothing forwarded), and advertise URLs that
/// send a replica's forward back to itself end after one hop (a 404, not a loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_served_where_it_lands_and_never_forwarded_again() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let key = write(dir.path(), "cluster.key", KEY);
    let (p0, p1) = (free_port(), free_port());
    // Replica 0 names replica 1's address as its own; replica 1 calls itself `localhost`, so
    // it takes replica 0's sessions for another replica's and forwards them to itself.
    let r0 = replica(&key, p0, &format!("http://127.0.0.1:{p1}")).await;
    let r1 = replica(&key, p1, &format!("http://localhost:{p1}")).await;
    let c = client();
    let s = Session::open(&c, &r0.url).await;
    // A spoofed header: replica 1 serves the request itself; the session is not its own.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": "x"}}});
    let mut h = via(&s, &r1.url).headers();
    h.insert("mcp-bridge-forwarded", hv("1"));
    let r = c
        .post(&r1.url)
        .headers(h)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a spoofed header was forwarded");
    assert_eq!(forwards(&r1, "ok").await, None, "replica 1 forwarded");

    // Without it, replica 1 forwards once, to itself (its owner's advertise URL), and the
    // hop is served there: one 404, one forward, no loop.
    let r = tokio::time::timeout(
        T,
        via(&s, &r1.url).call(json!(2), "echo", json!({"text": "y"})),
    )
    .await
    .expect("a forwarding loop: no answer");
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(forwards(&r1, "ok").await, Some(1.0), "one hop");
}
