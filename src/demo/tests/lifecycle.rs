//! Eras, discovery, `initialize`, the catalog methods, and malformed input.

use super::*;

#[tokio::test]
async fn legacy_initialize_list_and_echo() {
    let mut c = Client::start(DemoMode::Dual);
    let init = initialize(&mut c, json!({})).await;
    assert_eq!(init["id"], 0);
    let r = &init["result"];
    assert_eq!(r["protocolVersion"], "2025-06-18");
    assert_eq!(r["serverInfo"]["name"], "mcp-bridge-demo");
    assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(r["capabilities"]["resources"]["subscribe"], true);
    assert!(r["capabilities"]["logging"].is_object());
    assert!(r["instructions"].is_string());
    assert!(r.get("resultType").is_none());

    let list = c
        .call(json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .await;
    let tools = list["result"]["tools"].as_array().expect("tools array");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "echo",
            "add",
            "slow",
            "fail",
            "bytes",
            "error",
            "sample",
            "elicit",
            "elicit_url",
            "roots",
            "lookup",
            "crash",
            "junk",
            "notify",
            "log",
            "whoami"
        ]
    );
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["inputSchema"]["properties"].is_object(), "{t}");
    }
    let lookup = &tools[10]["inputSchema"]["properties"];
    assert_eq!(lookup["region"]["x-mcp-header"], "Region");
    assert_eq!(lookup["id"]["x-mcp-header"], "Item-Id");
    assert!(list["result"].get("resultType").is_none());

    let echo = c
        .call(call(
            json!("e1"),
            "echo",
            json!({ "text": "hi \"you\"\nthere" }),
        ))
        .await;
    assert_eq!(echo["id"], "e1");
    assert_eq!(echo["result"]["content"][0]["type"], "text");
    assert_eq!(text_of(&echo), "hi \"you\"\nthere");
    assert!(echo["result"].get("resultType").is_none());

    let add = c
        .call(call(json!(2), "add", json!({ "a": 2, "b": 40 })))
        .await;
    assert_eq!(text_of(&add), "42");
    assert_eq!(add["result"]["structuredContent"]["sum"], 42);

    let ping = c
        .call(json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" }))
        .await;
    assert_eq!(ping["result"], json!({}));

    let other = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
            "protocolVersion": "1999-01-01", "capabilities": {} } }),
        )
        .await;
    assert_eq!(other["result"]["protocolVersion"], "2025-11-25");

    let unknown = c
        .call(json!({ "jsonrpc": "2.0", "id": 5, "method": "nope" }))
        .await;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad_tool = c.call(call(json!(6), "nope", json!({}))).await;
    assert_eq!(bad_tool["error"]["code"], -32602);

    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn modern_discover_and_echo() {
    let mut c = Client::start(DemoMode::Dual);
    let d = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
                      "params": { "_meta": modern_meta(json!({})) } }),
        )
        .await;
    let r = &d["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r["capabilities"]["prompts"]["listChanged"], true);
    assert_eq!(r["ttlMs"], 0);
    assert_eq!(r["cacheScope"], "public");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-bridge-demo"
    );

    let echo = c
        .call(modern_call(
            json!(2),
            "echo",
            json!({ "text": "yo" }),
            json!({}),
        ))
        .await;
    assert_eq!(text_of(&echo), "yo");
    assert_eq!(echo["result"]["resultType"], "complete");
    assert!(echo["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

    for (i, method) in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ]
    .into_iter()
    .enumerate()
    {
        let r = c
            .call(json!({ "jsonrpc": "2.0", "id": 10 + i, "method": method,
                          "params": { "_meta": modern_meta(json!({})) } }))
            .await;
        assert_eq!(r["result"]["resultType"], "complete", "{method}: {r}");
        assert_eq!(r["result"]["ttlMs"], 0, "{method}");
        assert_eq!(r["result"]["cacheScope"], "public", "{method}");
    }

    let read = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 20, "method": "resources/read",
                      "params": { "_meta": modern_meta(json!({})), "uri": "demo://readme" } }),
        )
        .await;
    assert_eq!(read["result"]["contents"][0]["mimeType"], "text/plain");
    assert_eq!(read["result"]["cacheScope"], "public");
    let missing = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 21, "method": "resources/read",
                      "params": { "_meta": modern_meta(json!({})), "uri": "demo://none" } }),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32602);
    assert_eq!(missing["error"]["data"]["uri"], "demo://none");

    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let bad_version = c
        .call(json!({ "jsonrpc": "2.0", "id": 22, "method": "tools/list",
                      "params": { "_meta": meta } }))
        .await;
    assert_eq!(bad_version["error"]["code"], -32022);
    assert_eq!(
        bad_version["error"]["data"],
        json!({ "supported": ["2026-07-28"], "requested": "2099-01-01" })
    );

    let no_caps = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 23, "method": "tools/list", "params": {
            "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } } }),
        )
        .await;
    assert_eq!(no_caps["error"]["code"], -32602);

    // Legacy-only methods do not exist for modern requests.
    let set_level = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 24, "method": "logging/setLevel",
                      "params": { "_meta": modern_meta(json!({})), "level": "info" } }),
        )
        .await;
    assert_eq!(set_level["error"]["code"], -32601);

    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn era_legacy_and_era_modern() {
    let mut c = Client::start(DemoMode::Only(Era::Legacy));
    let d = c
        .call(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
                      "params": { "_meta": modern_meta(json!({})) } }),
        )
        .await;
    assert_eq!(d["error"]["code"], -32601);
    assert_eq!(d["error"]["message"], "Method not found");
    // Modern _meta is ignored: served as a legacy request.
    let echo = c
        .call(modern_call(
            json!(2),
            "echo",
            json!({ "text": "t" }),
            json!({}),
        ))
        .await;
    assert_eq!(text_of(&echo), "t");
    assert!(echo["result"].get("resultType").is_none());
    c.close().await.expect("clean shutdown");

    let mut c = Client::start(DemoMode::Only(Era::Modern));
    let init = initialize(&mut c, json!({})).await;
    assert_eq!(init["error"]["code"], -32022);
    assert_eq!(init["error"]["data"]["supported"], json!(["2026-07-28"]));
    assert_eq!(init["error"]["data"]["requested"], "2025-06-18");
    let legacy_list = c
        .call(json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }))
        .await;
    assert_eq!(legacy_list["error"]["code"], -32602);
    let echo = c
        .call(modern_call(
            json!(3),
            "echo",
            json!({ "text": "m" }),
            json!({}),
        ))
        .await;
    assert_eq!(echo["result"]["resultType"], "complete");
    c.close().await.expect("clean shutdown");
}

