//! Tests of `serve`'s flags as a plan: plain `serve` as a one-server plan, flags over a
//! configuration file, flags that do not belong.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::plan::*;
use super::ServeArgs;
use crate::config::tests::{plan_of, remote_of, SAMPLE};
use crate::config::*;
use crate::upstream::UpstreamSpec;

#[test]
fn explicit_flags_override_the_file() {
    use clap::Parser;
    let f = parse_toml(Path::new("t.toml"), SAMPLE).unwrap();
    let mut p = resolve(f, "t.toml").unwrap();
    let cli = crate::cli::Cli::try_parse_from([
        "mcp-bridge",
        "serve",
        "--port",
        "9100",
        "--call-timeout",
        "7s",
        "--issuer",
        "https://as.example",
        "--shutdown-grace",
        "3s",
        "--max-line",
        "1000",
        "--pass-environment",
    ])
    .unwrap();
    let crate::cli::Command::Serve(args) = cli.command else {
        panic!()
    };
    let given: Given = [
        "port",
        "call_timeout",
        "issuer",
        "shutdown_grace",
        "max_line",
        "pass_environment",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    apply_overrides(&mut p, &args, &given).unwrap();
    assert!(p.listen.iter().all(|a| a.port() == 9100));
    assert!(p
        .servers
        .iter()
        .all(|s| s.limits.call_timeout == Duration::from_secs(7)));
    assert_eq!(p.auth.issuer.as_deref(), Some("https://as.example"));
    assert_eq!(p.shutdown_grace, Duration::from_secs(3));
    assert!(p.servers.iter().all(|s| s.limits.max_line == 1000
        && matches!(&s.target, Target::Command(c) if c.pass_environment)));
    // Not given: the file's value stays.
    assert_eq!(p.server("py").unwrap().limits.max_body, 1 << 20);
    assert!(check_overrides(&["demo".to_string()].into_iter().collect()).is_err());
}

fn serve_args(args: &[&str]) -> ServeArgs {
    use clap::Parser;
    let cli = crate::cli::Cli::try_parse_from(["mcp-bridge", "serve"].iter().chain(args)).unwrap();
    let crate::cli::Command::Serve(a) = cli.command else {
        panic!()
    };
    *a
}

#[test]
fn plain_serve_is_a_one_server_plan() {
    let p = solo(&serve_args(&[
        "--port", "0", "--path", "/x", "-e", "A=1", "--name", "n", "--", "node", "s.js",
    ]))
    .unwrap();
    assert!(p.solo);
    assert_eq!(p.listen, vec![SocketAddr::from(([127, 0, 0, 1], 0))]);
    let s = &p.servers[0];
    assert_eq!((s.name.as_str(), s.path.as_str()), ("n", "/x"));
    let Some(UpstreamSpec::Child(c)) = p.server("n").map(ServerSpec::upstream) else {
        panic!()
    };
    assert_eq!(c.command, PathBuf::from("node"));
    assert_eq!(c.args, vec!["s.js"]);
    assert_eq!(c.env, vec![("A".into(), "1".into())]);
    assert_eq!(s.path, "/x");
    // Same limits as a config file's defaults.
    assert_eq!(s.limits, Resolved::default());

    let p = solo(&serve_args(&["--demo", "--demo-era", "legacy"])).unwrap();
    let Some(UpstreamSpec::Child(c)) = p.server("default").map(ServerSpec::upstream) else {
        panic!()
    };
    assert_eq!(c.args, vec!["demo-server", "--era", "legacy"]);

    let a = serve_args(&[
        "--upstream",
        "https://h/mcp",
        "-H",
        "X-A: b",
        "--probe-timeout",
        "2s",
    ]);
    let r = remote_of(&solo(&a).unwrap(), "default");
    assert_eq!(r.headers[0].0, "x-a");
    assert_eq!(r.probe_timeout, Duration::from_secs(2));

    assert!(solo(&serve_args(&[])).unwrap_err().contains("no server"));
    assert!(solo(&serve_args(&["--demo", "--path", "x"])).is_err());
    assert!(solo(&serve_args(&["--demo", "--", "node"])).is_err());
    assert!(solo(&serve_args(&["--upstream", "ftp://h/x"])).is_err());
}

#[test]
fn flags_that_do_not_belong_are_refused() {
    let given = |ids: &[&str]| -> Given { ids.iter().map(|s| s.to_string()).collect() };
    let demo = serve_args(&["--demo", "-H", "X: y"]);
    let e = check_solo(&demo, &given(&["demo", "header"])).unwrap_err();
    assert!(e.contains("-H/--header") && e.contains("--upstream"), "{e}");
    let up = serve_args(&["--upstream", "http://h/mcp", "-e", "A=1"]);
    let e = check_solo(&up, &given(&["upstream", "env"])).unwrap_err();
    assert!(e.contains("-e/--env"), "{e}");
    let up = serve_args(&["--upstream", "http://h/mcp", "--isolation", "session"]);
    assert!(check_solo(&up, &given(&["upstream", "isolation"])).is_err());
    let up = serve_args(&["--upstream", "http://h/mcp", "--connect-timeout", "1s"]);
    assert!(check_solo(&up, &given(&["upstream", "connect_timeout"])).is_ok());
    let e = check_overrides(&given(&["bearer_token_env"])).unwrap_err();
    assert!(e.contains("--bearer-token-env"), "{e}");

    // --isolation session cannot reach a url server of the file.
    let mut p = plan_of("[servers.r]\nurl = \"http://h/mcp\"\n").unwrap();
    let a = serve_args(&["--isolation", "session"]);
    assert!(apply_overrides(&mut p, &a, &given(&["isolation"])).is_err());
    let a = serve_args(&["-e", "A=1", "--call-timeout", "1s"]);
    apply_overrides(&mut p, &a, &given(&["env", "call_timeout"])).unwrap();
    assert_eq!(p.servers[0].limits.call_timeout, Duration::from_secs(1));
}

#[test]
fn a_pool_comes_from_its_table_and_the_flags_over_it() {
    let text = "[servers.a]\ncommand = \"a\"\npool = { max = 4, idle = \"2m\" }\n\
                [servers.b]\ncommand = \"b\"\n";
    let mut p = plan_of(text).unwrap();
    let pool = |p: &Plan, n: &str| match p.server(n).map(ServerSpec::upstream) {
        Some(UpstreamSpec::Child(c)) => c.pool,
        other => panic!("{other:?}"),
    };
    let a = pool(&p, "a");
    assert_eq!((a.min, a.max, a.idle), (1, 4, Duration::from_secs(120)));
    assert_eq!(pool(&p, "b"), PoolSize::default());
    // --pool-min over the file raises max where it would fall below.
    let args = serve_args(&["--pool-min", "6"]);
    let given: Given = ["pool_min".to_owned()].into_iter().collect();
    apply_overrides(&mut p, &args, &given).unwrap();
    assert_eq!((pool(&p, "a").min, pool(&p, "a").max), (6, 6));
    assert!(plan_of("[servers.a]\ncommand = \"a\"\npool = { min = 0 }\n").is_err());
    assert!(plan_of("[servers.a]\ncommand = \"a\"\npool = { most = 2 }\n").is_err());
    let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\npool = { max = 2 }\n").unwrap_err();
    assert!(e.contains("`pool` belongs to a `command` server"), "{e}");
    let e = plan_of("[servers.a]\ncommand = \"a\"\nisolation = \"session\"\npool = { max = 2 }\n")
        .unwrap_err();
    assert!(e.contains("exclude each other"), "{e}");
}
