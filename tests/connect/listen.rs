//! `mcp-bridge connect` translating notifications and logging between eras, against
//! `mcp-bridge serve --demo`:
//! - a 2026 host's `subscriptions/listen` on a 2025 remote: acknowledged first with the
//!   honoured subset, only the requested types, tagged with the listen's id, resource updates
//!   after `resources/subscribe`, reference-counted across listens, `resources/unsubscribe`
//!   when the last listen holding a URI is cancelled, the completion result at shutdown;
//! - a 2026 host's listen on a 2026 remote: the remote's tags become the host's listen id;
//! - a 2025 host and a 2026 remote: list changes and (after `resources/subscribe`) resource
//!   updates reach stdout without `subscriptionId`;
//! - logging both ways: a 2026 request's `_meta` logLevel becomes `logging/setLevel` on a
//!   2025 remote (once per change) with per-request filtering; a 2025 host's
//!   `logging/setLevel` becomes the logLevel of its requests to a 2026 remote.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);
const SUB: &str = "io.modelcontextprotocol/subscriptionId";

fn listen_params(filter: Value) -> Value {
    json!({"notifications": filter, "_meta": modern_meta()})
}

/// A 2026 tool call, with `_meta` logLevel when `level` is given.
fn modern_call(name: &str, args: Value, level: Option<&str>) -> Value {
    let mut p = modern_call_params(name, args);
    if let Some(l) = level {
        p["_meta"]["io.modelcontextprotocol/logLevel"] = json!(l);
    }
    p
}

/// Call the demo's `notify` tool (2026 or 2025 style) and return its text.
fn notify(h: &mut Host, id: Value, kind: &str, modern: bool) -> String {
    let args = json!({"kind": kind});
    let p = if modern {
        modern_call("notify", args, None)
    } else {
        call_params("notify", args)
    };
    h.request(id.clone(), "tools/call", p);
    text(&h.response(&id, T))
}

