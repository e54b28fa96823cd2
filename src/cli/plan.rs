//! `serve`'s flags become a [`Plan`]: plain `serve` (`-- CMD`, `--demo`, `--upstream URL`) is
//! a one-server plan ([`solo`]); with a configuration file, which flags the file excludes
//! (`check_overrides`), which need `--upstream` or a child (`check_solo`), and each explicit
//! flag applied over the plan the file gave (`apply_overrides`). Here, in `cli`, because
//! `config` reads files and never looks at flags: `config` sits below `cli`.

use std::net::SocketAddr;
use std::time::Duration;

use std::path::PathBuf;

use super::ServeArgs;
use crate::config::oauth::{oauth_ids, with_login};
use crate::config::remote::{self, Naming};
use crate::config::{pool, CommandSpec, Isolation, Plan, RemoteSpec, Resolved, ServerSpec, Target};
use crate::upstream::pool::PoolSize;

/// `serve` flags given explicitly on the command line (or by environment), by clap argument id.
pub type Given = std::collections::HashSet<String>;

/// Plain `serve` (`-- CMD`, `--demo`, `--upstream URL`): one server, from the flags. Errors
/// are usage errors (they name flags).
pub fn solo(args: &ServeArgs) -> Result<Plan, String> {
    if !args.path.starts_with('/') {
        return Err(format!("--path must start with '/': {:?}", args.path));
    }
    if args.demo && !args.command.is_empty() {
        return Err("give either --demo or a command after --, not both".into());
    }
    if args.upstream.is_none() {
        let pool = args.pool_size();
        pool.check()?;
        pool::fits(pool, args.isolation)?;
    }
    let child = |command: PathBuf, a: Vec<String>| {
        Target::Command(CommandSpec {
            command,
            args: a,
            env: args.env.clone(),
            pass_environment: args.pass_environment,
            cwd: args.cwd.clone(),
            pool: args.pool_size(),
        })
    };
    let target = if let Some(url) = &args.upstream {
        let cfg = args.remote.config(url, args.probe_timeout, Naming::Flags)?;
        Target::Url(RemoteSpec(with_login(cfg, &args.oauth, true)?))
    } else if args.demo {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
        let era = args.demo_era.as_str().to_owned();
        child(exe, vec!["demo-server".into(), "--era".into(), era])
    } else {
        let Some((cmd, rest)) = args.command.split_first() else {
            return Err(
                "no server to publish: give --demo, `-- CMD ARGS`, --upstream URL \
                        or --config FILE"
                    .into(),
            );
        };
        child(PathBuf::from(cmd), rest.to_vec())
    };
    let limits = Resolved {
        call_timeout: args.call_timeout,
        start_wait: args.start_wait,
        probe_timeout: args.probe_timeout,
        park_timeout: args.park_timeout,
        attribution_wait: args.attribution_wait,
        session_timeout: args.session_timeout,
        max_sessions: args.max_sessions.max(1),
        max_body: args.max_body,
        max_line: args.max_line,
        shutdown_grace: args.shutdown_grace,
        stdin_grace: args.stdin_grace,
        term_grace: args.term_grace,
        keepalive: args.keepalive.max(Duration::from_millis(100)),
        replay: replay_from(args, &|_| true, crate::config::limits::Replay::default()),
    };
    Ok(Plan {
        listen: vec![args.addr()],
        allow_origins: args.allow_origin.clone(),
        auth: args.auth.clone(),
        public_url: None,
        metrics_listen: args.metrics_listen,
        metrics_on_main: args.metrics_on_main,
        shutdown_grace: args.shutdown_grace,
        conn: args.conn_limits(),
        default_server: None,
        servers: vec![ServerSpec {
            name: args.name.clone(),
            path: args.path.clone(),
            target,
            isolation: args.isolation,
            limits,
        }],
        solo: true,
        cluster_key_file: args.cluster_key_file.clone(),
        advertise_url: args.advertise_url.clone(),
        cluster_ca_file: args.cluster_ca_file.clone(),
        audit: None,
    })
}

/// Flags that have no meaning next to a configuration file (besides the remote ones).
const NOT_WITH_CONFIG: &[&str] = &["path", "demo", "demo_era", "name", "command", "upstream"];

/// Flags for a stdio child, which `--upstream URL` does not have.
const CHILD_ONLY: &[&str] = &[
    "env",
    "pass_environment",
    "cwd",
    "demo_era",
    "max_line",
    "attribution_wait",
    "stdin_grace",
    "term_grace",
    "pool_min",
    "pool_max",
    "pool_idle",
];

