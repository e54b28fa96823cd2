//! The 2026-07-28 stateless path against the real binary: header/body validation (each
//! mismatch is 400 + -32020), required `_meta` (-32602), unsupported versions (-32022),
//! unknown methods (404 + -32601), `server/discover`, and HTTP/2 prior knowledge.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use support::*;

fn lookup_body(id: i64) -> Value {
    modern_tool_call(json!(id), "lookup", json!({"region": "eu", "id": 42}))
}

/// Correct headers for `lookup {region: eu, id: 42}`.
fn lookup_headers(body: &Value) -> HeaderMap {
    let mut h = modern_headers(body);
    h.insert("mcp-param-region", hv("eu"));
    h.insert("mcp-param-item-id", hv("42"));
    h
}

fn assert_rpc_error(r: &Reply, status: u16, code: i64, id: &Value, what: &str) {
    assert_eq!(r.status, status, "{what}: {r:?}");
    assert_eq!(r.error_code(), code, "{what}: {r:?}");
    assert_eq!(&r.last()["id"], id, "{what}: error id: {r:?}");
    assert!(
        r.error()["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: no message: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_mismatch_matrix() {
    let b = Bridge::demo(&[]).await;
    let c = client();
    b.wait_ready(Duration::from_secs(20)).await;

    // The correct request works.
    let body = lookup_body(1);
    let r = post_with(&c, &b.url, lookup_headers(&body), body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "region=eu id=42");
    assert_eq!(r.result()["resultType"], "complete");

    type Edit = fn(&mut HeaderMap);
    let bad: Vec<(&str, Edit)> = vec![
        ("missing MCP-Protocol-Version", |h| {
            h.remove("mcp-protocol-version");
        }),
        ("MCP-Protocol-Version differs from _meta", |h| {
            h.insert("mcp-protocol-version", hv("2025-11-25"));
        }),
        ("missing Mcp-Method", |h| {
            h.remove("mcp-method");
        }),
        ("mismatched Mcp-Method", |h| {
            h.insert("mcp-method", hv("tools/list"));
        }),
        ("Mcp-Method differs in case", |h| {
            h.insert("mcp-method", hv("Tools/Call"));
        }),
        ("missing Mcp-Name", |h| {
            h.remove("mcp-name");
        }),
        ("mismatched Mcp-Name", |h| {
            h.insert("mcp-name", hv("echo"));
        }),
        ("Mcp-Name base64 of another name", |h| {
            // base64("echo")
            h.insert("mcp-name", hv("=?base64?ZWNobw==?="));
        }),
        ("Mcp-Name with invalid base64", |h| {
            h.insert("mcp-name", hv("=?base64?!!!?="));
        }),
        ("Mcp-Name with non-ASCII bytes", |h| {
            h.insert(
                "mcp-name",
                reqwest::header::HeaderValue::from_bytes("lookup\u{fc}".as_bytes()).unwrap(),
            );
        }),
        ("missing Mcp-Param-Region", |h| {
            h.remove("mcp-param-region");
        }),
        ("mismatched Mcp-Param-Region", |h| {
            h.insert("mcp-param-region", hv("us"));
        }),
        ("Mcp-Param-Region differs in case", |h| {
            h.insert("mcp-param-region", hv("EU"));
        }),
        ("missing Mcp-Param-Item-Id", |h| {
            h.remove("mcp-param-item-id");
        }),
        ("mismatched Mcp-Param-Item-Id", |h| {
            h.insert("mcp-param-item-id", hv("43"));
        }),
        ("non-numeric Mcp-Param-Item-Id", |h| {
            h.insert("mcp-param-item-id", hv("forty-two"));
        }),
    ];
    for (i, (what, edit)) in bad.into_iter().enumerate() {
        let id = 100 + i as i64;
        let body = lookup_body(id);
        let mut h = lookup_headers(&body);
        edit(&mut h);
        let r = post_with(&c, &b.url, h, body.to_string()).await;
        assert_rpc_error(&r, 400, -32020, &json!(id), what);
    }

    // Accepted variants: base64 name and params, numeric compare of integers, header names in
    // any case.
    type Good = fn(&mut HeaderMap);
    let good: Vec<(&str, Good)> = vec![
        ("base64 Mcp-Name", |h| {
            // base64("lookup")
            h.insert("mcp-name", hv("=?base64?bG9va3Vw?="));
        }),
        ("base64 Mcp-Param-Region", |h| {
            // base64("eu")
            h.insert("mcp-param-region", hv("=?base64?ZXU=?="));
        }),
        ("Mcp-Param-Item-Id as 42.0", |h| {
            h.insert("mcp-param-item-id", hv("42.0"));
        }),
        ("upper-case header names", |h| {
            let v = h.remove("mcp-param-region").unwrap();
            h.insert(hn("MCP-PARAM-REGION"), v);
        }),
    ];
    for (i, (what, edit)) in good.into_iter().enumerate() {
        let id = 200 + i as i64;
        let body = lookup_body(id);
        let mut h = lookup_headers(&body);
        edit(&mut h);
        let r = post_with(&c, &b.url, h, body.to_string()).await;
        assert_eq!(r.status, 200, "{what}: {r:?}");
        assert_eq!(r.text(), "region=eu id=42", "{what}");
        assert_eq!(r.last()["id"], id, "{what}");
    }

    // A non-ASCII argument value travels base64-encoded in its header.
    let body = modern_tool_call(json!(300), "lookup", json!({"region": "Zürich", "id": 7}));
    let mut h = modern_headers(&body);
    // base64("Zürich")
    h.insert("mcp-param-region", hv("=?base64?WsO8cmljaA==?="));
    h.insert("mcp-param-item-id", hv("7"));
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "region=Zürich id=7");

    // A tool name that needs base64 because it looks like the sentinel itself is compared
    // after decoding: an unknown tool then reaches the server (-32602 from the child).
    let body = modern_tool_call(json!(301), "no-such-tool", json!({}));
    let mut h = modern_headers(&body);
    // base64("no-such-tool")
    h.insert("mcp-name", hv("=?base64?bm8tc3VjaC10b29s?="));
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.error_code(), -32602, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_version_and_method_errors() {
    let b = Bridge::demo(&[]).await;
    let c = client();

    // No _meta at all, but 2026 headers: 400 + -32602.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let r = post_with(&c, &b.url, modern_headers(&body), body.to_string()).await;
    assert_rpc_error(&r, 400, -32602, &json!(1), "missing _meta");

    // No params at all.
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r = post_with(&c, &b.url, modern_headers(&body), body.to_string()).await;
    assert_rpc_error(&r, 400, -32602, &json!(2), "missing params");

    // _meta without clientCapabilities.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
        "params": {"_meta": {META_PV: MODERN}}});
    let r = post_with(&c, &b.url, modern_headers(&body), body.to_string()).await;
    assert_rpc_error(&r, 400, -32602, &json!(3), "missing clientCapabilities");

    // Unsupported version in both header and _meta: 400 + -32022 with supported/requested.
    let body = json!({"jsonrpc": "2.0", "id": "v", "method": "tools/list",
        "params": {"_meta": {META_PV: "2099-01-01", META_CAPS: {}}}});
    let mut h = modern_headers(&body);
    h.insert("mcp-protocol-version", hv("2099-01-01"));
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_rpc_error(&r, 400, -32022, &json!("v"), "unsupported version");
    let data = &r.error()["data"];
    assert_eq!(data["requested"], "2099-01-01", "{data}");
    let supported: Vec<&str> = data["supported"]
        .as_array()
        .unwrap_or_else(|| panic!("data.supported: {data}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(supported.contains(&MODERN), "{supported:?}");

    // Unknown method: 404 + -32601 (the JSON-RPC body tells it from a plain 404).
    let body = modern_request(json!(5), "no/such/method", json!({}));
    let r = post_modern(&c, &b.url, &body).await;
    assert_rpc_error(&r, 404, -32601, &json!(5), "unknown method");

    // A malformed body: 400 + -32700.
    let r = post_with(&c, &b.url, modern_headers(&body), "{not json").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), -32700, "{r:?}");

    // A batch, with the headers its one message would be valid with, so the batch is the
    // only thing wrong: 400 + -32600 saying so.
    let one = modern_request(json!(6), "tools/list", json!({}));
    let batch = json!([one]);
    let r = post_with(&c, &b.url, modern_headers(&one), batch.to_string()).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), -32600, "{r:?}");
    assert_eq!(
        r.error()["message"],
        "JSON-RPC batches are not supported by mcp-bridge: send one message per POST",
        "{r:?}"
    );

    // Wrong Content-Type: 415.
    let body = modern_request(json!(7), "tools/list", json!({}));
    let mut h = modern_headers(&body);
    h.insert("content-type", hv("text/plain"));
    let r = post_with(&c, &b.url, h, body.to_string()).await;
    assert_eq!(r.status, 415, "{r:?}");

    // A GET without a session (2026 has no GET stream) and other methods: 405.
    let r = c.put(&b.url).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_and_lists() {
    let b = Bridge::demo(&[]).await;
    let c = client();

    let r = post_modern(
        &c,
        &b.url,
        &modern_request(json!(1), "server/discover", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = r.result();
    assert_eq!(d["resultType"], "complete", "{d}");
    assert!(d["ttlMs"].is_i64() || d["ttlMs"].is_u64(), "ttlMs: {d}");
    assert!(d["cacheScope"].is_string(), "cacheScope: {d}");
    let versions: Vec<&str> = d["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("supportedVersions: {d}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(versions.contains(&MODERN), "{versions:?}");
    assert!(d["capabilities"]["tools"].is_object(), "{d}");

    let r = post_modern(
        &c,
        &b.url,
        &modern_request(json!(2), "tools/list", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let l = r.result();
    assert_eq!(l["resultType"], "complete", "{l}");
    assert!(l["ttlMs"].is_number() && l["cacheScope"].is_string(), "{l}");
    assert!(l["tools"].as_array().is_some_and(|t| t.len() >= 10), "{l}");

    // A 2025-era child behind the bridge: discover is synthesised with the same fields.
    let b2 = Bridge::demo(&["--demo-era", "legacy"]).await;
    let r = post_modern(
        &c,
        &b2.url,
        &modern_request(json!(3), "server/discover", json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let d = r.result();
    assert_eq!(d["resultType"], "complete", "{d}");
    assert!(d["ttlMs"].is_number() && d["cacheScope"].is_string(), "{d}");
    assert!(d["supportedVersions"]
        .as_array()
        .is_some_and(|v| v.iter().any(|x| x == MODERN)));
    // ... and results get resultType + cache hints added.
    let r = post_modern(
        &c,
        &b2.url,
        &modern_request(json!(4), "tools/list", json!({})),
    )
    .await;
    let l = r.result();
    assert_eq!(l["resultType"], "complete", "{l}");
    assert!(l["ttlMs"].is_number() && l["cacheScope"].is_string(), "{l}");
    let r = call_modern(&c, &b2.url, json!(5), "echo", json!({"text": "via legacy"})).await;
    assert_eq!(r.text(), "via legacy");
    assert_eq!(r.result()["resultType"], "complete");
}

/// `Mcp-Param-*` checks must not depend on timing: a request that arrives while the child is
/// still starting (its tool list not yet known) must be validated like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn param_headers_checked_during_child_start() {
    let script = format!("sleep 1; exec {} demo-server", bin());
    let b = Bridge::serve(&["--port", "0", "--", "sh", "-c", &script]).await;
    let c = client();
    // Missing Mcp-Param-Region / Mcp-Param-Item-Id, sent while the child sleeps.
    let body = lookup_body(1);
    let r = post_with(&c, &b.url, modern_headers(&body), body.to_string()).await;
    assert_rpc_error(
        &r,
        400,
        -32020,
        &json!(1),
        "missing Mcp-Param-* during start-up",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge() {
    let b = Bridge::demo(&[]).await;
    let c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let body = modern_tool_call(json!(1), "echo", json!({"text": "over h2"}));
    let resp = c
        .post(&b.url)
        .headers(modern_headers(&body))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let r = read_reply(resp).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.text(), "over h2");

    // An SSE response (progress) over h2 as well, several streams on one connection.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let c = c.clone();
        let url = b.url.clone();
        tasks.push(tokio::spawn(async move {
            let body = modern_tool_call_progress(
                json!(1),
                "slow",
                json!({"seconds": 0.2, "steps": 2}),
                json!(format!("tok-{i}")),
            );
            post_modern(&c, &url, &body).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.unwrap();
        assert!(r.is_sse(), "{r:?}");
        assert_eq!(r.text(), "done");
        let p = r.notifications("notifications/progress");
        assert_eq!(p.len(), 2, "{r:?}");
        assert!(p
            .iter()
            .all(|n| n["params"]["progressToken"] == format!("tok-{i}")));
    }
}

/// A 2026 client calls a tool of a 2025-era child that asks for elicitation: the bridge must
/// answer with an `input_required` result (digest §12 item 14), not fail the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_child_elicitation_becomes_input_required() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let body = modern_request(
        json!(1),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "who?"},
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let r = post_modern(&c, &b.url, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    let res = r.result();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let reqs = res["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("no inputRequests: {res}"));
    assert!(
        reqs.values().any(|v| v["method"] == "elicitation/create"),
        "{res}"
    );
    let (key, _) = reqs.iter().next().unwrap();
    let state = res["requestState"].as_str().unwrap().to_owned();

    // A retry with other arguments is refused (the state is bound to them).
    let forged = modern_request(
        json!(2),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "someone else"},
               "inputResponses": {key: {"action": "decline"}}, "requestState": state,
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let r = post_modern(&c, &b.url, &forged).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");

    // The real retry (new id) resumes the parked call in the child and gets the final result.
    let retry = modern_request(
        json!(3),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "who?"},
               "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
               "requestState": state,
               "_meta": {META_CAPS: {"elicitation": {}}}}),
    );
    let r = post_modern(&c, &b.url, &retry).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.messages.last().unwrap()["id"], 3, "{r:?}");
    let text = r.text();
    assert!(
        text.contains("action=accept") && text.contains("Ada"),
        "{text}"
    );
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");

    // The same state cannot be used twice.
    let r = post_modern(&c, &b.url, &retry).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");

    // Without the capability in this request, the child is refused and the call completes
    // without asking.
    let body = modern_request(
        json!(4),
        "tools/call",
        json!({"name": "elicit", "arguments": {"message": "who?"}}),
    );
    let r = post_modern(&c, &b.url, &body).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_ne!(r.result()["resultType"], "input_required", "{r:?}");
}

/// A 2026 client's `subscriptions/listen` in front of a 2025-era child: acknowledged first with
/// the honoured subset, then only the requested notification types, tagged with the listen id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_in_front_of_legacy_child() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let body = modern_request(
        json!("L1"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "resourceSubscriptions": ["demo://readme"]}}),
    );
    let mut sse = open_modern_stream(&c, &b.url, &body).await;
    let ack = sse.next(Duration::from_secs(10)).await.expect("ack");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    assert!(
        ack["params"]["notifications"]
            .get("promptsListChanged")
            .is_none(),
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"][0], "demo://readme",
        "{ack}"
    );

    // Not requested: prompts. Requested: tools. Only the tools one arrives.
    for kind in ["prompts", "tools"] {
        let r = call_modern(&c, &b.url, json!(kind), "notify", json!({"kind": kind})).await;
        assert_eq!(r.text(), "ok", "{r:?}");
    }
    let n = sse
        .next(Duration::from_secs(10))
        .await
        .expect("notification");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1",
        "{n}"
    );
}

