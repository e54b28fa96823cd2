//! `serve --auth bearer` and the guarantees around it: every method on the MCP endpoint needs
//! the token, health stays open, CORS preflight only for allowed origins, default deny on
//! non-loopback binds, the caller's token never reaches the child (environment or messages),
//! and no secret appears in the bridge's log even at trace level.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::{json, Value};

use support::*;

const TOKEN_A: &str = "tok-alice-0123456789abcdefXYZ";
const TOKEN_ENV: &str = "tok-from-env-9876543210fedcba";
const WRONG: &str = "tok-wrong-00000000000000000000";

fn token_file(dir: &tempfile::TempDir) -> String {
    let p = dir.path().join("tokens");
    std::fs::write(&p, format!("# callers\nalice:{TOKEN_A}\n")).unwrap();
    p.to_str().unwrap().to_owned()
}

/// `serve --demo --auth bearer` with the token file `f` and TOKEN_ENV in the variable `var`.
async fn demo_with_tokens(level: &str, f: &str, var: &str) -> Bridge {
    Bridge::builder()
        .log_level(level)
        .serve()
        .args([
            "--demo",
            "--port",
            "0",
            "--auth",
            "bearer",
            "--token-file",
            f,
            "--token-env",
            var,
        ])
        .envs(&[(var, TOKEN_ENV)])
        .spawn()
        .await
}

#[tokio::test]
async fn bearer_tokens_guard_every_method_and_health_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let b = demo_with_tokens("debug", &f, "MCPB_T").await;

    let r = post_init(&b.url, None).await;
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(
        www_auth(&r),
        "Bearer",
        "no metadata configured: a bare challenge"
    );
    let r = post_init(&b.url, Some(WRONG)).await;
    assert_eq!(r.status().as_u16(), 401);
    assert!(www_auth(&r).contains("error=\"invalid_token\""));
    let r = client()
        .post(&b.url)
        .header("authorization", format!("Basic {TOKEN_A}"))
        .json(&initialize_body(json!(1), LEGACY))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401, "other schemes are refused");

    let r = post_init(&b.url, Some(TOKEN_A)).await;
    assert_eq!(r.status().as_u16(), 200);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    assert!(
        b.log
            .wait_for("caller{id=alice}", Duration::from_secs(5))
            .await
            .is_some(),
        "{}",
        b.log.dump()
    );
    assert_eq!(
        post_init(&b.url, Some(TOKEN_ENV)).await.status().as_u16(),
        200
    );

    // GET and DELETE need the token as well (checked before the session is looked at).
    for m in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = client()
            .request(m.clone(), &b.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{m} without a token");
    }
    let r = client()
        .delete(&b.url)
        .header("mcp-session-id", &sid)
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "DELETE with the token");

    // A token in the query string is refused, even a good one.
    let r = client()
        .post(format!("{}?access_token={TOKEN_A}", b.url))
        .header("content-type", "application/json")
        .json(&initialize_body(json!(1), LEGACY))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);

    for p in ["/healthz", "/readyz"] {
        let r = client()
            .get(format!("{}{p}", b.origin()))
            .send()
            .await
            .unwrap();
        // Outside auth, and the child has answered calls by now: 200 without a token (401
        // would be auth on the probes, 503 a child not up).
        assert_eq!(r.status().as_u16(), 200, "{p} without a token");
    }
    assert!(
        b.log.dump().contains("reason=\"unknown_token\"")
            || b.log.dump().contains("reason=unknown_token")
    );
}

#[tokio::test]
async fn metadata_in_bearer_mode_when_an_authorization_server_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let b = Bridge::builder()
        .log_level("info")
        .serve()
        .args([
            "--demo",
            "--port",
            "0",
            "--auth",
            "bearer",
            "--token-file",
            &f,
            "--authorization-server",
            "https://as.example.com",
            "--resource-url",
            "https://mcp.example.com/mcp/",
        ])
        .spawn()
        .await;
    let r = post_init(&b.url, None).await;
    assert_eq!(
        www_auth(&r),
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
    );
    let doc: Value = client()
        .get(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            b.origin()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["resource"], json!("https://mcp.example.com/mcp"));
    assert_eq!(
        doc["authorization_servers"],
        json!(["https://as.example.com"])
    );
}

