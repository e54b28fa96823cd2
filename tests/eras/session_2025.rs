//! 2025-era Streamable HTTP sessions against the real binary: the whole lifecycle, the
//! session errors (400/404), DELETE, version header checks, the GET stream, and an explicit
//! `notifications/cancelled` reaching the child under the child's own id.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_lifecycle() {
    let b = Bridge::demo(&[]).await;
    let c = client();

    // initialize → a session id of 64 visible ASCII characters.
    let r = post_with(
        &c,
        &b.url,
        base_headers(),
        initialize_body(json!(1), LEGACY).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let sid = r.header("mcp-session-id").expect("Mcp-Session-Id");
    assert_eq!(sid.len(), 64, "session id {sid:?}");
    assert!(
        sid.bytes().all(|x| (0x21..=0x7e).contains(&x)),
        "session id has non-visible characters: {sid:?}"
    );
    assert_eq!(r.last()["id"], 1);
    let init = r.result();
    assert_eq!(init["protocolVersion"], LEGACY);
    assert!(init["serverInfo"]["name"].is_string(), "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");

    let s = Session {
        c: c.clone(),
        url: b.url.clone(),
        id: sid.clone(),
        version: LEGACY.into(),
        init: init.clone(),
    };

    // notifications/initialized → 202, empty body.
    let r = s
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert!(r.raw.is_empty(), "202 with a body: {:?}", r.raw);

    // tools/list
    let r = s.request(json!(2), "tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["id"], 2);
    let names: Vec<&str> = r.result()["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["echo", "slow", "lookup", "crash", "junk"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }

    // tools/call echo (string id comes back as the same string)
    let r = s
        .call(json!("call-3"), "echo", json!({"text": "hello 2025"}))
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.last()["id"], "call-3");
    assert_eq!(r.text(), "hello 2025");
    assert_ne!(r.result()["isError"], true);

    // A non-initialize request without a session → 400.
    let mut h = base_headers();
    h.insert("mcp-protocol-version", hv(LEGACY));
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}});
    let r = post_with(&c, &b.url, h.clone(), body.to_string()).await;
    assert_eq!(r.status, 400, "no session: {r:?}");

    // Unknown session → 404.
    let mut h404 = h.clone();
    h404.insert("mcp-session-id", hv(&"f".repeat(64)));
    let r = post_with(&c, &b.url, h404, body.to_string()).await;
    assert_eq!(r.status, 404, "unknown session: {r:?}");

    // A bad MCP-Protocol-Version on a live session → 400.
    let mut hbad = s.headers();
    hbad.insert("mcp-protocol-version", hv("1999-01-01"));
    let r = post_with(&c, &b.url, hbad, body.to_string()).await;
    assert_eq!(r.status, 400, "bad protocol version header: {r:?}");
    // ... and the session is still usable afterwards.
    let r = s
        .call(json!(5), "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(r.text(), "still here");

    // DELETE → 200; the session is then gone (404), and a second DELETE is 404 too.
    let r = c
        .delete(&b.url)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", LEGACY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s
        .call(json!(6), "echo", json!({"text": "after delete"}))
        .await;
    assert_eq!(r.status, 404, "deleted session: {r:?}");
    let r = c
        .delete(&b.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_versions() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    for (asked, want) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-01-01", LEGACY),
    ] {
        let r = post_with(
            &c,
            &b.url,
            base_headers(),
            initialize_body(json!(1), asked).to_string(),
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.result()["protocolVersion"], want, "asked {asked}");
        assert!(r.header("mcp-session-id").is_some());
    }
    // A 2025-03-26 client sends no MCP-Protocol-Version header at all; that must work.
    let s = Session::open(&c, &b.url).await;
    let mut h = s.headers();
    h.remove("mcp-protocol-version");
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "no header"}}});
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "no header");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream() {
    // A 2025-era child: its list_changed notifications are session-wide traffic.
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();

    // Without a session there is no GET stream: 405.
    let r = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);

    // With a session: an open text/event-stream.
    let s = Session::open(&c, &b.url).await;
    let r = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &s.id)
        .header("mcp-protocol-version", &s.version)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct:?}");
    let mut old = SseReader::new(r);

    // A second GET replaces the first (a host that reopens its stream without closing the
    // old one): the old stream ends, the new one carries what follows.
    let r = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &s.id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut stream = SseReader::new(r);
    assert!(
        old.ends_within(Duration::from_secs(10)).await,
        "the replaced GET stream stayed open"
    );

    // A GET with an unknown session → 404.
    let r = c
        .get(&b.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", "nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // A list_changed notification from the child arrives on the GET stream.
    let r = s.call(json!(1), "notify", json!({"kind": "tools"})).await;
    assert_eq!(r.text(), "ok");
    let ev = stream
        .next(Duration::from_secs(10))
        .await
        .expect("an event");
    assert_eq!(ev["method"], "notifications/tools/list_changed", "{ev}");

    // Ending the session ends its GET stream.
    let r = c
        .delete(&b.url)
        .header("mcp-session-id", &s.id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        stream.ends_within(Duration::from_secs(10)).await,
        "the GET stream outlived its session"
    );
}

