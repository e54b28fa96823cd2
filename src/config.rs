//! The daemon's configuration file (`serve --config FILE`, `check-config FILE`): TOML with
//! unknown keys rejected, errors reported as `FILE:LINE:COLUMN: message`; an optional
//! `mcpServers` JSON map (`--servers-json FILE`, the format desktop hosts use) adds named
//! servers; explicit command-line flags override what the files say.
//!
//! Reading produces a [`Plan`]: every value resolved (defaults filled in, per-server limits over
//! global ones), every server validated. A `Plan` is plain data and comparable, so a reload can
//! tell added, removed, changed and unchanged servers apart by comparing [`ServerSpec`]s.
//! Plain `serve` (`-- CMD`, `--demo`, `--upstream URL`) is a one-server plan too
//! ([`Plan::solo`]): the daemon runs both the same way.
//!
//! A server is a stdio `command` or a remote `url`; a url server's header file and bearer token
//! are read while resolving, so a changed secret makes a different spec (SIGHUP replaces the
//! server) and `check-config` reads them too.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{AuthArgs, AuthMode};
use crate::cli::remote::{self, Naming, ProtocolChoice, RemoteArgs};
use crate::cli::{parse_duration, parse_size, Isolation, ServeArgs};
use crate::face::http::HttpConfig;
use crate::upstream::child::ChildConfig;
use crate::upstream::remote::RemoteConfig;
use crate::upstream::UpstreamSpec;

// ---------------------------------------------------------------------------------------------
// The file as written
// ---------------------------------------------------------------------------------------------

/// The TOML document.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub listen: ListenFile,
    pub tls: Option<TlsFile>,
    pub auth: Option<AuthFile>,
    pub metrics: Option<MetricsFile>,
    /// Defaults for every server; a server's own `limits` table wins.
    #[serde(default)]
    pub limits: Limits,
    /// The server also published at `/mcp` (default: the only server, when there is one).
    pub default_server: Option<String>,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenFile {
    /// `IP:PORT` addresses to bind (default `127.0.0.1:8080`); ignored under socket activation.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Allowed `Origin`s besides loopback ones (as `--allow-origin`).
    #[serde(default)]
    pub allow_origins: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    #[serde(default)]
    pub mode: AuthModeFile,
    pub token_file: Option<PathBuf>,
    pub token_env: Option<String>,
    pub jwks_url: Option<String>,
    pub jwks_file: Option<PathBuf>,
    pub issuer: Option<String>,
    #[serde(default)]
    pub audience: Vec<String>,
    #[serde(default)]
    pub required_scopes: Vec<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// `scheme://host[:port]` clients use; each server's resource URL is this plus its path.
    pub public_url: Option<String>,
    #[serde(default)]
    pub allow_unauthenticated: bool,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthModeFile {
    #[default]
    None,
    Bearer,
    Jwt,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsFile {
    /// `IP:PORT` of a listener of its own serving `/metrics` (as `--metrics-listen`).
    pub listen: Option<String>,
    /// Also serve `/metrics` on the main listeners, behind their guards and auth.
    #[serde(default)]
    pub on_main: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum IsolationFile {
    Shared,
    Session,
}

/// One `[servers.<name>]` table, checked: a stdio `command` or a remote `url`, with only the
/// keys that belong to it (errors are located at the table).
#[derive(Debug, Deserialize)]
#[serde(try_from = "ServerTable")]
pub struct ServerFile {
    pub upstream: UpstreamFile,
    pub isolation: Option<IsolationFile>,
    pub limits: Limits,
}

#[derive(Debug)]
pub enum UpstreamFile {
    Command(CommandFile),
    Url(UrlFile),
}

#[derive(Debug)]
pub struct CommandFile {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
}

/// A remote server: its URL and the same settings `serve --upstream` takes as flags.
#[derive(Debug)]
pub struct UrlFile {
    pub url: String,
    pub remote: RemoteArgs,
}

/// A server table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerTable {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    pass_environment: Option<bool>,
    cwd: Option<PathBuf>,
    url: Option<UrlText>,
    headers: Option<Headers>,
    header_file: Option<PathBuf>,
    bearer_token_file: Option<PathBuf>,
    bearer_token_env: Option<String>,
    ca_file: Option<PathBuf>,
    system_roots: Option<bool>,
    protocol: Option<ProtocolChoice>,
    connect_timeout: Option<Dur>,
    request_timeout: Option<Dur>,
    retry_idempotent: Option<bool>,
    max_response: Option<Size>,
    idle_timeout: Option<Dur>,
    isolation: Option<IsolationFile>,
    #[serde(default)]
    limits: Limits,
}

/// A remote endpoint URL, checked where it is written.
#[derive(Debug, Deserialize)]
#[serde(try_from = "String")]
struct UrlText(String);

impl TryFrom<String> for UrlText {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        remote::check_url(&s, Naming::File)?;
        Ok(UrlText(s))
    }
}

/// `headers = { Name = "value" }`, checked where it is written; kept as `Name: value` lines
/// (what `-H` takes). Debug shows the names only.
#[derive(Deserialize)]
#[serde(try_from = "BTreeMap<String, String>")]
struct Headers(Vec<String>);

impl TryFrom<BTreeMap<String, String>> for Headers {
    type Error = String;
    fn try_from(m: BTreeMap<String, String>) -> Result<Self, String> {
        let mut lines = Vec::new();
        for (k, v) in m {
            http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("invalid header name {k:?}"))?;
            http::HeaderValue::from_str(v.trim())
                .map_err(|_| format!("invalid value for header {k}"))?;
            lines.push(format!("{k}: {v}"));
        }
        Ok(Headers(lines))
    }
}

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|l| l.split(':').next().unwrap_or("")))
            .finish()
    }
}

