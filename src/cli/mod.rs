//! The command line: subcommands and their flags. `serve`'s become a [`crate::config::Plan`]
//! ([`plan`]: `solo`, or the file's with the flags over it). The remote and OAuth flags
//! `connect` and `serve --upstream` share are `config::remote`'s and `config::oauth`'s (a
//! config file's `url` server fills the same structs), value parsers `config::units`'.

pub mod connect;
pub mod plan;
#[cfg(test)]
mod plan_tests;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::config::units::{duration_from_secs, parse_duration, parse_kv, parse_size};
pub use crate::config::Isolation;

#[derive(Debug, Parser)]
#[command(
    name = "mcp-bridge",
    version,
    about = "Bridge MCP transports: publish a stdio server over Streamable HTTP (both protocol eras)"
)]
pub struct Cli {
    /// Log filter for stderr (error, warn, info, debug, trace, or a RUST_LOG-style filter).
    #[arg(long, global = true, env = "MCP_BRIDGE_LOG", default_value = "info")]
    pub log_level: String,
    /// Log line format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "MCP_BRIDGE_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: crate::telemetry::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Publish a stdio MCP server (or a remote one) as a Streamable HTTP endpoint.
    Serve(Box<ServeArgs>),
    /// Run the built-in demo MCP server on stdin/stdout (both protocol eras).
    DemoServer(DemoArgs),
    /// Validate a configuration file: exit 0, or 78 with the error.
    CheckConfig(CheckConfigArgs),
    /// Be a stdio MCP server for a host, forwarding to a remote Streamable HTTP server.
    Connect(Box<connect::ConnectArgs>),
    /// The OAuth logins `connect` keeps: see them, remove them.
    #[command(subcommand)]
    Auth(AuthCommand),
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Log in to a server now, as connect would on its first request (the same flags), and
    /// keep the login for later runs.
    Login(Box<connect::ConnectArgs>),
    /// Servers logged in to: resource, authorization server, client, scopes, expiry (never a
    /// token).
    Status(AuthStatusArgs),
    /// Forget every login (tokens and client registration) kept for a server URL.
    Logout(AuthLogoutArgs),
}

