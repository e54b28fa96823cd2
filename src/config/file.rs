//! The configuration file as written: the TOML shapes serde reads (unknown keys rejected),
//! with the conversions that check a value where it stands (URLs, headers, durations, sizes),
//! so a mistake is reported at its line and column. Resolving them into a `Plan` is
//! `config`'s job.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::oauth::OAuthArgs;
use super::remote::{self, Naming, ProtocolChoice, RemoteArgs};
use super::units::{duration_from_secs, parse_duration, parse_size};

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
    /// Replicas (as `--cluster-key-file`, `--advertise-url`).
    pub cluster: Option<ClusterFile>,
    /// Defaults for every server; a server's own `limits` table wins.
    #[serde(default)]
    pub limits: Limits,
    /// The server also published at `/mcp` (default: the only server, when there is one).
    pub default_server: Option<String>,
    #[serde(default)]
    pub servers: BTreeMap<String, ServerFile>,
    /// Paths that merge several servers (`crate::upstream::aggregate`).
    #[serde(default)]
    pub endpoints: BTreeMap<String, super::endpoint::EndpointFile>,
    /// Who may use what of an endpoint, in order (`super::policy`).
    #[serde(default)]
    pub policy: Vec<super::policy::PolicyFile>,
    /// What applies when no rule does (default `allow`).
    pub policy_default: Option<super::policy::Decision>,
    /// One JSON line per call of an endpoint (`crate::audit`).
    pub audit: Option<crate::audit::AuditSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub key_file: Option<PathBuf>,
    pub advertise_url: Option<String>,
    pub ca_file: Option<PathBuf>,
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
    /// Boxed: a url server's settings (its remote and OAuth flags) are far the larger.
    Url(Box<UrlFile>),
}

#[derive(Debug)]
pub struct CommandFile {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub pass_environment: bool,
    pub cwd: Option<PathBuf>,
    pub pool: Option<PoolFile>,
}

/// `pool = { min = 1, max = 4, idle = "60s" }`: how many children a command server runs.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    pub min: Option<usize>,
    pub max: Option<usize>,
    pub idle: Option<Dur>,
}

/// A remote server: its URL and the same settings `serve --upstream` takes as flags.
#[derive(Debug)]
pub struct UrlFile {
    pub url: String,
    pub remote: RemoteArgs,
    pub oauth: OAuthArgs,
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
    pool: Option<PoolFile>,
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
    oauth: Option<OAuthFile>,
    isolation: Option<IsolationFile>,
    #[serde(default)]
    limits: Limits,
}

/// `[servers.NAME.oauth]` of a `url` server: connect's `--oauth-*` flags without the prefix
/// (`enabled = true` is `--oauth`, `false` is `--no-oauth`). A daemon never opens a browser:
/// it uses the login `mcp-bridge auth login URL` kept in `dir`, and refreshes it, or logs a
/// machine in by itself (`client_credentials = true`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthFile {
    enabled: Option<bool>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    client_metadata_url: Option<String>,
    scope: Option<String>,
    no_resource: Option<bool>,
    #[serde(default)]
    params: BTreeMap<String, String>,
    dir: Option<PathBuf>,
    /// A machine login (the client credentials grant) with `client_id` and
    /// `client_secret_file` or `private_key_file` (+ `key_id`).
    client_credentials: Option<bool>,
    private_key_file: Option<PathBuf>,
    key_id: Option<String>,
    /// `auto`, `always` or `never` (DPoP, RFC 9449).
    dpop: Option<DpopFile>,
    /// Workload identity: the JWT-bearer grant with the JWT in this file or printed by this
    /// command.
    jwt_bearer_file: Option<PathBuf>,
    jwt_bearer_command: Option<String>,
    /// Enterprise-managed authorization (SEP-990).
    idp_issuer: Option<String>,
    idp_token_endpoint: Option<String>,
    idp_client_id: Option<String>,
    idp_client_secret_file: Option<PathBuf>,
    id_token_file: Option<PathBuf>,
    id_token_command: Option<String>,
}

