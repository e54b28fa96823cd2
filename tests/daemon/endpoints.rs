//! Aggregation endpoints (`[endpoints.NAME]`) against the real binary: two demo children of
//! different eras behind one path, seen by a 2026 caller and a 2025 session — merged and
//! prefixed lists walked with the endpoint's own cursor, calls routed by prefix, the
//! members' requests to the caller (elicitation) in both eras, list changes of either member
//! on one listen; a remote member that goes away and comes back; and the configuration's
//! errors (exit 78).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

const T: Duration = Duration::from_secs(20);

/// `[endpoints.team]` over `a` (2025 child, tools in pages of 4) and `b` (2026 child).
fn team_config(extra: &str) -> String {
    format!(
        "{}{}[endpoints.team]\nservers = [\"a\", \"b\"]\ntitle = \"The team\"\n{extra}",
        demo_server("a", &["--era", "legacy", "--tools-page", "4"]),
        demo_server("b", &["--era", "modern"]),
    )
}

/// Every page of a 2026 `tools/list` at `url`: the names, and the cursors seen.
async fn all_tools(c: &reqwest::Client, url: &str) -> (Vec<String>, Vec<String>) {
    let (mut names, mut cursors) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let r = post_modern(c, url, &modern_request(json!(1), "tools/list", params)).await;
        let res = r.result().clone();
        assert_eq!(res["resultType"], "complete", "{res}");
        assert!(res["ttlMs"].is_u64(), "a merged 2026 list has ttlMs: {res}");
        for t in res["tools"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_owned());
        }
        match res["nextCursor"].as_str() {
            Some(n) => {
                cursors.push(n.to_owned());
                cursor = Some(n.to_owned());
            }
            None => return (names, cursors),
        }
    }
    panic!("the list did not end in 50 pages");
}

