//! Authentication and transport security for the HTTP face (issue 4).
//!
//! The bridge is an OAuth 2.1 *resource server* (MCP authorization, RFC 9728, RFC 8707): it
//! checks the `Authorization: Bearer` token on every request to the MCP endpoint and never
//! passes it on. Two ways to check a token:
//!
//! - `bearer`: static API keys from a file (`name:token` lines) and/or an environment variable,
//!   kept only as SHA-256 digests and compared in constant time ([`bearer`]);
//! - `jwt`: signed access tokens checked against a JWKS (URL or file) with issuer, audience
//!   (default: the endpoint's canonical URL), an algorithm allow-list and required scopes
//!   ([`jwt`], keys fetched by [`fetch`]).
//!
//! [`http`] is the face's hook (Protected Resource Metadata, CORS preflight, the 401/403
//! answers); [`tls`] terminates TLS with rustls (aws-lc-rs provider) and reloads certificates.
//! Auth sits below the face: it knows the endpoint it guards only through the [`Endpoint`]
//! trait (which the face's configuration implements) and answers with `crate::http_util`'s
//! bodies, so it imports nothing from `crate::face`.
//!
//! Configuration happens in two steps: [`prepare`] before binding (reads secrets, refuses unsafe
//! set-ups, loads certificates) and [`Prepared::finish`] after binding, when the canonical URL
//! (which may include a port picked by the OS) is known.

pub mod bearer;
pub mod dpop;
pub mod fetch;
pub mod http;
pub mod jwt;
pub mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};
use tracing::{info, warn};

use crate::reload::Reloader;

/// The MCP endpoint auth guards, as auth needs to see it. The face's `HttpConfig` implements
/// this (in `crate::face`), so auth depends on no face type: the face calls auth's hook
/// ([`http::front`], [`http::cors`]) and hands itself over through this trait, and the
/// dependency points one way only (face -> auth).
pub trait Endpoint: Sync {
    /// The MCP endpoint's path (`/mcp`).
    fn mcp_path(&self) -> &str;
    /// The token check in force (none: open).
    fn auth_slot(&self) -> &AuthSlot;
    /// May a browser page from `origin` call the endpoint? The face's Origin guard decides;
    /// CORS answers follow the same rule.
    fn origin_allowed(&self, origin: &str) -> bool;
    /// Put the finished token check and TLS termination in place ([`Prepared::finish`]).
    fn install(&mut self, auth: AuthSlot, tls: Option<Arc<tls::Tls>>);
}

/// How callers authenticate on the MCP endpoint.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// No authentication (only allowed on loopback unless --allow-unauthenticated).
    #[default]
    None,
    /// Static bearer tokens (API keys) from --token-file and/or --token-env.
    Bearer,
    /// JWT access tokens checked against a JWKS (--jwks-url or --jwks-file).
    Jwt,
}

/// The `serve` flags of this module (flattened into `ServeArgs`).
#[derive(Debug, Clone, Default, Args, PartialEq, Eq)]
pub struct AuthArgs {
    /// How callers authenticate on the MCP endpoint.
    #[arg(long, value_enum, default_value = "none")]
    pub auth: AuthMode,
    /// Bearer tokens, one per line, optionally `name:TOKEN` (the name identifies the caller).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Name of an environment variable holding bearer tokens (comma- or newline-separated).
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// JWKS URL of the authorization server (http or https).
    #[arg(long, value_name = "URL")]
    pub jwks_url: Option<String>,
    /// JWKS file (read at start and re-read on refresh).
    #[arg(long, value_name = "FILE")]
    pub jwks_file: Option<PathBuf>,
    /// Required `iss` of JWTs (also the default authorization server in the metadata).
    #[arg(long, value_name = "URL")]
    pub issuer: Option<String>,
    /// Accepted `aud` of JWTs (repeatable; default: the canonical URL of the endpoint).
    #[arg(long, value_name = "AUD")]
    pub audience: Vec<String>,
    /// Scope every token must carry (repeatable); a missing one gets 403 insufficient_scope.
    #[arg(long = "required-scope", value_name = "SCOPE")]
    pub required_scope: Vec<String>,
    /// Authorization server for the protected-resource metadata (repeatable).
    #[arg(long = "authorization-server", value_name = "URL")]
    pub authorization_server: Vec<String>,
    /// Canonical URL of the endpoint as clients see it (default: scheme://bind-address:port/path).
    #[arg(long, value_name = "URL")]
    pub resource_url: Option<String>,
    /// TLS certificate chain (PEM); reloaded on SIGHUP and when the file changes.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve a non-loopback address without authentication (refused otherwise).
    #[arg(long)]
    pub allow_unauthenticated: bool,
}