#[tokio::test]
async fn cors_preflight_only_for_allowed_origins() {
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let b = Bridge::builder()
        .log_level("info")
        .serve()
        .args([
            "--demo",
            "--port",
            "0",
            "--auth",
            "bearer",
            "--token-file",
            &f,
            "--allow-origin",
            "https://app.example.com",
            "--allow-origin",
            "*.corp.example",
        ])
        .spawn()
        .await;
    let preflight = |origin: &'static str| {
        let url = b.url.clone();
        async move {
            client()
                .request(reqwest::Method::OPTIONS, &url)
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .header(
                    "access-control-request-headers",
                    "authorization, content-type, mcp-protocol-version, mcp-param-region",
                )
                .send()
                .await
                .unwrap()
        }
    };
    for ok in [
        "https://app.example.com",
        "https://a.corp.example",
        "https://x.y.corp.example:8443",
    ] {
        let r = preflight(ok).await;
        assert_eq!(r.status().as_u16(), 204, "{ok}");
        assert_eq!(r.headers()["access-control-allow-origin"], ok);
        let allowed = r.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(allowed.contains("authorization") && allowed.contains("mcp-param-region"));
        assert!(r.headers()["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("DELETE"));
    }
    for bad in [
        "https://evil.example",
        "https://corp.example",
        "https://evilcorp.example",
        "https://app.example.com.evil.io",
    ] {
        let r = preflight(bad).await;
        assert_eq!(r.status().as_u16(), 403, "{bad}");
        assert!(
            r.headers().get("access-control-allow-origin").is_none(),
            "{bad}"
        );
    }
    // The real request from an allowed origin exposes the session id.
    let r = client()
        .post(&b.url)
        .header("origin", "https://app.example.com")
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .header("accept", "application/json, text/event-stream")
        .json(&initialize_body(json!(1), LEGACY))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.example.com"
    );
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    assert!(exposed.contains("Mcp-Session-Id"), "{exposed}");
}

#[tokio::test]
async fn default_deny_on_non_loopback_binds() {
    let (code, log) = run_refused(&["--demo", "--host", "0.0.0.0", "--port", "0"]);
    assert_eq!(code, Some(64), "{log}");
    assert!(log.contains("--allow-unauthenticated"), "{log}");
    let (code, _) = run_refused(&["--demo", "--port", "0", "--auth", "bearer"]);
    assert_eq!(code, Some(64), "bearer without tokens");
    // Explicit opt-out starts.
    let b = Bridge::builder()
        .log_level("info")
        .serve()
        .args([
            "--demo",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--allow-unauthenticated",
        ])
        .spawn()
        .await;
    assert!(b.url.starts_with("http://0.0.0.0:"), "{}", b.url);
}

const DUMP_CHILD: &str = r#"
import json, os, sys
out = open(sys.argv[1], "a")
out.write("ENV " + json.dumps(dict(os.environ)) + "\n"); out.flush()
for line in sys.stdin:
    out.write("IN " + line); out.flush()
    try:
        m = json.loads(line)
    except Exception:
        continue
    if "id" not in m or "method" not in m:
        continue
    meth = m["method"]
    if meth == "initialize":
        res = {"protocolVersion": m.get("params", {}).get("protocolVersion", "2025-06-18"),
               "capabilities": {"tools": {}}, "serverInfo": {"name": "dump", "version": "1"}}
        resp = {"jsonrpc": "2.0", "id": m["id"], "result": res}
    elif meth == "tools/list":
        resp = {"jsonrpc": "2.0", "id": m["id"], "result": {"tools": [
            {"name": "t", "inputSchema": {"type": "object"}}]}}
    elif meth == "tools/call" or meth == "ping":
        resp = {"jsonrpc": "2.0", "id": m["id"], "result": {"content": []}}
    else:
        resp = {"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "Method not found"}}
    sys.stdout.write(json.dumps(resp) + "\n"); sys.stdout.flush()
"#;

#[tokio::test]
async fn the_callers_token_never_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let script = dir.path().join("dump.py");
    std::fs::write(&script, DUMP_CHILD).unwrap();
    let dump = dir.path().join("dump.txt");
    let b = Bridge::builder()
        .log_level("info")
        .serve()
        .args([
            "--port",
            "0",
            "--auth",
            "bearer",
            "--token-file",
            &f,
            "--token-env",
            "MCPB_SECRET",
            // The whole environment goes to the child, so a missing token proves something.
            "--pass-environment",
            "--",
            "python3",
            "-u",
            script.to_str().unwrap(),
            dump.to_str().unwrap(),
        ])
        .envs(&[
            ("MCPB_SECRET", TOKEN_ENV),
            ("MCPB_MARKER", "visible-marker"),
        ])
        .spawn()
        .await;
    for token in [TOKEN_A, TOKEN_ENV] {
        let r = post_init(&b.url, Some(token)).await;
        assert_eq!(r.status().as_u16(), 200, "log:\n{}", b.log.dump());
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        for body in [
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t", "arguments": {}}}),
        ] {
            let r = client()
                .post(&b.url)
                .header("authorization", format!("Bearer {token}"))
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", "2025-11-25")
                .header("accept", "application/json, text/event-stream")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{body}: {}", r.status());
        }
    }
    // Wait until the child has seen the last call.
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(&dump).unwrap_or_default();
        if text.matches("tools/call").count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        text.matches("tools/call").count() >= 2,
        "the child did not get the calls:\n{text}"
    );
    assert!(
        text.contains("visible-marker"),
        "environment not passed at all?\n{text}"
    );
    assert!(
        !text.contains("MCPB_SECRET"),
        "the token variable reached the child"
    );
    for t in [TOKEN_A, TOKEN_ENV] {
        assert!(
            !text.contains(t),
            "a caller's token reached the child:\n{text}"
        );
    }
    assert!(!text.to_ascii_lowercase().contains("bearer"), "{text}");
}