/// A 2026 request's logLevel reaches a 2025 child (as logging/setLevel) and its log messages
/// come back on that request's stream only, filtered by the requested level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_level_in_front_of_legacy_child() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let call = |id: i64, level: Option<&str>, msg_level: &str| {
        let mut meta = json!({});
        if let Some(l) = level {
            meta["io.modelcontextprotocol/logLevel"] = json!(l);
        }
        modern_request(
            json!(id),
            "tools/call",
            json!({"name": "log", "arguments": {"level": msg_level, "message": format!("m{id}")},
                   "_meta": meta}),
        )
    };
    // Asked for info, message at warning: delivered before the result.
    let r = post_modern(&c, &b.url, &call(1, Some("info"), "warning")).await;
    let logs = r.notifications("notifications/message");
    assert_eq!(logs.len(), 1, "{r:?}");
    assert_eq!(logs[0]["params"]["data"], "m1", "{r:?}");
    assert_eq!(r.text(), "ok");
    // Asked for error, message at warning: filtered out.
    let r = post_modern(&c, &b.url, &call(2, Some("error"), "warning")).await;
    assert!(r.notifications("notifications/message").is_empty(), "{r:?}");
    // Did not ask: nothing.
    let r = post_modern(&c, &b.url, &call(3, None, "emergency")).await;
    assert!(r.notifications("notifications/message").is_empty(), "{r:?}");
    // A bad level is refused.
    let r = post_modern(&c, &b.url, &call(4, Some("loud"), "info")).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(r.error_code(), -32602, "{r:?}");
}

