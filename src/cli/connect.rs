//! `mcp-bridge connect URL`: the remote's flags ([`RemoteArgs`], shared with `serve
//! --upstream`), those of its own for the host side, and the OAuth login's ([`OAuthArgs`]:
//! only `connect` has a user at a browser). The wiring is `app::run_connect`.

use std::time::Duration;

use clap::Args;

use crate::config::oauth::{with_login, OAuthArgs};
use crate::config::remote::{Naming, RemoteArgs};
use crate::config::units::{parse_duration, parse_size};
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
    /// Most host requests in flight at once (listens included); one more is answered with a
    /// JSON-RPC error until some are answered.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_inflight: u32,
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

impl ConnectArgs {
    pub fn config(&self) -> Result<RemoteConfig, String> {
        let mut cfg = self
            .remote
            .config(&self.url, self.probe_timeout, Naming::Flags)?;
        // Tool labels are only worth a round trip when the metrics are served.
        cfg.learn_tools_first = self.metrics_listen.is_some();
        with_login(cfg, &self.oauth, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::oauth::login::Grant;
    use crate::oauth::Trigger;
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