/// `dpop = "auto" | "always" | "never"`.
#[derive(Debug, Deserialize)]
#[serde(try_from = "String")]
struct DpopFile(crate::oauth::dpop::Mode);

impl TryFrom<String> for DpopFile {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        crate::oauth::dpop::Mode::parse(&s).map(DpopFile)
    }
}

impl OAuthFile {
    fn args(self) -> OAuthArgs {
        OAuthArgs {
            oauth: self.enabled == Some(true),
            no_oauth: self.enabled == Some(false),
            oauth_client_id: self.client_id,
            oauth_client_secret_file: self.client_secret_file,
            oauth_client_metadata_url: self.client_metadata_url,
            oauth_scope: self.scope,
            oauth_no_resource: self.no_resource.unwrap_or(false),
            oauth_param: self.params.into_iter().collect(),
            oauth_dir: self.dir,
            oauth_client_credentials: self.client_credentials.unwrap_or(false),
            oauth_private_key_file: self.private_key_file,
            oauth_key_id: self.key_id,
            oauth_dpop: self.dpop.map(|d| d.0).unwrap_or_default(),
            oauth_jwt_bearer_file: self.jwt_bearer_file,
            oauth_jwt_bearer_command: self.jwt_bearer_command,
            oauth_idp_issuer: self.idp_issuer,
            oauth_idp_token_endpoint: self.idp_token_endpoint,
            oauth_idp_client_id: self.idp_client_id,
            oauth_idp_client_secret_file: self.idp_client_secret_file,
            oauth_id_token_file: self.id_token_file,
            oauth_id_token_command: self.id_token_command,
            no_browser: true,
            oauth_timeout: Duration::from_secs(300),
            ..OAuthArgs::default()
        }
    }
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
        if let Some(k) = t.limits.listener_key() {
            return Err(format!(
                "`{k}` limits a listener's connections: set it in the global [limits] table"
            ));
        }
        let set = |keys: &[(&'static str, bool)]| keys.iter().find(|(_, s)| *s).map(|(k, _)| *k);
        let child_keys = [
            ("args", t.args.is_some()),
            ("env", t.env.is_some()),
            ("pass_environment", t.pass_environment.is_some()),
            ("cwd", t.cwd.is_some()),
            ("pool", t.pool.is_some()),
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
            ("oauth", t.oauth.is_some()),
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
                    pool: t.pool,
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
                UpstreamFile::Url(Box::new(UrlFile {
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
                    oauth: t.oauth.unwrap_or_default().args(),
                }))
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
    /// As `--park-timeout`.
    pub park_timeout: Option<Dur>,
    /// As `--attribution-wait`.
    pub attribution_wait: Option<Dur>,
    pub session_timeout: Option<Dur>,
    pub max_sessions: Option<usize>,
    pub max_body: Option<Size>,
    pub max_line: Option<Size>,
    /// Global: the SIGTERM drain. Per server: the drain when a reload removes or restarts it.
    pub shutdown_grace: Option<Dur>,
    pub stdin_grace: Option<Dur>,
    pub term_grace: Option<Dur>,
    pub keepalive: Option<Dur>,
    /// As `--sse-retry`.
    pub sse_retry: Option<Dur>,
    /// As `--sse-close-after` (0: off).
    pub sse_close_after: Option<Dur>,
    /// As `--sse-replay-events`.
    pub sse_replay_events: Option<usize>,
    /// As `--sse-replay-bytes`.
    pub sse_replay_bytes: Option<Size>,
    /// As `--sse-replay-age`.
    pub sse_replay_age: Option<Dur>,
    /// Global only (each listener's connections): as `--header-timeout`.
    pub header_timeout: Option<Dur>,
    /// Global only: as `--body-timeout`.
    pub body_timeout: Option<Dur>,
    /// Global only: as `--http-idle-timeout` (`idle_timeout` of a url server is its remote's).
    pub idle_timeout: Option<Dur>,
    /// Global only: as `--max-connections`.
    pub max_connections: Option<usize>,
    /// Global only: as `--max-streams`.
    pub max_streams: Option<usize>,
    /// Global only: as `--h2-max-concurrent-streams`.
    pub h2_max_concurrent_streams: Option<u32>,
    /// Global only: as `--h2-max-header-list-size`.
    pub h2_max_header_list_size: Option<Size>,
    /// Global only: as `--h2-max-pending-resets`.
    pub h2_max_pending_resets: Option<usize>,
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
            // i64 to f64 loses precision only far beyond the one-year bound.
            #[allow(clippy::cast_precision_loss)]
            NumOrText::Int(n) => duration_from_secs(n as f64).map(Dur),
            NumOrText::Float(f) => duration_from_secs(f).map(Dur),
            NumOrText::Text(s) => parse_duration(&s).map(Dur),
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
    pub(crate) fn over(&self, base: &Limits) -> Limits {
        Limits {
            call_timeout: self.call_timeout.or(base.call_timeout),
            start_wait: self.start_wait.or(base.start_wait),
            probe_timeout: self.probe_timeout.or(base.probe_timeout),
            park_timeout: self.park_timeout.or(base.park_timeout),
            attribution_wait: self.attribution_wait.or(base.attribution_wait),
            session_timeout: self.session_timeout.or(base.session_timeout),
            max_sessions: self.max_sessions.or(base.max_sessions),
            max_body: self.max_body.or(base.max_body),
            max_line: self.max_line.or(base.max_line),
            shutdown_grace: self.shutdown_grace.or(base.shutdown_grace),
            stdin_grace: self.stdin_grace.or(base.stdin_grace),
            term_grace: self.term_grace.or(base.term_grace),
            keepalive: self.keepalive.or(base.keepalive),
            sse_retry: self.sse_retry.or(base.sse_retry),
            sse_close_after: self.sse_close_after.or(base.sse_close_after),
            sse_replay_events: self.sse_replay_events.or(base.sse_replay_events),
            sse_replay_bytes: self.sse_replay_bytes.or(base.sse_replay_bytes),
            sse_replay_age: self.sse_replay_age.or(base.sse_replay_age),
            // Per listener, never per server (`ServerFile` refuses them).
            header_timeout: base.header_timeout,
            body_timeout: base.body_timeout,
            idle_timeout: base.idle_timeout,
            max_connections: base.max_connections,
            max_streams: base.max_streams,
            h2_max_concurrent_streams: base.h2_max_concurrent_streams,
            h2_max_header_list_size: base.h2_max_header_list_size,
            h2_max_pending_resets: base.h2_max_pending_resets,
        }
    }

    /// The connection limits key set in this table, if any (they belong to the global one).
    fn listener_key(&self) -> Option<&'static str> {
        [
            ("header_timeout", self.header_timeout.is_some()),
            ("body_timeout", self.body_timeout.is_some()),
            ("idle_timeout", self.idle_timeout.is_some()),
            ("max_connections", self.max_connections.is_some()),
            ("max_streams", self.max_streams.is_some()),
            (
                "h2_max_concurrent_streams",
                self.h2_max_concurrent_streams.is_some(),
            ),
            (
                "h2_max_header_list_size",
                self.h2_max_header_list_size.is_some(),
            ),
            (
                "h2_max_pending_resets",
                self.h2_max_pending_resets.is_some(),
            ),
        ]
        .into_iter()
        .find(|(_, set)| *set)
        .map(|(k, _)| k)
    }

    /// The connection limits, defaults filled in.
    pub fn conn(&self) -> super::limits::ConnLimits {
        let d = super::limits::ConnLimits::default();
        super::limits::ConnLimits::new(
            self.header_timeout.map_or(d.header_timeout, |v| v.0),
            self.body_timeout.map_or(d.body_timeout, |v| v.0),
            self.idle_timeout.map_or(d.idle_timeout, |v| v.0),
            Some(self.max_connections.unwrap_or(d.max_connections)),
            self.max_streams.unwrap_or(d.max_streams),
            super::limits::H2Limits::new(
                self.h2_max_concurrent_streams,
                self.h2_max_header_list_size.map(|s| s.0),
                self.h2_max_pending_resets,
            ),
        )
    }
}
