//! Shutdown leaves nothing behind: SIGTERM to the bridge stops the child and everything in
//! the child's process group, including a grandchild the child forked.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
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

/// Same with a call in flight: the grace ends, the call gets its one answer (-32000 "the
/// bridge is shutting down"), the bridge exits 0, and still nothing survives.
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
    let t0 = std::time::Instant::now();
    b.signal(nix::sys::signal::Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await;
    let st = st.unwrap_or_else(|| panic!("bridge still running; log:\n{}", b.log.dump()));
    let took = t0.elapsed();
    assert!(st.success(), "exit status {st}; log:\n{}", b.log.dump());
    // The call had the grace (1 s) to finish, and no more (the default is 10 s).
    assert!(
        took >= Duration::from_millis(950),
        "exited in {took:?}, before the grace"
    );
    assert!(
        took < Duration::from_secs(6),
        "exited in {took:?}: not the flag's grace"
    );
    // The caller is not left hanging: its call is answered by the bridge's shutdown.
    let sent = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("call still pending after the bridge exited")
        .expect("call task");
    let messages = outcome(sent).await.expect("the in-flight call's answer");
    let a = one_answer(&messages, &json!(1));
    assert_eq!(a["error"]["code"], -32000, "{a}");
    assert_eq!(a["error"]["message"], "the bridge is shutting down", "{a}");
    assert!(
        wait_gone(demo, Duration::from_secs(5)).await,
        "child survived"
    );
    assert!(
        wait_gone(sleep, Duration::from_secs(5)).await,
        "grandchild survived"
    );
}