/// Start `slow` (30 s) on a session under the client id "client-7"; return the bridge, the
/// session, the running call and the child-side id the demo logged for it.
async fn slow_on_session() -> (Bridge, Session, tokio::task::JoinHandle<Reply>, String) {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let s2 = Session {
        c: c.clone(),
        url: s.url.clone(),
        id: s.id.clone(),
        version: s.version.clone(),
        init: s.init.clone(),
    };
    let call = tokio::spawn(async move {
        s2.call(
            json!("client-7"),
            "slow",
            json!({"seconds": 30, "steps": 0}),
        )
        .await
    });
    let started = b
        .log
        .expect("demo: slow started id=", Duration::from_secs(10))
        .await;
    let child_id = word_after(&started, "demo: slow started id=").unwrap();
    assert_ne!(child_id, "client-7");
    assert_ne!(child_id, "\"client-7\"");
    (b, s, call, child_id)
}

/// A 2025 client cancels with `notifications/cancelled {requestId: <its own id>}`: 202, and
/// the cancelled POST ends promptly without a result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_cancel_ends_call() {
    let (b, s, call, _child_id) = slow_on_session().await;
    let st = s
        .notify(
            "notifications/cancelled",
            json!({"requestId": "client-7", "reason": "user pressed stop"}),
        )
        .await;
    assert_eq!(st, 202);
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "cancelled call still running after 10 s; log:\n{}",
                b.log.dump()
            )
        })
        .unwrap();
    if let Some(m) = r.messages.last() {
        assert!(
            m.get("result").is_none(),
            "cancelled call got a result: {m}"
        );
    }
    // Cancelling an unknown or finished id is ignored, still 202.
    let st = s
        .notify(
            "notifications/cancelled",
            json!({"requestId": "never-sent"}),
        )
        .await;
    assert_eq!(st, 202);
}

/// ... and the child must hear of it, under the id the bridge gave the call (not the client's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_cancel_reaches_child() {
    let (b, s, _call, child_id) = slow_on_session().await;
    let st = s
        .notify(
            "notifications/cancelled",
            json!({"requestId": "client-7", "reason": "user pressed stop"}),
        )
        .await;
    assert_eq!(st, 202);
    let line = b
        .log
        .expect("demo: cancelled id=", Duration::from_secs(10))
        .await;
    assert_eq!(
        word_after(&line, "demo: cancelled id=").as_deref(),
        Some(child_id.as_str()),
        "cancelled the wrong child id; log:\n{}",
        b.log.dump()
    );
}

/// A 2025-era child asks the client something during a call: the request travels on the
/// call's SSE stream, the client POSTs its answer (202), and the call then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_request_round_trip() {
    round_trip_with_child("legacy").await;
}