impl TryFrom<ServerTable> for ServerFile {
    type Error = String;
    fn try_from(t: ServerTable) -> Result<Self, String> {
        let set = |keys: &[(&'static str, bool)]| keys.iter().find(|(_, s)| *s).map(|(k, _)| *k);
        let child_keys = [
            ("args", t.args.is_some()),
            ("env", t.env.is_some()),
            ("pass_environment", t.pass_environment.is_some()),
            ("cwd", t.cwd.is_some()),
        ];
        let remote_keys = [
            ("headers", t.headers.is_some()),
            ("header_file", t.header_file.is_some()),
            ("bearer_token_file", t.bearer_token_file.is_some()),
            ("bearer_token_env", t.bearer_token_env.is_some()),
            ("ca_file", t.ca_file.is_some()),
            ("system_roots", t.system_roots.is_some()),
            ("protocol", t.protocol.is_some()),
            ("connect_timeout", t.connect_timeout.is_some()),
            ("request_timeout", t.request_timeout.is_some()),
            ("retry_idempotent", t.retry_idempotent.is_some()),
            ("max_response", t.max_response.is_some()),
            ("idle_timeout", t.idle_timeout.is_some()),
        ];
        let upstream = match (t.command, t.url) {
            (Some(_), Some(_)) => {
                return Err(
                    "give `command` (a stdio server) or `url` (a remote Streamable \
                            HTTP server), not both"
                        .into(),
                )
            }
            (None, None) => {
                return Err(
                    "a server needs `command` (a stdio server) or `url` (a remote \
                            Streamable HTTP server)"
                        .into(),
                )
            }
            (Some(command), None) => {
                if let Some(k) = set(&remote_keys) {
                    return Err(format!(
                        "`{k}` belongs to a `url` server, not a `command` one"
                    ));
                }
                UpstreamFile::Command(CommandFile {
                    command,
                    args: t.args.unwrap_or_default(),
                    env: t.env.unwrap_or_default(),
                    pass_environment: t.pass_environment.unwrap_or(false),
                    cwd: t.cwd,
                })
            }
            (None, Some(url)) => {
                if let Some(k) = set(&child_keys) {
                    return Err(format!(
                        "`{k}` belongs to a `command` server, not a `url` one"
                    ));
                }
                if t.isolation == Some(IsolationFile::Session) {
                    return Err("isolation = \"session\" needs a `command` (a child per \
                                session): a `url` server is shared by every session"
                        .into());
                }
                if t.bearer_token_file.is_some() && t.bearer_token_env.is_some() {
                    return Err("give bearer_token_file or bearer_token_env, not both".into());
                }
                let d = RemoteArgs::default();
                UpstreamFile::Url(UrlFile {
                    url: url.0,
                    remote: RemoteArgs {
                        header: t.headers.map(|h| h.0).unwrap_or_default(),
                        header_file: t.header_file,
                        bearer_token_file: t.bearer_token_file,
                        bearer_token_env: t.bearer_token_env,
                        protocol: t.protocol.unwrap_or(d.protocol),
                        ca_file: t.ca_file,
                        system_roots: t.system_roots.unwrap_or(d.system_roots),
                        connect_timeout: t.connect_timeout.map_or(d.connect_timeout, |v| v.0),
                        request_timeout: t.request_timeout.map(|v| v.0),
                        retry_idempotent: t.retry_idempotent.unwrap_or(d.retry_idempotent),
                        max_response: t.max_response.map_or(d.max_response, |v| v.0),
                        idle_timeout: t.idle_timeout.map(|v| v.0),
                    },
                })
            }
        };
        Ok(ServerFile {
            upstream,
            isolation: t.isolation,
            limits: t.limits,
        })
    }
}

/// Limits and timeouts; every one optional so that a server's table can override a few.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub call_timeout: Option<Dur>,
    pub start_wait: Option<Dur>,
    pub probe_timeout: Option<Dur>,
    pub session_timeout: Option<Dur>,
    pub max_sessions: Option<usize>,
    pub max_body: Option<Size>,
    pub max_line: Option<Size>,
    /// Global: the SIGTERM drain. Per server: the drain when a reload removes or restarts it.
    pub shutdown_grace: Option<Dur>,
    pub stdin_grace: Option<Dur>,
    pub term_grace: Option<Dur>,
    pub keepalive: Option<Dur>,
}

/// A duration: `"250ms"`, `"10s"`, `"5m"`, `"1h"`, or a number of seconds.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "NumOrText")]
pub struct Dur(pub Duration);

/// A size: `"16MiB"`, `"64K"`, or a number of bytes.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "NumOrText")]
pub struct Size(pub usize);

#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Int(i64),
    Float(f64),
    Text(String),
}