/// How long JWT `exp`/`nbf` may be off (clock skew between the issuer and us).
pub const LEEWAY_SECS: u64 = 30;

/// The first step's result: secrets read, certificates loaded, unsafe set-ups refused.
pub struct Prepared {
    args: AuthArgs,
    tokens: Option<bearer::TokenSet>,
    /// The tokens that came from `--token-env` (kept across token-file reloads).
    env_tokens: bearer::TokenSet,
    tls: Option<Arc<tls::Tls>>,
    /// A JWKS that cannot be loaded is an error (reloads: the running keys stay in force
    /// instead of an endpoint that refuses every token).
    strict_keys: bool,
}

/// Check the flags and read what must be read before binding. Runs before the runtime starts
/// (single-threaded), so the token variable can be removed from the environment here: with
/// `--pass-environment` the child would otherwise inherit it.
pub fn prepare(args: &AuthArgs, host: IpAddr) -> Result<Prepared, String> {
    prepare_with(args, host, None)
}

impl Prepared {
    /// The same step for a configuration reload (SIGHUP), with the runtime running: token and
    /// JWKS files are read again and new settings checked, while what cannot change without a
    /// restart is carried over — the certificate (same paths; it reloads itself) and the
    /// `--token-env` tokens (the variable was removed from the environment at start, and
    /// editing the environment of a multi-threaded process is not sound).
    pub fn reconfigure(&self, args: &AuthArgs, host: IpAddr) -> Result<Prepared, String> {
        if args.tls_cert != self.args.tls_cert || args.tls_key != self.args.tls_key {
            return Err("TLS certificate/key paths change only on restart".into());
        }
        if args.token_env.is_some() && args.token_env != self.args.token_env {
            return Err("token_env changes only on restart (the variable is read once)".into());
        }
        let mut args = args.clone();
        // Certificates: keep the running (self-reloading) ones instead of loading them again.
        let (cert, key) = (args.tls_cert.take(), args.tls_key.take());
        let mut p = prepare_with(&args, host, Some(&self.env_tokens))?;
        p.args.tls_cert = cert;
        p.args.tls_key = key;
        p.tls = self.tls.clone();
        p.strict_keys = true;
        Ok(p)
    }

    /// The settings it was prepared from.
    pub fn args(&self) -> &AuthArgs {
        &self.args
    }
}