/// The same round trips with a 2026-era child: its `input_required` results become requests
/// on the client's stream (ids minted by the bridge), and the bridge retries the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_request_round_trip_modern_child() {
    round_trip_with_child("modern").await;
}

/// The capability gate connect applies to a 2025 host holds for a 2025 session too: a 2025
/// child (initialised by the bridge, so it asks whatever the session declared) that asks for
/// sampling, which the session did not declare at `initialize`, never reaches the client; the
/// call's stream carries only its final answer. (A 2026 upstream that asks regardless:
/// `connect_eras::undeclared_capability_is_never_asked_of_a_2025_session_of_serve`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_capability_is_never_asked_of_a_2025_session() {
    {
        let era = "legacy";
        let b = Bridge::demo(&["--demo-era", era]).await;
        let c = client();
        let s = Session::open_with_caps(&c, &b.url, json!({})).await;
        let r = s
            .request(
                json!("call-sample"),
                "tools/call",
                json!({"name": "sample", "arguments": {"prompt": "2+2?"}}),
            )
            .await;
        assert_eq!(r.status, 200, "{era}: {r:?}");
        // JSON or SSE: either way the only message is the call's answer.
        assert_eq!(
            r.messages.len(),
            1,
            "{era}: the client was asked: {:?}",
            r.messages
        );
        let first = r.last();
        assert_eq!(first["id"], "call-sample", "{era}: {first}");
    }
}