impl TryFrom<NumOrText> for Dur {
    type Error = String;
    fn try_from(v: NumOrText) -> Result<Self, String> {
        match v {
            NumOrText::Int(n) if n >= 0 => Ok(Dur(Duration::from_secs(n.unsigned_abs()))),
            NumOrText::Float(f) if f.is_finite() && f >= 0.0 => Ok(Dur(Duration::from_secs_f64(f))),
            NumOrText::Text(s) => parse_duration(&s).map(Dur),
            _ => Err("a duration must not be negative".into()),
        }
    }
}

impl TryFrom<NumOrText> for Size {
    type Error = String;
    fn try_from(v: NumOrText) -> Result<Self, String> {
        match v {
            NumOrText::Int(n) if n > 0 => usize::try_from(n)
                .map(Size)
                .map_err(|_| "size out of range".to_owned()),
            NumOrText::Text(s) => parse_size(&s).map(Size),
            _ => {
                Err("a size must be a positive whole number of bytes or text like \"16MiB\"".into())
            }
        }
    }
}

impl Limits {
    /// `self` where set, else `base`.
    fn over(&self, base: &Limits) -> Limits {
        Limits {
            call_timeout: self.call_timeout.or(base.call_timeout),
            start_wait: self.start_wait.or(base.start_wait),
            probe_timeout: self.probe_timeout.or(base.probe_timeout),
            session_timeout: self.session_timeout.or(base.session_timeout),
            max_sessions: self.max_sessions.or(base.max_sessions),
            max_body: self.max_body.or(base.max_body),
            max_line: self.max_line.or(base.max_line),
            shutdown_grace: self.shutdown_grace.or(base.shutdown_grace),
            stdin_grace: self.stdin_grace.or(base.stdin_grace),
            term_grace: self.term_grace.or(base.term_grace),
            keepalive: self.keepalive.or(base.keepalive),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The resolved plan
// ---------------------------------------------------------------------------------------------

/// Limits with every value decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub call_timeout: Duration,
    pub start_wait: Duration,
    pub probe_timeout: Duration,
    pub session_timeout: Duration,
    pub max_sessions: usize,
    pub max_body: usize,
    pub max_line: usize,
    pub shutdown_grace: Duration,
    pub stdin_grace: Duration,
    pub term_grace: Duration,
    pub keepalive: Duration,
}

impl Default for Resolved {
    /// The same defaults as `serve`'s flags.
    fn default() -> Self {
        Resolved {
            call_timeout: Duration::from_secs(300),
            start_wait: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(10),
            session_timeout: Duration::from_secs(1800),
            max_sessions: 1000,
            max_body: 16 << 20,
            max_line: 16 << 20,
            shutdown_grace: Duration::from_secs(10),
            stdin_grace: Duration::from_secs(2),
            term_grace: Duration::from_secs(3),
            keepalive: Duration::from_secs(15),
        }
    }
}

impl Resolved {
    fn from(l: &Limits) -> Self {
        let d = Resolved::default();
        Resolved {
            call_timeout: l.call_timeout.map_or(d.call_timeout, |v| v.0),
            start_wait: l.start_wait.map_or(d.start_wait, |v| v.0),
            probe_timeout: l.probe_timeout.map_or(d.probe_timeout, |v| v.0),
            session_timeout: l.session_timeout.map_or(d.session_timeout, |v| v.0),
            max_sessions: l.max_sessions.unwrap_or(d.max_sessions).max(1),
            max_body: l.max_body.map_or(d.max_body, |v| v.0),
            max_line: l.max_line.map_or(d.max_line, |v| v.0),
            shutdown_grace: l.shutdown_grace.map_or(d.shutdown_grace, |v| v.0),
            stdin_grace: l.stdin_grace.map_or(d.stdin_grace, |v| v.0),
            term_grace: l.term_grace.map_or(d.term_grace, |v| v.0),
            keepalive: l
                .keepalive
                .map_or(d.keepalive, |v| v.0)
                .max(Duration::from_millis(100)),
        }
    }
}

/// One named server, fully decided. Two equal specs run the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub name: String,
    /// Where its face is published: `/servers/<name>/mcp`, or `--path` for plain `serve`.
    pub path: String,
    pub target: Target,
    pub isolation: Isolation,
    pub limits: Resolved,
}

/// What a server publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A stdio child process.
    Command(CommandSpec),
    /// A remote Streamable HTTP server.
    Url(RemoteSpec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
}

/// A remote server's settings with its header file and token already read (header values are
/// sensitive: Debug does not show them). The probe timeout is the spec's limit's.
#[derive(Debug, Clone)]
pub struct RemoteSpec(pub RemoteConfig);

impl PartialEq for RemoteSpec {
    fn eq(&self, other: &Self) -> bool {
        // Destructured, so that a field added to RemoteConfig cannot be left out here.
        let RemoteConfig {
            url,
            headers,
            has_token,
            protocol,
            ca_file,
            system_roots,
            connect_timeout,
            request_timeout,
            retry_idempotent,
            max_response,
            probe_timeout: _,
            idle_timeout,
        } = &self.0;
        let o = &other.0;
        *url == o.url
            && *headers == o.headers
            && *has_token == o.has_token
            && *protocol == o.protocol
            && *ca_file == o.ca_file
            && *system_roots == o.system_roots
            && *connect_timeout == o.connect_timeout
            && *request_timeout == o.request_timeout
            && *retry_idempotent == o.retry_idempotent
            && *max_response == o.max_response
            && *idle_timeout == o.idle_timeout
    }
}

impl Eq for RemoteSpec {}

/// Everything the daemon runs, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Addresses to bind (unless listeners are passed by socket activation).
    pub listen: Vec<SocketAddr>,
    pub allow_origins: Vec<String>,
    pub auth: AuthArgs,
    /// Base URL clients use (`scheme://host[:port]`), for each server's canonical resource URL.
    pub public_url: Option<String>,
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_on_main: bool,
    /// The SIGTERM drain.
    pub shutdown_grace: Duration,
    pub default_server: Option<String>,
    /// Sorted by name.
    pub servers: Vec<ServerSpec>,
    /// Plain `serve`: one server at its own path, answering every request on the listener
    /// itself (health, metrics, 404s); no `/servers/` routes.
    pub solo: bool,
}