/// `prepare`, with the `--token-env` tokens taken from `env_tokens` when given instead of the
/// environment.
fn prepare_with(
    args: &AuthArgs,
    host: IpAddr,
    env_tokens_known: Option<&bearer::TokenSet>,
) -> Result<Prepared, String> {
    let a = args.clone();
    let bearer_flags = a.token_file.is_some() || a.token_env.is_some();
    let jwt_flags = a.jwks_url.is_some() || a.jwks_file.is_some() || a.issuer.is_some();
    match a.auth {
        AuthMode::None => {
            if bearer_flags || jwt_flags {
                return Err("token or JWKS flags given without --auth bearer|jwt".into());
            }
            if !host.is_loopback() && !a.allow_unauthenticated {
                return Err(format!(
                    "refusing to serve {host} without authentication: anyone who can reach it \
                     could run the published server. Use --auth bearer|jwt, or \
                     --allow-unauthenticated to accept that risk"
                ));
            }
        }
        AuthMode::Bearer => {
            if !bearer_flags {
                return Err("--auth bearer needs --token-file and/or --token-env".into());
            }
            if jwt_flags {
                return Err("--jwks-url/--jwks-file/--issuer belong to --auth jwt".into());
            }
        }
        AuthMode::Jwt => {
            if bearer_flags {
                return Err("--token-file/--token-env belong to --auth bearer".into());
            }
            match (&a.jwks_url, &a.jwks_file) {
                (Some(_), Some(_)) => return Err("give --jwks-url or --jwks-file, not both".into()),
                (None, None) => return Err("--auth jwt needs --jwks-url or --jwks-file".into()),
                (Some(u), None) => {
                    fetch::Target::parse(u).map_err(|e| format!("--jwks-url: {e}"))?;
                }
                _ => {}
            }
        }
    }
    if a.auth != AuthMode::Jwt && !a.audience.is_empty() {
        return Err("--audience belongs to --auth jwt".into());
    }
    let mut env_tokens = bearer::TokenSet::default();
    let tokens = if a.auth == AuthMode::Bearer {
        let mut set = bearer::TokenSet::default();
        if let Some(p) = &a.token_file {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read --token-file {}: {e}", p.display()))?;
            set.add_lines(&text, None)
                .map_err(|e| format!("--token-file {}: {e}", p.display()))?;
        }
        if let (Some(_), Some(known)) = (&a.token_env, env_tokens_known) {
            set.extend(known);
            env_tokens = known.clone();
        } else if let Some(var) = &a.token_env {
            let v = std::env::var(var)
                .map_err(|_| format!("--token-env {var}: variable not set or not UTF-8"))?;
            set.add_lines(&v.replace(',', "\n"), Some("env"))
                .map_err(|e| format!("--token-env {var}: {e}"))?;
            env_tokens
                .add_lines(&v.replace(',', "\n"), Some("env"))
                .map_err(|e| format!("--token-env {var}: {e}"))?;
            // Keep the secret out of the child's environment (--pass-environment).
            std::env::remove_var(var);
        }
        if set.is_empty() {
            return Err("no bearer tokens configured (the token file/variable is empty)".into());
        }
        Some(set)
    } else {
        None
    };
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(tls::Tls::load(c.clone(), k.clone())?),
        (None, None) => None,
        _ => return Err("--tls-cert and --tls-key go together".into()),
    };
    Ok(Prepared {
        args: a,
        tokens,
        env_tokens,
        tls,
        strict_keys: false,
    })
}

impl Prepared {
    /// A copy for one more endpoint behind the same listener (named servers in the daemon):
    /// the same tokens and certificate, with `resource_url` as its canonical URL when given.
    pub fn for_endpoint(&self, resource_url: Option<String>) -> Prepared {
        let mut args = self.args.clone();
        if resource_url.is_some() {
            args.resource_url = resource_url;
        }
        Prepared {
            args,
            tokens: self.tokens.clone(),
            env_tokens: self.env_tokens.clone(),
            tls: self.tls.clone(),
            strict_keys: self.strict_keys,
        }
    }

    /// The URL scheme clients use.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Complete the face's configuration once the listener is bound; what reloads on SIGHUP
    /// (certificate, token file, JWKS) registers with `reloader`.
    pub async fn finish<E: Endpoint>(
        self,
        mut http: E,
        bound: SocketAddr,
        reloader: &Reloader,
    ) -> Result<E, String> {
        if let Some(t) = &self.tls {
            t.watch(reloader);
        }
        let auth = AuthSlot::new(self.build_auth(http.mcp_path(), bound, reloader).await?);
        http.install(auth, self.tls.clone());
        Ok(http)
    }

