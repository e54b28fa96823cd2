//! Tasks of the 2026 extension (`io.modelcontextprotocol/tasks`) through `serve`
//! (`crate::core::tasks`), over `tests/fixtures/tasks_modern_server.py`, whose task ids are a
//! per-process counter (`t1`, `t2`, ...) so that two children of a pool mint the same ids:
//!
//! - a task's id is the bridge's (`mb-…`), never the child's;
//! - in a pool of two, the tasks of two callers land on both children under the same child
//!   id, and each `tasks/get` reaches the child that runs its task (the answer names its
//!   topic and the pid that ran it);
//! - another principal's `tasks/get` and `tasks/cancel` are `-32602`, as for an id the bridge
//!   never gave, and the task is still there for its owner;
//! - the owner cancels: an empty ack, then `cancelled`;
//! - the extension's request rules hold at serve's face (`core::tasks::modern_refusal`,
//!   `Mcp-Name` mirroring `taskId`), as the conformance suite's tasks scenarios expect of a
//!   server (`CONFORMANCE_SET=tasks` in .ci/conformance.sh runs those).
//!
//! (The 2025-11-25 experimental tasks, with `tasks/list` and `tasks/result`, are checked
//! against server-everything and the TypeScript SDK by `.ci/interop-eras.sh`.)

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/tasks_modern_server.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// A 2026 request of `who` (a bearer token) declaring the tasks extension.
async fn ask(c: &reqwest::Client, url: &str, who: &str, method: &str, params: Value) -> Reply {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut h = modern_headers(&body);
    h.insert("authorization", hv(&format!("Bearer {who}")));
    post_with(c, url, h, body.to_string()).await
}

async fn start_task(c: &reqwest::Client, url: &str, who: &str, topic: &str, secs: f64) -> String {
    let args = json!({"name": "slow", "arguments": {"topic": topic, "seconds": secs}});
    let r = ask(c, url, who, "tools/call", args).await;
    let res = r.result();
    assert_eq!(res["resultType"], "task", "{r:?}");
    let id = res["taskId"].as_str().expect("taskId").to_owned();
    assert!(
        id.starts_with("mb-") && id.len() == 35,
        "the bridge's id: {id}"
    );
    id
}