/// How a `serve` flag is written, from its clap id.
fn flag_name(id: &str) -> String {
    match id {
        "command" => "a command after --".into(),
        "header" => "-H/--header".into(),
        "env" => "-e/--env".into(),
        _ => format!("--{}", id.replace('_', "-")),
    }
}

/// Check that the explicit flags make sense with a configuration file. The remote flags are
/// refused too: a url server's headers and token belong to it, not to every server.
pub fn check_overrides(given: &Given) -> Result<(), String> {
    let remote = remote::ids().into_iter().chain(oauth_ids());
    let not = NOT_WITH_CONFIG.iter().map(|s| s.to_string()).chain(remote);
    for f in not {
        if given.contains(&f) {
            return Err(format!(
                "{} cannot be combined with --config/--servers-json: define servers in the file",
                flag_name(&f)
            ));
        }
    }
    Ok(())
}

/// Check that the explicit flags make sense for plain `serve`: the remote flags need
/// `--upstream`, which in turn has no child for the child flags.
pub fn check_solo(args: &ServeArgs, given: &Given) -> Result<(), String> {
    if args.upstream.is_none() {
        let mut remote = remote::ids().into_iter().chain(oauth_ids());
        if let Some(f) = remote.find(|f| given.contains(f)) {
            return Err(format!(
                "{} belongs to --upstream URL (a remote server)",
                flag_name(&f)
            ));
        }
        return Ok(());
    }
    if let Some(f) = CHILD_ONLY.iter().find(|f| given.contains(**f)) {
        return Err(format!(
            "{} is for a stdio child; --upstream URL has none",
            flag_name(f)
        ));
    }
    if args.isolation == Isolation::Session {
        return Err(
            "--isolation session starts a child per session; a remote upstream is shared".into(),
        );
    }
    Ok(())
}

/// Each flag given on the command line replaces the field of the same name:
/// `given!(g, to <- from: field, …)` with `g` the "was this flag given" test.
macro_rules! given {
    ($g:ident, $to:ident <- $from:ident: $($f:ident),+) => {
        $(if $g(stringify!($f)) {
            $to.$f = $from.$f.clone();
        })+
    };
}

/// Whether the flag of a clap id was given explicitly.
type GivenFn<'a> = dyn Fn(&str) -> bool + 'a;

/// Apply the explicit flags of `args` over `plan`: listeners, origins, auth and TLS replace the
/// file's; limits and isolation apply to every server, the child environment settings to every
/// command server. `--isolation session` over a url server is an error.
pub fn apply_overrides(plan: &mut Plan, args: &ServeArgs, given: &Given) -> Result<(), String> {
    let g = |id: &str| given.contains(id);
    apply_listen(plan, args, &g);
    apply_auth(plan, args, &g);
    apply_daemon(plan, args, &g);
    apply_conn_limits(plan, args, &g);
    for s in &mut plan.servers {
        apply_server(s, args, &g)?;
    }
    Ok(())
}

/// The listeners (`--host` replaces them, `--port` alone re-ports each) and `--allow-origin`.
fn apply_listen(plan: &mut Plan, args: &ServeArgs, g: &GivenFn) {
    match (g("host"), g("port")) {
        (true, _) => plan.listen = vec![SocketAddr::new(args.host, args.port)],
        (false, true) => plan.listen.iter_mut().for_each(|a| a.set_port(args.port)),
        _ => {}
    }
    if g("allow_origin") {
        plan.allow_origins = args.allow_origin.clone();
    }
}

/// The auth flags, TLS (certificate and key as a pair) and `--resource-url`.
fn apply_auth(plan: &mut Plan, args: &ServeArgs, g: &GivenFn) {
    let a = &args.auth;
    let p = &mut plan.auth;
    given!(g, p <- a: auth, token_file, token_env, jwks_url, jwks_file, issuer, audience,
        required_scope, authorization_server, allow_unauthenticated);
    if g("tls_cert") || g("tls_key") {
        p.tls_cert = a.tls_cert.clone();
        p.tls_key = a.tls_key.clone();
    }
    if g("resource_url") {
        // With named servers the flag gives the base every server's path is appended to.
        plan.public_url = a.resource_url.clone();
    }
}