    /// The endpoint's token check for the MCP endpoint at `path` (none when `--auth none`);
    /// its token file or JWKS registers with `reloader`.
    pub async fn build_auth(
        &self,
        path: &str,
        bound: SocketAddr,
        reloader: &Reloader,
    ) -> Result<Option<Arc<Auth>>, String> {
        let a = &self.args;
        if a.auth == AuthMode::None {
            if !a.authorization_server.is_empty() || !a.required_scope.is_empty() {
                warn!("--authorization-server/--required-scope have no effect without --auth");
            }
            return Ok(None);
        }
        let resource = match &a.resource_url {
            Some(u) => canonical(u)?,
            None => {
                let ip = bound.ip();
                if ip.is_unspecified()
                    && (a.auth == AuthMode::Jwt || !a.authorization_server.is_empty())
                {
                    return Err(format!(
                        "--resource-url is required when binding {ip}: it is the URL clients \
                         use, and tokens must be issued for it"
                    ));
                }
                let host = match ip {
                    IpAddr::V6(v6) => format!("[{v6}]"),
                    IpAddr::V4(v4) => v4.to_string(),
                };
                format!("{}://{host}:{}{path}", self.scheme(), bound.port())
            }
        };
        let mut servers = a.authorization_server.clone();
        if servers.is_empty() {
            if let Some(iss) = &a.issuer {
                servers.push(iss.clone());
            }
        }
        let metadata = if servers.is_empty() {
            None
        } else {
            Some(Metadata::new(
                &resource,
                &servers,
                &a.required_scope,
                a.auth == AuthMode::Jwt,
            )?)
        };
        if metadata.is_none() && a.auth == AuthMode::Jwt {
            warn!("no --authorization-server or --issuer: protected-resource metadata is not published");
        }
        let check = match a.auth {
            AuthMode::Bearer => match &self.tokens {
                Some(t) => {
                    let live = Arc::new(bearer::LiveTokens::new(
                        t.clone(),
                        a.token_file.clone(),
                        self.env_tokens.clone(),
                    ));
                    live.watch(reloader);
                    Check::Bearer(live)
                }
                None => return Err("no bearer tokens configured".into()),
            },
            AuthMode::Jwt => {
                let source = match (&a.jwks_url, &a.jwks_file) {
                    (Some(u), _) => jwt::Source::Url(fetch::Target::parse(u)?),
                    (None, Some(f)) => jwt::Source::File(f.clone()),
                    (None, None) => return Err("--auth jwt needs --jwks-url or --jwks-file".into()),
                };
                let audiences = if a.audience.is_empty() {
                    vec![resource.clone()]
                } else {
                    a.audience.clone()
                };
                let v = jwt::Verifier::new(jwt::Config {
                    source,
                    issuer: a.issuer.clone(),
                    audiences,
                    leeway: LEEWAY_SECS,
                });
                v.start(self.strict_keys, reloader).await?;
                Check::Jwt(v)
            }
            AuthMode::None => return Ok(None),
        };
        info!(
            mode = ?a.auth,
            resource = %resource,
            metadata = metadata.as_ref().map(|m| m.url.as_str()).unwrap_or("none"),
            "authentication required on the MCP endpoint"
        );
        Ok(Some(Arc::new(Auth {
            check,
            resource,
            metadata,
            scopes: a.required_scope.clone(),
            proofs: dpop::Proofs::default(),
        })))
    }
}

/// A canonical resource URL (RFC 8707): absolute http(s), no fragment, no trailing slash.
fn canonical(u: &str) -> Result<String, String> {
    let uri: ::http::Uri = u
        .parse()
        .map_err(|e| format!("--resource-url {u:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("--resource-url {u:?}: must be an http(s) URL")),
    }
    if uri.authority().is_none() || u.contains('#') {
        return Err(format!(
            "--resource-url {u:?}: needs a host and no fragment"
        ));
    }
    Ok(u.trim_end_matches('/').to_owned())
}

/// Protected Resource Metadata (RFC 9728): the document and where it is published.
pub struct Metadata {
    /// The path-inserted well-known URL announced in `WWW-Authenticate`.
    pub url: String,
    /// Path of the resource (e.g. `/mcp`), for the path-inserted well-known form.
    pub resource_path: String,
    pub body: Bytes,
}

pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

impl Metadata {
    /// With `dpop`, the document says DPoP-bound tokens are taken (RFC 9728 §2).
    fn new(
        resource: &str,
        servers: &[String],
        scopes: &[String],
        dpop: bool,
    ) -> Result<Self, String> {
        let uri: ::http::Uri = resource
            .parse()
            .map_err(|e| format!("resource URL {resource:?}: {e}"))?;
        let (Some(scheme), Some(auth)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!("resource URL {resource:?} is not absolute"));
        };
        let path = uri.path().trim_end_matches('/').to_owned();
        let url = format!("{scheme}://{auth}{WELL_KNOWN}{path}");
        let mut doc = serde_json::json!({
            "resource": resource,
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-bridge",
        });
        if !scopes.is_empty() {
            doc["scopes_supported"] = serde_json::json!(scopes);
        }
        if dpop {
            doc["dpop_signing_alg_values_supported"] = serde_json::json!(dpop::ALGS);
        }
        Ok(Metadata {
            url,
            resource_path: path,
            body: Bytes::from(doc.to_string()),
        })
    }
}

