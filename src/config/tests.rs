//! Parse, resolve and override tests for the configuration.

use super::*;
use crate::config::remote::RemoteArgs;

pub(crate) const SAMPLE: &str = r#"
default_server = "everything"

[listen]
addresses = ["127.0.0.1:9000", "[::1]:9000"]

[limits]
call_timeout = "2m"
max_body = "1MiB"

[servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]

[servers.py]
command = "python3"
args = ["server.py"]
env = { API_KEY = "x" }
isolation = "session"

[servers.py.limits]
call_timeout = 30
"#;

#[test]
fn sample_resolves_with_per_server_limits_over_global() {
    let f = parse_toml(Path::new("t.toml"), SAMPLE).unwrap();
    let p = resolve(f, "t.toml").unwrap();
    assert_eq!(p.listen.len(), 2);
    assert_eq!(p.default_server.as_deref(), Some("everything"));
    let e = p.server("everything").unwrap();
    assert_eq!(e.limits.call_timeout, Duration::from_secs(120));
    assert_eq!(e.limits.max_body, 1 << 20);
    let py = p.server("py").unwrap();
    assert_eq!(py.limits.call_timeout, Duration::from_secs(30));
    assert_eq!(py.limits.max_body, 1 << 20);
    assert_eq!(py.isolation, Isolation::Session);
    let Target::Command(c) = &py.target else {
        panic!("{py:?}")
    };
    assert_eq!(c.env, vec![("API_KEY".into(), "x".into())]);
    assert_eq!(py.path, "/servers/py/mcp");
}

#[test]
fn unknown_key_names_line_and_column() {
    let text = "[servers.a]\ncommand = \"x\"\n  bogus = 1\n";
    let e = parse_toml(Path::new("c.toml"), text).unwrap_err();
    assert!(e.starts_with("c.toml:3:3: "), "{e}");
    assert!(e.contains("bogus"), "{e}");
}

#[test]
fn bad_duration_is_located() {
    let text = "[limits]\ncall_timeout = \"5y\"\n";
    let e = parse_toml(Path::new("c.toml"), text).unwrap_err();
    assert!(e.starts_with("c.toml:2:"), "{e}");
}

#[test]
fn names_and_defaults_are_checked() {
    let f = parse_toml(Path::new("c"), "[servers.\"a/b\"]\ncommand = \"x\"\n").unwrap();
    assert!(resolve(f, "c").is_err());
    let f = parse_toml(
        Path::new("c"),
        "default_server = \"z\"\n[servers.a]\ncommand = \"x\"\n",
    )
    .unwrap();
    assert!(resolve(f, "c").unwrap_err().contains("default_server"));
    let f = parse_toml(
        Path::new("c"),
        "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\n",
    )
    .unwrap();
    assert_eq!(resolve(f, "c").unwrap().default_server, None);
}

#[test]
fn servers_json_imports_stdio_entries() {
    let text = r#"{"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "server-fs", "/tmp"], "env": {"A": "1"}},
        "remote": {"url": "https://example.com/mcp"}
    }}"#;
    let (m, notes) = parse_servers_json(Path::new("s.json"), text).unwrap();
    assert_eq!(m.len(), 1);
    let UpstreamFile::Command(c) = &m["fs"].upstream else {
        panic!()
    };
    assert_eq!(c.args, vec!["-y", "server-fs", "/tmp"]);
    assert_eq!(notes.len(), 1);
    assert!(parse_servers_json(
        Path::new("s.json"),
        "{\"mcpServers\": {\"x\": {\"command\": 1}}}"
    )
    .is_err());
    let e = parse_servers_json(Path::new("s.json"), "{\n  oops").unwrap_err();
    assert!(e.starts_with("s.json:2:"), "{e}");
}

pub(crate) fn plan_of(text: &str) -> Result<Plan, String> {
    resolve(parse_toml(Path::new("c.toml"), text)?, "c.toml")
}