/// Sampling and roots from a 2025 child reach a 2026 client as input_required too, and the
/// retry completes the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_child_sampling_and_roots_via_input_required() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    for (i, (tool, args, cap, answer, want)) in [
        (
            "sample",
            json!({"prompt": "2+2?"}),
            json!({"sampling": {}}),
            json!({"role": "assistant", "content": {"type": "text", "text": "four"}, "model": "m"}),
            "four",
        ),
        (
            "roots",
            json!({}),
            json!({"roots": {}}),
            json!({"roots": [{"uri": "file:///srv/project"}]}),
            "file:///srv/project",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let id = i as i64 * 10;
        let first = modern_request(
            json!(id),
            "tools/call",
            json!({"name": tool, "arguments": args.clone(), "_meta": {META_CAPS: cap.clone()}}),
        );
        let r = post_modern(&c, &b.url, &first).await;
        let res = r.result().clone();
        assert_eq!(res["resultType"], "input_required", "{tool}: {res}");
        let (key, req) = res["inputRequests"]
            .as_object()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        assert!(req["method"]
            .as_str()
            .unwrap()
            .starts_with(if tool == "sample" {
                "sampling"
            } else {
                "roots"
            }));
        let retry = modern_request(
            json!(id + 1),
            "tools/call",
            json!({"name": tool, "arguments": args, "inputResponses": {key: answer},
                   "requestState": res["requestState"], "_meta": {META_CAPS: cap}}),
        );
        let r = post_modern(&c, &b.url, &retry).await;
        assert!(r.text().contains(want), "{tool}: {r:?}");
    }
}