/// The demo's own tool names, from member `b` directly (with `token`, if auth is on).
async fn demo_tools(c: &reqwest::Client, b: &Bridge, token: Option<&str>) -> BTreeSet<String> {
    let body = modern_request(json!(1), "tools/list", json!({}));
    let mut h = modern_headers(&body);
    if let Some(t) = token {
        h.insert("authorization", hv(&format!("Bearer {t}")));
    }
    let r = post_with(c, &server_url(b, "b"), h, body.to_string()).await;
    r.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_merges_lists_and_routes_calls_for_2026_callers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "team.toml", &team_config(""));
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    let url = b.endpoint("/endpoints/team/mcp");
    let own = demo_tools(&c, &b, None).await;
    assert!(own.len() > 4, "the demo has enough tools to page: {own:?}");

    // Every tool of both members, prefixed, over several pages of the endpoint's cursor.
    let (names, cursors) = all_tools(&c, &url).await;
    let want: BTreeSet<String> = own
        .iter()
        .flat_map(|t| [format!("a__{t}"), format!("b__{t}")])
        .collect();
    let got: BTreeSet<String> = names.iter().cloned().collect();
    assert_eq!(got, want, "merged list");
    assert_eq!(names.len(), want.len(), "no tool twice: {names:?}");
    assert!(!cursors.is_empty(), "a's pages make the merged list page");
    for cur in &cursors {
        assert!(
            !cur.contains("demo-page"),
            "a member's cursor leaked: {cur}"
        );
    }
    // An edited cursor is refused.
    let mut bad = cursors[0].clone();
    bad.push('x');
    let r = post_modern(
        &c,
        &url,
        &modern_request(json!(2), "tools/list", json!({ "cursor": bad })),
    )
    .await;
    assert_eq!(r.error_code(), -32602, "{r:?}");

    // Calls go to the member the prefix names, without it.
    for m in ["a", "b"] {
        let text = format!("to {m}");
        let r = call_modern(
            &c,
            &url,
            json!(3),
            &format!("{m}__echo"),
            json!({"text": text}),
        )
        .await;
        assert_eq!(r.text(), text, "{r:?}");
    }
    let r = call_modern(&c, &url, json!(4), "c__echo", json!({"text": "x"})).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");
    assert!(
        r.error()["message"].as_str().unwrap().contains("c__echo"),
        "{r:?}"
    );
    let r = post_modern(
        &c,
        &url,
        &modern_request(
            json!(5),
            "prompts/get",
            json!({"name": "b__greet", "arguments": {"name": "Ada"}}),
        ),
    )
    .await;
    assert!(r.raw.contains("Ada"), "{r:?}");
    // Both members list demo://readme: one answers it (the first, warned once).
    let r = post_modern(
        &c,
        &url,
        &modern_request(json!(6), "resources/read", json!({"uri": "demo://readme"})),
    )
    .await;
    assert!(r.raw.contains("mcp-bridge demo server"), "{r:?}");

    // The endpoint describes itself.
    let r = post_modern(
        &c,
        &url,
        &modern_request(json!(7), "server/discover", json!({})),
    )
    .await;
    let d = r.result();
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "team",
        "{d}"
    );
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["title"], "The team",
        "{d}"
    );
    let text = d["instructions"].as_str().unwrap();
    assert!(text.contains("a, b") && text.contains("a__"), "{text}");
    assert_eq!(d["capabilities"]["tools"]["listChanged"], true, "{d}");

    // A 2025 member's question to the caller becomes input_required, and the retry lands.
    let ask = |id: Value, extra: Value| {
        let mut p = json!({"name": "a__elicit", "arguments": {"message": "who?"},
            "_meta": {META_CAPS: {"elicitation": {}}}});
        if let (Some(o), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        modern_request(id, "tools/call", p)
    };
    let r = post_modern(&c, &url, &ask(json!(8), json!({}))).await;
    let res = r.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let key = res["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let retry = json!({"inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": res["requestState"]});
    let r = post_modern(&c, &url, &ask(json!(9), retry)).await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
    assert!(r.text().contains("Ada"), "{r:?}");

    // One listen hears list changes of either member.
    let listen = modern_request(
        json!("L"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut s = open_modern_stream(&c, &url, &listen).await;
    let ack = s.next(T).await.expect("acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    for m in ["a", "b"] {
        let notify = json!({"name": format!("{m}__notify"), "arguments": {"kind": "tools"}});
        let r = post_modern(&c, &url, &modern_request(json!(10), "tools/call", notify)).await;
        assert!(r.last().get("result").is_some(), "{m}: {r:?}");
        let until = std::time::Instant::now() + T;
        loop {
            let n = s
                .next(until.saturating_duration_since(std::time::Instant::now()))
                .await
                .unwrap_or_else(|| panic!("{m}: no list change; log:\n{}", b.log.dump()));
            if n["method"] == "notifications/tools/list_changed" {
                break;
            }
        }
    }
    // /readyz names each member.
    let r: Value = c
        .get(b.endpoint("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        r["endpoints"]["team"],
        json!({"a": "ready", "b": "ready"}),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_on_an_endpoint_is_asked_by_either_member() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "team.toml", &team_config(""));
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    // The only endpoint is also at /mcp.
    let s = elicit_session(&c, &b.endpoint("/mcp")).await;
    assert_eq!(s.init["serverInfo"]["name"], "team", "{}", s.init);
    let r = s.request(json!(1), "tools/list", json!({})).await;
    let names: Vec<&str> = r.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("a__") || n.starts_with("b__")),
        "{names:?}"
    );
    assert!(names.contains(&"b__echo"), "{names:?}");
    let r = s.call(json!(2), "b__echo", json!({"text": "via b"})).await;
    assert_eq!(r.text(), "via b", "{r:?}");
    // Each member asks the session on the call's stream; the answer reaches the one that
    // asked (a 2025 child under its own id, a 2026 child as an input round).
    for m in ["a", "b"] {
        let body = json!({"jsonrpc": "2.0", "id": format!("e-{m}"), "method": "tools/call",
            "params": {"name": format!("{m}__elicit"), "arguments": {"message": m}}});
        let mut sse = s.stream(&body).await;
        let req = sse
            .next(T)
            .await
            .unwrap_or_else(|| panic!("{m}: stream ended; log:\n{}", b.log.dump()));
        assert_eq!(req["method"], "elicitation/create", "{m}: {req}");
        let reply = json!({"jsonrpc": "2.0", "id": req["id"],
            "result": {"action": "accept", "content": {"name": format!("name-{m}")}}});
        assert_eq!(s.post(&reply).await.status, 202, "{m}");
        let fin = sse
            .next(T)
            .await
            .unwrap_or_else(|| panic!("{m}: no final answer; log:\n{}", b.log.dump()));
        let text = fin["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains(&format!("name-{m}")), "{m}: {fin}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_goes_away_leaves_the_lists_and_comes_back() {
    let remote = Bridge::demo(&[]).await;
    let port = remote.addr.port();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}[servers.far]\nurl = \"{}\"\n[endpoints.team]\nservers = [\"near\", \"far\"]\n",
        demo_server("near", &[]),
        remote.endpoint("/mcp"),
    );
    let cfg = write(dir.path(), "far.toml", &text);
    let b = daemon_builder(&cfg, &["--port", "0", "--metrics-listen", "127.0.0.1:0"])
        .spawn()
        .await;
    let murl = metrics_url(&b).await;
    b.wait_ready(T).await;
    let c = client();
    let url = b.endpoint("/endpoints/team/mcp");
    let (names, _) = all_tools(&c, &url).await;
    assert!(names.contains(&"far__echo".to_owned()), "{names:?}");
    let listen = modern_request(
        json!("L"),
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut s = open_modern_stream(&c, &url, &listen).await;
    s.next(T).await.expect("acknowledgement");

    drop(remote);
    // A call to it names the member; the other keeps answering.
    let r = call_modern(&c, &url, json!(1), "far__echo", json!({"text": "x"})).await;
    let msg = r.error()["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("\"far\""), "{r:?}");
    let r = call_modern(&c, &url, json!(2), "near__echo", json!({"text": "still"})).await;
    assert_eq!(r.text(), "still", "{r:?}");
    // Its tools leave the list, and the listen hears that the list changed.
    let (names, _) = all_tools(&c, &url).await;
    assert!(names.iter().all(|n| n.starts_with("near__")), "{names:?}");
    assert!(!names.is_empty());
    let until = std::time::Instant::now() + T;
    loop {
        let n = s
            .next(until.saturating_duration_since(std::time::Instant::now()))
            .await
            .unwrap_or_else(|| panic!("no list change; log:\n{}", b.log.dump()));
        if n["method"] == "notifications/tools/list_changed" {
            break;
        }
    }

    // Counted per member: far's failures, near's answers; far is down.
    let m = scrape(&c, &murl).await;
    let calls = |server: &str, outcome: &str| {
        metric_sum(
            &m,
            "mcp_bridge_endpoint_calls_total",
            &[
                ("endpoint", "team"),
                ("server", server),
                ("outcome", outcome),
            ],
        )
        .unwrap_or(0.0)
    };
    assert!(calls("far", "failed") >= 1.0, "{m}");
    assert!(calls("near", "result") >= 2.0, "{m}");
    assert_eq!(
        sample(
            &m,
            "mcp_bridge_endpoint_member_up{endpoint=\"team\",server=\"far\"}"
        ),
        Some(0.0),
        "{m}"
    );

    // Back on the same port: its tools return.
    let _back = Bridge::serve(&["--demo", "--port", &port.to_string()]).await;
    let until = std::time::Instant::now() + T;
    loop {
        let (names, _) = all_tools(&c, &url).await;
        if names.contains(&"far__echo".to_owned()) {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "far did not come back: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = call_modern(&c, &url, json!(3), "far__echo", json!({"text": "back"})).await;
    assert_eq!(r.text(), "back", "{r:?}");
}

#[test]
fn endpoint_configuration_errors_exit_78() {
    let dir = tempfile::tempdir().unwrap();
    // check-config FILE, or (serve) serve --config FILE --port 0.
    let run = |name: &str, text: &str, serve: bool| {
        let f = write(dir.path(), name, text);
        let b = Bridge::builder().no_log_level();
        let b = if serve {
            b.config(&f).args(["--port", "0"])
        } else {
            b.sub(["check-config"]).arg(&f)
        };
        let out = b.output();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // check-config: (file, its text after one demo server "a", what the error names).
    let cases = [
        (
            "unknown.toml",
            "[endpoints.team]\nservers = [\"a\", \"zz\"]\n",
            "zz",
        ),
        (
            "reserved.toml",
            "[endpoints.team]\npath = \"/metrics\"\nservers = [\"a\"]\n",
            "/metrics",
        ),
        (
            "clash.toml",
            "[endpoints.a]\nservers = [\"a\"]\n",
            "same name",
        ),
    ];
    for (file, text, names) in cases {
        let (code, err) = run(file, &format!("{}{text}", demo_server("a", &[])), false);
        assert_eq!(code, Some(78), "{file}: {err}");
        assert!(err.contains(names), "{file}: {err}");
    }
    // Bare names that collide are found when the members are up: serve exits 78 naming both.
    let (code, err) = run(
        "never.toml",
        &format!(
            "{}{}[endpoints.team]\nservers = [\"a\", \"b\"]\nprefix = \"never\"\n",
            demo_server("a", &[]),
            demo_server("b", &[])
        ),
        true,
    );
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("\"a\"") && err.contains("\"b\"") && err.contains("echo"),
        "{err}"
    );
}

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdefgh";

/// Headers of a 2026 call with a bearer token.
fn as_caller(token: &str, body: &Value) -> reqwest::header::HeaderMap {
    let mut h = modern_headers(body);
    h.insert("authorization", hv(&format!("Bearer {token}")));
    h
}

/// The tool names `token`'s caller sees at `url`.
async fn tools_of(c: &reqwest::Client, url: &str, token: &str) -> BTreeSet<String> {
    let body = modern_request(json!(1), "tools/list", json!({}));
    let r = post_with(c, url, as_caller(token, &body), body.to_string()).await;
    r.result()["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r:?}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn policy_config(tokens: &std::path::Path, bob_allows: &str) -> String {
    format!(
        "policy_default = \"deny\"\n[auth]\nmode = \"bearer\"\ntoken_file = {tokens:?}\n\
         [metrics]\non_main = true\n{}{}\
         [endpoints.team]\nservers = [\"a\", \"b\"]\n\
         [[policy]]\nendpoint = \"team\"\nwho = {{ token = \"alice\" }}\n\
         allow = [\"a__*\", \"demo://*\"]\ndeny = [\"a__crash\"]\n\
         [[policy]]\nwho = {{ token = \"bob\" }}\nallow = [{bob_allows}]\n",
        demo_server("a", &["--era", "legacy"]),
        demo_server("b", &["--era", "modern"]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_hides_and_refuses_per_caller_and_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write(dir.path(), "tokens", &format!("alice:{ALICE}\nbob:{BOB}\n"));
    let cfg = write(
        dir.path(),
        "policy.toml",
        &policy_config(&tokens, "\"b__echo\""),
    );
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    let url = b.endpoint("/endpoints/team/mcp");
    let own = demo_tools(&c, &b, Some(ALICE)).await;

    // Each caller's list holds what it may use, and nothing else.
    let alice = tools_of(&c, &url, ALICE).await;
    let want: BTreeSet<String> = own
        .iter()
        .filter(|t| *t != "crash")
        .map(|t| format!("a__{t}"))
        .collect();
    assert_eq!(alice, want);
    assert_eq!(
        tools_of(&c, &url, BOB).await,
        BTreeSet::from(["b__echo".to_owned()])
    );

    // A denied call gets the answer of an unknown tool: no oracle.
    let call = |token: &'static str, name: &str| {
        let body = modern_tool_call(json!(2), name, json!({"text": "hi"}));
        let (c, url) = (c.clone(), url.clone());
        async move { post_with(&c, &url, as_caller(token, &body), body.to_string()).await }
    };
    assert_eq!(call(ALICE, "a__echo").await.text(), "hi");
    let denied = call(ALICE, "a__crash").await;
    let unknown = call(ALICE, "a__no_such_tool").await;
    assert_eq!(denied.error_code(), -32602, "{denied:?}");
    assert_eq!(
        denied.error()["message"]
            .as_str()
            .unwrap()
            .replace("a__crash", "X"),
        unknown.error()["message"]
            .as_str()
            .unwrap()
            .replace("a__no_such_tool", "X"),
    );
    assert_eq!(call(BOB, "a__echo").await.error_code(), -32602);
    assert_eq!(call(BOB, "b__echo").await.text(), "hi");
    // Resources follow the same rules: alice may read demo://, bob may not.
    let read = modern_request(json!(3), "resources/read", json!({"uri": "demo://readme"}));
    let r = post_with(&c, &url, as_caller(ALICE, &read), read.to_string()).await;
    assert!(r.raw.contains("mcp-bridge demo server"), "{r:?}");
    let r = post_with(&c, &url, as_caller(BOB, &read), read.to_string()).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");

    // A 2025 session is held to the same rules.
    let mut h = base_headers();
    h.insert("authorization", hv(&format!("Bearer {BOB}")));
    let init = post_with(
        &c,
        &url,
        h.clone(),
        initialize_body(json!(0), LEGACY).to_string(),
    )
    .await;
    let sid = init.header("mcp-session-id").expect("session");
    h.insert("mcp-session-id", hv(&sid));
    h.insert("mcp-protocol-version", hv(LEGACY));
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "a__echo", "arguments": {"text": "x"}}});
    let r = post_with(&c, &url, h, body.to_string()).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");

    // Every decision on a call is counted by rule.
    let m = c
        .get(b.endpoint("/metrics"))
        .header("authorization", format!("Bearer {ALICE}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let decided = |rule: &str, d: &str| {
        metric_sum(
            &m,
            "mcp_bridge_policy_decisions_total",
            &[("endpoint", "team"), ("rule", rule), ("decision", d)],
        )
    };
    // alice: a__echo, a__no_such_tool (allowed, then unknown), demo://readme.
    assert_eq!(decided("1", "allow"), Some(3.0), "{m}");
    assert_eq!(decided("1", "deny"), Some(1.0), "{m}");
    assert_eq!(decided("4", "allow"), None, "no rule 4");
    // bob: a__echo twice (2026 and 2025), demo://readme.
    assert_eq!(decided("default", "deny"), Some(3.0), "{m}");
    assert_eq!(decided("2", "allow"), Some(1.0), "{m}");

    // New rules on SIGHUP: bob may use all of b now.
    std::fs::write(&cfg, policy_config(&tokens, "\"b__*\"")).unwrap();
    b.signal(nix::sys::signal::Signal::SIGHUP);
    b.log.expect("configuration reloaded", T).await;
    let bob: BTreeSet<String> = tools_of(&c, &url, BOB).await;
    let want: BTreeSet<String> = own.iter().map(|t| format!("b__{t}")).collect();
    assert_eq!(bob, want);
}

#[test]
fn check_config_explains_a_callers_rules() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write(dir.path(), "tokens", &format!("alice:{ALICE}\nbob:{BOB}\n"));
    let cfg = write(dir.path(), "p.toml", &policy_config(&tokens, "\"b__echo\""));
    let explain = |who: &str| {
        let out = Bridge::builder()
            .no_log_level()
            .sub(["check-config"])
            .arg(&cfg)
            .args(["--explain", who])
            .output();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = explain("token=alice");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("rule 1: deny a__crash; allow a__*, demo://*"),
        "{out}"
    );
    assert!(!out.contains("rule 2"), "bob's rule is not alice's: {out}");
    assert!(
        out.contains("anything else: deny (policy_default)"),
        "{out}"
    );
    let (_, out) = explain("token=bob");
    assert!(
        out.contains("rule 2: allow b__echo") && !out.contains("rule 1"),
        "{out}"
    );
    assert_eq!(explain("nonsense").0, Some(64));
    // A rule about an endpoint that does not exist: 78.
    let bad = write(
        dir.path(),
        "bad.toml",
        &format!(
            "{}[[policy]]\nendpoint = \"nope\"\nallow = [\"*\"]\n",
            demo_server("a", &[])
        ),
    );
    let out = Bridge::builder()
        .no_log_level()
        .sub(["check-config"])
        .arg(&bad)
        .output();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_has_one_line_per_call_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let text = format!(
        "[audit]\npath = {log:?}\ninclude_arguments = true\nfsync = \"batch\"\n{}",
        team_config("")
    );
    let cfg = write(dir.path(), "audit.toml", &text);
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let url = b.endpoint("/endpoints/team/mcp");
    let c = client();
    let r = call_modern(&c, &url, json!(0), "c__echo", json!({"text": "x"})).await;
    assert_eq!(r.error_code(), -32602);

    // 8 callers, 40 calls each; the file is moved away (logrotate) and SIGHUP sent meanwhile.
    const CALLERS: usize = 8;
    const EACH: usize = 40;
    let mut tasks = Vec::new();
    for t in 0..CALLERS {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                let m = if i % 2 == 0 { "a" } else { "b" };
                let text = format!("{t}-{i}");
                let r = call_modern(
                    &c,
                    &url,
                    json!(i),
                    &format!("{m}__echo"),
                    json!({"text": text}),
                )
                .await;
                assert_eq!(r.text(), text, "{r:?}");
            }
        }));
    }
    // Rotated once the log holds some of the load's lines.
    let count = |p: &std::path::Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
    let until = std::time::Instant::now() + T;
    while count(&log) < 40 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rotated = dir.path().join("audit.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    b.signal(nix::sys::signal::Signal::SIGHUP);
    b.log.expect("audit log reopened", T).await;
    for t in tasks {
        t.await.unwrap();
    }
    // A call after the reopen lands in the new file.
    let r = call_modern(&c, &url, json!(9), "b__echo", json!({"text": "last"})).await;
    assert_eq!(r.text(), "last");
    // The writer drains within its tick; wait (bounded) until every line is there.
    let lines = || {
        [&rotated, &log]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
            .map(|l| serde_json::from_str::<Value>(&l).unwrap())
            .collect::<Vec<_>>()
    };
    let until = std::time::Instant::now() + T;
    while lines().len() < CALLERS * EACH + 2 && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = lines();
    assert_eq!(
        all.len(),
        CALLERS * EACH + 2,
        "one line per call, none lost"
    );
    assert!(count(&rotated) >= 40, "the rotated file kept its lines");
    let fresh = std::fs::read_to_string(&log).expect("reopened at its path");
    assert!(
        fresh.contains("\"last\""),
        "the last call is in the new file: {fresh}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let unknown = &all[0];
    assert_eq!(unknown["outcome"], "error", "{unknown}");
    assert_eq!(unknown["code"], -32602, "{unknown}");
    assert!(unknown["member"].is_null(), "{unknown}");
    let mut texts = BTreeSet::new();
    for l in all[1..].iter().filter(|l| l["arguments"]["text"] != "last") {
        assert_eq!(l["outcome"], "ok", "{l}");
        assert_eq!(l["endpoint"], "team", "{l}");
        assert_eq!(l["method"], "tools/call", "{l}");
        let name = l["name"].as_str().unwrap();
        assert_eq!(l["member"].as_str().unwrap(), &name[..1], "{l}");
        assert!(l["duration_ms"].is_number() && l["time"].is_string(), "{l}");
        assert!(l.get("dropped").is_none(), "{l}");
        texts.insert(l["arguments"]["text"].as_str().unwrap().to_owned());
    }
    assert_eq!(texts.len(), CALLERS * EACH, "each call's own arguments");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_over_its_rate_gets_429_and_starves_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = write(dir.path(), "tokens", &format!("alice:{ALICE}\nbob:{BOB}\n"));
    let text = format!(
        "[auth]\nmode = \"bearer\"\ntoken_file = {tokens:?}\n[metrics]\non_main = true\n{}\
         [endpoints.team]\nservers = [\"a\"]\nrate = \"3/min\"\n",
        demo_server("a", &[]),
    );
    let cfg = write(dir.path(), "rate.toml", &text);
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    let url = b.endpoint("/endpoints/team/mcp");
    let call = |token: &'static str| {
        let body = modern_tool_call(json!(1), "a__echo", json!({"text": "hi"}));
        let (c, url) = (c.clone(), url.clone());
        async move { post_with(&c, &url, as_caller(token, &body), body.to_string()).await }
    };
    for _ in 0..3 {
        assert_eq!(call(ALICE).await.text(), "hi");
    }
    let over = call(ALICE).await;
    assert_eq!(over.status, 429, "{over:?}");
    let secs: u64 = over
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    // Bob has a bucket of his own, in both eras.
    assert_eq!(call(BOB).await.text(), "hi");
    let mut h = base_headers();
    h.insert("authorization", hv(&format!("Bearer {ALICE}")));
    let init = post_with(&c, &url, h, initialize_body(json!(0), LEGACY).to_string()).await;
    assert_eq!(init.status, 200, "initialize is the bridge's own: {init:?}");
    let m = c
        .get(b.endpoint("/metrics"))
        .header("authorization", format!("Bearer {BOB}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let n = metric_sum(
        &m,
        "mcp_bridge_rate_limited_total",
        &[("endpoint", "team"), ("caller", "alice")],
    );
    assert_eq!(n, Some(1.0), "{m}");
}

/// A 2026 `tools/call` of `name` on the endpoint, from a caller that declared `caps`, with
/// `extra` params (a retry's `inputResponses` and `requestState`).
fn confirm_call(id: i64, name: &str, caps: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": {"text": format!("t-{id}")},
        "_meta": {META_CAPS: caps}});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    modern_request(json!(id), "tools/call", params)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_asks_the_caller_in_either_era_before_a_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let extra = format!(
        "[metrics]\non_main = true\n[audit]\npath = {audit:?}\n\
         [[policy]]\nconfirm = [\"*__echo\", \"b__elicit\"]\nallow = [\"*\"]\n"
    );
    let cfg = write(dir.path(), "confirm.toml", &team_config(&extra));
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    let url = b.endpoint("/mcp");
    let el = json!({"elicitation": {}});

    // 2026 caller, either member: an input round first, naming the tool and arguments;
    // the accepted retry runs the call.
    for (i, m) in [(1, "a"), (2, "b")] {
        let tool = format!("{m}__echo");
        let r = post_modern(&c, &url, &confirm_call(i, &tool, el.clone(), json!({}))).await;
        let res = r.result().clone();
        assert_eq!(res["resultType"], "input_required", "{m}: {res}");
        let (key, q) = res["inputRequests"]
            .as_object()
            .and_then(|o| o.iter().next())
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap_or_else(|| panic!("{m}: {res}"));
        assert_eq!(q["method"], "elicitation/create", "{m}: {q}");
        let msg = q["params"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(&tool) && msg.contains(&format!("t-{i}")),
            "{m}: {msg}"
        );
        let retry = json!({"inputResponses": {key: {"action": "accept"}},
            "requestState": res["requestState"]});
        let r = post_modern(&c, &url, &confirm_call(i, &tool, el.clone(), retry)).await;
        assert_eq!(r.result()["resultType"], "complete", "{m}: {r:?}");
        assert_eq!(r.text(), format!("t-{i}"), "{m}");
    }
    // Declined: the tool is not run, and the caller's model reads why.
    let r = post_modern(&c, &url, &confirm_call(3, "b__echo", el.clone(), json!({}))).await;
    let res = r.result().clone();
    let retry = json!({"inputResponses": {"mcp-bridge/confirm": {"action": "decline"}},
        "requestState": res["requestState"]});
    let r = post_modern(&c, &url, &confirm_call(3, "b__echo", el.clone(), retry)).await;
    assert_eq!(r.result()["isError"], true, "{r:?}");
    assert!(r.text().contains("not approved"), "{r:?}");
    // The state is bound to the arguments: approving one call does not run another.
    let r = post_modern(&c, &url, &confirm_call(4, "b__echo", el.clone(), json!({}))).await;
    let state = r.result()["requestState"].clone();
    let mut other = confirm_call(
        4,
        "b__echo",
        el.clone(),
        json!({"inputResponses": {"mcp-bridge/confirm": {"action": "accept"}},
               "requestState": state}),
    );
    other["params"]["arguments"]["text"] = json!("something else");
    let r = post_modern(&c, &url, &other).await;
    assert_eq!(r.error_code(), -32602, "{r:?}");
    // Approved once: a 2026 member's own rounds that follow are not asked again.
    let call = |extra: Value| {
        let mut b = confirm_call(7, "b__elicit", el.clone(), extra);
        b["params"]["arguments"] = json!({"message": "who?"});
        b
    };
    let r = post_modern(&c, &url, &call(json!({}))).await;
    let ours = r.result()["requestState"].clone();
    let accept = json!({"inputResponses": {"mcp-bridge/confirm": {"action": "accept"}},
        "requestState": ours});
    let r = post_modern(&c, &url, &call(accept)).await;
    let res = r.result().clone();
    assert_eq!(
        res["resultType"], "input_required",
        "the member's own round: {res}"
    );
    let key = res["inputRequests"]
        .as_object()
        .and_then(|o| o.keys().next().cloned());
    assert_ne!(key.as_deref(), Some("mcp-bridge/confirm"), "{res}");
    let answer = json!({"inputResponses": {key.unwrap(): {"action": "accept",
        "content": {"name": "carol"}}}, "requestState": res["requestState"]});
    let r = post_modern(&c, &url, &call(answer)).await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");
    assert!(r.text().contains("carol"), "{r:?}");
    // A caller that cannot be asked is refused, naming the capability; calls that need no
    // approval run as before.
    for m in ["a", "b"] {
        let r = post_modern(
            &c,
            &url,
            &confirm_call(5, &format!("{m}__echo"), json!({}), json!({})),
        )
        .await;
        let e = r.error();
        assert_eq!(e["code"], -32021, "{m}: {r:?}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("elicitation"),
            "{m}: {e}"
        );
    }
    let r = post_modern(
        &c,
        &url,
        &modern_tool_call(json!(6), "b__add", json!({"a": 1, "b": 2})),
    )
    .await;
    assert_eq!(r.result()["resultType"], "complete", "{r:?}");

    // 2025 session, either member: `elicitation/create` on the call's stream first.
    let s = elicit_session(&c, &url).await;
    for m in ["a", "b"] {
        let body = json!({"jsonrpc": "2.0", "id": format!("c-{m}"), "method": "tools/call",
            "params": {"name": format!("{m}__echo"), "arguments": {"text": format!("s-{m}")}}});
        let mut sse = s.stream(&body).await;
        let req = sse
            .next(T)
            .await
            .unwrap_or_else(|| panic!("{m}: stream ended; log:\n{}", b.log.dump()));
        assert_eq!(req["method"], "elicitation/create", "{m}: {req}");
        let msg = req["params"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&format!("{m}__echo")), "{m}: {req}");
        let reply = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "accept"}});
        assert_eq!(s.post(&reply).await.status, 202, "{m}");
        let fin = sse
            .next(T)
            .await
            .unwrap_or_else(|| panic!("{m}: no final answer; log:\n{}", b.log.dump()));
        assert_eq!(
            fin["result"]["content"][0]["text"],
            format!("s-{m}"),
            "{m}: {fin}"
        );
    }

    // Every answer is counted.
    let m = scrape(&c, &b.endpoint("/metrics")).await;
    let answered = |a: &str| {
        metric_sum(
            &m,
            "mcp_bridge_confirm_answers_total",
            &[("endpoint", "team"), ("answer", a)],
        )
    };
    assert_eq!(answered("accept"), Some(5.0), "{m}");
    assert_eq!(answered("decline"), Some(1.0), "{m}");
    assert_eq!(answered("unable"), Some(2.0), "{m}");
    // The audit log says what became of each: asked, declined, then ran.
    let outcomes = || {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["name"] == "b__echo")
            .map(|v| v["outcome"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    let until = std::time::Instant::now() + T;
    while !outcomes().contains(&"declined".to_owned()) && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let o = outcomes();
    for want in ["asked", "ok", "declined"] {
        assert!(o.iter().any(|x| x == want), "{want} in {o:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_subscribes_to_a_2026_members_resource() {
    let dir = tempfile::tempdir().unwrap();
    // `b` (2026) first: demo://readme, which both list, is b's.
    let cfg = format!(
        "{}{}[endpoints.team]\nservers = [\"b\", \"a\"]\n",
        demo_server("a", &["--era", "legacy"]),
        demo_server("b", &["--era", "modern"]),
    );
    let cfg = write(dir.path(), "subs.toml", &cfg);
    let b = daemon(&cfg).await;
    b.wait_ready(T).await;
    let c = client();
    let s = Session::open(&c, &b.endpoint("/mcp")).await;
    let resp = c
        .get(&s.url)
        .headers(s.headers())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseReader::new(resp);
    // Two subscriptions and one unsubscribe of the same URI: it stays subscribed.
    for (id, m) in [
        (1, "resources/subscribe"),
        (2, "resources/subscribe"),
        (3, "resources/unsubscribe"),
    ] {
        let r = s
            .request(json!(id), m, json!({"uri": "demo://readme"}))
            .await;
        assert_eq!(r.result(), &json!({}), "{m}: {r:?}");
    }
    // b announces an update of demo://readme to its listens' subscribers (bounded retries:
    // the held listen re-opens with the new set).
    let mut got = None;
    for i in 0..10 {
        let r = s
            .call(json!(10 + i), "b__notify", json!({"kind": "updated"}))
            .await;
        assert!(!r.text().is_empty(), "{r:?}");
        let wait = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                let n = sse.next(Duration::from_secs(3)).await?;
                if n["method"] == "notifications/resources/updated" {
                    return Some(n);
                }
            }
        });
        if let Ok(Some(n)) = wait.await {
            got = Some(n);
            break;
        }
    }
    let n = got.unwrap_or_else(|| panic!("no resources/updated; log:\n{}", b.log.dump()));
    assert_eq!(n["params"]["uri"], "demo://readme", "{n}");
    // The last unsubscribe ends it.
    let r = s
        .request(
            json!(30),
            "resources/unsubscribe",
            json!({"uri": "demo://readme"}),
        )
        .await;
    assert_eq!(r.result(), &json!({}), "{r:?}");
}
