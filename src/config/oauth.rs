//! The OAuth login's settings ([`OAuthArgs`]): flags of `connect` and `serve --upstream`, and
//! the keys of a config file's `url` server, which fill the same struct; [`with_login`] puts
//! the login they ask for on a [`RemoteConfig`]. Here, not in `cli`, because the config file
//! builds them too and `config` sits below `cli`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http::header::AUTHORIZATION;

use super::units::{parse_duration, parse_kv};
use crate::oauth::assertion::ClientKey;
use crate::oauth::dpop;
use crate::oauth::exchange::{Idp, Source};
use crate::oauth::login::{Grant, LoginSettings};
use crate::oauth::register::StaticClient;
use crate::oauth::store::Secret;
use crate::oauth::{OAuthSettings, Trigger};
use crate::upstream::remote::RemoteConfig;

/// The OAuth login (without a static token, a 401 with a Bearer challenge starts it; any of
/// these flags makes every 401 start it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
#[command(next_help_heading = "OAuth login (connect)")]
pub struct OAuthArgs {
    /// Log in with OAuth on a 401 even without a Bearer challenge (discovery by well-known URIs).
    #[arg(long, conflicts_with = "no_oauth")]
    pub oauth: bool,
    /// Never log in: a 401 is an error that names the token flags.
    #[arg(long)]
    pub no_oauth: bool,
    /// A client id registered with the authorization server (else dynamic registration).
    #[arg(long, value_name = "ID")]
    pub oauth_client_id: Option<String>,
    /// File holding the client secret of --oauth-client-id (a confidential client).
    #[arg(long, value_name = "FILE", requires = "oauth_client_id")]
    pub oauth_client_secret_file: Option<PathBuf>,
    /// URL of a Client ID Metadata Document (https): the client id at authorization servers
    /// that advertise client_id_metadata_document_supported (else dynamic registration).
    #[arg(long, value_name = "URL")]
    pub oauth_client_metadata_url: Option<String>,
    /// Scopes to ask for (space-separated; default: the server's challenge, else its metadata).
    #[arg(long, value_name = "SCOPES")]
    pub oauth_scope: Option<String>,
    /// Port of the loopback callback on 127.0.0.1 (default: one derived from the server URL,
    /// else any free port).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub oauth_callback_port: Option<u16>,
    /// Leave out the RFC 8707 `resource` parameter (for providers that reject it).
    #[arg(long)]
    pub oauth_no_resource: bool,
    /// Extra authorization request parameter K=V (repeatable), e.g. audience=…, prompt=consent
    /// (with --oauth-device-code or --oauth-client-credentials: on their requests).
    #[arg(long, value_name = "K=V", value_parser = parse_kv)]
    pub oauth_param: Vec<(String, String)>,
    /// Do not open a browser; only print the login URL (on stderr).
    #[arg(long)]
    pub no_browser: bool,
    /// Where logins are kept (default: $XDG_CONFIG_HOME/mcp-bridge/oauth or
    /// ~/.config/mcp-bridge/oauth).
    #[arg(long, value_name = "DIR")]
    pub oauth_dir: Option<PathBuf>,
    /// How long the browser or device login may take.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub oauth_timeout: Duration,
    /// Log in without a browser here: the device authorization grant (RFC 8628); the URL and
    /// the code to enter there are printed on stderr.
    #[arg(long)]
    pub oauth_device_code: bool,
    /// Log in as a machine (no user): the client credentials grant with --oauth-client-id and
    /// --oauth-client-secret-file or --oauth-private-key-file.
    #[arg(long)]
    pub oauth_client_credentials: bool,
    /// PEM private key (RSA or EC P-256) of --oauth-client-id: the client authenticates with a
    /// signed JWT (private_key_jwt, RFC 7523) instead of a secret.
    #[arg(long, value_name = "FILE")]
    pub oauth_private_key_file: Option<PathBuf>,
    /// The `kid` of --oauth-private-key-file in the authorization server's records.
    #[arg(long, value_name = "KID", requires = "oauth_private_key_file")]
    pub oauth_key_id: Option<String>,
    /// Bind tokens to a key of the login's own (DPoP, RFC 9449: a proof on every request):
    /// auto (when the authorization server lists ES256 in dpop_signing_alg_values_supported
    /// and the server takes DPoP: a DPoP challenge or DPoP in its resource metadata),
    /// always, or never.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = dpop::Mode::parse)]
    pub oauth_dpop: dpop::Mode,
    /// Workload identity (SEP-1933): log in with the JWT-bearer grant (RFC 7523) using the JWT
    /// in FILE, read again for every token (the platform may rotate it).
    #[arg(long, value_name = "FILE", conflicts_with = "oauth_jwt_bearer_command")]
    pub oauth_jwt_bearer_file: Option<PathBuf>,
    /// Workload identity with the JWT that CMD prints (run with `sh -c` for every token, 30 s
    /// at most).
    #[arg(long, value_name = "CMD")]
    pub oauth_jwt_bearer_command: Option<String>,
    /// Enterprise-managed authorization (SEP-990): the enterprise identity provider's issuer
    /// (its token endpoint from its metadata). The user's ID token is exchanged there for an
    /// ID-JAG (RFC 8693), which the JWT-bearer grant trades for the token.
    #[arg(long, value_name = "URL")]
    pub oauth_idp_issuer: Option<String>,
    /// The enterprise identity provider's token endpoint (no metadata is then fetched).
    #[arg(long, value_name = "URL")]
    pub oauth_idp_token_endpoint: Option<String>,
    /// This client's id at the enterprise identity provider.
    #[arg(long, value_name = "ID")]
    pub oauth_idp_client_id: Option<String>,
    /// File holding the client secret of --oauth-idp-client-id.
    #[arg(long, value_name = "FILE", requires = "oauth_idp_client_id")]
    pub oauth_idp_client_secret_file: Option<PathBuf>,
    /// File holding the user's ID token from the enterprise identity provider (read again for
    /// every token).
    #[arg(long, value_name = "FILE", conflicts_with = "oauth_id_token_command")]
    pub oauth_id_token_file: Option<PathBuf>,
    /// The user's ID token as CMD prints it (run with `sh -c` for every token).
    #[arg(long, value_name = "CMD")]
    pub oauth_id_token_command: Option<String>,
}

