//! Elicitation in both eras, step by step, for the attribution and pool tests: a 2026
//! `elicit` parked as `input_required` and its retry; a 2025 session that declared
//! elicitation, asked on its call's SSE stream, and its answer.

use std::time::Duration;

use serde_json::{json, Value};

use super::bridge::Bridge;
use super::http::*;

const T: Duration = Duration::from_secs(20);

/// A 2026 `elicit` of `message` from a caller that declared elicitation.
pub fn elicit_2026(id: Value, message: &str) -> Value {
    modern_request(
        id,
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": message},
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    )
}

/// A 2026 `elicit` answered `input_required`: (its input key, its `requestState`).
pub async fn park_2026(
    c: &reqwest::Client,
    url: &str,
    id: Value,
    message: &str,
) -> (String, String) {
    let r = post_modern(c, url, &elicit_2026(id, message)).await;
    assert_eq!(r.status, 200, "{r:?}");
    let res = r.result();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let key = res["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_else(|| panic!("no inputRequests: {res}"));
    let state = res["requestState"].as_str().unwrap().to_owned();
    (key, state)
}

/// The retry of a parked `elicit` that accepts with `name`: the tool's final text.
pub async fn retry_2026(
    c: &reqwest::Client,
    url: &str,
    id: Value,
    message: &str,
    (key, state): (String, String),
    name: &str,
) -> String {
    let body = modern_request(
        id,
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": message},
               "inputResponses": {key: {"action": "accept", "content": {"name": name}}},
               "requestState": state,
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let r = post_modern(c, url, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
    r.text()
}

pub async fn elicit_session(c: &reqwest::Client, url: &str) -> Session {
    Session::open_with_caps(c, url, json!({"elicitation": {}})).await
}

/// A 2025 session's `elicit` on an SSE stream, up to the child's question.
pub async fn ask_2025(b: &Bridge, s: &Session, id: &str) -> (SseReader, Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "elicit", "arguments": {"message": id}}});
    let mut sse = s.stream(&body).await;
    let req = sse
        .next(T)
        .await
        .unwrap_or_else(|| panic!("{id}: stream ended; log:\n{}", b.log.dump()));
    assert_eq!(req["method"], "elicitation/create", "{id}: {req}");
    assert_eq!(
        req["params"]["message"], id,
        "{id} was asked another's question: {req}"
    );
    (sse, req)
}

/// Answer the child's question `req` with `name`; the call's final text.
pub async fn answer_2025(
    b: &Bridge,
    s: &Session,
    mut sse: SseReader,
    req: &Value,
    name: &str,
) -> String {
    let reply = json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"action": "accept", "content": {"name": name}}});
    assert_eq!(s.post(&reply).await.status, 202);
    let fin = sse
        .next(T)
        .await
        .unwrap_or_else(|| panic!("no final answer; log:\n{}", b.log.dump()));
    assert!(fin.get("result").is_some(), "{fin}");
    fin["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
