//! A 2026 caller's input rounds in front of a 2025 child that asks the 2025 way
//! (`tests/fixtures/conformance_server.py`): server requests it sends at once are one
//! `input_required` round however they are spaced, and a request for a capability the caller
//! did not declare is refused to the child as `-32021` naming it, so a child that fails its
//! call with that error answers the caller as a 2026 server would (HTTP 400).

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use serde_json::{json, Value};
use support::*;

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/conformance_server.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

async fn serve_fixture() -> Bridge {
    let f = fixture();
    Bridge::serve(&["--port", "0", "--", "python3", f.as_str()]).await
}

fn call(id: i64, tool: &str, args: Value, caps: Value, extra: Value) -> Value {
    let mut params = json!({"name": tool, "arguments": args, "_meta": {META_CAPS: caps}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    modern_request(json!(id), "tools/call", params)
}

/// The `inputResponses` for a round that asks all three things of the multiple-inputs tool
/// (checked to be exactly one of each).
fn answer_all_three(res: &Value) -> serde_json::Map<String, Value> {
    let reqs = res["inputRequests"].as_object().expect("inputRequests");
    let mut methods: Vec<&str> = reqs.values().filter_map(|v| v["method"].as_str()).collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        ["elicitation/create", "roots/list", "sampling/createMessage"],
        "{res}"
    );
    let mut answers = serde_json::Map::new();
    for (k, v) in reqs {
        let a = match v["method"].as_str().unwrap() {
            "elicitation/create" => json!({"action": "accept", "content": {"name": "Ada"}}),
            "sampling/createMessage" => json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "hi there"}}),
            _ => json!({"roots": [{"uri": "file:///srv", "name": "srv"}]}),
        };
        answers.insert(k.clone(), a);
    }
    answers
}

/// Three requests the child starts 10 ms apart (one thread each, all in flight together) are
/// one round of three `inputRequests`, not a round of one and two requests refused for want of
/// an addressee; the retry answering all three completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_of_a_2025_child_are_one_round() {
    let b = serve_fixture().await;
    let c = client();
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let tool = "test_input_required_result_multiple_inputs";
    let args = json!({"stagger_ms": 10});
    let r = post_modern(
        &c,
        &b.url,
        &call(1, tool, args.clone(), caps.clone(), json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let res = r.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let answers = answer_all_three(&res);
    let retry = call(
        2,
        tool,
        args,
        caps,
        json!({"inputResponses": answers, "requestState": res["requestState"]}),
    );
    let r = post_modern(&c, &b.url, &retry).await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
    assert_eq!(
        r.text(),
        "name=Ada, greeting=hi there, roots=file:///srv",
        "{r:?}"
    );
}

/// A tool that cannot work without sampling, called by a 2026 caller that did not declare
/// it: the child is refused with -32021 naming `sampling` and fails its call with that error,
/// which reaches the caller as HTTP 400 + -32021 with `data.requiredCapabilities`. Both ways
/// the refusal happens: the caller declared nothing (no addressee of the child's requests at
/// all), or declared another capability (its call is parked for what it declared only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_capability_is_missing_capability_for_a_2026_caller() {
    let b = serve_fixture().await;
    let c = client();
    for (i, caps) in [json!({}), json!({"elicitation": {}})]
        .into_iter()
        .enumerate()
    {
        let body = call(
            i as i64,
            "test_missing_capability",
            json!({}),
            caps.clone(),
            json!({}),
        );
        let r = post_modern(&c, &b.url, &body).await;
        assert_eq!(r.status, 400, "caps {caps}: {r:?}");
        assert_eq!(r.error_code(), -32021, "caps {caps}: {r:?}");
        assert_eq!(
            r.error()["data"]["requiredCapabilities"],
            json!({"sampling": {}}),
            "caps {caps}: {r:?}"
        );
    }
    // Declared, the same tool is one round of sampling, then its answer.
    let caps = json!({"sampling": {}});
    let r = post_modern(
        &c,
        &b.url,
        &call(
            9,
            "test_missing_capability",
            json!({}),
            caps.clone(),
            json!({}),
        ),
    )
    .await;
    let res = r.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let (key, req) = res["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(req["method"], "sampling/createMessage", "{res}");
    let answer =
        json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "hello"}});
    let retry = call(
        10,
        "test_missing_capability",
        json!({}),
        caps,
        json!({"inputResponses": {key: answer}, "requestState": res["requestState"]}),
    );
    let r = post_modern(&c, &b.url, &retry).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "Success: hello", "{r:?}");
}

/// Of two requests a 2025 child sends at once, the one the caller declared is its round and
/// the other is refused to the child (-32021), which goes on with what it got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_declared_requests_are_asked() {
    let b = serve_fixture().await;
    let c = client();
    let caps = json!({"sampling": {}});
    let tool = "test_input_required_result_capabilities";
    let r = post_modern(
        &c,
        &b.url,
        &call(1, tool, json!({}), caps.clone(), json!({})),
    )
    .await;
    let res = r.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let reqs = res["inputRequests"].as_object().unwrap();
    assert_eq!(reqs.len(), 1, "{res}");
    let (key, req) = reqs.iter().next().unwrap();
    assert_eq!(req["method"], "sampling/createMessage", "{res}");
    let answer =
        json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "x"}});
    let retry = call(
        2,
        tool,
        json!({}),
        caps,
        json!({"inputResponses": {key: answer}, "requestState": res["requestState"]}),
    );
    let r = post_modern(&c, &b.url, &retry).await;
    assert_eq!(r.text(), "answered: sampling/createMessage", "{r:?}");
}

/// The same through `connect` for a 2026 host, in front of a 2025 remote (serve publishing
/// the fixture, spoken to at 2025-11-25): the three requests come on the call's POST stream
/// 10 ms apart and are one round (`era::park::gather`, as on serve), and the retry completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_of_a_2025_remote_are_one_round_for_connect() {
    let b = serve_fixture().await;
    let mut h = Host::start(&b.url, &["--protocol", "2025-11-25"]);
    let caps = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let tool = "test_input_required_result_multiple_inputs";
    let args = json!({"stagger_ms": 10});
    let params = |extra: Value| {
        let mut p = json!({"name": tool, "arguments": args,
            "_meta": {META_PV: MODERN, META_CAPS: caps}});
        if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        p
    };
    let t = std::time::Duration::from_secs(20);
    h.request(json!(1), "tools/call", params(json!({})));
    let r = h.response(&json!(1), t);
    let res = r["result"].clone();
    assert_eq!(res["resultType"], "input_required", "{r}");
    let answers = answer_all_three(&res);
    let retry = json!({"inputResponses": answers, "requestState": res["requestState"]});
    h.request(json!(2), "tools/call", params(retry));
    let done = h.response(&json!(2), t);
    assert_eq!(
        text(&done),
        "name=Ada, greeting=hi there, roots=file:///srv",
        "{done}"
    );
    h.close_stdin();
    assert!(h.wait_exit(std::time::Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}