/// A notification frame as the host must see it.
fn note(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The `notifications/message` that came before the answer to `id`, and that answer.
fn log_call(h: &mut Host, id: Value, params: Value) -> (Vec<Value>, Value) {
    h.request(id.clone(), "tools/call", params);
    let r = h.response(&id, T);
    // Messages ride the call's stream, so they were read before its answer.
    let msgs = h
        .drain(Duration::ZERO)
        .into_iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    (msgs, r)
}

fn message(level: &str, data: &str) -> Value {
    note(
        "notifications/message",
        json!({"level": level, "logger": "demo", "data": data}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_listens_on_a_2025_remote() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);

    // Two listens at once, sharing a resource subscription.
    h.request(
        json!("L1"),
        "subscriptions/listen",
        listen_params(
            json!({"toolsListChanged": true, "resourceSubscriptions": ["demo://readme"]}),
        ),
    );
    let ack = h.wait_for("ack of L1", T, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack,
        note(
            "notifications/subscriptions/acknowledged",
            json!({"notifications": {"toolsListChanged": true,
                                     "resourceSubscriptions": ["demo://readme"]},
                   "_meta": {SUB: "L1"}})
        )
    );
    h.request(
        json!(7),
        "subscriptions/listen",
        listen_params(
            json!({"promptsListChanged": true, "resourceSubscriptions": ["demo://readme"]}),
        ),
    );
    let ack = h.wait_for("ack of 7", T, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(
        ack,
        note(
            "notifications/subscriptions/acknowledged",
            json!({"notifications": {"promptsListChanged": true,
                                     "resourceSubscriptions": ["demo://readme"]},
                   "_meta": {SUB: 7}})
        )
    );

    // Every kind of change; each listen gets only what it asked for, tagged with its id.
    assert_eq!(notify(&mut h, json!(10), "prompts", true), "ok");
    assert_eq!(notify(&mut h, json!(11), "tools", true), "ok");
    assert_eq!(notify(&mut h, json!(12), "resources", true), "ok");
    assert_eq!(notify(&mut h, json!(13), "updated", true), "updated: 1");
    let mut seen = Vec::new();
    for id in [json!("L1"), json!(7)] {
        let id2 = id.clone();
        seen.push(h.wait_for("resource update", T, move |m| {
            m["method"] == "notifications/resources/updated" && m["params"]["_meta"][SUB] == id2
        }));
    }
    // The GET stream is relayed in order: the earlier notifications are in already.
    seen.extend(
        h.drain(Duration::ZERO)
            .into_iter()
            .filter(|m| m.get("id").is_none()),
    );
    let expected = [
        note(
            "notifications/resources/updated",
            json!({"uri": "demo://readme", "_meta": {SUB: "L1"}}),
        ),
        note(
            "notifications/resources/updated",
            json!({"uri": "demo://readme", "_meta": {SUB: 7}}),
        ),
        note(
            "notifications/prompts/list_changed",
            json!({"_meta": {SUB: 7}}),
        ),
        note(
            "notifications/tools/list_changed",
            json!({"_meta": {SUB: "L1"}}),
        ),
    ];
    assert_eq!(seen.len(), expected.len(), "{seen:#?}");
    for e in &expected {
        assert!(seen.contains(e), "missing {e} in {seen:#?}");
    }

    // Cancelling L1 keeps the subscription (7 still holds it) and ends L1's traffic.
    h.notify("notifications/cancelled", json!({"requestId": "L1"}));
    h.log.expect_blocking("listen \"L1\" ended", T);
    assert_eq!(notify(&mut h, json!(14), "updated", true), "updated: 1");
    let u = h.wait_for("resource update for 7", T, |m| {
        m["method"] == "notifications/resources/updated"
    });
    assert_eq!(u["params"]["_meta"][SUB], 7, "{u}");
    assert_eq!(notify(&mut h, json!(15), "tools", true), "ok");
    assert_eq!(notify(&mut h, json!(16), "prompts", true), "ok");
    let p = h.wait_for("prompts change for 7", T, |m| {
        m["method"] == "notifications/prompts/list_changed"
    });
    assert_eq!(p["params"]["_meta"][SUB], 7, "{p}");
    let rest = h.drain(Duration::ZERO);
    assert!(
        rest.iter().all(|m| m["params"]["_meta"][SUB] != "L1"),
        "{rest:#?}"
    );

    // Cancelling the last holder unsubscribes the remote.
    h.notify("notifications/cancelled", json!({"requestId": 7}));
    h.log.expect_blocking("listen 7 ended", T);
    h.log
        .expect_blocking("resources/unsubscribe demo://readme on the remote", T);
    assert_eq!(notify(&mut h, json!(17), "updated", true), "updated: 0");

    // A cancelled listen is never answered; at shutdown an open one gets its completion.
    h.request(
        json!("L3"),
        "subscriptions/listen",
        listen_params(json!({"toolsListChanged": true})),
    );
    h.wait_for("ack of L3", T, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    h.close_stdin();
    let done = h.response(&json!("L3"), T);
    assert_eq!(
        done["result"],
        json!({"resultType": "complete", "_meta": {SUB: "L3"}}),
        "{done}"
    );
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    let rest = h.drain(Duration::from_millis(100));
    assert!(
        rest.iter().all(|m| m["id"] != "L1" && m["id"] != 7),
        "{rest:#?}"
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_listen_on_a_2026_remote_keeps_the_hosts_id() {
    let serve = Bridge::demo(&["--demo-era", "modern"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.request(
        json!("M1"),
        "subscriptions/listen",
        listen_params(json!({"toolsListChanged": true})),
    );
    let ack = h.wait_for("ack", T, |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
    });
    assert_eq!(ack["params"]["_meta"][SUB], "M1", "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    assert_eq!(notify(&mut h, json!(1), "tools", true), "ok");
    let n = h.wait_for("tools change", T, |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(
        n,
        note(
            "notifications/tools/list_changed",
            json!({"_meta": {SUB: "M1"}})
        )
    );
    h.notify("notifications/cancelled", json!({"requestId": "M1"}));
    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    let rest = h.drain(Duration::from_millis(100));
    assert!(rest.iter().all(|m| m["id"] != "M1"), "{rest:#?}");
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_host_gets_a_2026_remotes_notifications() {
    let serve = Bridge::demo(&["--demo-era", "modern"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.initialize("2025-11-25", json!({}));

    // List changes flow from the initialize answer on, untagged.
    assert_eq!(notify(&mut h, json!(1), "tools", false), "ok");
    let n = h.wait_for("tools change", T, |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(n, note("notifications/tools/list_changed", json!({})));

    // Resource updates only after resources/subscribe.
    assert_eq!(notify(&mut h, json!(2), "updated", false), "updated: 0");
    h.request(
        json!(3),
        "resources/subscribe",
        json!({"uri": "demo://readme"}),
    );
    let r = h.response(&json!(3), T);
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(notify(&mut h, json!(4), "updated", false), "updated: 1");
    let u = h.wait_for("resource update", T, |m| {
        m["method"] == "notifications/resources/updated"
    });
    assert_eq!(
        u,
        note(
            "notifications/resources/updated",
            json!({"uri": "demo://readme"})
        )
    );
    // The re-opened listen still carries list changes.
    assert_eq!(notify(&mut h, json!(5), "prompts", false), "ok");
    let p = h.wait_for("prompts change", T, |m| {
        m["method"] == "notifications/prompts/list_changed"
    });
    assert_eq!(p, note("notifications/prompts/list_changed", json!({})));

    h.request(
        json!(6),
        "resources/unsubscribe",
        json!({"uri": "demo://readme"}),
    );
    assert_eq!(h.response(&json!(6), T)["result"], json!({}));
    assert_eq!(notify(&mut h, json!(7), "updated", false), "updated: 0");
    h.request(json!(8), "resources/subscribe", json!({}));
    let e = h.response(&json!(8), T);
    assert_eq!(e["error"]["code"], -32602, "{e}");

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    let rest = h.drain(Duration::from_millis(100));
    assert!(
        rest.iter().all(
            |m| m["method"] != "notifications/subscriptions/acknowledged"
                && m["params"]["_meta"].get(SUB).is_none()
        ),
        "{rest:#?}"
    );
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_log_level_reaches_a_2025_remote() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    let log = |level: &str, data: &str, at: Option<&str>| {
        modern_call("log", json!({"level": level, "message": data}), at)
    };

    let (m, r) = log_call(&mut h, json!(1), log("info", "a", Some("warning")));
    assert_eq!(text(&r), "ok");
    assert!(m.is_empty(), "{m:?}");
    h.log
        .expect_blocking("the 2025 remote now logs at warning", T);
    let (m, _) = log_call(&mut h, json!(2), log("error", "b", Some("warning")));
    assert_eq!(m, vec![message("error", "b")]);
    // A lower level lowers the remote's.
    let (m, _) = log_call(&mut h, json!(3), log("info", "c", Some("debug")));
    assert_eq!(m, vec![message("info", "c")]);
    h.log
        .expect_blocking("the 2025 remote now logs at debug", T);
    // The remote now logs at debug; a request asking for errors only gets errors.
    let (m, _) = log_call(&mut h, json!(4), log("warning", "d", Some("error")));
    assert!(m.is_empty(), "{m:?}");
    let (m, _) = log_call(&mut h, json!(5), log("critical", "e", Some("error")));
    assert_eq!(m, vec![message("critical", "e")]);
    // No logLevel: no log messages at all.
    let (m, _) = log_call(&mut h, json!(6), log("emergency", "f", None));
    assert!(m.is_empty(), "{m:?}");
    // Not a level.
    h.request(json!(7), "tools/call", log("info", "g", Some("loud")));
    assert_eq!(h.response(&json!(7), T)["error"]["code"], -32602);

    // logging/setLevel went out once per change of the session's level.
    let d = h.log.dump();
    assert_eq!(d.matches("the 2025 remote now logs at").count(), 2, "{d}");

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_host_log_level_reaches_a_2026_remote() {
    let serve = Bridge::demo(&["--demo-era", "modern"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.initialize("2025-11-25", json!({}));
    let log =
        |level: &str, data: &str| call_params("log", json!({"level": level, "message": data}));

    // No level set: a 2026 server sends no log messages.
    let (m, r) = log_call(&mut h, json!(1), log("error", "a"));
    assert_eq!(text(&r), "ok");
    assert!(m.is_empty(), "{m:?}");

    h.request(json!(2), "logging/setLevel", json!({"level": "warning"}));
    assert_eq!(h.response(&json!(2), T)["result"], json!({}));
    let (m, _) = log_call(&mut h, json!(3), log("info", "b"));
    assert!(m.is_empty(), "{m:?}");
    let (m, _) = log_call(&mut h, json!(4), log("error", "c"));
    assert_eq!(m, vec![message("error", "c")]);

    h.request(json!(5), "logging/setLevel", json!({"level": "debug"}));
    assert_eq!(h.response(&json!(5), T)["result"], json!({}));
    let (m, _) = log_call(&mut h, json!(6), log("info", "d"));
    assert_eq!(m, vec![message("info", "d")]);

    h.request(json!(7), "logging/setLevel", json!({"level": "loud"}));
    assert_eq!(h.response(&json!(7), T)["error"]["code"], -32602);

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_hosts_listen_is_reopened_when_the_remote_restarts() {
    const ACKED: &str = "the listen held for a 2025 caller is acknowledged";
    let serve = Bridge::demo(&["--demo-era", "modern"]).await;
    let port = serve.addr.port().to_string();
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.initialize("2025-11-25", json!({}));
    h.log.expect_blocking(ACKED, T);

    // The remote goes away (its listen stream ends) and comes back on the same port.
    drop(serve);
    h.log.expect_blocking("re-opening in", T);
    let _serve = Bridge::serve(&["--demo", "--demo-era", "modern", "--port", &port]).await;
    let until = Instant::now() + T;
    while h.log.dump().matches(ACKED).count() < 2 {
        assert!(
            Instant::now() < until,
            "the listen was not re-opened; log:\n{}",
            h.log.dump()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(notify(&mut h, json!(1), "tools", false), "ok");
    let n = h.wait_for("tools change", T, |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(n, note("notifications/tools/list_changed", json!({})));

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

/// Both faces hold a listen for a 2025 caller of a 2026 upstream, and both ask it only for
/// the list changes the upstream's capabilities offer (here tools, not prompts): connect for a
/// 2025 host after `initialize`, serve for a 2025 session's GET stream (`serve --upstream`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_listen_asks_only_for_offered_list_changes_on_both_faces() {
    let remote = fake_remote_with(RemoteEra::Modern, |v, _| {
        let id = &v["id"];
        match v["method"].as_str()? {
            "server/discover" => Some(rpc_result(
                id,
                json!({"resultType": "complete",
                "ttlMs": 0, "cacheScope": "private", "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {"listChanged": true}, "prompts": {}}}),
            )),
            "subscriptions/listen" => Some(rpc_error(id, -32601, "no listens here")),
            _ => None,
        }
    })
    .await;
    let url = remote.url.clone();
    // The notifications the first listen after the first `skip` messages asked for.
    let first_filter = |skip: usize| {
        let remote = &remote;
        async move {
            let listen = remote
                .wait_for(skip, |m| m["method"] == "subscriptions/listen", T)
                .await
                .expect("no subscriptions/listen reached the remote");
            listen["params"]["notifications"].clone()
        }
    };
    let want = json!({"toolsListChanged": true});

    // connect, a 2025 host.
    let mut h = Host::start(&url, &["--protocol", "2026-07-28"]);
    h.initialize("2025-11-25", json!({}));
    assert_eq!(first_filter(0).await, want);
    drop(h);

    // serve, a 2025 session's GET stream.
    let before = remote.seen().len();
    let b = Bridge::serve(&["--port", "0", "--upstream", &url]).await;
    let c = client();
    let s = Session::open(&c, &b.url).await;
    let get = c
        .get(&s.url)
        .headers(s.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET stream");
    assert_eq!(get.status(), 200);
    assert_eq!(first_filter(before).await, want);
}

/// A 2026 remote that ends every `subscriptions/listen` at once (as the conformance suite's
/// 2026 test servers do): with `sse`, a stream that closes with no answer in it; else an
/// immediate final result. Everything else: `server/discover` and an empty tool list.
async fn listen_ending_remote(sse: bool) -> FakeRemote {
    fake_remote_with(RemoteEra::Modern, move |v, _| {
        let id = &v["id"];
        match v["method"].as_str()? {
            "server/discover" => Some(rpc_result(
                id,
                json!({"resultType": "complete",
                "ttlMs": 0, "cacheScope": "private", "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {"listChanged": true}}}),
            )),
            "subscriptions/listen" if sse => Some((200, "text/event-stream", String::new())),
            "subscriptions/listen" => Some(rpc_result(id, json!({"resultType": "complete"}))),
            "tools/list" => Some(rpc_result(
                id,
                json!({"resultType": "complete", "tools": []}),
            )),
            _ => None,
        }
    })
    .await
}

/// A 2025 host's first answers do not wait for a held listen the 2026 remote ended at once
/// (it never gets acknowledged; it is re-opened with backoff in the background). The bound
/// is a correctness bound: a wait for the acknowledgement takes 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_hosts_first_answer_does_not_wait_for_a_listen_that_ended() {
    const BOUND: Duration = Duration::from_secs(5);
    for sse in [false, true] {
        let remote = listen_ending_remote(sse).await;
        let url = remote.url.clone();
        for protocol in ["2026-07-28", "auto"] {
            let mut h = Host::start(&url, &["--protocol", protocol]);
            h.request(
                json!(0),
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "connect-tests", "version": "0"}}),
            );
            let r = h.response(&json!(0), BOUND);
            assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
            h.notify("notifications/initialized", json!({}));
            h.request(json!(1), "tools/list", json!({}));
            let r = h.response(&json!(1), BOUND);
            assert_eq!(r["result"]["tools"], json!([]), "{r}");
            h.log.expect_blocking(
                "the listen held for a 2025 caller ended or could not open",
                T,
            );
            h.close_stdin();
            assert!(h.wait_exit(Duration::from_secs(10)).is_some());
            h.assert_clean_stdout();
        }
    }
}