#[tokio::test]
async fn malformed_input_does_not_kill_the_server() {
    let mut c = Client::start(DemoMode::Dual);
    c.send_bytes(b"this is not json").await;
    let e = c.recv().await;
    assert_eq!(e["error"]["code"], -32700);
    assert_eq!(e["id"], Value::Null);

    c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"")
        .await;
    assert_eq!(c.recv().await["error"]["code"], -32700);
    c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}")
        .await;
    assert_eq!(c.recv().await["error"]["code"], -32700);

    // Valid JSON that is not an object is ignored; blank lines too.
    c.send_bytes(b"[1,2,3]").await;
    c.send_bytes(b"42").await;
    c.send_bytes(b"   ").await;

    let no_method = c.call(json!({ "jsonrpc": "2.0", "id": 7 })).await;
    assert_eq!(no_method["error"]["code"], -32600);
    assert_eq!(no_method["id"], 7);
    let bad_type = c
        .call(json!({ "jsonrpc": "2.0", "id": 8, "method": 5 }))
        .await;
    assert_eq!(bad_type["error"]["code"], -32600);
    let bad_id = c
        .call(json!({ "jsonrpc": "2.0", "id": { "x": 1 }, "method": "ping" }))
        .await;
    assert_eq!(bad_id["error"]["code"], -32600);

    for (id, params) in [
        (9, json!(5)),
        (10, json!([1])),
        (11, json!({ "_meta": 3 })),
        (12, json!({ "name": "echo", "arguments": ["x"] })),
        (13, json!({ "name": "echo", "arguments": { "text": 5 } })),
        (14, json!({ "name": "bytes", "arguments": { "n": -1 } })),
        (
            15,
            json!({ "name": "bytes", "arguments": { "n": 1u64 << 40 } }),
        ),
        (16, json!({ "name": 17 })),
        (
            17,
            json!({ "name": "slow", "arguments": { "seconds": -1 } }),
        ),
        (
            18,
            json!({ "name": "log", "arguments": { "level": "loud", "message": "m" } }),
        ),
    ] {
        let r = c
            .call(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }))
            .await;
        assert_eq!(r["error"]["code"], -32602, "{params}: {r}");
        assert_eq!(r["id"], id);
    }

    // Stray responses and notifications are ignored silently.
    c.send(json!({ "jsonrpc": "2.0", "id": "demo-999", "result": {} }))
        .await;
    c.send(json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": 1 }))
        .await;
    c.send(json!({ "jsonrpc": "2.0", "method": "notifications/whatever" }))
        .await;

    let ping = c
        .call(json!({ "jsonrpc": "2.0", "id": "alive", "method": "ping" }))
        .await;
    assert_eq!(ping["id"], "alive");
    assert_eq!(ping["result"], json!({}));
    c.close().await.expect("clean shutdown");
}
