//! The configuration file against the real binary: `check-config` exit codes and messages,
//! three named servers behind one listener with a default at `/mcp`, `--servers-json`
//! import, and command-line flags overriding the file.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;

fn check(args: &[&str]) -> (i32, String, String) {
    let out = Bridge::builder()
        .no_log_level()
        .sub(["check-config"])
        .args(args)
        .output();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.toml",
        &format!("{}{}", demo_server("a", &[]), demo_server("b", &[])),
    );
    let (code, out, err) = check(&[good.to_str().unwrap()]);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("ok (2 servers: a, b)"), "{out}");

    // An unknown key: 78, located at file:line:column.
    let text = format!("{}  colour = \"blue\"\n", demo_server("a", &[]));
    let bad = write(dir.path(), "bad.toml", &text);
    let (code, _, err) = check(&[bad.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains(&format!("{}:4:3:", bad.display())), "{err}");
    assert!(err.contains("colour"), "{err}");

    // Semantic errors are 78 too.
    let text = format!("default_server = \"zz\"\n{}", demo_server("a", &[]));
    let bad = write(dir.path(), "default.toml", &text);
    let (code, _, err) = check(&[bad.to_str().unwrap()]);
    assert_eq!(code, 78);
    assert!(err.contains("default_server"), "{err}");
    let empty = write(dir.path(), "empty.toml", "");
    assert_eq!(check(&[empty.to_str().unwrap()]).0, 78);
    assert_eq!(check(&["/nonexistent/mcp-bridge.toml"]).0, 78);
    let bad_auth = write(
        dir.path(),
        "auth.toml",
        &format!(
            "[auth]\nmode = \"bearer\"\ntoken_file = \"/nonexistent/tokens\"\n{}",
            demo_server("a", &[])
        ),
    );
    assert_eq!(check(&[bad_auth.to_str().unwrap()]).0, 78);

    // Usage errors: 64.
    assert_eq!(check(&[]).0, 64);
    assert_eq!(check(&["--no-such-flag", good.to_str().unwrap()]).0, 64);
    let st = Bridge::builder()
        .no_log_level()
        .args(["serve", "--config", good.to_str().unwrap(), "--demo"])
        .output();
    assert_eq!(st.status.code(), Some(64));
    let st = Bridge::builder()
        .no_log_level()
        .args(["serve", "--config", bad.to_str().unwrap()])
        .output();
    assert_eq!(st.status.code(), Some(78));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_named_servers_and_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "default_server = \"two\"\n{}{}{}",
        demo_server("one", &[]),
        demo_server("two", &["--era", "legacy"]),
        demo_server("three", &["--era", "modern"]),
    );
    let cfg = write(dir.path(), "three.toml", &text);
    let b = daemon(&cfg).await;
    b.wait_ready(Duration::from_secs(20)).await;
    let c = client();
    for name in ["one", "two", "three"] {
        let r = echo_until_ok(&c, &server_url(&b, name), name, Duration::from_secs(20)).await;
        assert!(echoed(&r, name), "{name}: {r:?}\nlog:\n{}", b.log.dump());
    }
    // /mcp is the default server: a 2025 session there is served by the legacy child.
    let s = Session::open(&c, &b.endpoint("/mcp")).await;
    let r = s
        .call(json!(1), "echo", json!({"text": "via default"}))
        .await;
    assert_eq!(r.text(), "via default");
    assert_eq!(child_pids(&b, "two").len(), 1);
    assert!(b.log.find("child started server=two").is_some());
    // A session belongs to its server: the same id on another server is unknown there.
    let mut h = s.headers();
    h.insert("mcp-session-id", hv(&s.id));
    let other = post_with(
        &c,
        &server_url(&b, "one"),
        h,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}).to_string(),
    )
    .await;
    assert_eq!(other.status, 404, "{other:?}");
    // Unknown servers and paths: 404.
    let r = call_modern(
        &c,
        &server_url(&b, "four"),
        json!(1),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = c.get(b.endpoint("/servers/one")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_json_import_and_flag_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let json_text = json!({"mcpServers": {
        "alpha": {"command": bin(), "args": ["demo-server"], "env": {"DEMO_MARK": "1"}},
        "beta": {"command": bin(), "args": ["demo-server", "--era", "legacy"]},
        "web": {"url": "https://example.com/mcp"}
    }});
    let js = write(dir.path(), "hosts.json", &json_text.to_string());
    // The TOML file sets a long call timeout; --call-timeout on the command line wins.
    let cfg = write(
        dir.path(),
        "base.toml",
        "[limits]\ncall_timeout = \"10m\"\n",
    );
    let b = daemon_builder(
        &cfg,
        &[
            "--servers-json",
            js.to_str().unwrap(),
            "--port",
            "0",
            "--call-timeout",
            "1s",
        ],
    )
    .env("MCP_TEST_UNUSED", "1")
    .spawn()
    .await;
    b.wait_ready(Duration::from_secs(20)).await;
    let c = client();
    for name in ["alpha", "beta"] {
        let r = echo_until_ok(&c, &server_url(&b, name), name, Duration::from_secs(20)).await;
        assert!(echoed(&r, name), "{name}: {r:?}");
    }
    assert!(
        b.log.find("\"web\" has no command").is_some(),
        "{}",
        b.log.dump()
    );
    // No default with two servers.
    let r = call_modern(
        &c,
        &b.endpoint("/mcp"),
        json!(1),
        "echo",
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = call_modern(
        &c,
        &server_url(&b, "alpha"),
        json!(9),
        "slow",
        json!({"seconds": 5, "steps": 0}),
    )
    .await;
    assert!(
        r.raw.contains("timed out"),
        "--call-timeout 1s should win over the file: {r:?}"
    );
}

#[test]
fn check_config_url_servers() {
    let dir = tempfile::tempdir().unwrap();
    let token = write(dir.path(), "token", "tok-s3cr3t-value\n");
    let text = format!(
        "{}[servers.remote]\nurl = \"https://mcp.example.com/mcp\"\n\
         headers = {{ X-Api-Key = \"hdr-s3cr3t-value\" }}\nbearer_token_file = {:?}\n\
         protocol = \"2025-11-25\"\nrequest_timeout = \"2m\"\n",
        demo_server("a", &[]),
        token
    );
    let good = write(dir.path(), "url.toml", &text);
    let (code, out, err) = check(&[good.to_str().unwrap()]);
    assert_eq!(code, 0, "stderr: {err}");
    assert!(out.contains("ok (2 servers: a, remote)"), "{out}");
    assert!(!format!("{out}{err}").contains("s3cr3t"), "{out}{err}");

    // A bad URL: 78, located at the value, without repeating it.
    let bad = write(
        dir.path(),
        "badurl.toml",
        "[servers.r]\nurl = \"https://user:s3cr3t@h/mcp\"\n",
    );
    let (code, _, err) = check(&[bad.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains(&format!("{}:2:7:", bad.display())), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");

    // Exactly one of command and url, located at the table.
    let both = write(
        dir.path(),
        "both.toml",
        "[servers.r]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n",
    );
    let (code, _, err) = check(&[both.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains(&format!("{}:1:1:", both.display())), "{err}");
    let neither = write(dir.path(), "neither.toml", "[servers.r]\nargs = []\n");
    assert_eq!(check(&[neither.to_str().unwrap()]).0, 78);

    // A remote is shared: no child per session.
    let iso = write(
        dir.path(),
        "iso.toml",
        "[servers.r]\nurl = \"http://h/mcp\"\nisolation = \"session\"\n",
    );
    let (code, _, err) = check(&[iso.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("shared"), "{err}");

    // The token is read: a missing file or variable is 78.
    let missing = write(
        dir.path(),
        "missing.toml",
        "[servers.r]\nurl = \"http://h/mcp\"\nbearer_token_file = \"/nonexistent/token\"\n",
    );
    let (code, _, err) = check(&[missing.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("bearer_token_file /nonexistent/token"),
        "{err}"
    );
    let unset = write(
        dir.path(),
        "unset.toml",
        "[servers.r]\nurl = \"http://h/mcp\"\nbearer_token_env = \"MCPB_TEST_SURELY_UNSET\"\n",
    );
    let out = Bridge::builder()
        .no_log_level()
        .args(["check-config", unset.to_str().unwrap()])
        .env_remove("MCPB_TEST_SURELY_UNSET")
        .output();
    assert_eq!(out.status.code(), Some(78));
    let out = Bridge::builder()
        .no_log_level()
        .args(["check-config", unset.to_str().unwrap()])
        .env("MCPB_TEST_SURELY_UNSET", "tok-from-env")
        .output();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn serve_upstream_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "a.toml", &demo_server("a", &[]));
    let cfg = cfg.to_str().unwrap();
    let up = "http://127.0.0.1:9/mcp";
    let cases: &[&[&str]] = &[
        &["--upstream", up, "--demo"],
        &["--upstream", up, "--", "cat"],
        &["--upstream", up, "--config", cfg],
        &["--config", cfg, "-H", "X-A: b"],
        &["--config", cfg, "--bearer-token-env", "V"],
        &["--demo", "-H", "X-A: b"],
        &["--demo", "--connect-timeout", "1s"],
        &["--upstream", "ftp://h/mcp"],
        &["--upstream", up, "--isolation", "session"],
        &["--upstream", up, "-e", "A=1"],
        &["--upstream", up, "-H", "Bad Name: x"],
        &[
            "--upstream",
            up,
            "--bearer-token-file",
            "/nonexistent/token",
        ],
        &[
            "--upstream",
            up,
            "--bearer-token-env",
            "MCPB_TEST_SURELY_UNSET",
        ],
        &["--upstream", up, "--protocol", "2024-01-01"],
    ];
    for args in cases {
        let out = Bridge::builder()
            .no_log_level()
            .args(["serve", "--port", "0"])
            .args(*args)
            .env_remove("MCPB_TEST_SURELY_UNSET")
            .output();
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // serve and connect take the same remote flags.
    let help = |sub: &str| {
        let out = Bridge::builder()
            .no_log_level()
            .args([sub, "--help"])
            .output();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (serve, connect) = (help("serve"), help("connect"));
    assert!(serve.contains("--upstream <URL>"), "{serve}");
    for flag in [
        "--header <NAME: VALUE>",
        "--header-file <FILE>",
        "--bearer-token-file <FILE>",
        "--bearer-token-env <VAR>",
        "--protocol <PROTOCOL>",
        "--ca-file <FILE>",
        "--system-roots",
        "--connect-timeout <CONNECT_TIMEOUT>",
        "--request-timeout <REQUEST_TIMEOUT>",
        "--retry-idempotent",
        "--max-response <MAX_RESPONSE>",
        "--idle-timeout <IDLE_TIMEOUT>",
        "--probe-timeout <PROBE_TIMEOUT>",
    ] {
        assert!(serve.contains(flag), "serve --help lacks {flag}");
        assert!(connect.contains(flag), "connect --help lacks {flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listen_address_is_bound_logged_and_served() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "two.toml",
        &format!(
            "[listen]\naddresses = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n{}",
            demo_server("a", &[])
        ),
    );
    let b = daemon_builder(&cfg, &[]).spawn().await;
    // Logged after every listener's line.
    b.log.expect("servers: ", Duration::from_secs(20)).await;
    let ls = b.listeners();
    assert_eq!(ls.len(), 2, "log:\n{}", b.log.dump());
    assert_eq!(ls[0].0, b.addr);
    assert_ne!(ls[0].0.port(), ls[1].0.port());
    let c = client();
    for (addr, _) in &ls {
        let url = format!("http://{addr}/servers/a/mcp");
        let r = echo_until_ok(&c, &url, "on both", Duration::from_secs(20)).await;
        assert!(
            echoed(&r, "on both"),
            "{addr}: {r:?}\nlog:\n{}",
            b.log.dump()
        );
    }
}