/// The path a named server is published at.
pub fn server_path(name: &str) -> String {
    format!("/servers/{name}/mcp")
}

impl ServerSpec {
    /// What the face is started in front of: the child's or the remote's configuration.
    pub fn upstream(&self) -> UpstreamSpec {
        match &self.target {
            Target::Command(c) => UpstreamSpec::Child(ChildConfig {
                name: self.name.clone(),
                command: c.command.clone(),
                args: c.args.clone(),
                env: c.env.clone(),
                pass_environment: c.pass_environment,
                cwd: c.cwd.clone(),
                max_line: self.limits.max_line,
                probe_timeout: self.limits.probe_timeout,
                stdin_grace: self.limits.stdin_grace,
                term_grace: self.limits.term_grace,
                max_backoff: Duration::from_secs(30),
            }),
            Target::Url(r) => {
                let mut cfg = r.0.clone();
                cfg.probe_timeout = self.limits.probe_timeout;
                UpstreamSpec::Remote(cfg)
            }
        }
    }

    /// The HTTP face's configuration (auth and TLS are filled in by the daemon);
    /// `loopback`: every listener is on a loopback address.
    pub fn http_config(&self, allow_origins: &[String], loopback: bool) -> HttpConfig {
        HttpConfig {
            path: self.path.clone(),
            allow_origins: allow_origins.to_vec(),
            loopback_only_host: loopback,
            max_body: self.limits.max_body,
            call_timeout: self.limits.call_timeout,
            start_wait: self.limits.start_wait,
            session_idle: self.limits.session_timeout,
            max_sessions: self.limits.max_sessions,
            isolation_session: self.isolation == Isolation::Session,
            keepalive: self.limits.keepalive,
            auth: Default::default(),
            tls: None,
            metrics_on_main: false,
        }
    }
}

