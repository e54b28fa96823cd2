//! `mcp-bridge connect URL`: the remote's flags ([`RemoteArgs`], shared with `serve
//! --upstream`), those of its own for the host side, and the OAuth login's ([`OAuthArgs`]:
//! only `connect` has a user at a browser). The wiring is `app::run_connect`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http::header::AUTHORIZATION;

use super::parse::{parse_duration, parse_kv, parse_size};
use super::remote::{Naming, RemoteArgs};
use crate::oauth::assertion::ClientKey;
use crate::oauth::login::{Grant, LoginSettings};
use crate::oauth::register::StaticClient;
use crate::oauth::store::Secret;
use crate::oauth::{OAuthSettings, Trigger};
use crate::upstream::remote::RemoteConfig;

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The remote MCP endpoint, e.g. https://mcp.example.com/mcp
    pub url: String,
    /// Longest line accepted from the host on stdin.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_line: usize,
    /// How long a 2026 host's call parked as `input_required` (a 2025 remote asked it
    /// something) waits for the host's retry before it is cancelled at the remote.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub park_timeout: Duration,
    /// How long era detection waits for an answer before assuming a 2025 server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub probe_timeout: Duration,
    /// Name of the server in logs and metrics (the `server` label; default: the URL's host).
    #[arg(long)]
    pub name: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics on a listener of their own (off unless set).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub oauth: OAuthArgs,
}

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
    }

    /// The grant the flags choose, or why they contradict each other.
    fn grant(&self) -> Result<Grant, String> {
        if !self.oauth_client_credentials {
            if self.oauth_private_key_file.is_some() {
                return Err("--oauth-private-key-file is for --oauth-client-credentials".into());
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

impl ConnectArgs {
    pub fn config(&self) -> Result<RemoteConfig, String> {
        let cfg = self
            .remote
            .config(&self.url, self.probe_timeout, Naming::Flags)?;
        with_login(cfg, &self.oauth, false)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn connect(args: &[&str]) -> ConnectArgs {
        let c = Cli::try_parse_from(["mcp-bridge", "connect"].iter().chain(args)).unwrap();
        let Command::Connect(a) = c.command else {
            panic!()
        };
        *a
    }

    #[test]
    fn connect_flags_parse() {
        let a = connect(&[
            "https://mcp.example.com/mcp",
            "-H",
            "X-Tenant: acme",
            "--protocol",
            "2025-06-18",
            "--request-timeout",
            "30s",
        ]);
        let cfg = a.config().unwrap();
        assert_eq!(cfg.protocol.as_deref(), Some("2025-06-18"));
        assert_eq!(cfg.request_timeout, Some(Duration::from_secs(30)));
        assert_eq!(cfg.headers[0].0, "x-tenant");
        assert!(cfg.headers[0].1.is_sensitive());
        assert_eq!(
            connect(&["http://h/mcp"]).config().unwrap().request_timeout,
            None
        );
    }

    #[test]
    fn oauth_flags_parse_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let cfg = connect(&["https://h.example/mcp", "--oauth-dir", d])
            .config()
            .unwrap();
        let o = cfg.oauth.unwrap();
        assert_eq!(o.trigger, Trigger::Auto);
        assert_eq!(o.login.timeout, Duration::from_secs(300));
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "client-s3cret\n").unwrap();
        let a = connect(&[
            "https://h.example/mcp",
            "--oauth-dir",
            d,
            "--oauth-client-id",
            "cid",
            "--oauth-client-secret-file",
            secret.to_str().unwrap(),
            "--oauth-param",
            "audience=api",
            "--oauth-param",
            "prompt=consent",
            "--oauth-callback-port",
            "33418",
            "--oauth-no-resource",
            "--no-browser",
        ]);
        let o = a.config().unwrap().oauth.unwrap();
        assert_eq!(o.trigger, Trigger::Always);
        assert_eq!(o.client.client_id.as_deref(), Some("cid"));
        assert_eq!(o.login.params.len(), 2);
        assert_eq!(o.login.callback_port, Some(33418));
        assert!(o.no_resource && o.login.no_browser);
        assert!(!format!("{o:?}").contains("client-s3cret"), "{o:?}");
        // A static token turns OAuth off; with OAuth flags it is a usage error.
        let tok = dir.path().join("t");
        std::fs::write(&tok, "t0k").unwrap();
        let t = tok.to_str().unwrap();
        let a = connect(&["https://h/mcp", "--bearer-token-file", t]);
        assert!(a.config().unwrap().oauth.is_none());
        let a = connect(&["https://h/mcp", "--bearer-token-file", t, "--oauth"]);
        assert!(a.config().is_err());
        assert!(connect(&["https://h/mcp", "--no-oauth"])
            .config()
            .unwrap()
            .oauth
            .is_none());
        for bad in [
            &["--oauth-param", "novalue"][..],
            &["--oauth-callback-port", "0"],
            &["--oauth-callback-port", "70000"],
            &["--oauth-client-secret-file", "f"],
            &["--oauth", "--no-oauth"],
            &["--oauth-timeout", "soon"],
        ] {
            let args = ["mcp-bridge", "connect", "https://h/mcp"].iter().chain(bad);
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?}");
        }
        let a = connect(&["https://h/mcp", "--oauth-timeout", "0s"]);
        assert!(a.config().is_err());
        let o = connect(&[
            "https://h/mcp",
            "--oauth-dir",
            d,
            "--oauth-client-metadata-url",
            "https://app.example/client.json",
        ])
        .config()
        .unwrap()
        .oauth
        .unwrap();
        assert_eq!(o.trigger, Trigger::Always);
        assert_eq!(
            o.client.metadata_url.as_deref(),
            Some("https://app.example/client.json")
        );
        for bad in [
            "http://app.example/client.json",
            "https://app.example/",
            "https://app.example/c.json#x",
            "not a url",
        ] {
            let a = connect(&["https://h/mcp", "--oauth-client-metadata-url", bad]);
            assert!(a.config().is_err(), "{bad}");
        }
        assert!(connect(&[
            "https://h/mcp",
            "--oauth-dir",
            d,
            "--oauth-client-metadata-url",
            "http://127.0.0.1:8080/client.json",
        ])
        .config()
        .is_ok());
        let a = connect(&[
            "https://h/mcp",
            "--oauth-client-id",
            "c",
            "--oauth-client-secret-file",
            "/nonexistent/x",
        ]);
        assert!(a.config().is_err());
    }

    #[test]
    fn oauth_grant_flags_choose_the_grant_and_contradictions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "s3cret\n").unwrap();
        let s = secret.to_str().unwrap();
        let key = dir.path().join("key.pem");
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let der = aws_lc_rs::signature::EcdsaKeyPair::generate_pkcs8(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        use base64::Engine;
        let b = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        std::fs::write(
            &key,
            format!("-----BEGIN PRIVATE KEY-----\n{b}\n-----END PRIVATE KEY-----\n"),
        )
        .unwrap();
        let k = key.to_str().unwrap();
        let o = |args: &[&str]| {
            let mut v = vec!["https://h/mcp", "--oauth-dir", d];
            v.extend_from_slice(args);
            connect(&v).config().map(|c| c.oauth.unwrap())
        };
        assert_eq!(o(&[]).unwrap().login.grant, Grant::Browser);
        let dev = o(&["--oauth-device-code"]).unwrap();
        assert_eq!(dev.login.grant, Grant::DeviceCode);
        assert_eq!(dev.trigger, Trigger::Always);
        let cc = o(&[
            "--oauth-client-credentials",
            "--oauth-client-id",
            "m",
            "--oauth-client-secret-file",
            s,
        ])
        .unwrap();
        assert_eq!(cc.login.grant, Grant::ClientCredentials);
        assert!(cc.client.client_secret.is_some() && cc.client.private_key.is_none());
        let pk = o(&[
            "--oauth-client-credentials",
            "--oauth-client-id",
            "m",
            "--oauth-private-key-file",
            k,
            "--oauth-key-id",
            "kid-1",
        ])
        .unwrap();
        let key_set = pk.client.private_key.as_ref().unwrap();
        assert_eq!(key_set.kid.as_deref(), Some("kid-1"));
        assert!(!format!("{pk:?}").contains("PRIVATE KEY"), "{pk:?}");
        for bad in [
            &["--oauth-client-credentials", "--oauth-client-id", "m"][..],
            &["--oauth-client-credentials", "--oauth-private-key-file", k],
            &[
                "--oauth-client-credentials",
                "--oauth-device-code",
                "--oauth-client-id",
                "m",
                "--oauth-client-secret-file",
                s,
            ],
            &[
                "--oauth-client-credentials",
                "--oauth-client-id",
                "m",
                "--oauth-client-secret-file",
                s,
                "--oauth-private-key-file",
                k,
            ],
            &["--oauth-client-id", "m", "--oauth-private-key-file", k],
            &[
                "--oauth-client-credentials",
                "--oauth-client-id",
                "m",
                "--oauth-private-key-file",
                s,
            ],
        ] {
            assert!(o(bad).is_err(), "{bad:?}");
        }
        let args = [
            "mcp-bridge",
            "connect",
            "https://h/mcp",
            "--oauth-key-id",
            "x",
        ];
        assert!(
            Cli::try_parse_from(args).is_err(),
            "--oauth-key-id needs a key"
        );
    }

    #[test]
    fn bad_urls_are_usage_errors() {
        assert!(connect(&["ftp://h/x"]).config().is_err());
        assert!(Cli::try_parse_from([
            "mcp-bridge",
            "connect",
            "http://h/mcp",
            "--bearer-token-file",
            "f",
            "--bearer-token-env",
            "V"
        ])
        .is_err());
    }
}
