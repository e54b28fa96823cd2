//! The daemon's configuration file (`serve --config FILE`, `check-config FILE`): TOML with
//! unknown keys rejected, errors reported as `FILE:LINE:COLUMN: message`; an optional
//! `mcpServers` JSON map (`--servers-json FILE`, the format desktop hosts use) adds named
//! servers; explicit command-line flags override what the files say.
//!
//! Reading produces a [`Plan`]: every value resolved (defaults filled in, per-server limits over
//! global ones), every server validated. A `Plan` is plain data and comparable, so a reload can
//! tell added, removed, changed and unchanged servers apart by comparing [`ServerSpec`]s.
//! Plain `serve` (`-- CMD`, `--demo`, `--upstream URL`) is a one-server plan too
//! (`cli::plan::solo`): the daemon runs both the same way.
//!
//! `config` is below `cli`: it imports nothing from it. What both the flags and the file fill
//! lives here — the remote's settings ([`remote`]), the OAuth login's ([`oauth`]), the value
//! parsers ([`units`]) — and turning flags into a plan is `cli::plan`'s.
//!
//! A server is a stdio `command` or a remote `url`; a url server's header file and bearer token
//! are read while resolving, so a changed secret makes a different spec (SIGHUP replaces the
//! server) and `check-config` reads them too.

pub mod endpoint;
mod file;
pub mod limits;
pub mod oauth;
pub mod policy;
pub(crate) mod pool;
pub mod remote;
#[cfg(test)]
pub(crate) mod tests;
pub mod units;

pub use file::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::auth::{AuthArgs, AuthMode};
use clap::ValueEnum;

use crate::upstream::child::ChildConfig;
pub use crate::upstream::pool::PoolSize;
use crate::upstream::remote::RemoteConfig;
use crate::upstream::UpstreamSpec;
use limits::ConnLimits;
use remote::Naming;

// ---------------------------------------------------------------------------------------------
// The resolved plan
// ---------------------------------------------------------------------------------------------

/// Which clients share a command server's child (`--isolation`, a server's `isolation`).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Isolation {
    /// All clients share one child process.
    Shared,
    /// Each 2025 session gets its own child (2026 clients use the shared one).
    Session,
}

/// Limits with every value decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub call_timeout: Duration,
    pub start_wait: Duration,
    pub probe_timeout: Duration,
    pub park_timeout: Duration,
    pub attribution_wait: Duration,
    pub session_timeout: Duration,
    pub max_sessions: usize,
    pub max_body: usize,
    pub max_line: usize,
    pub shutdown_grace: Duration,
    pub stdin_grace: Duration,
    pub term_grace: Duration,
    pub keepalive: Duration,
    /// SSE resumability of 2025-11-25 sessions.
    pub replay: limits::Replay,
}

impl Default for Resolved {
    /// The same defaults as `serve`'s flags.
    fn default() -> Self {
        Resolved {
            call_timeout: Duration::from_secs(300),
            start_wait: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(10),
            park_timeout: crate::era::mrtr::INPUT_TTL,
            attribution_wait: Duration::from_secs(30),
            session_timeout: Duration::from_secs(1800),
            max_sessions: 1000,
            max_body: 16 << 20,
            max_line: 16 << 20,
            shutdown_grace: Duration::from_secs(10),
            stdin_grace: Duration::from_secs(2),
            term_grace: Duration::from_secs(3),
            keepalive: Duration::from_secs(15),
            replay: limits::Replay::default(),
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
            park_timeout: l.park_timeout.map_or(d.park_timeout, |v| v.0),
            attribution_wait: l.attribution_wait.map_or(d.attribution_wait, |v| v.0),
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
            replay: limits::Replay::new(
                l.sse_retry.map(|v| v.0),
                l.sse_close_after.map(|v| v.0),
                l.sse_replay_events,
                l.sse_replay_bytes.map(|v| v.0),
                l.sse_replay_age.map(|v| v.0),
            ),
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
    /// Several of the plan's servers merged behind one path (`[endpoints.NAME]`).
    Endpoint(endpoint::EndpointSpec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    /// How many children run it (`pool`, `--pool-min/--pool-max/--pool-idle`).
    pub pool: PoolSize,
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
            oauth,
            learn_tools_first,
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
            && *oauth == o.oauth
            && *learn_tools_first == o.learn_tools_first
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
    /// What each listener's connections may cost.
    pub conn: ConnLimits,
    pub default_server: Option<String>,
    /// Sorted by name; endpoints (`Target::Endpoint`) after every server they merge.
    pub servers: Vec<ServerSpec>,
    /// Plain `serve`: one server at its own path, answering every request on the listener
    /// itself (health, metrics, 404s); no `/servers/` routes.
    pub solo: bool,
    /// Replicas: the shared key file and this replica's URL (both, or neither: see
    /// [`Plan::cluster`]).
    pub cluster_key_file: Option<PathBuf>,
    pub advertise_url: Option<String>,
    /// CA certificates for https:// hops between replicas.
    pub cluster_ca_file: Option<PathBuf>,
    /// The audit log of the endpoints' calls (`[audit]`), if any.
    pub audit: Option<crate::audit::AuditSpec>,
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
                pool: c.pool,
                max_line: self.limits.max_line,
                probe_timeout: self.limits.probe_timeout,
                attribution_wait: self.limits.attribution_wait,
                stdin_grace: self.limits.stdin_grace,
                term_grace: self.limits.term_grace,
                max_backoff: Duration::from_secs(30),
            }),
            Target::Url(r) => {
                let mut cfg = r.0.clone();
                cfg.probe_timeout = self.limits.probe_timeout;
                UpstreamSpec::Remote(cfg)
            }
            Target::Endpoint(e) => UpstreamSpec::Endpoint(e.clone()),
        }
    }
}