impl Plan {
    /// Plain `serve` (`-- CMD`, `--demo`, `--upstream URL`): one server, from the flags. Errors
    /// are usage errors (they name flags).
    pub fn solo(args: &ServeArgs) -> Result<Plan, String> {
        if !args.path.starts_with('/') {
            return Err(format!("--path must start with '/': {:?}", args.path));
        }
        if args.demo && !args.command.is_empty() {
            return Err("give either --demo or a command after --, not both".into());
        }
        let child = |command: PathBuf, a: Vec<String>| {
            Target::Command(CommandSpec {
                command,
                args: a,
                env: args.env.clone(),
                pass_environment: args.pass_environment,
                cwd: args.cwd.clone(),
            })
        };
        let target = if let Some(url) = &args.upstream {
            Target::Url(RemoteSpec(args.remote.config(
                url,
                args.probe_timeout,
                Naming::Flags,
            )?))
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
            session_timeout: args.session_timeout,
            max_sessions: args.max_sessions.max(1),
            max_body: args.max_body,
            max_line: args.max_line,
            shutdown_grace: args.shutdown_grace,
            stdin_grace: args.stdin_grace,
            term_grace: args.term_grace,
            keepalive: args.keepalive.max(Duration::from_millis(100)),
        };
        Ok(Plan {
            listen: vec![args.addr()],
            allow_origins: args.allow_origin.clone(),
            auth: args.auth.clone(),
            public_url: None,
            metrics_listen: args.metrics_listen,
            metrics_on_main: args.metrics_on_main,
            shutdown_grace: args.shutdown_grace,
            default_server: None,
            servers: vec![ServerSpec {
                name: args.name.clone(),
                path: args.path.clone(),
                target,
                isolation: args.isolation,
                limits,
            }],
            solo: true,
        })
    }

    pub fn server(&self, name: &str) -> Option<&ServerSpec> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// Settings that only a restart can change (listeners, TLS paths, public URL, metrics); a
    /// reload that changes them warns and keeps the running ones. Auth settings reload.
    pub fn same_restart_settings(&self, other: &Plan) -> bool {
        self.listen == other.listen
            && self.auth.tls_cert == other.auth.tls_cert
            && self.auth.tls_key == other.auth.tls_key
            && self.public_url == other.public_url
            && self.metrics_listen == other.metrics_listen
            && self.metrics_on_main == other.metrics_on_main
    }
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// Where the configuration comes from, kept for reloads.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config: Option<PathBuf>,
    pub servers_json: Option<PathBuf>,
}

/// `FILE:LINE:COLUMN` (1-based) of byte `offset` in `text`.
fn position(path: &Path, text: &str, offset: usize) -> String {
    let upto = &text[..offset.min(text.len())];
    let line = upto.matches('\n').count() + 1;
    let col = upto.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{}:{line}:{col}", path.display())
}