/// `tasks/get` of `who` until the task is no longer working.
async fn settled(c: &reqwest::Client, url: &str, who: &str, id: &str) -> Value {
    let until = Instant::now() + T;
    loop {
        let r = ask(c, url, who, "tasks/get", json!({"taskId": id})).await;
        let res = r.result().clone();
        assert_eq!(res["taskId"], id, "{r:?}");
        if res["status"] != "working" || Instant::now() > until {
            return res;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_reach_their_child_and_only_their_owner() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "alice:alice-secret-0123456789abcdef\nbob:bob-secret-0123456789abcdef0\n",
    )
    .expect("write");
    let fx = fixture();
    let b = Bridge::serve(&[
        "--port",
        "0",
        "--auth",
        "bearer",
        "--token-file",
        tokens.to_str().expect("path"),
        "--pool-min",
        "2",
        "--pool-max",
        "2",
        "--",
        "python3",
        &fx,
    ])
    .await;
    b.wait_ready(T).await;
    let c = client();
    let (alice, bob) = (
        "alice-secret-0123456789abcdef",
        "bob-secret-0123456789abcdef0",
    );

    // Four tasks, two each: the pool takes turns, so both children run tasks `t1` and `t2`.
    let mut mine = Vec::new();
    for (i, who) in [alice, bob, alice, bob].into_iter().enumerate() {
        let topic = format!("topic-{i}");
        mine.push((
            who,
            topic.clone(),
            start_task(&c, &b.url, who, &topic, 0.3).await,
        ));
    }
    let ids: std::collections::HashSet<_> = mine.iter().map(|m| m.2.clone()).collect();
    assert_eq!(ids.len(), 4, "four distinct ids: {mine:?}");

    let mut pids = std::collections::HashSet::new();
    for (who, topic, id) in &mine {
        let t = settled(&c, &b.url, who, id).await;
        assert_eq!(t["status"], "completed", "{t}");
        let text = t["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let (got, pid) = text.split_once(" done by ").expect("fixture text");
        assert_eq!(
            got, topic,
            "tasks/get reached the child that runs {id}: {t}"
        );
        pids.insert(pid.to_owned());
    }
    assert_eq!(pids.len(), 2, "the tasks ran on both children: {pids:?}");

    // Bob cannot see or cancel Alice's task: the same error as an id never given.
    let (_, _, alices) = &mine[0];
    for method in ["tasks/get", "tasks/cancel"] {
        let r = ask(&c, &b.url, bob, method, json!({"taskId": alices})).await;
        assert_eq!(r.error_code(), -32602, "{method} of another's task: {r:?}");
    }
    let never = "mb-00000000000000000000000000000000";
    let r = ask(&c, &b.url, alice, "tasks/get", json!({"taskId": never})).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");
    assert_eq!(
        settled(&c, &b.url, alice, alices).await["status"],
        "completed"
    );

    // Alice cancels a running task of hers.
    let id = start_task(&c, &b.url, alice, "long", 30.0).await;
    let r = ask(&c, &b.url, alice, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
    assert!(r.result().get("taskId").is_none(), "an empty ack: {r:?}");
    assert_eq!(settled(&c, &b.url, alice, &id).await["status"], "cancelled");
}

/// A 2026 request without a bearer token, with these client capabilities and extra headers
/// (`(name, value)`; an empty value removes the header).
async fn ask_as(
    c: &reqwest::Client,
    url: &str,
    method: &str,
    params: Value,
    caps: Value,
    headers: &[(&'static str, &str)],
) -> Reply {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut h = modern_headers(&body);
    for (k, v) in headers {
        if v.is_empty() {
            h.remove(*k);
        } else {
            h.insert(*k, hv(v));
        }
    }
    post_with(c, url, h, body.to_string()).await
}

/// The extension's own rules, checked by serve as its server would (the conformance suite's
/// tasks scenarios: capability negotiation, dispatch, request headers): a request that does
/// not declare the extension cannot use `tasks/get|update|cancel` (-32021 naming it), even
/// on a task of its principal; `tasks/result` and `tasks/list` are not 2026 methods (-32601,
/// not the book's -32602); and `Mcp-Name` mirrors `taskId` (-32020 when it differs or is
/// missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_extension_is_gated_and_named_the_2026_way() {
    let fx = fixture();
    let b = Bridge::serve(&["--port", "0", "--", "python3", &fx]).await;
    b.wait_ready(T).await;
    let c = client();
    let ext = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let args = json!({"name": "slow", "arguments": {"topic": "gate", "seconds": 30}});
    let r = ask_as(&c, &b.url, "tools/call", args, ext.clone(), &[]).await;
    let id = r.result()["taskId"].as_str().expect("a task").to_owned();

    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let mut p = json!({"taskId": id});
        if method == "tasks/update" {
            p["inputResponses"] = json!({});
        }
        let r = ask_as(&c, &b.url, method, p, json!({}), &[]).await;
        assert_eq!(r.status, 400, "{method} without the extension: {r:?}");
        assert_eq!(r.error_code(), -32021, "{method}: {r:?}");
        assert!(
            r.error()["data"]["requiredCapabilities"]["extensions"]
                ["io.modelcontextprotocol/tasks"]
                .is_object(),
            "{r:?}"
        );
    }
    for method in ["tasks/result", "tasks/list"] {
        let r = ask_as(&c, &b.url, method, json!({"taskId": id}), ext.clone(), &[]).await;
        assert_eq!(r.error_code(), -32601, "{method}: {r:?}");
        assert_eq!(r.status, 404, "{r:?}");
    }
    let get = |h: &'static [(&'static str, &'static str)]| {
        ask_as(
            &c,
            &b.url,
            "tasks/get",
            json!({"taskId": id}),
            ext.clone(),
            h,
        )
    };
    let r = get(&[("mcp-name", "mb-not-this-one")]).await;
    assert_eq!((r.status, r.error_code()), (400, -32020), "{r:?}");
    let r = get(&[("mcp-name", "")]).await;
    assert_eq!((r.status, r.error_code()), (400, -32020), "{r:?}");

    // Declared, named: the task, then an empty cancel ack.
    let r = get(&[]).await;
    assert_eq!(r.result()["status"], "working", "{r:?}");
    let r = ask_as(&c, &b.url, "tasks/cancel", json!({"taskId": id}), ext, &[]).await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
}