/// The daemon-wide settings: shutdown grace, the metrics listener, the cluster's files and URL.
fn apply_daemon(plan: &mut Plan, args: &ServeArgs, g: &GivenFn) {
    given!(g, plan <- args: shutdown_grace, metrics_listen, metrics_on_main);
    if g("cluster_key_file") {
        plan.cluster_key_file = args.cluster_key_file.clone();
    }
    if g("advertise_url") {
        plan.advertise_url = args.advertise_url.clone();
    }
    if g("cluster_ca_file") {
        plan.cluster_ca_file = args.cluster_ca_file.clone();
    }
}

/// The connection limits every listener applies (clocks, caps, HTTP/2 limits).
fn apply_conn_limits(plan: &mut Plan, args: &ServeArgs, g: &GivenFn) {
    let c = &mut plan.conn;
    let flags = args.conn_limits();
    if g("header_timeout") {
        c.header_timeout = flags.header_timeout;
    }
    if g("body_timeout") {
        c.body_timeout = flags.body_timeout;
    }
    if g("http_idle_timeout") {
        c.idle_timeout = flags.idle_timeout;
    }
    if g("max_connections") {
        c.max_connections = flags.max_connections;
    }
    if g("max_streams") {
        c.max_streams = flags.max_streams;
    }
    if g("h2_max_concurrent_streams") {
        c.h2.max_concurrent_streams = flags.h2.max_concurrent_streams;
    }
    if g("h2_max_header_list_size") {
        c.h2.max_header_list = flags.h2.max_header_list;
    }
    if g("h2_max_pending_resets") {
        c.h2.max_pending_resets = flags.h2.max_pending_resets;
    }
}

/// One server: its limits, its isolation (`session` refused over a url server) and, for a
/// command server, the child's environment, directory and pool.
fn apply_server(s: &mut ServerSpec, args: &ServeArgs, g: &GivenFn) -> Result<(), String> {
    let l = &mut s.limits;
    given!(g, l <- args: call_timeout, start_wait, probe_timeout, session_timeout);
    given!(g, l <- args: park_timeout, attribution_wait);
    if g("max_sessions") {
        l.max_sessions = args.max_sessions.max(1);
    }
    given!(g, l <- args: max_body, max_line, stdin_grace, term_grace);
    if g("keepalive") {
        l.keepalive = args.keepalive.max(Duration::from_millis(100));
    }
    l.replay = replay_from(args, g, l.replay);
    if g("isolation") {
        if args.isolation == Isolation::Session && matches!(s.target, Target::Url(_)) {
            return Err(format!(
                "--isolation session cannot apply to url server {:?}: a remote server is \
                 shared by every session",
                s.name
            ));
        }
        s.isolation = args.isolation;
    }
    if let Target::Command(c) = &mut s.target {
        given!(g, c <- args: pass_environment, cwd);
        override_with(&mut c.pool, args, g).map_err(|e| format!("server {:?}: {e}", s.name))?;
        pool::fits(c.pool, s.isolation).map_err(|e| format!("server {:?}: {e}", s.name))?;
        if g("env") {
            for (k, v) in &args.env {
                c.env.retain(|(k2, _)| k2 != k);
                c.env.push((k.clone(), v.clone()));
            }
        }
    }
    Ok(())
}

/// The pool flags given on the command line over a server's `pool` from the file; `given`
/// says which flags were.
fn override_with(
    p: &mut PoolSize,
    args: &ServeArgs,
    given: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let flags = args.pool_size();
    if given("pool_min") {
        p.min = flags.min;
        p.max = p.max.max(p.min);
    }
    if given("pool_max") {
        p.max = flags.max;
    }
    if given("pool_idle") {
        p.idle = flags.idle;
    }
    p.check()
}

/// The SSE resumability settings: each `--sse-*` flag `g` says was given over `base`.
fn replay_from(
    args: &ServeArgs,
    g: &GivenFn,
    base: crate::config::limits::Replay,
) -> crate::config::limits::Replay {
    let pick = |id: &str| g(id);
    crate::config::limits::Replay::new(
        Some(if pick("sse_retry") {
            args.sse_retry
        } else {
            base.retry
        }),
        Some(if pick("sse_close_after") {
            args.sse_close_after
        } else {
            base.close_after.unwrap_or(Duration::ZERO)
        }),
        Some(if pick("sse_replay_events") {
            args.sse_replay_events
        } else {
            base.max_events
        }),
        Some(if pick("sse_replay_bytes") {
            args.sse_replay_bytes
        } else {
            base.max_bytes
        }),
        Some(if pick("sse_replay_age") {
            args.sse_replay_age
        } else {
            base.max_age
        }),
    )
}
