//! The tools: payloads, errors, junk, slow calls with progress and cancellation, notify and log.

use super::*;

#[tokio::test]
async fn slow_reports_progress_and_can_be_cancelled() {
    let mut c = Client::start(DemoMode::Dual);
    let mut req = call(json!(1), "slow", json!({ "seconds": 0.3, "steps": 3 }));
    req["params"]["_meta"] = json!({ "progressToken": "tok-1" });
    c.send(req).await;
    for i in 1..=3 {
        let p = c.recv().await;
        assert_eq!(p["method"], "notifications/progress", "{p}");
        assert_eq!(p["params"]["progressToken"], "tok-1");
        assert_eq!(p["params"]["progress"], i);
        assert_eq!(p["params"]["total"], 3);
    }
    let done = c.recv().await;
    assert_eq!(done["id"], 1);
    assert_eq!(text_of(&done), "done");

    // A modern slow call with an integer token, cancelled after the first step.
    let mut req = modern_call(
        json!("slow-2"),
        "slow",
        json!({ "seconds": 20, "steps": 200 }),
        json!({}),
    );
    req["params"]["_meta"]["progressToken"] = json!(7);
    c.send(req).await;
    let p = c.recv().await;
    assert_eq!(p["params"]["progressToken"], 7);
    c.send(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": { "requestId": "slow-2", "reason": "test" } }),
    )
    .await;
    // Other requests are still served; the slow call sends nothing more
    // (a progress notification already in flight may still arrive).
    c.send(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
        .await;
    loop {
        let m = c.recv().await;
        if m["id"] == 3 {
            break;
        }
        assert_eq!(m["method"], "notifications/progress", "{m}");
    }
    c.expect_silence(Duration::from_millis(400)).await;

    // Concurrency: a slow call does not hold up an echo.
    c.send(call(json!(4), "slow", json!({ "seconds": 10, "steps": 0 })))
        .await;
    let echo = c
        .call(call(json!(5), "echo", json!({ "text": "fast" })))
        .await;
    assert_eq!(echo["id"], 5);
    // Closing the input abandons the slow call promptly.
    c.close().await.expect("clean shutdown");
}

/// bytes, fail, error, lookup: answers of a given size, tool errors, JSON-RPC errors.
#[tokio::test]
async fn payload_and_error_tools() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({})).await;

    let bytes = c
        .call(call(json!(1), "bytes", json!({ "n": 100_000 })))
        .await;
    let text = text_of(&bytes);
    assert_eq!(text.len(), 100_000);
    assert!(text.bytes().all(|b| b == b'x'));
    let modern_bytes = c
        .call(modern_call(json!(2), "bytes", json!({ "n": 0 }), json!({})))
        .await;
    assert_eq!(text_of(&modern_bytes), "");
    assert_eq!(modern_bytes["result"]["resultType"], "complete");

    let fail = c
        .call(call(json!(3), "fail", json!({ "message": "nope" })))
        .await;
    assert_eq!(fail["result"]["isError"], true);
    assert_eq!(text_of(&fail), "nope");

    let err = c
        .call(call(
            json!(4),
            "error",
            json!({ "code": -32000, "message": "custom" }),
        ))
        .await;
    assert_eq!(err["error"], json!({ "code": -32000, "message": "custom" }));
    let err = c.call(call(json!(5), "error", json!({}))).await;
    assert_eq!(err["error"]["code"], -32603);

    let lookup = c
        .call(call(
            json!(6),
            "lookup",
            json!({ "region": "eu-west", "id": 42 }),
        ))
        .await;
    assert_eq!(text_of(&lookup), "region=eu-west id=42");

    c.close().await.expect("clean shutdown");
}