/// Parse a TOML configuration text (`path` only names it in errors).
pub fn parse_toml(path: &Path, text: &str) -> Result<FileConfig, String> {
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let at = e.span().map_or_else(
            || path.display().to_string(),
            |s| position(path, text, s.start),
        );
        format!("{at}: {}", e.message().trim_end())
    })
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// Servers from an `mcpServers` JSON document (`{"mcpServers": {"name": {"command", "args",
/// "env", "cwd"}}}`, or the bare map). Entries without a `command` (remote servers) are skipped
/// and named in the returned notes.
pub fn parse_servers_json(
    path: &Path,
    text: &str,
) -> Result<(BTreeMap<String, ServerFile>, Vec<String>), String> {
    let doc: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("{}:{}:{}: {e}", path.display(), e.line(), e.column()))?;
    let map = doc
        .get("mcpServers")
        .or_else(|| doc.get("servers"))
        .unwrap_or(&doc)
        .as_object()
        .ok_or_else(|| {
            format!(
                "{}: expected an object of servers under \"mcpServers\"",
                path.display()
            )
        })?;
    let mut out = BTreeMap::new();
    let mut notes = Vec::new();
    for (name, v) in map {
        let at = |what: &str| format!("{}: server {name:?}: {what}", path.display());
        let Some(command) = v.get("command") else {
            notes.push(format!(
                "server {name:?} has no command (not a stdio server); skipped"
            ));
            continue;
        };
        let command = command
            .as_str()
            .ok_or_else(|| at("\"command\" must be a string"))?
            .to_owned();
        let args = match v.get("args") {
            None => Vec::new(),
            Some(a) => serde_json::from_value::<Vec<String>>(a.clone())
                .map_err(|_| at("\"args\" must be an array of strings"))?,
        };
        let env = match v.get("env") {
            None => BTreeMap::new(),
            Some(e) => serde_json::from_value::<BTreeMap<String, String>>(e.clone())
                .map_err(|_| at("\"env\" must be an object of strings"))?,
        };
        let cwd = match v.get("cwd") {
            None => None,
            Some(c) => Some(PathBuf::from(
                c.as_str().ok_or_else(|| at("\"cwd\" must be a string"))?,
            )),
        };
        out.insert(
            name.clone(),
            ServerFile {
                upstream: UpstreamFile::Command(CommandFile {
                    command,
                    args,
                    env,
                    pass_environment: false,
                    cwd,
                }),
                isolation: None,
                limits: Limits::default(),
            },
        );
    }
    Ok((out, notes))
}

/// A server name usable in a URL path segment and a metrics label.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(format!(
            "server name {name:?}: use 1-64 letters, digits, '-', '_' or '.'"
        ))
    }
}

/// Read the sources (but apply no command-line overrides). Notes are non-fatal remarks.
pub fn load(src: &Sources) -> Result<(Plan, Vec<String>), String> {
    let mut file = match &src.config {
        Some(p) => parse_toml(p, &read(p)?)?,
        None => FileConfig::default(),
    };
    let mut notes = Vec::new();
    if let Some(p) = &src.servers_json {
        let (servers, n) = parse_servers_json(p, &read(p)?)?;
        notes.extend(n);
        for (name, s) in servers {
            if file.servers.contains_key(&name) {
                return Err(format!(
                    "{}: server {name:?} is also defined in the config file",
                    p.display()
                ));
            }
            file.servers.insert(name, s);
        }
    }
    let name = src
        .config
        .as_deref()
        .or(src.servers_json.as_deref())
        .map_or_else(|| "configuration".to_owned(), |p| p.display().to_string());
    resolve(file, &name).map(|p| (p, notes))
}

