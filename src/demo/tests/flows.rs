//! Client input (sampling, elicitation, roots) in both eras, and 2026 listens.

use super::*;

#[tokio::test]
async fn legacy_sample_round_trip() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({ "sampling": {}, "roots": {} })).await;
    c.send(call(json!(1), "sample", json!({ "prompt": "say hi" })))
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "sampling/createMessage");
    let sid = ask["id"].as_str().expect("string id").to_owned();
    assert!(sid.starts_with("demo-"), "{sid}");
    assert_eq!(ask["params"]["messages"][0]["role"], "user");
    assert_eq!(ask["params"]["messages"][0]["content"]["text"], "say hi");
    assert_eq!(ask["params"]["maxTokens"], 100);

    // The server keeps serving while it waits.
    let echo = c.call(call(json!(2), "echo", json!({ "text": "x" }))).await;
    assert_eq!(echo["id"], 2);

    c.send(json!({ "jsonrpc": "2.0", "id": sid, "result": {
        "role": "assistant", "content": { "type": "text", "text": "hello" }, "model": "m" } }))
        .await;
    let done = c.recv().await;
    assert_eq!(done["id"], 1);
    assert_eq!(text_of(&done), "sampled: hello");
    assert!(done["result"].get("isError").is_none());

    // A client error becomes an isError result; ids are not reused.
    c.send(call(json!(3), "sample", json!({ "prompt": "again" })))
        .await;
    let ask2 = c.recv().await;
    assert_ne!(ask2["id"].as_str(), Some(sid.as_str()));
    c.send(json!({ "jsonrpc": "2.0", "id": ask2["id"],
                   "error": { "code": -1, "message": "user said no" } }))
        .await;
    let failed = c.recv().await;
    assert_eq!(failed["result"]["isError"], true);
    assert!(text_of(&failed).contains("user said no"));

    // roots goes the same way.
    c.send(call(json!(4), "roots", json!({}))).await;
    let ask3 = c.recv().await;
    assert_eq!(ask3["method"], "roots/list");
    c.send(json!({ "jsonrpc": "2.0", "id": ask3["id"], "result": {
        "roots": [{ "uri": "file:///a" }, { "uri": "file:///b" }] } }))
        .await;
    assert!(text_of(&c.recv().await).contains("file:///a,file:///b"));

    // No elicitation capability was declared.
    let no_cap = c
        .call(call(json!(5), "elicit", json!({ "message": "name?" })))
        .await;
    assert_eq!(no_cap["result"]["isError"], true);
    assert_eq!(text_of(&no_cap), "client lacks elicitation");

    // Cancelling a call that waits on the client cancels our request too.
    c.send(call(json!(6), "sample", json!({ "prompt": "never" })))
        .await;
    let ask4 = c.recv().await;
    c.send(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": { "requestId": 6 } }),
    )
    .await;
    let cancel = c.recv().await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], ask4["id"]);
    c.expect_silence(Duration::from_millis(200)).await;

    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn legacy_sample_without_capability() {
    let mut c = Client::start(DemoMode::Dual);
    initialize(&mut c, json!({})).await;
    let r = c
        .call(call(json!(1), "sample", json!({ "prompt": "p" })))
        .await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(text_of(&r), "client lacks sampling");
    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn modern_sample_input_required_round_trip() {
    let mut c = Client::start(DemoMode::Dual);
    let caps = json!({ "sampling": {} });
    let first = c
        .call(modern_call(
            json!(1),
            "sample",
            json!({ "prompt": "hi" }),
            caps.clone(),
        ))
        .await;
    let r = &first["result"];
    assert_eq!(r["resultType"], "input_required", "{first}");
    assert_eq!(r["inputRequests"]["s1"]["method"], "sampling/createMessage");
    assert_eq!(
        r["inputRequests"]["s1"]["params"]["messages"][0]["content"]["text"],
        "hi"
    );
    let state = r["requestState"].as_str().expect("requestState").to_owned();

    let mut retry = modern_call(json!(2), "sample", json!({ "prompt": "hi" }), caps.clone());
    retry["params"]["inputResponses"] = json!({ "s1": {
        "role": "assistant", "content": { "type": "text", "text": "hey" }, "model": "m" } });
    retry["params"]["requestState"] = json!(state);
    let done = c.call(retry).await;
    assert_eq!(done["id"], 2);
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(text_of(&done), "sampled: hey");

    // Forged state is refused.
    let mut forged = modern_call(json!(3), "sample", json!({ "prompt": "hi" }), caps);
    forged["params"]["inputResponses"] =
        json!({ "s1": { "content": { "type": "text", "text": "x" } } });
    forged["params"]["requestState"] = json!("garbage");
    assert_eq!(c.call(forged).await["error"]["code"], -32602);

    // Without the capability: -32021.
    let missing = c
        .call(modern_call(
            json!(4),
            "sample",
            json!({ "prompt": "hi" }),
            json!({}),
        ))
        .await;
    assert_eq!(missing["error"]["code"], -32021);
    assert_eq!(
        missing["error"]["data"],
        json!({ "requiredCapabilities": { "sampling": {} } })
    );

    // Elicitation works the same way, and nothing is ever sent as a request.
    let caps = json!({ "elicitation": {} });
    let first = c
        .call(modern_call(
            json!(5),
            "elicit",
            json!({ "message": "name?" }),
            caps.clone(),
        ))
        .await;
    let req = &first["result"]["inputRequests"]["e1"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["mode"], "form");
    assert_eq!(
        req["params"]["requestedSchema"]["required"],
        json!(["name"])
    );
    let mut retry = modern_call(json!(6), "elicit", json!({ "message": "name?" }), caps);
    retry["params"]["inputResponses"] =
        json!({ "e1": { "action": "accept", "content": { "name": "Ada" } } });
    retry["params"]["requestState"] = first["result"]["requestState"].clone();
    let done = c.call(retry).await;
    assert_eq!(
        text_of(&done),
        "elicited: action=accept content={\"name\":\"Ada\"}"
    );

    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn modern_listen_gets_tagged_list_changed() {
    let mut c = Client::start(DemoMode::Dual);
    let ack = c
        .call(json!({ "jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen", "params": {
            "_meta": modern_meta(json!({})),
            "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["demo://x"] } } }))
        .await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({ "toolsListChanged": true })
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );

    let n = c
        .call(modern_call(
            json!(1),
            "notify",
            json!({ "kind": "tools" }),
            json!({}),
        ))
        .await;
    assert_eq!(n["method"], "notifications/tools/list_changed");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "L"
    );
    assert_eq!(text_of(&c.recv().await), "ok");
    // Not subscribed to prompts: only the answer.
    let r = c
        .call(modern_call(
            json!(2),
            "notify",
            json!({ "kind": "prompts" }),
            json!({}),
        ))
        .await;
    assert_eq!(text_of(&r), "ok");

    c.send(
        json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": { "requestId": "L" } }),
    )
    .await;
    let r = c
        .call(modern_call(
            json!(3),
            "notify",
            json!({ "kind": "tools" }),
            json!({}),
        ))
        .await;
    assert_eq!(text_of(&r), "ok");
    c.expect_silence(Duration::from_millis(100)).await;
    c.close().await.expect("clean shutdown");
}