pub(crate) fn remote_of(p: &Plan, name: &str) -> RemoteConfig {
    match p.server(name).map(ServerSpec::upstream) {
        Some(UpstreamSpec::Remote(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn park_timeout_and_attribution_wait_resolve_per_server_over_global() {
    let text = "[limits]\npark_timeout = \"1m\"\nattribution_wait = \"5s\"\n\
                [servers.a]\ncommand = \"a\"\n\
                [servers.b]\ncommand = \"b\"\n[servers.b.limits]\nattribution_wait = 2\n";
    let p = plan_of(text).unwrap();
    let (a, b) = (
        &p.server("a").unwrap().limits,
        &p.server("b").unwrap().limits,
    );
    assert_eq!(
        (a.park_timeout, a.attribution_wait),
        (Duration::from_secs(60), Duration::from_secs(5))
    );
    assert_eq!(
        (b.park_timeout, b.attribution_wait),
        (Duration::from_secs(60), Duration::from_secs(2))
    );
    let UpstreamSpec::Child(c) = p.server("b").unwrap().upstream() else {
        panic!("a command server has a child")
    };
    assert_eq!(c.attribution_wait, Duration::from_secs(2));
    assert_eq!(
        p.server("a").unwrap().limits.park_timeout,
        Duration::from_secs(60)
    );
    // Defaults: today's five minutes for a park, 30 s for attribution.
    let d = Resolved::default();
    assert_eq!(
        (d.park_timeout, d.attribution_wait),
        (Duration::from_secs(300), Duration::from_secs(30))
    );
}

#[test]
fn url_server_resolves_with_connects_settings() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cr3t-token\n").unwrap();
    let text = format!(
        "[limits]\nprobe_timeout = \"4s\"\n\
         [servers.acme]\nurl = \"https://mcp.example.com/mcp\"\n\
         headers = {{ X-Tenant = \"tenant-zz\" }}\nbearer_token_file = {token:?}\n\
         protocol = \"2025-06-18\"\nconnect_timeout = \"3s\"\nrequest_timeout = \"1m\"\n\
         retry_idempotent = true\nmax_response = \"1MiB\"\nidle_timeout = 90\n\
         system_roots = true\n"
    );
    let p = plan_of(&text).unwrap();
    let r = remote_of(&p, "acme");
    assert_eq!(r.url, "https://mcp.example.com/mcp");
    assert_eq!(r.protocol.as_deref(), Some("2025-06-18"));
    assert_eq!(r.connect_timeout, Duration::from_secs(3));
    assert_eq!(r.request_timeout, Some(Duration::from_secs(60)));
    assert_eq!(r.idle_timeout, Some(Duration::from_secs(90)));
    assert_eq!(r.max_response, 1 << 20);
    assert_eq!(r.probe_timeout, Duration::from_secs(4));
    assert!(r.retry_idempotent && r.system_roots && r.has_token);
    assert_eq!(r.headers[0].0, "x-tenant");
    assert_eq!(r.headers[1].1, "Bearer s3cr3t-token");
    // Secrets are not in what could be logged.
    assert!(!format!("{p:?}").contains("s3cr3t"));
    assert!(!format!("{p:?}").contains("tenant-zz"), "{p:?}");
    assert_eq!(p.server("acme").unwrap().isolation, Isolation::Shared);
    assert_eq!(p.default_server.as_deref(), Some("acme"));

    // Defaults: connect's.
    let p = plan_of("[servers.r]\nurl = \"http://127.0.0.1:9/mcp\"\n").unwrap();
    let r = remote_of(&p, "r");
    let d = RemoteArgs::default();
    assert_eq!(r.connect_timeout, d.connect_timeout);
    assert_eq!(r.max_response, d.max_response);
    assert_eq!(
        (r.protocol, r.request_timeout, r.has_token),
        (None, None, false)
    );
    assert_eq!(r.probe_timeout, Resolved::default().probe_timeout);
}

#[test]
fn url_server_mistakes_are_located() {
    let both = "[servers.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n";
    let e = plan_of(both).unwrap_err();
    assert!(
        e.starts_with("c.toml:1:1: ") && e.contains("not both"),
        "{e}"
    );
    let e = plan_of("[servers.a]\nargs = []\n").unwrap_err();
    assert!(e.starts_with("c.toml:1:1: ") && e.contains("needs"), "{e}");
    let e = plan_of("[servers.a]\n\nurl = \"ftp://h/mcp\"\n").unwrap_err();
    assert!(e.starts_with("c.toml:3:7: "), "{e}");
    let e = plan_of("[servers.a]\nurl = \"https://u:pw@h/mcp\"\n").unwrap_err();
    assert!(e.starts_with("c.toml:2:") && !e.contains("pw"), "{e}");
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nisolation = \"session\"\n").unwrap_err();
    assert!(e.starts_with("c.toml:1:1: ") && e.contains("shared"), "{e}");
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nargs = [\"x\"]\n").unwrap_err();
    assert!(e.contains("`args` belongs to a `command` server"), "{e}");
    let e = plan_of("[servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n").unwrap_err();
    assert!(e.contains("`headers` belongs to a `url` server"), "{e}");
    let e =
        plan_of("[servers.a]\ncommand = \"x\"\n[servers.a.oauth]\nscope = \"s\"\n").unwrap_err();
    assert!(e.contains("`oauth` belongs to a `url` server"), "{e}");
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\n[servers.a.oauth]\nbrowser = true\n")
        .unwrap_err();
    assert!(e.contains("unknown field `browser`"), "{e}");
    let p = plan_of(
        "[servers.a]\nurl = \"http://h/mcp\"\n[servers.a.oauth]\nenabled = true\nscope = \"s\"\n\
         dir = \"/d\"\nparams = { audience = \"x\" }\n",
    )
    .unwrap();
    let Target::Url(r) = &p.servers[0].target else {
        panic!("not a url server")
    };
    let o = r.0.oauth.as_deref().expect("oauth settings");
    assert!(!o.login.interactive, "a daemon never opens a browser");
    assert_eq!(o.scope.as_deref(), Some("s"));
    assert_eq!(
        o.login.params,
        vec![("audience".to_owned(), "x".to_owned())]
    );
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nheaders = { \"Bad Name\" = \"v\" }\n")
        .unwrap_err();
    assert!(e.starts_with("c.toml:3:") && e.contains("Bad Name"), "{e}");
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nheaders = { A = \"x\\u0001hidden\" }\n")
        .unwrap_err();
    assert!(e.starts_with("c.toml:3:") && !e.contains("hidden"), "{e}");
    let e =
        plan_of("[servers.a]\nurl = \"http://h/mcp\"\nprotocol = \"2024-01-01\"\n").unwrap_err();
    assert!(e.starts_with("c.toml:3:"), "{e}");
    // Files are read while resolving: not located, but named.
    let e =
        plan_of("[servers.a]\nurl = \"http://h/mcp\"\nbearer_token_file = \"/nonexistent/t\"\n")
            .unwrap_err();
    assert!(
        e.starts_with("c.toml: server \"a\": bearer_token_file /nonexistent/t"),
        "{e}"
    );
}

#[test]
fn a_changed_url_header_or_token_makes_a_different_spec() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "one\n").unwrap();
    let text = |url: &str, tenant: &str| {
        format!(
            "[servers.r]\nurl = {url:?}\nheaders = {{ X-Tenant = {tenant:?} }}\n\
             bearer_token_file = {token:?}\n"
        )
    };
    let spec = |t: &str| plan_of(t).unwrap().servers.remove(0);
    let base = spec(&text("http://h/mcp", "a"));
    assert_eq!(base, spec(&text("http://h/mcp", "a")));
    assert_ne!(base, spec(&text("http://h/other", "a")));
    assert_ne!(base, spec(&text("http://h/mcp", "b")));
    std::fs::write(&token, "two\n").unwrap();
    assert_ne!(base, spec(&text("http://h/mcp", "a")));
}