/// A secret kept in a file (trimmed; empty is refused).
fn read_secret(flag: &str, f: &std::path::Path) -> Result<Secret, String> {
    let s = std::fs::read_to_string(f).map_err(|e| format!("{flag} {}: {e}", f.display()))?;
    let s = s.trim();
    if s.is_empty() {
        return Err(format!("{flag} {}: empty", f.display()));
    }
    Ok(Secret(s.to_owned()))
}

/// An OAuth endpoint given as a flag: https (http only on a loopback host).
fn check_endpoint(flag: &str, u: &str) -> Result<(), String> {
    let url = url::Url::parse(u).map_err(|e| format!("{flag} {u}: {e}"))?;
    crate::oauth::http::check_url(&url).map_err(|e| format!("{flag}: {e}"))
}

/// The ids of the OAuth flags (`serve` refuses them without `--upstream`).
pub fn oauth_ids() -> Vec<String> {
    OAuthArgs::augment_args(clap::Command::new("oauth"))
        .get_arguments()
        .map(|a| a.get_id().as_str().to_owned())
        .collect()
}

impl OAuthArgs {
    /// The settings for a daemon (`serve --upstream`, a `url` server): never interactive.
    pub fn daemon_settings(&self, static_auth: bool) -> Result<Option<OAuthSettings>, String> {
        Ok(self.settings(static_auth)?.map(|mut s| {
            s.login.interactive = false;
            s
        }))
    }

    /// Were OAuth settings given (so that every 401 starts a login)?
    fn explicit(&self) -> bool {
        self.oauth
            || self.oauth_client_id.is_some()
            || self.oauth_client_metadata_url.is_some()
            || self.oauth_scope.is_some()
            || self.oauth_callback_port.is_some()
            || !self.oauth_param.is_empty()
            || self.oauth_device_code
            || self.oauth_client_credentials
            || self.oauth_private_key_file.is_some()
            || self.workload().is_some()
            || self.enterprise_asked()
    }

    fn workload(&self) -> Option<Source> {
        match (&self.oauth_jwt_bearer_file, &self.oauth_jwt_bearer_command) {
            (Some(f), _) => Some(Source::File(f.clone())),
            (None, Some(c)) => Some(Source::Command(c.clone())),
            (None, None) => None,
        }
    }