impl Plan {
    /// The replica settings, when set: both the key file and the advertise URL, or neither
    /// (and a CA file only with them).
    pub fn cluster(&self) -> Result<Option<(&Path, &str)>, String> {
        match (&self.cluster_key_file, &self.advertise_url) {
            (None, None) if self.cluster_ca_file.is_some() => {
                Err("--cluster-ca-file ([cluster] ca_file) goes with --cluster-key-file".into())
            }
            (None, None) => Ok(None),
            (Some(f), Some(u)) => Ok(Some((f, u))),
            _ => Err(
                "a replica needs both --cluster-key-file and --advertise-url \
                      ([cluster] key_file and advertise_url)"
                    .into(),
            ),
        }
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
            && self.conn == other.conn
            && self.cluster_key_file == other.cluster_key_file
            && self.advertise_url == other.advertise_url
            && self.cluster_ca_file == other.cluster_ca_file
            && self.audit == other.audit
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
                    pool: None,
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
        servers.push(resolve_server(n, s, global).map_err(&err)?);
    }
    let mut paths = std::collections::BTreeMap::new();
    let endpoint_names: Vec<&str> = file.endpoints.keys().map(String::as_str).collect();
    policy::check_all(&file.policy, &endpoint_names).map_err(&err)?;
    let policy_default = file.policy_default.unwrap_or_default();
    for (n, e) in &file.endpoints {
        check_name(n).map_err(&err)?;
        let (path, mut spec) = endpoint::resolve(n, e, &file.servers).map_err(&err)?;
        spec.policy = policy::for_endpoint(n, &file.policy, policy_default).map_err(&err)?;
        if let Some(other) = paths.insert(path.clone(), n.clone()) {
            return Err(err(format!(
                "endpoints {other:?} and {n:?} have the same path {path:?}"
            )));
        }
        servers.push(ServerSpec {
            name: n.clone(),
            path,
            target: Target::Endpoint(spec),
            isolation: Isolation::Shared,
            limits: Resolved::from(global),
        });
    }
    let default_server = match file.default_server {
        Some(d) => {
            if !file.servers.contains_key(&d) && !file.endpoints.contains_key(&d) {
                return Err(err(format!(
                    "default_server {d:?} is not among [servers] or [endpoints]"
                )));
            }
            Some(d)
        }
        None if servers.len() == 1 => Some(servers[0].name.clone()),
        None if file.endpoints.len() == 1 => file.endpoints.keys().next().cloned(),
        None => None,
    };
    let (auth, public_url) = resolve_auth(file.auth, file.tls);
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
        conn: global.conn(),
        default_server,
        servers,
        solo: false,
        cluster_key_file: file.cluster.as_ref().and_then(|c| c.key_file.clone()),
        advertise_url: file.cluster.as_ref().and_then(|c| c.advertise_url.clone()),
        cluster_ca_file: file.cluster.and_then(|c| c.ca_file),
        audit: file.audit,
    })
}

/// One `[servers.NAME]` table, with the global `[limits]` under its own.
fn resolve_server(n: &str, s: &ServerFile, global: &Limits) -> Result<ServerSpec, String> {
    check_name(n)?;
    let limits = Resolved::from(&s.limits.over(global));
    let target = match &s.upstream {
        UpstreamFile::Command(c) => {
            if c.command.trim().is_empty() {
                return Err(format!("server {n:?}: command is empty"));
            }
            if let Some(k) = c
                .env
                .keys()
                .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
            {
                return Err(format!("server {n:?}: bad environment variable name {k:?}"));
            }
            Target::Command(CommandSpec {
                command: PathBuf::from(&c.command),
                args: c.args.clone(),
                env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                pass_environment: c.pass_environment,
                cwd: c.cwd.clone(),
                pool: pool::of(c.pool).map_err(|e| format!("server {n:?}: {e}"))?,
            })
        }
        // Reads the header file and the token: a bad one fails here (and check-config).
        UpstreamFile::Url(u) => Target::Url(RemoteSpec(
            u.remote
                .config(&u.url, limits.probe_timeout, Naming::File)
                .and_then(|cfg| oauth::with_login(cfg, &u.oauth, true))
                .map_err(|e| format!("server {n:?}: {e}"))?,
        )),
    };
    let isolation = match s.isolation {
        Some(IsolationFile::Session) => Isolation::Session,
        _ => Isolation::Shared,
    };
    if let Target::Command(c) = &target {
        pool::fits(c.pool, isolation).map_err(|e| format!("server {n:?}: {e}"))?;
    }
    Ok(ServerSpec {
        name: n.to_owned(),
        path: server_path(n),
        target,
        isolation,
        limits,
    })
}

/// `[auth]` and `[tls]` as the flags they stand for, and `[auth] public_url`.
fn resolve_auth(a: Option<AuthFile>, tls: Option<TlsFile>) -> (AuthArgs, Option<String>) {
    let mut auth = AuthArgs::default();
    let mut public_url = None;
    if let Some(a) = a {
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
    if let Some(t) = tls {
        auth.tls_cert = Some(t.cert);
        auth.tls_key = Some(t.key);
    }
    (auth, public_url)
}