/// A listen carried to a 2026-era child is open-ended: `--call-timeout` does not cut it, and
/// at shutdown it ends with its completion result (not a broken stream after the grace period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_on_modern_child_outlives_call_timeout_and_ends_at_shutdown() {
    let b = Bridge::demo(&[
        "--demo-era",
        "modern",
        "--call-timeout",
        "1s",
        "--shutdown-grace",
        "60s",
    ])
    .await;
    let c = client();
    let body = modern_request(
        json!("L2"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut sse = open_modern_stream(&c, &b.url, &body).await;
    let ack = sse.next(Duration::from_secs(10)).await.expect("ack");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    // Past the call timeout, the stream still carries notifications.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = call_modern(&c, &b.url, json!(1), "notify", json!({"kind": "tools"})).await;
    assert_eq!(r.text(), "ok", "{r:?}");
    let n = sse
        .next(Duration::from_secs(10))
        .await
        .expect("notification");
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L2",
        "{n}"
    );
    // Shutdown: the listen's completion result, long before the 60 s grace is over.
    b.signal(nix::sys::signal::Signal::SIGTERM);
    let end = sse.next(Duration::from_secs(20)).await.expect("completion");
    assert_eq!(end["id"], "L2", "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L2",
        "{end}"
    );
    assert!(sse.ends_within(Duration::from_secs(20)).await);
}