    fn enterprise_asked(&self) -> bool {
        self.oauth_idp_issuer.is_some()
            || self.oauth_idp_token_endpoint.is_some()
            || self.oauth_idp_client_id.is_some()
            || self.oauth_id_token_file.is_some()
            || self.oauth_id_token_command.is_some()
    }

    /// The enterprise identity provider the flags name, all of it or none.
    fn idp(&self) -> Result<Option<Idp>, String> {
        if !self.enterprise_asked() {
            return Ok(None);
        }
        let id_token = match (&self.oauth_id_token_file, &self.oauth_id_token_command) {
            (Some(f), _) => Source::File(f.clone()),
            (None, Some(c)) => Source::Command(c.clone()),
            (None, None) => {
                return Err(
                    "enterprise login needs --oauth-id-token-file or --oauth-id-token-command"
                        .into(),
                )
            }
        };
        let Some(client_id) = self
            .oauth_idp_client_id
            .clone()
            .filter(|c| !c.trim().is_empty())
        else {
            return Err("enterprise login needs --oauth-idp-client-id".into());
        };
        match (&self.oauth_idp_issuer, &self.oauth_idp_token_endpoint) {
            (None, None) => {
                return Err(
                    "enterprise login needs --oauth-idp-issuer or --oauth-idp-token-endpoint"
                        .into(),
                )
            }
            (i, t) => {
                if let Some(u) = i {
                    check_endpoint("--oauth-idp-issuer", u)?;
                }
                if let Some(u) = t {
                    check_endpoint("--oauth-idp-token-endpoint", u)?;
                }
            }
        }
        let client_secret = match &self.oauth_idp_client_secret_file {
            Some(f) => Some(read_secret("--oauth-idp-client-secret-file", f)?),
            None => None,
        };
        Ok(Some(Idp {
            issuer: self.oauth_idp_issuer.clone(),
            token_endpoint: self.oauth_idp_token_endpoint.clone(),
            client_id,
            client_secret,
            id_token,
        }))
    }

    /// The grant the flags choose, or why they contradict each other.
    fn grant(&self) -> Result<Grant, String> {
        let chosen = [
            (self.oauth_client_credentials, "--oauth-client-credentials"),
            (self.oauth_device_code, "--oauth-device-code"),
            (
                self.workload().is_some(),
                "--oauth-jwt-bearer-file/-command",
            ),
            (self.enterprise_asked(), "the --oauth-idp-* flags"),
        ];
        let on: Vec<&str> = chosen.iter().filter(|c| c.0).map(|c| c.1).collect();
        if on.len() > 1
            && !(on.len() == 2 && self.oauth_client_credentials && self.oauth_device_code)
        {
            return Err(format!("{} exclude each other", on.join(" and ")));
        }
        if self.workload().is_some() {
            return Ok(Grant::JwtBearer);
        }
        if self.enterprise_asked() {
            return Ok(Grant::Enterprise);
        }
        if !self.oauth_client_credentials {
            if self.oauth_private_key_file.is_some() {
                return Err(
                    "--oauth-private-key-file is for --oauth-client-credentials and the \
                     JWT-bearer logins"
                        .into(),
                );
            }
            return Ok(if self.oauth_device_code {
                Grant::DeviceCode
            } else {
                Grant::Browser
            });
        }
        if self.oauth_device_code {
            return Err(
                "--oauth-client-credentials and --oauth-device-code exclude each other".into(),
            );
        }
        if self.oauth_client_id.is_none() {
            return Err("--oauth-client-credentials needs --oauth-client-id".into());
        }
        match (&self.oauth_client_secret_file, &self.oauth_private_key_file) {
            (None, None) => Err(
                "--oauth-client-credentials needs --oauth-client-secret-file or \
                 --oauth-private-key-file"
                    .into(),
            ),
            (Some(_), Some(_)) => {
                Err("give --oauth-client-secret-file or --oauth-private-key-file, not both".into())
            }
            _ => Ok(Grant::ClientCredentials),
        }
    }