#[derive(Debug, Args)]
pub struct AuthStatusArgs {
    /// Only this server URL (as given to `connect`).
    pub url: Option<String>,
    /// Where logins are kept (as connect's --oauth-dir).
    #[arg(long, value_name = "DIR")]
    pub oauth_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AuthLogoutArgs {
    /// The server URL (as given to `connect`).
    pub url: String,
    /// Where logins are kept (as connect's --oauth-dir).
    #[arg(long, value_name = "DIR")]
    pub oauth_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The TOML configuration file.
    pub file: PathBuf,
    /// Also check an `mcpServers` JSON file, as `serve --servers-json` would read it.
    #[arg(long, value_name = "FILE")]
    pub servers_json: Option<PathBuf>,
    /// Print which `[[policy]]` rules apply to this caller on each endpoint, in order:
    /// comma-separated `sub=…`, `token=…`, `scope=…`, `claim:NAME=VALUE`.
    #[arg(long, value_name = "IDENTITY")]
    pub explain: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum DemoEra {
    Dual,
    Legacy,
    Modern,
}

impl DemoEra {
    pub fn as_str(self) -> &'static str {
        match self {
            DemoEra::Dual => "dual",
            DemoEra::Legacy => "legacy",
            DemoEra::Modern => "modern",
        }
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Which protocol era(s) the demo server speaks.
    #[arg(long, value_enum, default_value = "dual")]
    pub era: DemoEra,
    /// Answer `tools/list` in pages of this many tools (0: one page), to exercise clients'
    /// and bridges' pagination.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub tools_page: usize,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to bind (0 picks a free one; the chosen address is logged).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The MCP endpoint path.
    #[arg(long, default_value = "/mcp")]
    pub path: String,
    /// Publish the built-in demo server instead of CMD.
    #[arg(long)]
    pub demo: bool,
    /// Publish a remote Streamable HTTP server instead of CMD (its flags: "Remote server").
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["demo", "command", "config", "servers_json"]
    )]
    pub upstream: Option<String>,
    /// Era of the built-in demo server (with --demo).
    #[arg(long, value_enum, default_value = "dual")]
    pub demo_era: DemoEra,
    /// Name of the server in logs and metrics.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Extra environment variable for the child (repeatable).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub env: Vec<(String, String)>,
    /// Give the child the bridge's whole environment (default: a safe baseline only).
    #[arg(long)]
    pub pass_environment: bool,
    /// Working directory of the child.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Allowed Origin (repeatable): exact origin, `*.example.com`, or `*`. Loopback origins
    /// are allowed when bound to loopback.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// One child for everyone, or one per 2025 session.
    #[arg(long, value_enum, default_value = "shared")]
    pub isolation: Isolation,
    /// Children kept running (a pool of them: 2026 calls go to the least-loaded one, a 2025
    /// session stays on one).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub pool_min: usize,
    /// Most children run at once; more start on demand (default: --pool-min).
    #[arg(long, value_name = "N")]
    pub pool_max: Option<usize>,
    /// How long a child above --pool-min stays idle before it is stopped.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub pool_idle: Duration,
    /// Idle time after which a 2025 session expires.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Most concurrent 2025 sessions.
    #[arg(long, default_value_t = 1000)]
    pub max_sessions: usize,
    /// Longest a call may run before it is cancelled in the child.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub call_timeout: Duration,
    /// How long a call waits for a starting or restarting child.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub start_wait: Duration,
    /// How long a 2026 call parked as `input_required` waits for its client's retry before it
    /// is cancelled in the child.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub park_timeout: Duration,
    /// How long a call whose client may be asked for input waits for a 2025 child busy with
    /// another such client (so that the child's requests reach the right one).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub attribution_wait: Duration,
    /// How long the era probe waits for the child's (or the remote's) answers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,
    /// Worker threads of the daemon's runtime. Default: one per core less one (at least one),
    /// leaving a core to the stdio children; TOKIO_WORKER_THREADS, when set, is the default.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Largest request body (bytes; K/M suffixes, KiB/MiB).
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_body: usize,
    /// Longest line accepted from the child's stdout; longer ones are skipped and counted.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_line: usize,
    /// On SIGTERM/SIGINT: how long in-flight calls may finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Child shutdown: wait after closing stdin before SIGTERM.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub stdin_grace: Duration,
    /// Child shutdown: wait after SIGTERM before SIGKILL.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub term_grace: Duration,
    /// SSE keep-alive comment interval on long streams.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub keepalive: Duration,
    /// 2025-11-25 sessions: the SSE `retry:` (ms a client waits before it reconnects) each
    /// stream's priming event carries.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub sse_retry: Duration,
    /// 2025-11-25 sessions: close a call's SSE stream after this long on one connection; the
    /// client resumes it with GET and Last-Event-ID (0: never).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub sse_close_after: Duration,
    /// 2025-11-25 sessions: events kept per SSE stream for Last-Event-ID replay.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub sse_replay_events: usize,
    /// 2025-11-25 sessions: bytes kept per SSE stream for Last-Event-ID replay.
    #[arg(long, default_value = "1MiB", value_parser = parse_size, value_name = "SIZE")]
    pub sse_replay_bytes: usize,
    /// 2025-11-25 sessions: how long an SSE stream's events stay replayable.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub sse_replay_age: Duration,
    /// A request head (and a new connection's first one) must arrive within this; else the
    /// connection is closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// A request body must arrive within this of its head; else 408 and the connection is closed.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long is closed (the HTTP keep-alive
    /// idle time; `--idle-timeout` is --upstream's).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub http_idle_timeout: Duration,
    /// Most connections open at once per listener; beyond it: 503 with Retry-After, and close
    /// [default: 10000, or fewer to keep a quarter of `ulimit -n` (at most 1024) free].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Most requests open at once per listener (HTTP/2 streams included), each until its
    /// response ends, so SSE streams and long calls count; beyond it: 503 with Retry-After.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub max_streams: usize,
    /// HTTP/2: streams open at once on one connection (never more than --max-streams).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2: largest request head (RFC 7541 size); beyond it 431. Twice this is advertised
    /// as SETTINGS_MAX_HEADER_LIST_SIZE.
    #[arg(long, default_value = "64KiB", value_parser = parse_size, value_name = "SIZE")]
    pub h2_max_header_list_size: usize,
    /// HTTP/2: streams a client may open and reset before they are accepted, before the
    /// connection is closed (the rapid-reset flood).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub h2_max_pending_resets: usize,
    /// Run as a daemon from a TOML configuration file with named servers (src/config.rs);
    /// flags given explicitly override the file. SIGHUP re-reads it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Add the named servers of an `mcpServers` JSON file (command/args/env), as desktop hosts
    /// write them; each is served at /servers/<name>/mcp.
    #[arg(long, value_name = "FILE")]
    pub servers_json: Option<PathBuf>,
    /// Authentication and TLS (src/auth).
    #[command(flatten)]
    pub auth: crate::auth::AuthArgs,
    /// Serve Prometheus metrics at http://ADDR/metrics on a listener of their own (off unless set).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Also serve /metrics on the main listener (behind its guards and --auth).
    #[arg(long)]
    pub metrics_on_main: bool,
    /// Replicas: a file of secrets shared by every replica (one a line, at least 32
    /// characters; the first seals and signs, the others are still accepted, for rotation).
    /// With --advertise-url; see "Running several replicas" in the README.
    #[arg(long, value_name = "FILE", help_heading = "Replicas")]
    pub cluster_key_file: Option<PathBuf>,
    /// Replicas: where the other replicas reach this one directly (scheme://host:port).
    #[arg(long, value_name = "URL", help_heading = "Replicas")]
    pub advertise_url: Option<String>,
    /// Replicas: CA certificates (PEM) for https:// advertise URLs signed by a private CA
    /// (default: the webpki roots).
    #[arg(long, value_name = "FILE", help_heading = "Replicas")]
    pub cluster_ca_file: Option<PathBuf>,
    /// How to reach the --upstream server (the same flags as `connect`).
    #[command(flatten)]
    pub remote: crate::config::remote::RemoteArgs,
    /// The --upstream server's OAuth login (connect's flags; a daemon never opens a browser:
    /// it uses a login kept by `mcp-bridge auth login URL`, refreshing it).
    #[command(flatten)]
    pub oauth: crate::config::oauth::OAuthArgs,
    /// The stdio server to publish: CMD ARGS (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ServeArgs {
    /// The pool the flags ask for (not yet checked: see [`PoolSize::check`]).
    pub fn pool_size(&self) -> crate::upstream::pool::PoolSize {
        crate::upstream::pool::PoolSize {
            min: self.pool_min,
            max: self.pool_max.unwrap_or(self.pool_min),
            idle: self.pool_idle,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// The connection limits the flags give (every one has a default).
    pub fn conn_limits(&self) -> crate::face::accept::ConnLimits {
        crate::face::accept::ConnLimits::new(
            self.header_timeout,
            self.body_timeout,
            self.http_idle_timeout,
            self.max_connections,
            self.max_streams,
            crate::face::accept::H2Limits::new(
                Some(self.h2_max_concurrent_streams),
                Some(self.h2_max_header_list_size),
                Some(self.h2_max_pending_resets),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let c = Cli::try_parse_from(["mcp-bridge", "serve"].iter().chain(args))?;
        let Command::Serve(s) = c.command else {
            panic!()
        };
        Ok(*s)
    }

    #[test]
    fn serve_parses_like_other_bridges() {
        let s = serve(&[
            "--port",
            "0",
            "-e",
            "A=1",
            "--allow-origin",
            "https://x.dev",
            "--",
            "node",
            "server.js",
            "--flag",
        ])
        .unwrap();
        assert_eq!(s.command, vec!["node", "server.js", "--flag"]);
        assert_eq!(s.env, vec![("A".into(), "1".into())]);
        assert_eq!(s.addr().port(), 0);
    }

    #[test]
    fn upstream_takes_the_remote_flags_and_excludes_other_servers() {
        let s = serve(&[
            "--upstream",
            "https://mcp.example.com/mcp",
            "-H",
            "X-Tenant: acme",
            "--protocol",
            "2025-06-18",
            "--retry-idempotent",
        ])
        .unwrap();
        assert_eq!(s.upstream.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(s.remote.header, vec!["X-Tenant: acme"]);
        assert!(s.remote.retry_idempotent);
        for other in [
            &["--demo"][..],
            &["--config", "f.toml"],
            &["--servers-json", "f.json"],
            &["--", "node", "server.js"],
        ] {
            let mut args = vec!["--upstream", "http://h/mcp"];
            args.extend_from_slice(other);
            let e = serve(&args).unwrap_err();
            assert!(e.use_stderr(), "{other:?}");
        }
    }
}