/// An endpoint's authentication, replaceable while it serves: requests load the current one
/// (lock-free), a daemon reload stores a new one. Empty = open endpoint.
#[derive(Clone, Default)]
pub struct AuthSlot(Arc<arc_swap::ArcSwapOption<Auth>>);

impl AuthSlot {
    pub fn new(auth: Option<Arc<Auth>>) -> Self {
        AuthSlot(Arc::new(arc_swap::ArcSwapOption::new(auth)))
    }
    /// The authentication in force now.
    pub fn current(&self) -> Option<Arc<Auth>> {
        self.0.load_full()
    }
    /// Replace it; requests already past the check keep what they were checked with.
    pub fn replace(&self, auth: Option<Arc<Auth>>) {
        self.0.store(auth);
    }
    pub fn is_set(&self) -> bool {
        self.0.load().is_some()
    }
}

impl std::fmt::Debug for AuthSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0.load() {
            Some(a) => a.fmt(f),
            None => f.write_str("open"),
        }
    }
}

/// How tokens are checked.
pub enum Check {
    Bearer(Arc<bearer::LiveTokens>),
    Jwt(Arc<jwt::Verifier>),
}

/// The MCP endpoint's authentication, shared by all requests.
pub struct Auth {
    pub check: Check,
    /// Canonical URL of the endpoint (default JWT audience; PRM `resource`).
    pub resource: String,
    pub metadata: Option<Metadata>,
    pub scopes: Vec<String>,
    /// The DPoP proofs seen lately (JWT mode: tokens may be bound to a key, RFC 9449).
    pub proofs: dpop::Proofs,
}

impl std::fmt::Debug for Auth {
    // Never prints token digests or keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.check {
            Check::Bearer(_) => "bearer",
            Check::Jwt(_) => "jwt",
        };
        f.debug_struct("Auth")
            .field("mode", &mode)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// Who a request came from, once authenticated.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Token name (bearer) or `sub` (JWT); safe to log.
    pub name: Arc<str>,
    /// Bounded label for metrics: the token name, or `jwt`.
    pub label: Arc<str>,
    /// What an endpoint's `[[policy]]` reads: the token's name, or the JWT's `sub`, scopes
    /// and string claims (bounded).
    pub identity: Arc<crate::config::policy::Identity>,
}

/// The string claims of a JWT (a string, or an array of strings), bounded: a policy rule's
/// `claim`/`contains` reads them.
fn string_claims(claims: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    const MAX_CLAIMS: usize = 32;
    const MAX_VALUES: usize = 64;
    const MAX_LEN: usize = 256;
    let Some(o) = claims.as_object() else {
        return Vec::new();
    };
    let short = |s: &str| (s.len() <= MAX_LEN).then(|| s.to_owned());
    o.iter()
        .filter_map(|(k, v)| {
            let vals: Vec<String> = match v {
                serde_json::Value::String(s) => short(s).into_iter().collect(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_str().and_then(short))
                    .take(MAX_VALUES)
                    .collect(),
                _ => return None,
            };
            (!vals.is_empty() && k.len() <= MAX_LEN).then(|| (k.clone(), vals))
        })
        .take(MAX_CLAIMS)
        .collect()
}