#[tokio::test]
async fn no_secret_in_the_log_at_trace_level() {
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let b = demo_with_tokens("trace", &f, "MCPB_T2").await;
    let param_secret = "param-secret-value-4711";
    for token in [TOKEN_A, TOKEN_ENV, WRONG] {
        let _ = post_init(&b.url, Some(token)).await;
        // A 2026 call carrying an Mcp-Param header.
        let body = modern_tool_call(
            json!(7),
            "lookup",
            json!({"region": param_secret, "id": 42}),
        );
        let mut h = modern_headers(&body);
        h.insert("mcp-param-region", hv(param_secret));
        h.insert("mcp-param-item-id", hv("42"));
        h.insert("authorization", hv(&format!("Bearer {token}")));
        let _ = client()
            .post(&b.url)
            .headers(h)
            .json(&body)
            .send()
            .await
            .unwrap();
        // HTTP/2 too (prior knowledge), whose header decoding has its own logging.
        let h2 = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let _ = h2
            .post(&b.url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize_body(json!(1), LEGACY))
            .send()
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = b.log.dump();
    assert!(log.contains("TRACE"), "trace logging was not on");
    for secret in [TOKEN_A, TOKEN_ENV, WRONG] {
        assert!(!log.contains(secret), "a token is in the log");
    }
    // The bridge's own lines never carry the Mcp-Param value; the child's stderr is its own.
    for line in log.lines().filter(|l| !l.contains(" child:")) {
        assert!(
            !line.contains(param_secret),
            "Mcp-Param value logged: {line}"
        );
    }
}

/// SIGHUP re-reads `--token-file`: a removed token stops working, a new one starts working,
/// `--token-env` tokens stay, and the bridge keeps running.
#[tokio::test]
async fn token_file_reloads_on_sighup() {
    const TOKEN_B: &str = "tok-bob-abcdefghijklmnop0123";
    let dir = tempfile::tempdir().unwrap();
    let f = token_file(&dir);
    let b = demo_with_tokens("info", &f, "MCPB_T").await;
    assert_eq!(
        post_init(&b.url, Some(TOKEN_A)).await.status().as_u16(),
        200
    );
    assert_eq!(
        post_init(&b.url, Some(TOKEN_B)).await.status().as_u16(),
        401
    );
    std::fs::write(&f, format!("bob:{TOKEN_B}\n")).unwrap();
    let pid = nix::unistd::Pid::from_raw(b.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    // Bounded wait for the reload to take effect.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while post_init(&b.url, Some(TOKEN_B)).await.status().as_u16() != 200 {
        assert!(std::time::Instant::now() < until, "token B never accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        post_init(&b.url, Some(TOKEN_A)).await.status().as_u16(),
        401
    );
    assert_eq!(
        post_init(&b.url, Some(TOKEN_ENV)).await.status().as_u16(),
        200
    );
}