/// junk: the bad line comes first, then the normal answer.
#[tokio::test]
async fn junk_writes_one_bad_line_then_answers() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({})).await;

    let w = c.input.as_mut().expect("open");
    let req = call(json!(7), "junk", json!({ "kind": "malformed" })).to_string();
    w.write_all(format!("{req}\n").as_bytes())
        .await
        .expect("write");
    let bad = c.output.next_line().await.expect("read").expect("line");
    assert_eq!(bad, "this is not json");
    assert_eq!(text_of(&c.recv().await), "ok");
    c.send(call(
        json!(8),
        "junk",
        json!({ "kind": "oversize", "size": 5000 }),
    ))
    .await;
    let big = c.output.next_line().await.expect("read").expect("line");
    assert_eq!(big.len(), 5000);
    assert_eq!(text_of(&c.recv().await), "ok");
    let stray = c
        .call(call(json!(9), "junk", json!({ "kind": "unknown_id" })))
        .await;
    assert_eq!(stray["id"], 987654321);
    assert_eq!(text_of(&c.recv().await), "ok");

    c.close().await.expect("clean shutdown");
}

/// notify and log for a 2025 caller, then log for 2026 callers.
#[tokio::test]
async fn notify_and_log() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({})).await;

    // notify (legacy): untagged list_changed.
    let n = c
        .call(call(json!(10), "notify", json!({ "kind": "prompts" })))
        .await;
    assert_eq!(n["method"], "notifications/prompts/list_changed");
    assert_eq!(text_of(&c.recv().await), "ok");

    // log (legacy): everything by default, then filtered by setLevel.
    let m = c
        .call(call(
            json!(11),
            "log",
            json!({ "level": "debug", "message": "d" }),
        ))
        .await;
    assert_eq!(m["method"], "notifications/message");
    assert_eq!(
        m["params"],
        json!({ "level": "debug", "logger": "demo", "data": "d" })
    );
    assert_eq!(text_of(&c.recv().await), "ok");
    let set = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 12, "method": "logging/setLevel",
                      "params": { "level": "warning" } }),
        )
        .await;
    assert_eq!(set["result"], json!({}));
    let quiet = c
        .call(call(
            json!(13),
            "log",
            json!({ "level": "info", "message": "i" }),
        ))
        .await;
    assert_eq!(text_of(&quiet), "ok");
    let loud = c
        .call(call(
            json!(14),
            "log",
            json!({ "level": "error", "message": "e" }),
        ))
        .await;
    assert_eq!(loud["params"]["level"], "error");
    assert_eq!(text_of(&c.recv().await), "ok");

    // log (modern): only with a logLevel in _meta.
    let silent = c
        .call(modern_call(
            json!(15),
            "log",
            json!({ "level": "error", "message": "x" }),
            json!({}),
        ))
        .await;
    assert_eq!(text_of(&silent), "ok");
    let mut req = modern_call(
        json!(16),
        "log",
        json!({ "level": "error", "message": "y" }),
        json!({}),
    );
    req["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let m = c.call(req).await;
    assert_eq!(m["params"]["data"], "y");
    assert_eq!(c.recv().await["result"]["resultType"], "complete");

    c.close().await.expect("clean shutdown");
}

/// The catalog methods for a 2025 caller.
#[tokio::test]
async fn legacy_prompts_resources_and_completion() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({})).await;

    let prompt = c
        .call(json!({ "jsonrpc": "2.0", "id": 17, "method": "prompts/get",
                      "params": { "name": "greet", "arguments": { "name": "Ada" } } }))
        .await;
    assert_eq!(
        prompt["result"]["messages"][0]["content"]["text"],
        "Hello, Ada!"
    );
    let unknown = c
        .call(json!({ "jsonrpc": "2.0", "id": 18, "method": "prompts/get",
                      "params": { "name": "nope" } }))
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    let missing = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 19, "method": "resources/read",
                      "params": { "uri": "demo://none" } }),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32002);
    let completion = c
        .call(json!({ "jsonrpc": "2.0", "id": 20, "method": "completion/complete", "params": {} }))
        .await;
    assert_eq!(completion["result"]["completion"]["hasMore"], false);
    for (id, method) in [(21, "resources/subscribe"), (22, "resources/unsubscribe")] {
        let r = c
            .call(json!({ "jsonrpc": "2.0", "id": id, "method": method,
                          "params": { "uri": "demo://readme" } }))
            .await;
        assert_eq!(r["result"], json!({}));
    }
    c.close().await.expect("clean shutdown");
}