    /// The login's settings; None when OAuth is off (`--no-oauth`, or a static
    /// `Authorization` configured, which OAuth flags may not accompany).
    pub fn settings(&self, static_auth: bool) -> Result<Option<OAuthSettings>, String> {
        if self.no_oauth {
            return Ok(None);
        }
        if static_auth {
            if self.explicit() {
                return Err(
                    "the OAuth flags exclude a static token (--bearer-token-file, \
                            --bearer-token-env or an Authorization header)"
                        .into(),
                );
            }
            return Ok(None);
        }
        if self.oauth_timeout.is_zero() {
            return Err("--oauth-timeout must be above zero".into());
        }
        if let Some(id) = &self.oauth_client_id {
            if id.trim().is_empty() {
                return Err("--oauth-client-id is empty".into());
            }
        }
        if let Some(u) = &self.oauth_client_metadata_url {
            check_metadata_url(u)?;
        }
        let grant = self.grant()?;
        let private_key = match &self.oauth_private_key_file {
            Some(f) => {
                let pem = std::fs::read_to_string(f)
                    .map_err(|e| format!("--oauth-private-key-file {}: {e}", f.display()))?;
                Some(
                    ClientKey::from_pem(&pem, self.oauth_key_id.clone())
                        .map_err(|e| format!("--oauth-private-key-file {}: {e}", f.display()))?,
                )
            }
            None => None,
        };
        let client_secret = match &self.oauth_client_secret_file {
            Some(f) => {
                let s = std::fs::read_to_string(f)
                    .map_err(|e| format!("--oauth-client-secret-file {}: {e}", f.display()))?;
                let s = s.trim();
                if s.is_empty() {
                    return Err(format!("--oauth-client-secret-file {}: empty", f.display()));
                }
                Some(Secret(s.to_owned()))
            }
            None => None,
        };
        let dir =
            match (&self.oauth_dir, crate::oauth::store::default_dir()) {
                (Some(d), _) => d.clone(),
                (None, Some(d)) => d,
                // Without a home there is nowhere to keep a login: OAuth stays off unless asked for.
                (None, None) if !self.explicit() => return Ok(None),
                (None, None) => return Err(
                    "no place for OAuth logins: set HOME or XDG_CONFIG_HOME, or give --oauth-dir"
                        .into(),
                ),
            };
        Ok(Some(OAuthSettings {
            trigger: if self.explicit() {
                Trigger::Always
            } else {
                Trigger::Auto
            },
            dir,
            client: StaticClient {
                client_id: self.oauth_client_id.clone(),
                client_secret,
                private_key,
                metadata_url: self.oauth_client_metadata_url.clone(),
            },
            scope: self.oauth_scope.clone(),
            no_resource: self.oauth_no_resource,
            login: LoginSettings {
                interactive: true,
                grant,
                callback_port: self.oauth_callback_port,
                no_browser: self.no_browser,
                timeout: self.oauth_timeout,
                params: self.oauth_param.clone(),
            },
            dpop: self.oauth_dpop,
            workload: self.workload(),
            idp: self.idp()?,
        }))
    }
}

/// A Client ID Metadata Document URL: https with a path (http only on a loopback host, for
/// tests), no fragment.
fn check_metadata_url(u: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("--oauth-client-metadata-url {u}: {why}"));
    let Ok(url) = url::Url::parse(u) else {
        return bad("not a URL");
    };
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    };
    if !(url.scheme() == "https" || (url.scheme() == "http" && loopback)) {
        return bad("must be https (http only on a loopback host)");
    }
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return bad("no fragment or credentials allowed");
    }
    if url.path().trim_matches('/').is_empty() {
        return bad("needs a path (the document's location)");
    }
    Ok(())
}

/// `cfg` with the OAuth login `oauth` asks for (none beside a static `Authorization`); a
/// `daemon`'s (`serve`) never opens a browser.
pub fn with_login(
    cfg: RemoteConfig,
    oauth: &OAuthArgs,
    daemon: bool,
) -> Result<RemoteConfig, String> {
    let static_auth = cfg.has_token || cfg.headers.iter().any(|(k, _)| *k == AUTHORIZATION);
    let settings = if daemon {
        oauth.daemon_settings(static_auth)?
    } else {
        oauth.settings(static_auth)?
    };
    Ok(cfg.with_oauth(settings))
}
