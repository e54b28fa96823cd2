//! `mcp-bridge connect` translating server-initiated flows between eras, against
//! `mcp-bridge serve --demo`:
//! - a 2026 host and a 2025 remote: the remote's elicitation/sampling requests become
//!   `input_required`, the host's retry carries the answers back (forged and replayed
//!   `requestState` get -32602, undeclared capabilities are refused to the remote);
//! - a 2025 host and a 2026 remote: `input_required` becomes real requests to the host
//!   (`"mcpb-N"` ids, the same scheme as serve), and the remote is retried with the answers.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

fn modern_params(tool: &str, args: Value, caps: Value) -> Value {
    json!({"name": tool, "arguments": args,
           "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": caps}})
}

/// A 2026 host's call that needs input: the `input_required` result, checked, with its
/// single input request (key, method, params) and state.
fn input_required(r: &Value) -> (String, String, Value, String) {
    let res = &r["result"];
    assert_eq!(res["resultType"], "input_required", "{r}");
    let reqs = res["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(reqs.len(), 1, "{r}");
    let (k, v) = reqs.iter().next().unwrap();
    let state = res["requestState"].as_str().expect("requestState");
    assert!(state.starts_with("mcpb1."), "{r}");
    (
        k.clone(),
        v["method"].as_str().unwrap_or_default().to_owned(),
        v["params"].clone(),
        state.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_host_answers_a_2025_remote_through_input_required() {
    let serve = Bridge::demo(&["--demo-era", "legacy"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2025-11-25"]);
    let caps = json!({"elicitation": {"form": {}}, "sampling": {}});

    // Elicitation.
    let first = modern_params("elicit", json!({"message": "your name?"}), caps.clone());
    h.request(json!(1), "tools/call", first.clone());
    let r = h.response(&json!(1), T);
    let (key, method, params, state) = input_required(&r);
    assert_eq!(method, "elicitation/create", "{r}");
    assert!(params.to_string().contains("your name?"), "{r}");
    let mut retry = first.clone();
    retry["inputResponses"] =
        json!({ key.clone(): {"action": "accept", "content": {"name": "Ada"}} });
    retry["requestState"] = json!(state);
    h.request(json!("retry-1"), "tools/call", retry.clone());
    let done = h.response(&json!("retry-1"), T);
    assert_eq!(
        text(&done),
        r#"elicited: action=accept content={"name":"Ada"}"#,
        "{done}"
    );
    // The same state again: the call is no longer waiting.
    h.request(json!("replay"), "tools/call", retry);
    let e = h.response(&json!("replay"), T);
    assert_eq!(e["error"]["code"], -32602, "{e}");

    // Sampling.
    let first = modern_params("sample", json!({"prompt": "say hi"}), caps.clone());
    h.request(json!(2), "tools/call", first.clone());
    let r = h.response(&json!(2), T);
    let (key, method, _, state) = input_required(&r);
    assert_eq!(method, "sampling/createMessage", "{r}");
    let mut retry = first;
    retry["inputResponses"] = json!({ key: {"role": "assistant",
        "content": {"type": "text", "text": "hello"}, "model": "test-model"} });
    retry["requestState"] = json!(state);
    h.request(json!(3), "tools/call", retry);
    assert_eq!(text(&h.response(&json!(3), T)), "sampled: hello");

    // A forged state (ours in shape, not signed by this bridge).
    let mut forged = modern_params("elicit", json!({"message": "x"}), caps);
    forged["inputResponses"] = json!({"input1": {"action": "decline"}});
    forged["requestState"] = json!("mcpb1.1.1.9999999999.AAAA.AAAA");
    h.request(json!(4), "tools/call", forged);
    let e = h.response(&json!(4), T);
    assert_eq!(e["error"]["code"], -32602, "{e}");

    // Undeclared capability: the remote gets -32601, the tool reports the failure.
    h.request(
        json!(5),
        "tools/call",
        modern_params("sample", json!({"prompt": "p"}), json!({})),
    );
    let r = h.response(&json!(5), T);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"].get("inputRequests").is_none(), "{r}");

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_host_answers_a_2026_remote_as_real_requests() {
    let serve = Bridge::demo(&["--demo-era", "modern"]).await;
    let mut h = Host::start(&serve.url, &["--protocol", "2026-07-28"]);
    h.initialize(
        "2025-11-25",
        json!({"elicitation": {"form": {}}, "sampling": {}}),
    );

    // Elicitation.
    h.request(
        json!(1),
        "tools/call",
        call_params("elicit", json!({"message": "your name?"})),
    );
    let req = h.wait_for("elicitation/create request", T, |m| {
        m["method"] == "elicitation/create" && m.get("id").is_some()
    });
    let rid = req["id"].clone();
    assert!(
        rid.as_str().is_some_and(|s| s.starts_with("mcpb-")),
        "{req}"
    );
    assert!(req["params"].to_string().contains("your name?"), "{req}");
    h.send(&json!({"jsonrpc": "2.0", "id": rid,
                   "result": {"action": "accept", "content": {"name": "Ada"}}}));
    let done = h.response(&json!(1), T);
    assert_eq!(
        text(&done),
        r#"elicited: action=accept content={"name":"Ada"}"#,
        "{done}"
    );
    assert!(done["result"].get("resultType").is_none(), "{done}");

    // Sampling.
    h.request(
        json!(2),
        "tools/call",
        call_params("sample", json!({"prompt": "say hi"})),
    );
    let req = h.wait_for("sampling/createMessage request", T, |m| {
        m["method"] == "sampling/createMessage" && m.get("id").is_some()
    });
    let rid2 = req["id"].clone();
    assert!(
        rid2.as_str().is_some_and(|s| s.starts_with("mcpb-")) && rid2 != rid,
        "{req}"
    );
    h.send(
        &json!({"jsonrpc": "2.0", "id": rid2, "result": {"role": "assistant",
        "content": {"type": "text", "text": "hello"}, "model": "test-model"}}),
    );
    assert_eq!(text(&h.response(&json!(2), T)), "sampled: hello");

    // The host answers with an error: the call fails with it, cleanly.
    h.request(
        json!(3),
        "tools/call",
        call_params("elicit", json!({"message": "again?"})),
    );
    let req = h.wait_for("elicitation/create request", T, |m| {
        m["method"] == "elicitation/create" && m.get("id").is_some()
    });
    h.send(&json!({"jsonrpc": "2.0", "id": req["id"],
                   "error": {"code": -1, "message": "user closed the dialog"}}));
    let e = h.response(&json!(3), T);
    assert_eq!(e["error"]["code"], -32603, "{e}");

    h.close_stdin();
    assert!(h.wait_exit(Duration::from_secs(10)).is_some());
    h.assert_clean_stdout();
}

/// The capability gate serve applies to a 2025 session holds for a 2025 host too: a remote
/// that asks for something the host did not declare at `initialize` (here: sampling, from a
/// host that declared nothing) never reaches the host. A 2026 remote's `input_required` fails
/// the call; a 2025 remote's request is refused to the remote with -32601.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_capability_is_never_asked_of_a_2025_host() {
    let sampling = json!({"messages": [], "maxTokens": 5});
    // A 2026 remote that asks for sampling whatever the request declared.
    let ask = sampling.clone();
    let modern = fake_remote_with(RemoteEra::Modern, move |m, _| {
        (m["method"] == "tools/call").then(|| {
            rpc_result(
                &m["id"],
                json!({"resultType": "input_required",
                "requestState": "remote-state",
                "inputRequests": {"s": {"method": "sampling/createMessage", "params": ask}}}),
            )
        })
    })
    .await;
    let mut h = Host::start(&modern.url, &["--protocol", "2026-07-28"]);
    h.initialize("2025-11-25", json!({}));
    h.request(json!(1), "tools/call", call_params("anything", json!({})));
    let r = h.response(&json!(1), T);
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("did not declare"), "{r}");
    let asked: Vec<Value> = h.drain(Duration::from_millis(300));
    assert!(
        !asked
            .iter()
            .any(|m| m.get("method").is_some() && m.get("id").is_some()),
        "the host was asked: {asked:?}"
    );

    // A 2025 remote that sends sampling/createMessage on the call's stream, then answers.
    let legacy = fake_remote_with(RemoteEra::Legacy, move |m, _| {
        (m["method"] == "tools/call").then(|| {
            let ask = json!({"jsonrpc": "2.0", "id": "s1",
                "method": "sampling/createMessage", "params": sampling});
            let done = json!({"jsonrpc": "2.0", "id": m["id"],
                "result": {"content": [{"type": "text", "text": "done"}]}});
            let sse = format!("data: {ask}\n\ndata: {done}\n\n");
            (200, "text/event-stream", sse)
        })
    })
    .await;
    let mut h = Host::start(&legacy.url, &["--protocol", "2025-11-25"]);
    h.initialize("2025-11-25", json!({}));
    h.request(json!(1), "tools/call", call_params("anything", json!({})));
    assert_eq!(text(&h.response(&json!(1), T)), "done");
    let refusal = legacy
        .wait_for(0, |m| m["id"] == "s1" && m.get("method").is_none(), T)
        .await
        .expect("no answer for s1 reached the remote");
    assert_eq!(refusal["error"]["code"], -32601, "{refusal}");
    let asked: Vec<Value> = h.drain(Duration::from_millis(300));
    assert!(
        !asked
            .iter()
            .any(|m| m["method"] == "sampling/createMessage"),
        "the host was asked: {asked:?}"
    );
    h.assert_clean_stdout();
}

/// The same gate on serve's HTTP face (one rule for both faces, `era::rounds`): a 2025
/// session that declared nothing, in front of a 2026 remote that asks for sampling whatever
/// the request declared (`serve --upstream`), gets an error naming the undeclared capability
/// and is asked nothing: the call's only message is its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_capability_is_never_asked_of_a_2025_session_of_serve() {
    let ask = json!({"messages": [], "maxTokens": 5});
    let modern = fake_remote_with(RemoteEra::Modern, move |m, _| {
        (m["method"] == "tools/call").then(|| {
            rpc_result(
                &m["id"],
                json!({"resultType": "input_required",
                "requestState": "remote-state",
                "inputRequests": {"s": {"method": "sampling/createMessage", "params": ask}}}),
            )
        })
    })
    .await;
    let url = modern.url.clone();
    let b = Bridge::serve(&["--port", "0", "--upstream", &url]).await;
    let c = client();
    let s = Session::open_with_caps(&c, &b.url, json!({})).await;
    let r = s
        .request(
            json!("c1"),
            "tools/call",
            json!({"name": "anything", "arguments": {}}),
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.messages.len(),
        1,
        "the client was asked: {:?}",
        r.messages
    );
    let msg = r.last()["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("did not declare"), "{:?}", r.messages);
}

/// A 2026 host's requests for methods the 2026 revision removed are refused by connect
/// itself, with the exact "removed in 2026-07-28" error, whatever the remote's era: none of
/// them reaches the remote (which records every message it gets), and the host still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_host_gets_method_not_found_for_removed_methods() {
    for era in [RemoteEra::Legacy, RemoteEra::Modern] {
        let remote = fake_remote(era).await;
        let mut h = Host::start(&remote.url, &[]);
        // connect's own handshake with the remote is over once a first call is answered.
        h.request(
            json!("first"),
            "tools/list",
            json!({"_meta": modern_meta()}),
        );
        let r = h.response(&json!("first"), T);
        assert!(r["result"]["tools"].is_array(), "{era:?}: {r}");
        let before = remote.methods().len();
        let removed = [
            (
                "initialize",
                json!({"protocolVersion": "2026-07-28", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}),
            ),
            ("ping", json!({})),
            ("logging/setLevel", json!({"level": "debug"})),
            ("resources/subscribe", json!({"uri": "demo://readme"})),
            ("resources/unsubscribe", json!({"uri": "demo://readme"})),
        ];
        for (i, (method, mut params)) in removed.into_iter().enumerate() {
            params["_meta"] = modern_meta();
            h.request(json!(i), method, params);
            let r = h.response(&json!(i), T);
            assert_eq!(r["error"]["code"], -32601, "remote {era:?}: {method}: {r}");
            assert_eq!(
                r["error"]["message"],
                format!("Method not found: {method} was removed in 2026-07-28"),
                "remote {era:?}: {r}"
            );
        }
        // Still a working 2026 host afterwards, and the call is the one message since.
        h.request(
            json!("ok"),
            "tools/call",
            modern_call_params("echo", json!({"text": "x"})),
        );
        assert_eq!(text(&h.response(&json!("ok"), T)), "x");
        let since = remote.methods().split_off(before);
        assert_eq!(
            since,
            vec!["tools/call"],
            "{era:?}: what reached the remote"
        );
        h.close_stdin();
        assert!(h.wait_exit(Duration::from_secs(10)).is_some());
        h.assert_clean_stdout();
    }
}

/// A 2026 result without `resultType` (which a receiver must read as `"complete"`) reaches a
/// 2026 caller with `"resultType": "complete"` on both faces: connect's host and a caller of
/// `serve --upstream`; a 2025 caller of the same remote gets no `resultType`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_result_without_result_type_is_complete_on_both_faces() {
    let remote = fake_remote_with(RemoteEra::Modern, |m, _| {
        (m["method"] == "tools/call").then(|| {
            let text = m["params"]["arguments"]["text"].clone();
            rpc_result(
                &m["id"],
                json!({"content": [{"type": "text", "text": text}]}),
            )
        })
    })
    .await;
    let args = json!({"text": "bare"});

    let mut h = Host::start(&remote.url, &["--protocol", "2026-07-28"]);
    h.request(
        json!(1),
        "tools/call",
        modern_params("echo", args.clone(), json!({})),
    );
    let r = h.response(&json!(1), T);
    assert_eq!(r["result"]["resultType"], "complete", "connect: {r}");
    assert_eq!(r["result"]["content"][0]["text"], "bare", "connect: {r}");
    drop(h);

    let b = Bridge::serve(&["--port", "0", "--upstream", &remote.url]).await;
    let c = client();
    let r = call_modern(&c, &b.url, json!(2), "echo", args.clone()).await;
    assert_eq!(r.result()["resultType"], "complete", "serve: {r:?}");
    assert_eq!(r.text(), "bare", "serve: {r:?}");
    let s = Session::open(&c, &b.url).await;
    let r = s.call(json!(3), "echo", args).await;
    assert_eq!(r.text(), "bare", "serve, 2025: {r:?}");
    assert!(r.result().get("resultType").is_none(), "serve, 2025: {r:?}");
}