/// Check and decide everything in a parsed file.
pub fn resolve(file: FileConfig, name: &str) -> Result<Plan, String> {
    let err = |m: String| format!("{name}: {m}");
    let mut listen = Vec::new();
    for a in &file.listen.addresses {
        let addr: SocketAddr = a.parse().map_err(|_| {
            err(format!(
                "listen address {a:?}: expected IP:PORT (e.g. \"127.0.0.1:8080\", \"[::1]:8080\")"
            ))
        })?;
        listen.push(addr);
    }
    if listen.is_empty() {
        listen.push(SocketAddr::from(([127, 0, 0, 1], 8080)));
    }
    let global = &file.limits;
    let mut servers = Vec::new();
    for (n, s) in &file.servers {
        check_name(n).map_err(&err)?;
        let limits = Resolved::from(&s.limits.over(global));
        let target = match &s.upstream {
            UpstreamFile::Command(c) => {
                if c.command.trim().is_empty() {
                    return Err(err(format!("server {n:?}: command is empty")));
                }
                for k in c.env.keys() {
                    if k.is_empty() || k.contains('=') || k.contains('\0') {
                        return Err(err(format!(
                            "server {n:?}: bad environment variable name {k:?}"
                        )));
                    }
                }
                Target::Command(CommandSpec {
                    command: PathBuf::from(&c.command),
                    args: c.args.clone(),
                    env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    pass_environment: c.pass_environment,
                    cwd: c.cwd.clone(),
                })
            }
            // Reads the header file and the token: a bad one fails here (and check-config).
            UpstreamFile::Url(u) => Target::Url(RemoteSpec(
                u.remote
                    .config(&u.url, limits.probe_timeout, Naming::File)
                    .map_err(|e| err(format!("server {n:?}: {e}")))?,
            )),
        };
        servers.push(ServerSpec {
            name: n.clone(),
            path: server_path(n),
            target,
            isolation: match s.isolation {
                Some(IsolationFile::Session) => Isolation::Session,
                _ => Isolation::Shared,
            },
            limits,
        });
    }
    let default_server = match file.default_server {
        Some(d) => {
            if !file.servers.contains_key(&d) {
                return Err(err(format!("default_server {d:?} is not among [servers]")));
            }
            Some(d)
        }
        None if servers.len() == 1 => Some(servers[0].name.clone()),
        None => None,
    };
    let mut auth = AuthArgs::default();
    let mut public_url = None;
    if let Some(a) = file.auth {
        auth.auth = match a.mode {
            AuthModeFile::None => AuthMode::None,
            AuthModeFile::Bearer => AuthMode::Bearer,
            AuthModeFile::Jwt => AuthMode::Jwt,
        };
        auth.token_file = a.token_file;
        auth.token_env = a.token_env;
        auth.jwks_url = a.jwks_url;
        auth.jwks_file = a.jwks_file;
        auth.issuer = a.issuer;
        auth.audience = a.audience;
        auth.required_scope = a.required_scopes;
        auth.authorization_server = a.authorization_servers;
        auth.allow_unauthenticated = a.allow_unauthenticated;
        public_url = a.public_url;
    }
    if let Some(t) = file.tls {
        auth.tls_cert = Some(t.cert);
        auth.tls_key = Some(t.key);
    }
    let (metrics_listen, metrics_on_main) = match file.metrics {
        None => (None, false),
        Some(m) => {
            let l = match m.listen {
                None => None,
                Some(a) => Some(
                    a.parse::<SocketAddr>()
                        .map_err(|_| err(format!("[metrics] listen {a:?}: expected IP:PORT")))?,
                ),
            };
            (l, m.on_main)
        }
    };
    Ok(Plan {
        listen,
        allow_origins: file.listen.allow_origins,
        auth,
        public_url,
        metrics_listen,
        metrics_on_main,
        shutdown_grace: Resolved::from(global).shutdown_grace,
        default_server,
        servers,
        solo: false,
    })
}

// ---------------------------------------------------------------------------------------------
// Command-line overrides
// ---------------------------------------------------------------------------------------------

/// `serve` flags given explicitly on the command line (or by environment), by clap argument id.
pub type Given = std::collections::HashSet<String>;

/// Flags that have no meaning next to a configuration file (besides the remote ones).
const NOT_WITH_CONFIG: &[&str] = &["path", "demo", "demo_era", "name", "command", "upstream"];

