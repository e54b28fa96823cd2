//! The daemon's configuration file (`serve --config FILE`, `check-config FILE`): TOML with
//! unknown keys rejected, errors reported as `FILE:LINE:COLUMN: message`; an optional
//! `mcpServers` JSON map (`--servers-json FILE`, the format desktop hosts use) adds named
//! servers; explicit command-line flags override what the files say.
//!
//! Reading produces a [`Plan`]: every value resolved (defaults filled in, per-server limits over
//! global ones), every server validated. A `Plan` is plain data and comparable, so a reload can
//! tell added, removed, changed and unchanged servers apart by comparing [`ServerSpec`]s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{AuthArgs, AuthMode};
use crate::cli::{parse_duration, parse_size, Isolation, ServeArgs};
use crate::face::http::HttpConfig;
use crate::upstream::child::ChildConfig;

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

/// One `[servers.<name>]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    pub isolation: Option<IsolationFile>,
    #[serde(default)]
    pub limits: Limits,
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
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    pub isolation: Isolation,
    pub limits: Resolved,
}

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
}

/// The path a named server is published at.
pub fn server_path(name: &str) -> String {
    format!("/servers/{name}/mcp")
}

impl ServerSpec {
    pub fn path(&self) -> String {
        server_path(&self.name)
    }

    /// The child's configuration.
    pub fn child_config(&self) -> ChildConfig {
        ChildConfig {
            name: self.name.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            pass_environment: self.pass_environment,
            cwd: self.cwd.clone(),
            max_line: self.limits.max_line,
            probe_timeout: self.limits.probe_timeout,
            stdin_grace: self.limits.stdin_grace,
            term_grace: self.limits.term_grace,
            max_backoff: Duration::from_secs(30),
        }
    }

    /// The HTTP face's configuration (auth and TLS are filled in by the daemon);
    /// `loopback`: every listener is on a loopback address.
    pub fn http_config(&self, allow_origins: &[String], loopback: bool) -> HttpConfig {
        HttpConfig {
            path: self.path(),
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
                command,
                args,
                env,
                pass_environment: false,
                cwd,
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
        if s.command.trim().is_empty() {
            return Err(err(format!("server {n:?}: command is empty")));
        }
        for k in s.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(err(format!(
                    "server {n:?}: bad environment variable name {k:?}"
                )));
            }
        }
        servers.push(ServerSpec {
            name: n.clone(),
            command: PathBuf::from(&s.command),
            args: s.args.clone(),
            env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            pass_environment: s.pass_environment,
            cwd: s.cwd.clone(),
            isolation: match s.isolation {
                Some(IsolationFile::Session) => Isolation::Session,
                _ => Isolation::Shared,
            },
            limits: Resolved::from(&s.limits.over(global)),
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
    })
}

// ---------------------------------------------------------------------------------------------
// Command-line overrides
// ---------------------------------------------------------------------------------------------

/// `serve` flags given explicitly on the command line (or by environment), by clap argument id.
pub type Given = std::collections::HashSet<String>;

/// Flags that have no meaning next to a configuration file.
const NOT_WITH_CONFIG: &[&str] = &["path", "demo", "demo_era", "name", "command"];

/// Check that the explicit flags make sense with a configuration file.
pub fn check_overrides(given: &Given) -> Result<(), String> {
    for f in NOT_WITH_CONFIG {
        if given.contains(*f) {
            let flag = if *f == "command" {
                "a command after --".to_owned()
            } else {
                format!("--{}", f.replace('_', "-"))
            };
            return Err(format!(
                "{flag} cannot be combined with --config/--servers-json: define servers in the file"
            ));
        }
    }
    Ok(())
}

/// Apply the explicit flags of `args` over `plan`: listeners, origins, auth and TLS replace the
/// file's; limits, isolation and child environment settings apply to every server.
pub fn apply_overrides(plan: &mut Plan, args: &ServeArgs, given: &Given) {
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
        given!(s <- args: isolation, pass_environment, cwd);
        if g("env") {
            for (k, v) in &args.env {
                s.env.retain(|(k2, _)| k2 != k);
                s.env.push((k.clone(), v.clone()));
            }
        }
    }
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
        assert_eq!(py.env, vec![("API_KEY".into(), "x".into())]);
        assert_eq!(py.path(), "/servers/py/mcp");
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
        assert_eq!(m["fs"].args, vec!["-y", "server-fs", "/tmp"]);
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
        apply_overrides(&mut p, &args, &given);
        assert!(p.listen.iter().all(|a| a.port() == 9100));
        assert!(p
            .servers
            .iter()
            .all(|s| s.limits.call_timeout == Duration::from_secs(7)));
        assert_eq!(p.auth.issuer.as_deref(), Some("https://as.example"));
        assert_eq!(p.shutdown_grace, Duration::from_secs(3));
        assert!(p
            .servers
            .iter()
            .all(|s| s.limits.max_line == 1000 && s.pass_environment));
        // Not given: the file's value stays.
        assert_eq!(p.server("py").unwrap().limits.max_body, 1 << 20);
        assert!(check_overrides(&["demo".to_string()].into_iter().collect()).is_err());
    }
}