/// Why a request was refused; `reason` is the metrics label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    /// The OAuth error code for `WWW-Authenticate` (none when no credentials were sent).
    pub error: Option<&'static str>,
    pub description: &'static str,
}

impl Refusal {
    pub const fn new(
        reason: &'static str,
        error: Option<&'static str>,
        description: &'static str,
    ) -> Self {
        Refusal {
            reason,
            error,
            description,
        }
    }
}

/// The token check timeout for a JWKS refresh triggered by an unknown `kid`.
pub const DEMAND_REFRESH_WAIT: Duration = Duration::from_secs(5);

impl Auth {
    /// Does this endpoint take `Authorization: DPoP` (JWT mode)?
    pub fn takes_dpop(&self) -> bool {
        matches!(self.check, Check::Jwt(_))
    }

    /// Check one presented token (already taken out of the `Authorization` header) and, for
    /// the DPoP scheme, its `proof` and the request's `method`: a bound token needs a proof
    /// by its key, and a proof needs a bound token.
    pub async fn verify(
        &self,
        token: &str,
        proof: Option<(&str, &str)>,
    ) -> Result<Caller, Refusal> {
        match &self.check {
            Check::Bearer(_) if proof.is_some() => Err(Refusal::new(
                "scheme",
                Some("invalid_request"),
                "Use the Bearer authentication scheme",
            )),
            Check::Bearer(set) => match set.verify(token) {
                Some(name) => Ok(Caller {
                    label: name.clone(),
                    identity: Arc::new(crate::config::policy::Identity {
                        token: Some(name.to_string()),
                        ..Default::default()
                    }),
                    name,
                }),
                None => Err(Refusal::new(
                    "unknown_token",
                    Some("invalid_token"),
                    "The access token is not valid",
                )),
            },
            Check::Jwt(v) => {
                let claims = v.verify(token).await?;
                self.check_binding(&claims, token, proof)?;
                let granted = jwt::scopes(&claims);
                if !self
                    .scopes
                    .iter()
                    .all(|need| jwt::scope_granted(&granted, need))
                {
                    return Err(Refusal::new(
                        "insufficient_scope",
                        Some("insufficient_scope"),
                        "The access token lacks a required scope",
                    ));
                }
                let sub = claims
                    .get("sub")
                    .and_then(|s| s.as_str())
                    .map(|s| s.chars().take(64).collect::<String>())
                    .unwrap_or_else(|| "jwt".into());
                let identity = crate::config::policy::Identity {
                    token: None,
                    sub: claims
                        .get("sub")
                        .and_then(|s| s.as_str())
                        .map(str::to_owned),
                    scopes: granted,
                    claims: string_claims(&claims),
                };
                Ok(Caller {
                    name: Arc::from(sub),
                    label: Arc::from("jwt"),
                    identity: Arc::new(identity),
                })
            }
        }
    }

    /// RFC 9449 §7: a token bound to a key (`cnf.jkt`) comes with a valid proof by that key.
    fn check_binding(
        &self,
        claims: &serde_json::Value,
        token: &str,
        proof: Option<(&str, &str)>,
    ) -> Result<(), Refusal> {
        match (dpop::bound_to(claims), proof) {
            (None, None) => Ok(()),
            (Some(_), None) => Err(Refusal::new(
                "dpop_required",
                Some("invalid_token"),
                "The access token is DPoP-bound: send it with the DPoP scheme and a proof",
            )),
            (None, Some(_)) => Err(Refusal::new(
                "dpop_unbound",
                Some("invalid_token"),
                "The access token is not DPoP-bound: send it with the Bearer scheme",
            )),
            (Some(jkt), Some((proof, method))) => {
                let now = crate::oauth::store::now_secs();
                let key = self
                    .proofs
                    .check(proof, method, &self.resource, token, now)?;
                if key == jkt {
                    Ok(())
                } else {
                    Err(Refusal::new(
                        "dpop_binding",
                        Some("invalid_dpop_proof"),
                        "The DPoP proof is signed by another key than the token is bound to",
                    ))
                }
            }
        }
    }
}