/// A child's `notifications/tools/list_changed` makes the bridge read its tool list again
/// (the `Mcp-Param-*` rules and the metric labels come from it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_tool_list_change_is_reread() {
    let b = Bridge::demo(&["--demo-era", "legacy"]).await;
    let c = client();
    let needle = "tool list re-read after list_changed";
    let r = call_modern(&c, &b.url, json!(1), "echo", json!({"text": "x"})).await;
    assert_eq!(r.text(), "x", "{r:?}");
    assert_eq!(b.log.count(needle), 0);
    let r = call_modern(&c, &b.url, json!(2), "notify", json!({"kind": "tools"})).await;
    assert_eq!(r.text(), "ok", "{r:?}");
    let line = b.log.expect(needle, Duration::from_secs(10)).await;
    assert!(
        line.contains("tools=") && !line.contains("tools=0"),
        "{line}"
    );
}

/// Each request 2026 removed, as a correct 2026 client would send it.
fn removed_requests() -> Vec<Value> {
    vec![
        modern_request(
            json!("init"),
            "initialize",
            json!({"protocolVersion": MODERN, "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}),
        ),
        modern_request(json!("ping"), "ping", json!({})),
        modern_request(json!("lvl"), "logging/setLevel", json!({"level": "debug"})),
        modern_request(
            json!("sub"),
            "resources/subscribe",
            json!({"uri": "demo://readme"}),
        ),
        modern_request(
            json!("unsub"),
            "resources/unsubscribe",
            json!({"uri": "demo://readme"}),
        ),
    ]
}

/// Every removed method gets 404 + -32601 and is counted as the bridge's own error.
async fn removed_methods_are_not_found(b: &Bridge, what: &str) {
    let c = client();
    let murl = metrics_url(b).await;
    for body in removed_requests() {
        let method = body["method"].as_str().unwrap_or("").to_owned();
        let r = post_modern(&c, &b.url, &body).await;
        assert_rpc_error(&r, 404, -32601, &body["id"], &format!("{what}: {method}"));
        assert!(r.header("mcp-session-id").is_none(), "{what}: {r:?}");
        let t = scrape(&c, &murl).await;
        let series = format!(
            r#"mcp_bridge_jsonrpc_errors_total{{code="-32601",method="{method}",server="default",source="bridge"}}"#
        );
        assert_eq!(sample(&t, &series), Some(1.0), "{what}: {series}\n{t}");
    }
    // The bridge still serves 2026 calls afterwards.
    let r = call_modern(&c, &b.url, json!("after"), "echo", json!({"text": "ok"})).await;
    assert_eq!(r.text(), "ok", "{what}: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_methods_are_404_for_every_child_era_and_a_remote() {
    for era in ["dual", "legacy", "modern"] {
        let b = Bridge::demo(&["--demo-era", era, "--metrics-listen", "127.0.0.1:0"]).await;
        b.wait_ready(Duration::from_secs(10)).await;
        removed_methods_are_not_found(&b, &format!("child era {era}")).await;
    }
    let far = Bridge::demo(&["--demo-era", "legacy"]).await;
    let near = Bridge::serve(&[
        "--port",
        "0",
        "--upstream",
        &far.url,
        "--metrics-listen",
        "127.0.0.1:0",
    ])
    .await;
    near.wait_ready(Duration::from_secs(10)).await;
    removed_methods_are_not_found(&near, "serve --upstream").await;
}

/// A 2025 upstream's `-32002` (resource not found, retired in 2026-07-28, SEP-2164) reaches a
/// 2026 caller as `-32602` with its message and `data.uri`, from a 2025 child and from a 2025
/// remote; a 2025 caller still gets the upstream's `-32002`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_resource_not_found_is_invalid_params_for_a_2026_caller() {
    let c = client();
    let uri = "demo://no-such-resource";
    let child = Bridge::demo(&["--demo-era", "legacy"]).await;
    child.wait_ready(Duration::from_secs(10)).await;
    let remote = Bridge::serve(&[
        "--port",
        "0",
        "--upstream",
        &child.url,
        "--protocol",
        "2025-11-25",
    ])
    .await;
    remote.wait_ready(Duration::from_secs(10)).await;
    for (what, b) in [("2025 child", &child), ("2025 remote", &remote)] {
        let body = modern_request(json!("nf"), "resources/read", json!({"uri": uri}));
        let r = post_modern(&c, &b.url, &body).await;
        assert_eq!(r.error_code(), -32602, "{what}: {r:?}");
        assert_eq!(r.error()["data"]["uri"], uri, "{what}: {r:?}");
        assert_eq!(r.error()["message"], "Resource not found", "{what}: {r:?}");
        let s = Session::open(&c, &b.url).await;
        let r = s
            .request(json!("nf25"), "resources/read", json!({"uri": uri}))
            .await;
        assert_eq!(r.error_code(), -32002, "{what}, 2025 caller: {r:?}");
    }
}