/// `--shutdown-grace`: a call shorter than the grace finishes with its own answer, and the
/// bridge exits once it has (not at the end of the grace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_within_the_grace_finishes_then_the_bridge_exits() {
    let (mut b, demo, _sleep) = bridge_with_grandchild(&["--shutdown-grace", "10s"]).await;
    let c = client();
    let url = b.url.clone();
    let call = tokio::spawn(async move {
        let args = json!({"seconds": 1.5, "steps": 0});
        call_modern(&c, &url, json!(1), "slow", args).await
    });
    b.log
        .expect("demo: slow started id=", Duration::from_secs(10))
        .await;
    let t0 = std::time::Instant::now();
    b.signal(nix::sys::signal::Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await;
    let took = t0.elapsed();
    assert!(st.is_some_and(|s| s.success()), "log:\n{}", b.log.dump());
    let r = call.await.unwrap();
    assert_eq!(r.text(), "done", "the call was cut: {r:?}");
    assert!(
        took >= Duration::from_millis(1000),
        "exited in {took:?}, before the call ended"
    );
    assert!(
        took < Duration::from_secs(8),
        "exited in {took:?}: waited out the grace"
    );
    assert!(
        wait_gone(demo, Duration::from_secs(5)).await,
        "child survived"
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

/// What a request got: the messages of its body (JSON or SSE) read to the end, or how
/// reading it failed.
async fn outcome(sent: Result<reqwest::Response, reqwest::Error>) -> Result<Vec<Value>, String> {
    let resp = sent.map_err(|e| format!("send: {e}"))?;
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let raw = resp.text().await.map_err(|e| format!("body: {e}"))?;
    Ok(match sse {
        true => parse_sse(&raw),
        false => serde_json::from_str::<Value>(&raw).into_iter().collect(),
    })
}

/// The one answer among `messages` for request `id`: a result or a JSON-RPC error.
fn one_answer(messages: &[Value], id: &Value) -> Value {
    let mine: Vec<&Value> = answers(messages)
        .into_iter()
        .filter(|m| m["id"] == *id)
        .collect();
    assert_eq!(mine.len(), 1, "answers for {id}: {messages:?}");
    let a = mine[0].clone();
    assert!(
        a.get("result").is_some() != a.get("error").is_some(),
        "neither or both of result and error: {a}"
    );
    a
}

/// SIGTERM under load: calls in flight on a pool of two children (2026 ones and one in a 2025
/// session), that session's GET stream and a 2026 `subscriptions/listen` open. The bridge
/// exits 0, every call gets exactly one answer, the streams end, no task is alive when the
/// runtime returns (the bridge logs the count) and nothing of the children's process groups
/// survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_leaves_no_task_and_no_child() {
    let _serial = serial().await;
    let mut b = Bridge::demo(&["--pool-min", "2", "--shutdown-grace", "1s"]).await;
    let c = client();
    let r = echo_until_ok(&c, &b.url, "ready", Duration::from_secs(20)).await;
    assert_eq!(r.text(), "ready", "log:\n{}", b.log.dump());
    let s = Session::open(&c, &b.url).await;
    let get = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &s.id)
        .header("mcp-protocol-version", &s.version)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let mut get = SseReader::new(get);
    let body = modern_request(
        json!("L1"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut listen = open_modern_stream(&c, &b.url, &body).await;
    let ack = listen.next(Duration::from_secs(10)).await.expect("ack");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );

    let slow = json!({"seconds": 60, "steps": 0});
    let mut calls = Vec::new();
    for i in 1..=4 {
        let body = modern_tool_call(json!(i), "slow", slow.clone());
        let req = c
            .post(&b.url)
            .headers(modern_headers(&body))
            .body(body.to_string());
        calls.push((
            json!(i),
            tokio::spawn(async move { outcome(req.send().await).await }),
        ));
    }
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "slow", "arguments": slow}});
    let req = c.post(&b.url).headers(s.headers()).body(body.to_string());
    calls.push((
        json!(5),
        tokio::spawn(async move { outcome(req.send().await).await }),
    ));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while b.log.count("demo: slow started id=") < 5 {
        assert!(std::time::Instant::now() < until, "log:\n{}", b.log.dump());
        b.log
            .wait_for("demo: slow started id=", Duration::from_millis(100))
            .await;
    }
    let kids = children_of(b.pid());
    assert_eq!(kids.len(), 2, "pool children {kids:?}");
    let groups: Vec<u32> = kids.iter().filter_map(|k| pgid(*k)).collect();
    assert_eq!(groups, kids, "each child leads its own process group");

    b.signal(nix::sys::signal::Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await;
    let st = st.unwrap_or_else(|| panic!("still running; log:\n{}", b.log.dump()));
    assert!(st.success(), "exit status {st}; log:\n{}", b.log.dump());

    for (id, call) in calls {
        let got = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("a call still pending after the bridge exited")
            .unwrap();
        let messages = got.unwrap_or_else(|e| panic!("call {id}: {e}; log:\n{}", b.log.dump()));
        // The 2025 call (5) too: the bridge's own shutdown is no client cancellation, so the
        // 2025 rule "a cancelled request gets no response" does not apply to it.
        let a = one_answer(&messages, &id);
        assert!(a.get("error").is_some(), "call {id}: {a}");
    }
    assert!(
        get.ends_within(Duration::from_secs(5)).await,
        "GET stream still open"
    );
    let mut rest = Vec::new();
    while let Some(m) = listen.next(Duration::from_secs(5)).await {
        rest.push(m);
    }
    one_answer(&rest, &json!("L1"));

    let tasks = b.log.find("tasks alive at exit").unwrap_or_default();
    assert!(
        tasks.ends_with("tasks=0"),
        "{tasks:?}; log:\n{}",
        b.log.dump()
    );
    for k in &kids {
        assert!(!alive(*k), "child {k} outlived the bridge");
    }
    for g in &groups {
        let left = group_members(*g);
        assert!(left.is_empty(), "left in process group {g}: {left:?}");
    }
}

