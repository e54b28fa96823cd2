//! connect's host-side bounds hold at full speed: `--max-inflight` refuses each request over it
//! with exactly one JSON-RPC error (a burst of them, written in one go while slow calls fill
//! the bound), frees a slot when a call is answered, and answers every request of a burst under
//! it exactly once; `--max-line` answers an oversize line with one error and keeps serving.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

/// Requests written in one burst.
const BURST: usize = 200;

/// One `tools/call echo` line per id, written to connect's stdin in one write.
fn burst(h: &mut Host, ids: std::ops::Range<usize>) {
    let mut buf = Vec::new();
    for id in ids {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": modern_call_params("echo", json!({"text": format!("b{id}")}))});
        writeln!(buf, "{msg}").unwrap();
    }
    h.send_raw(&buf);
}

/// Read answers until every id of `ids` has one, then a little longer: the answers by id (a
/// second answer to an id fails the test) and the messages that are not answers to `ids`.
fn answers(h: &mut Host, ids: std::ops::Range<usize>) -> (HashMap<usize, Value>, Vec<Value>) {
    let want = ids.len();
    let mut got = HashMap::new();
    let mut others = Vec::new();
    let mut take = |m: Value, got: &mut HashMap<usize, Value>| {
        let id = m["id"].as_u64().and_then(|i| usize::try_from(i).ok());
        match id.filter(|i| ids.contains(i) && m.get("method").is_none()) {
            Some(id) => assert!(got.insert(id, m).is_none(), "two answers to id {id}"),
            None => others.push(m),
        }
    };
    let deadline = std::time::Instant::now() + T;
    while got.len() < want {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {want} answers",
            got.len()
        );
        for m in h.drain(Duration::from_millis(100)) {
            take(m, &mut got);
        }
    }
    for m in h.drain(Duration::from_millis(300)) {
        take(m, &mut got);
    }
    (got, others)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_inflight_refuses_each_request_over_it_once_and_frees_on_answer() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &["--max-inflight", "2"]);
    let slow = |s: u64| modern_call_params("slow", json!({"seconds": s, "steps": 1}));
    h.request(json!(1), "tools/call", slow(30));
    h.request(json!(2), "tools/call", slow(2));
    serve.log.expect_count("demo: slow started", 2, T).await;

    // The bound is full: every request of the burst is refused, each exactly once.
    burst(&mut h, 100..100 + BURST);
    let (got, others) = answers(&mut h, 100..100 + BURST);
    for (id, m) in &got {
        assert_eq!(m["error"]["code"], -32000, "id {id}: {m}");
        let msg = m["error"]["message"].as_str().unwrap();
        assert!(msg.contains("too many requests in flight"), "{m}");
    }
    assert_eq!(
        serve.log.count("demo: slow started"),
        2,
        "a refused call reached the remote"
    );
    assert!(h.log.find("(--max-inflight)").is_some(), "{}", h.log.dump());

    // Call 2 is answered: its slot is free before its answer is written.
    let r = match others.into_iter().find(|m| m["id"] == 2) {
        Some(r) => r,
        None => h.response(&json!(2), T),
    };
    assert!(r.get("result").is_some(), "{r}");
    h.request(
        json!(3),
        "tools/call",
        modern_call_params("echo", json!({"text": "after"})),
    );
    let r = h.response(&json!(3), T);
    assert_eq!(text(&r), "after", "{r}");
    assert!(h.alive());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_under_the_bound_gets_one_answer_per_request() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &["--max-inflight", "4096"]);
    burst(&mut h, 0..BURST);
    let (got, others) = answers(&mut h, 0..BURST);
    assert!(others.iter().all(|m| m.get("id").is_none()), "{others:?}");
    for (id, m) in &got {
        assert_eq!(text(m), format!("b{id}"), "{m}");
    }
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_line_answers_an_oversize_line_once_and_keeps_serving() {
    let serve = Bridge::demo(&[]).await;
    let mut h = Host::start(&serve.url, &["--max-line", "1KiB"]);
    h.request(
        json!(1),
        "tools/call",
        modern_call_params("echo", json!({"text": "x".repeat(4096)})),
    );
    h.request(
        json!(2),
        "tools/call",
        modern_call_params("echo", json!({"text": "small"})),
    );
    let msgs = h.drain(Duration::from_secs(3));
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    let err = msgs
        .iter()
        .find(|m| m["id"].is_null())
        .expect("the oversize line's error");
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_eq!(err["error"]["message"], "message too large", "{err}");
    let ok = msgs
        .iter()
        .find(|m| m["id"] == 2)
        .expect("the next call's answer");
    assert_eq!(text(ok), "small", "{ok}");
    assert!(h.log.find("over --max-line").is_some(), "{}", h.log.dump());
    assert!(h.alive());
    h.assert_clean_stdout();
}

#[test]
fn max_inflight_zero_is_a_usage_error() {
    let out = std::process::Command::new(bin())
        .args(["connect", "http://127.0.0.1:9/mcp", "--max-inflight", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}