/// Flags for a stdio child, which `--upstream URL` does not have.
const CHILD_ONLY: &[&str] = &[
    "env",
    "pass_environment",
    "cwd",
    "demo_era",
    "max_line",
    "stdin_grace",
    "term_grace",
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
    let remote = remote::ids();
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
        if let Some(f) = remote::ids().into_iter().find(|f| given.contains(f)) {
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

/// Apply the explicit flags of `args` over `plan`: listeners, origins, auth and TLS replace the
/// file's; limits and isolation apply to every server, the child environment settings to every
/// command server. `--isolation session` over a url server is an error.
pub fn apply_overrides(plan: &mut Plan, args: &ServeArgs, given: &Given) -> Result<(), String> {
    let g = |id: &str| given.contains(id);
    match (g("host"), g("port")) {
        (true, _) => plan.listen = vec![SocketAddr::new(args.host, args.port)],
        (false, true) => plan.listen.iter_mut().for_each(|a| a.set_port(args.port)),
        _ => {}
    }
    if g("allow_origin") {
        plan.allow_origins = args.allow_origin.clone();
    }
    let a = &args.auth;
    let p = &mut plan.auth;
    // Each flag given on the command line replaces the field of the same name.
    macro_rules! given {
        ($to:ident <- $from:ident: $($f:ident),+) => {
            $(if g(stringify!($f)) {
                $to.$f = $from.$f.clone();
            })+
        };
    }
    given!(p <- a: auth, token_file, token_env, jwks_url, jwks_file, issuer, audience,
        required_scope, authorization_server, allow_unauthenticated);
    if g("tls_cert") || g("tls_key") {
        p.tls_cert = a.tls_cert.clone();
        p.tls_key = a.tls_key.clone();
    }
    if g("resource_url") {
        // With named servers the flag gives the base every server's path is appended to.
        plan.public_url = a.resource_url.clone();
    }
    given!(plan <- args: shutdown_grace, metrics_listen, metrics_on_main);
    for s in &mut plan.servers {
        let l = &mut s.limits;
        given!(l <- args: call_timeout, start_wait, probe_timeout, session_timeout);
        if g("max_sessions") {
            l.max_sessions = args.max_sessions.max(1);
        }
        given!(l <- args: max_body, max_line, stdin_grace, term_grace);
        if g("keepalive") {
            l.keepalive = args.keepalive.max(Duration::from_millis(100));
        }
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
            given!(c <- args: pass_environment, cwd);
            if g("env") {
                for (k, v) in &args.env {
                    c.env.retain(|(k2, _)| k2 != k);
                    c.env.push((k.clone(), v.clone()));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
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

    fn plan_of(text: &str) -> Result<Plan, String> {
        resolve(parse_toml(Path::new("c.toml"), text)?, "c.toml")
    }

    fn remote_of(p: &Plan, name: &str) -> RemoteConfig {
        match p.server(name).map(ServerSpec::upstream) {
            Some(UpstreamSpec::Remote(r)) => r,
            other => panic!("{other:?}"),
        }
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
        let e =
            plan_of("[servers.a]\nurl = \"http://h/mcp\"\nisolation = \"session\"\n").unwrap_err();
        assert!(e.starts_with("c.toml:1:1: ") && e.contains("shared"), "{e}");
        let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nargs = [\"x\"]\n").unwrap_err();
        assert!(e.contains("`args` belongs to a `command` server"), "{e}");
        let e = plan_of("[servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n").unwrap_err();
        assert!(e.contains("`headers` belongs to a `url` server"), "{e}");
        let e =
            plan_of("[servers.a]\nurl = \"http://h/mcp\"\nheaders = { \"Bad Name\" = \"v\" }\n")
                .unwrap_err();
        assert!(e.starts_with("c.toml:3:") && e.contains("Bad Name"), "{e}");
        let e =
            plan_of("[servers.a]\nurl = \"http://h/mcp\"\nheaders = { A = \"x\\u0001hidden\" }\n")
                .unwrap_err();
        assert!(e.starts_with("c.toml:3:") && !e.contains("hidden"), "{e}");
        let e = plan_of("[servers.a]\nurl = \"http://h/mcp\"\nprotocol = \"2024-01-01\"\n")
            .unwrap_err();
        assert!(e.starts_with("c.toml:3:"), "{e}");
        // Files are read while resolving: not located, but named.
        let e = plan_of(
            "[servers.a]\nurl = \"http://h/mcp\"\nbearer_token_file = \"/nonexistent/t\"\n",
        )
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

    fn serve_args(args: &[&str]) -> ServeArgs {
        use clap::Parser;
        let cli =
            crate::cli::Cli::try_parse_from(["mcp-bridge", "serve"].iter().chain(args)).unwrap();
        let crate::cli::Command::Serve(a) = cli.command else {
            panic!()
        };
        *a
    }

    #[test]
    fn plain_serve_is_a_one_server_plan() {
        let p = Plan::solo(&serve_args(&[
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
        let http = s.http_config(&p.allow_origins, true);
        assert_eq!(http.path, "/x");
        // Same limits as a config file's defaults.
        assert_eq!(s.limits, Resolved::default());

        let p = Plan::solo(&serve_args(&["--demo", "--demo-era", "legacy"])).unwrap();
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
        let r = remote_of(&Plan::solo(&a).unwrap(), "default");
        assert_eq!(r.headers[0].0, "x-a");
        assert_eq!(r.probe_timeout, Duration::from_secs(2));

        assert!(Plan::solo(&serve_args(&[]))
            .unwrap_err()
            .contains("no server"));
        assert!(Plan::solo(&serve_args(&["--demo", "--path", "x"])).is_err());
        assert!(Plan::solo(&serve_args(&["--demo", "--", "node"])).is_err());
        assert!(Plan::solo(&serve_args(&["--upstream", "ftp://h/x"])).is_err());
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
}