/// The same for `connect` (the stdio face in front of a 2025 remote, whose GET stream it
/// holds open, its host's stdin left open): SIGTERM with calls in flight and a 2026 listen
/// open exits 0 at once, the listen ends with its completion result, and no task is alive
/// when the runtime returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_sigterm_under_load_leaves_no_task() {
    let _serial = serial().await;
    const T: Duration = Duration::from_secs(10);
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    let listen = json!({"notifications": {"toolsListChanged": true}, "_meta": modern_meta()});
    h.request(json!("L1"), "subscriptions/listen", listen);
    let ack = h.wait_for("ack of L1", T, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L1"
    );
    h.request(json!("p"), "ping", json!({}));
    assert_eq!(h.response(&json!("p"), T)["result"], json!({}));
    for i in 1..=3 {
        let args = json!({"seconds": 60, "steps": 0});
        h.request(json!(i), "tools/call", modern_call_params("slow", args));
    }
    let until = std::time::Instant::now() + T;
    while serve.log.count("demo: slow started id=") < 3 {
        assert!(
            std::time::Instant::now() < until,
            "log:\n{}",
            serve.log.dump()
        );
        serve
            .log
            .wait_for("demo: slow started id=", Duration::from_millis(100))
            .await;
    }
    assert_eq!(
        children_of(h.pid()),
        Vec::<u32>::new(),
        "connect runs no child"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(h.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = h.wait_exit(Duration::from_secs(20));
    let st = st.unwrap_or_else(|| panic!("connect still running; log:\n{}", h.log.dump()));
    assert!(st.success(), "exit status {st}; log:\n{}", h.log.dump());
    // Read to the end of stdout (the reader stops at EOF, the process being gone).
    let rest = h.drain(Duration::from_secs(5));
    for id in [json!(1), json!(2), json!(3)] {
        // Every call in flight gets its one answer, as serve's callers do: an error saying
        // the bridge is shutting down (it was cancelled at the remote).
        let a = one_answer(&rest, &id);
        let msg = a["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("shutting down"), "call {id}: {a}");
    }
    let done = one_answer(&rest, &json!("L1"));
    assert!(
        done.get("result").is_some(),
        "the listen's completion: {done}"
    );
    let tasks = h.log.find("tasks alive at exit").unwrap_or_default();
    assert!(
        tasks.ends_with("tasks=0"),
        "{tasks:?}; log:\n{}",
        h.log.dump()
    );
    h.assert_clean_stdout();
}

/// SIGTERM with every task that runs beside the servers alive: the JWKS refresh (a reload
/// trigger of its own), the metrics listener with an idle scrape connection open, the systemd
/// watchdog, and a 2025 call whose client hung up (its child's reaper holds it until its
/// deadline). The bridge exits 0 and no task is alive when the runtime returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_no_background_task() {
    const ISS: &str = "https://as.test.example";
    let key = TestKey::es256("k-shutdown");
    let keys = JwksServer::start(jwks(&[&key])).await;
    let mut b = Bridge::builder()
        .serve()
        .args(["--demo", "--port", "0", "--shutdown-grace", "1s"])
        .args(["--auth", "jwt", "--jwks-url", &keys.url, "--issuer", ISS])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .no_systemd_env()
        .env("WATCHDOG_USEC", "60000000")
        .spawn()
        .await;
    b.log
        .expect("systemd watchdog enabled", Duration::from_secs(10))
        .await;
    let line = b
        .log
        .expect("metrics on http://", Duration::from_secs(10))
        .await;
    let at = word_after(&line, "metrics on http://").unwrap();
    let at = at.trim_end_matches("/metrics").to_owned();
    // A scrape connection that sends nothing: its task waits for a request head.
    let _idle_scrape = tokio::net::TcpStream::connect(&at).await.unwrap();

    let t = support::now();
    let token = key.token(&json!({"iss": ISS, "sub": "u", "aud": b.url, "iat": t,
        "nbf": t - 5, "exp": t + 600}));
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        "authorization",
        reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    let c = reqwest::Client::builder()
        .default_headers(auth)
        .build()
        .unwrap();
    let s = Session::open(&c, &b.url).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "arguments": {"seconds": 60, "steps": 0}}});
    let req = c.post(&b.url).headers(s.headers()).body(body.to_string());
    let hung_up = tokio::spawn(async move { req.send().await.map(|r| r.status()) });
    b.log
        .expect("demo: slow started id=", Duration::from_secs(10))
        .await;
    // The client hangs up: a 2025 call runs on, detached, until its deadline.
    hung_up.abort();
    let _ = hung_up.await;

    b.signal(nix::sys::signal::Signal::SIGTERM);
    let st = b.wait_exit(Duration::from_secs(20)).await;
    let st = st.unwrap_or_else(|| panic!("still running; log:\n{}", b.log.dump()));
    assert!(st.success(), "exit status {st}; log:\n{}", b.log.dump());
    let tasks = b.log.find("tasks alive at exit").unwrap_or_default();
    assert!(
        tasks.ends_with("tasks=0"),
        "{tasks:?}; log:\n{}",
        b.log.dump()
    );
}

/// `connect` whose host closes stdin (no signal): it exits 0 and its signal loop, still
/// waiting for a signal that never comes, is not left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_ended_by_its_host_leaves_no_task() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &[]);
    h.request(json!("p"), "ping", json!({}));
    assert_eq!(
        h.response(&json!("p"), Duration::from_secs(10))["result"],
        json!({})
    );
    h.close_stdin();
    let st = h.wait_exit(Duration::from_secs(20));
    let st = st.unwrap_or_else(|| panic!("connect still running; log:\n{}", h.log.dump()));
    assert!(st.success(), "exit status {st}; log:\n{}", h.log.dump());
    let tasks = h.log.find("tasks alive at exit").unwrap_or_default();
    assert!(
        tasks.ends_with("tasks=0"),
        "{tasks:?}; log:\n{}",
        h.log.dump()
    );
}