async fn round_trip_with_child(era: &str) {
    let b = Bridge::demo(&["--demo-era", era]).await;
    let c = client();
    let s = Session::open_with_caps(
        &c,
        &b.url,
        json!({"elicitation": {}, "roots": {"listChanged": true}, "sampling": {}}),
    )
    .await;

    for (tool, args, answer, want) in [
        (
            "elicit",
            json!({"message": "who?"}),
            json!({"action": "accept", "content": {"name": "Ada"}}),
            "Ada",
        ),
        (
            "roots",
            json!({}),
            json!({"roots": [{"uri": "file:///work/project"}]}),
            "file:///work/project",
        ),
        (
            "sample",
            json!({"prompt": "2+2?"}),
            json!({"role": "assistant", "content": {"type": "text", "text": "four"},
                   "model": "test-model"}),
            "four",
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": format!("call-{tool}"), "method": "tools/call",
            "params": {"name": tool, "arguments": args}});
        let mut sse = s.stream(&body).await;
        let req = sse
            .next(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{tool}: stream ended; log:\n{}", b.log.dump()));
        assert!(
            req["method"].is_string() && req.get("id").is_some(),
            "{tool}: {req}"
        );
        if era == "modern" {
            // Minted by the bridge, in the scheme connect uses too.
            assert!(
                req["id"].as_str().is_some_and(|i| i.starts_with("mcpb-")),
                "{tool}: {req}"
            );
        }
        let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": answer});
        let r = s.post(&reply).await;
        assert_eq!(r.status, 202, "{tool}: {r:?}");
        let fin = sse
            .next(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{tool}: no final answer; log:\n{}", b.log.dump()));
        assert_eq!(fin["id"], format!("call-{tool}"), "{fin}");
        let text = fin["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.contains(want), "{tool}: {fin}");
        assert_ne!(fin["result"]["isError"], true, "{tool}: {fin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_expires() {
    let b = Bridge::demo(&["--session-timeout", "1s"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    assert_eq!(
        s.call(json!(1), "echo", json!({"text": "a"})).await.text(),
        "a"
    );
    // Poll without touching the session: a fresh unknown-session probe would not help, so
    // wait past the timeout, then expect 404 (bounded).
    let until = std::time::Instant::now() + Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    loop {
        let r = s.call(json!(2), "echo", json!({"text": "b"})).await;
        if r.status == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "idle session never expired: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_sessions() {
    let b = Bridge::demo(&["--max-sessions", "2"]).await;
    let c = client();
    // Two busy sessions (a call in flight keeps a session from being reclaimed as idle).
    let mut busy = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let s = Session::open(&c, &b.url).await;
        ids.push(s.id.clone());
        busy.push(tokio::spawn(async move {
            s.call(json!(1), "slow", json!({"seconds": 20, "steps": 0}))
                .await
        }));
    }
    tokio::time::timeout(Duration::from_secs(10), async {
        while b.log.count("demo: slow started") < 2 {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await
    .expect("slow calls did not start");
    let r = post_with(
        &c,
        &b.url,
        base_headers(),
        initialize_body(json!(1), LEGACY).to_string(),
    )
    .await;
    assert_eq!(r.status, 503, "third session: {r:?}");
    assert!(r.header("mcp-session-id").is_none());

    // Ending one makes room.
    let d = c
        .delete(&b.url)
        .header("mcp-session-id", &ids[0])
        .send()
        .await
        .unwrap();
    assert_eq!(d.status(), 200);
    let r = post_with(
        &c,
        &b.url,
        base_headers(),
        initialize_body(json!(2), LEGACY).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    for t in busy {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_per_session() {
    let mut b = Bridge::demo(&["--isolation", "session"]).await;
    let c = client();
    b.wait_ready(Duration::from_secs(20)).await;
    let s1 = Session::open(&c, &b.url).await;
    let s2 = Session::open(&c, &b.url).await;
    assert_eq!(
        s1.call(json!(1), "echo", json!({"text": "one"}))
            .await
            .text(),
        "one"
    );
    assert_eq!(
        s2.call(json!(1), "echo", json!({"text": "two"}))
            .await
            .text(),
        "two"
    );
    // The shared child plus one per session.
    assert_eq!(children_of(b.pid()).len(), 3, "log:\n{}", b.log.dump());

    // A crash in one session's child does not touch the other session.
    let r = s1.call(json!(2), "crash", json!({})).await;
    assert_eq!(r.error()["data"]["reason"], "child_exited", "{r:?}");
    assert_eq!(
        s2.call(json!(2), "echo", json!({"text": "two again"}))
            .await
            .text(),
        "two again"
    );

    // Ending a session stops its child.
    let d = c
        .delete(&b.url)
        .header("mcp-session-id", &s2.id)
        .send()
        .await
        .unwrap();
    assert_eq!(d.status(), 200);
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while children_of(b.pid()).len() > 2 {
        assert!(
            std::time::Instant::now() < until,
            "session child still running after DELETE: {:?}; log:\n{}",
            children_of(b.pid()),
            b.log.dump()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(b.wait_exit(Duration::from_secs(20)).await.is_some());
}

/// For a 2025 client a dropped connection is not a cancellation (only
/// `notifications/cancelled` is): the child keeps running the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_is_not_cancellation_2025() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    s.hang_up_slow_call(&b.log, "demo: slow started id=").await;
    // The request future is gone: the client hung up. Give a cancellation time to show.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        b.log.find("demo: cancelled id=").is_none(),
        "a 2025 hang-up cancelled the call; log:\n{}",
        b.log.dump()
    );
    // The session is still there.
    assert_eq!(
        s.call(json!(2), "echo", json!({"text": "x"})).await.text(),
        "x"
    );
    // The call still runs in the child, and the client can still cancel it by id.
    assert_eq!(
        s.notify(
            "notifications/cancelled",
            json!({"requestId": 1, "reason": "changed my mind"})
        )
        .await,
        202
    );
    let line = b
        .log
        .expect("demo: cancelled id=", Duration::from_secs(10))
        .await;
    assert!(line.contains("client cancelled"), "{line}");
}

/// A 2025 session's logging/setLevel becomes the logLevel stamped on its requests to a 2026
/// child: messages below it never come, messages at or above it arrive on the call's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_level_reaches_modern_child() {
    let b = Bridge::demo(&["--demo-era", "modern"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let r = s
        .request(json!(1), "logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(r.result(), &json!({}), "{r:?}");
    let r = s
        .call(
            json!(2),
            "log",
            json!({"level": "info", "message": "quiet"}),
        )
        .await;
    assert!(r.notifications("notifications/message").is_empty(), "{r:?}");
    let r = s
        .call(
            json!(3),
            "log",
            json!({"level": "error", "message": "loud"}),
        )
        .await;
    let logs = r.notifications("notifications/message");
    assert_eq!(logs.len(), 1, "{r:?}");
    assert_eq!(logs[0]["params"]["data"], "loud", "{r:?}");
    let r = s
        .request(json!(4), "logging/setLevel", json!({"level": "nope"}))
        .await;
    assert_eq!(r.error_code(), -32602, "{r:?}");
}

/// A 2025 session's GET stream in front of a 2026 child: the bridge holds a listen stream on
/// the child for the session, and list changes reach the GET stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream_in_front_of_modern_child() {
    let b = Bridge::demo(&["--demo-era", "modern"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let resp = c
        .get(&s.url)
        .headers(s.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let r = s
        .request(
            json!(1),
            "resources/subscribe",
            json!({"uri": "demo://readme"}),
        )
        .await;
    assert_eq!(r.result(), &json!({}), "{r:?}");
    // The listen is re-issued with the new subscription; announce changes until one arrives
    // (bounded), so the test does not depend on when the new listen is in place.
    let mut got = None;
    for i in 0..10 {
        let r = s
            .call(json!(10 + i), "notify", json!({"kind": "tools"}))
            .await;
        assert_eq!(r.text(), "ok", "{r:?}");
        if let Ok(n) =
            tokio::time::timeout(Duration::from_secs(1), sse.next(Duration::from_secs(2))).await
        {
            got = n;
            break;
        }
    }
    let n = got.expect("a notification on the GET stream");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_2025_only(&n);
}

/// A notification on a 2025 stream carries no 2026-only `_meta` (the bridge's listen id).
fn assert_2025_only(n: &Value) {
    assert!(
        n["params"]["_meta"]
            .get("io.modelcontextprotocol/subscriptionId")
            .is_none(),
        "2026 subscriptionId on a 2025 stream: {n}"
    );
}

/// Announce a tools change (bounded retries) until one reaches `sse`.
async fn until_list_changed(s: &Session, sse: &mut SseReader, base: i64) -> Option<Value> {
    for i in 0..20 {
        let r = s
            .call(json!(base + i), "notify", json!({"kind": "tools"}))
            .await;
        if r.text() != "ok" {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        if let Ok(Some(n)) =
            tokio::time::timeout(Duration::from_secs(1), sse.next(Duration::from_secs(2))).await
        {
            return Some(n);
        }
    }
    None
}

/// The GET stream outlives a restart of the 2026 child behind it: the bridge holds a listen on
/// the new child, and its notifications still come in 2025 form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_stream_survives_a_modern_child_restart() {
    let b = Bridge::demo(&["--demo-era", "modern"]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let resp = c
        .get(&s.url)
        .headers(s.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    let n = until_list_changed(&s, &mut sse, 10)
        .await
        .expect("before the crash");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_2025_only(&n);

    let r = s.call(json!("crash"), "crash", json!({})).await;
    assert_eq!(r.error()["data"]["reason"], "child_exited", "{r:?}");
    let r = echo_until_ok(&c, &b.url, "back", Duration::from_secs(20)).await;
    assert_eq!(r.text(), "back", "{r:?}");

    let n = until_list_changed(&s, &mut sse, 100)
        .await
        .unwrap_or_else(|| {
            panic!(
                "the GET stream went silent after the restart; log:\n{}",
                b.log.dump()
            )
        });
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_2025_only(&n);
}
